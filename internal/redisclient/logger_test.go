package redisclient

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// go-redis's messages reach the process's structured log, one a second at
// most, each saying how many were left out before it.
func TestLimitedLoggerWritesOneMessageASecond(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	l := &limitedLogger{log: slog.New(slog.NewJSONHandler(&buf, nil)), now: func() time.Time { return now }}
	ctx := context.Background()
	l.Printf(ctx, "redis: dial %s: refused\n", "127.0.0.1:7000") // logged
	for range 5 {
		now = now.Add(100 * time.Millisecond)
		l.Printf(ctx, "redis: dial %s: refused", "127.0.0.1:7000") // left out
	}
	now = now.Add(600 * time.Millisecond)                // 1.1 s after the first
	l.Printf(ctx, "redis: cluster slots: %s", "timeout") // logged, with 5 left out

	var lines []map[string]any
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 2)
	require.Equal(t, "WARN", lines[0]["level"])
	require.Equal(t, "redis client", lines[0]["msg"])
	require.Equal(t, "redis: dial 127.0.0.1:7000: refused", lines[0]["message"])
	require.EqualValues(t, 0, lines[0]["left_out_since_last"])
	require.Equal(t, "redis: cluster slots: timeout", lines[1]["message"])
	require.EqualValues(t, 5, lines[1]["left_out_since_last"])
}
