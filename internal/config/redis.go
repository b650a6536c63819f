package config

import (
	"strings"

	"github.com/hookline/hookline/internal/redisclient"
)

// validate reports a mode and URL that do not name a Redis deployment, and
// a key prefix holding a hash tag's brace.
func (r Redis) validate(bad func(name, format string, args ...any)) {
	switch r.Mode {
	case redisclient.Single, redisclient.Cluster, redisclient.Sentinel:
		if err := redisclient.Check(r.Mode, r.URL); err != nil {
			bad("redis.url (REDIS_URL)", "%s", strings.TrimPrefix(err.Error(), redisclient.ErrInvalid.Error()+": "))
		}
	default:
		bad("redis.mode (REDIS_MODE)", "must be single, cluster or sentinel, got %q", r.Mode)
	}
	if strings.ContainsAny(r.KeyPrefix, "{}") {
		bad("redis.key_prefix (REDIS_PREFIX)", "must not contain { or }, got %q: the keys' hash tags come after it", r.KeyPrefix)
	}
}
