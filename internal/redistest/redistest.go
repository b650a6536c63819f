// Package redistest gives each test its own Redis key prefix on the local
// server and deletes every key under it when the test ends.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Addr is the Redis used by tests: $TEST_REDIS_ADDR or 127.0.0.1:6379.
func Addr() string {
	if a := os.Getenv("TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Prefix returns a fresh key prefix ("test-<random>:") whose keys are
// deleted when t ends.
func Prefix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	prefix := "test-" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: Addr()})
		defer rdb.Close()
		_, _ = DeleteKeys(context.Background(), rdb, prefix)
	})
	return prefix
}

// DeleteKeys deletes every key under prefix and returns how many there
// were.
func DeleteKeys(ctx context.Context, rdb *redis.Client, prefix string) (int, error) {
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, nil
	}
	return len(keys), rdb.Del(ctx, keys...).Err()
}

// Counter is a client hook (redis.Client.AddHook) counting what the client
// sends: pipelines (not those that set up a new connection), and the Lua
// scripts that ran, in pipelines or not (a script sent by its digest that
// Redis did not hold yet is sent again with its text, and counted once).
type Counter struct{ pipelines, scripts atomic.Int64 }

// Pipelines is the number of pipelines sent.
func (c *Counter) Pipelines() int64 { return c.pipelines.Load() }

// Scripts is the number of scripts run.
func (c *Counter) Scripts() int64 { return c.scripts.Load() }

// DialHook implements redis.Hook.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// The client sets cmd's error only after its hooks have run.
		c.count(cmd, err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !connectionSetup(cmds) {
			c.pipelines.Add(1)
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			c.count(cmd, cmd.Err())
		}
		return err
	}
}

func (c *Counter) count(cmd redis.Cmder, err error) {
	if name := cmd.Name(); (name == "evalsha" || name == "eval") && !isNoScript(err) {
		c.scripts.Add(1)
	}
}

// isNoScript: as redisbatch.IsNoScript (which imports nothing of tests).
func isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// connectionSetup reports whether cmds are the commands go-redis sends, as
// a pipeline, on a new connection.
func connectionSetup(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		switch cmd.Name() {
		case "hello", "client", "auth", "select":
		default:
			return false
		}
	}
	return true
}
