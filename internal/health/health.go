// Package health serves liveness and readiness: /healthz answers while the
// process runs, /readyz only while every dependency it needs answers.
//
// Both are served without authentication, to load balancers and to
// anyone who can reach the port, so readiness says only which dependency
// is down, never why: a driver's error names hosts, users and databases.
// The error goes to the process's log (LogFailures).
package health

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Check returns nil when its dependency is reachable.
type Check func(ctx context.Context) error

// Checks maps a dependency name (postgres, redis, rabbitmq) to its check.
type Checks map[string]Check

// Report is the readiness answer: each check "ok" or "down", and the
// names of those down.
type Report struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
	Down   []string          `json:"down,omitempty"`
}

// LogFailures returns c with each check logging its error to log (at
// warn, with the dependency's name) when it fails.
func (c Checks) LogFailures(log *slog.Logger) Checks {
	out := make(Checks, len(c))
	for name, check := range c {
		out[name] = func(ctx context.Context) error {
			err := check(ctx)
			if err != nil {
				log.Warn("dependency check failed", "dependency", name, "error", err)
			}
			return err
		}
	}
	return out
}

// Run runs every check concurrently, each within timeout.
func (c Checks) Run(ctx context.Context, timeout time.Duration) Report {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep := Report{Status: "ok", Checks: make(map[string]string, len(c))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, check := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := check(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rep.Checks[name] = "down"
				rep.Down = append(rep.Down, name)
				return
			}
			rep.Checks[name] = "ok"
		}()
	}
	wg.Wait()
	if len(rep.Down) > 0 {
		sort.Strings(rep.Down)
		rep.Status = "unavailable"
	}
	return rep
}

// LiveHandler answers 200 while the process serves HTTP.
func LiveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

// ReadyHandler answers 200 when every check passes, 503 naming what is down
// otherwise.
func ReadyHandler(c Checks) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := c.Run(r.Context(), 2*time.Second)
		status := http.StatusOK
		if len(rep.Down) > 0 {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, rep)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
