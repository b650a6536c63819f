// Package redistest gives each test its own Redis key prefix on the local
// server and deletes every key under it when the test ends.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
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
