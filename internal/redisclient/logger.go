package redisclient

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// logEvery is how often the client's own messages are logged at most:
// while a node is down, go-redis reports every failed dial, dozens a
// second.
const logEvery = time.Second

// SetLogger sends go-redis's own messages (failed dials, a cluster's
// slot map it could not read, ...) to log as warnings, one a second at
// most with the count of those left out, instead of as plain lines on
// stderr beside the process's structured logs. It is process-wide, as
// go-redis's logger is.
func SetLogger(log *slog.Logger) {
	redis.SetLogger(&limitedLogger{log: log, now: time.Now})
}

// limitedLogger is go-redis's Logging, written to a slog.Logger at most
// once per logEvery.
type limitedLogger struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	last    time.Time
	dropped int
}

// Printf logs one message of go-redis, or counts it when the last was
// logged less than logEvery ago.
func (l *limitedLogger) Printf(ctx context.Context, format string, v ...any) {
	now := l.now()
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < logEvery {
		l.dropped++
		l.mu.Unlock()
		return
	}
	dropped := l.dropped
	l.last, l.dropped = now, 0
	l.mu.Unlock()
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	l.log.WarnContext(ctx, "redis client", "message", msg, "left_out_since_last", dropped)
}
