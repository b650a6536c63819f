package redisbatch

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// ScriptCall is one call of a Lua script. Queued on a pipeline
// (QueueScript) it goes as EVALSHA, the script's digest rather than its
// text; when Redis has lost the script (first use after a restart or
// SCRIPT FLUSH) nothing ran, and Reply sends the script with EVAL in one
// more round trip, because a pipeline cannot retry one command.
type ScriptCall struct {
	cmd   *redis.Cmd
	rerun func() *redis.Cmd
}

// QueueScript queues script on pipe by its digest; rdb runs it again with
// its text if needed (see ScriptCall).
func QueueScript(ctx context.Context, pipe redis.Pipeliner, rdb redis.Scripter, script *redis.Script, keys []string, args ...any) ScriptCall {
	return ScriptCall{cmd: script.EvalSha(ctx, pipe, keys, args...),
		rerun: func() *redis.Cmd { return script.Eval(ctx, rdb, keys, args...) }}
}

// RunScript runs script on rdb now (Script.Run: by digest, then by text
// if Redis has lost it).
func RunScript(ctx context.Context, rdb redis.Scripter, script *redis.Script, keys []string, args ...any) ScriptCall {
	return ScriptCall{cmd: script.Run(ctx, rdb, keys, args...)}
}

// Reply is the script's reply, once its pipeline has run.
func (c *ScriptCall) Reply() *redis.Cmd {
	if c.rerun != nil && c.MetNoScript() {
		c.cmd, c.rerun = c.rerun(), nil
	}
	return c.cmd
}

// MetNoScript reports whether the queued call found the script missing
// (before Reply has run it again).
func (c *ScriptCall) MetNoScript() bool { return IsNoScript(c.cmd.Err()) }

// IsNoScript reports whether err is Redis's NOSCRIPT: the script is not in
// its cache and did not run. go-redis normalises it to ErrNoScript only
// outside pipelines; inside one the server's error arrives as it is, and a
// Redis error is recognised by its code, as Script.Run does.
func IsNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}
