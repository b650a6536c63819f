package supervisor

import (
	"context"
	"time"
)

// Every calls pass after first (at once when first is 0) and then every
// interval until ctx ends, and returns nil. A pass longer than interval
// delays the next one rather than queueing passes behind it. pass reports
// its own failures: a periodic job's failed pass is retried by the next.
func Every(ctx context.Context, first, interval time.Duration, pass func(ctx context.Context)) error {
	timer := time.NewTimer(first)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		pass(ctx)
		timer.Reset(interval)
	}
}
