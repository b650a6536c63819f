package httpapi

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/webhook"
)

// circuitView is the circuit_breaker object of the health route and of the
// override route's answer.
type circuitView struct {
	State         breaker.State `json:"state"`
	Source        string        `json:"source"` // redis, or postgres when Redis is unreachable
	OpenedAt      *time.Time    `json:"opened_at"`
	SleepWindowMS int64         `json:"sleep_window_ms"`
	ForcedState   *string       `json:"forced_state"`
	ForcedUntil   *time.Time    `json:"forced_until"`
	Window        struct {
		Successes int `json:"successes"`
		Failures  int `json:"failures"`
	} `json:"window"`
	HalfOpen *struct {
		ProbesIssued   int `json:"probes_issued"`
		ProbeSuccesses int `json:"probe_successes"`
		ProbeFailures  int `json:"probe_failures"`
	} `json:"half_open,omitempty"`
}

// circuit reads a webhook's circuit in force (see breaker.Resolve).
func (s *Server) circuit(c *gin.Context, w webhook.Webhook) (circuitView, error) {
	e, err := breaker.Resolve(c.Request.Context(), s.breaker, s.overrides, w.ID, w.CircuitBreakerConfig.Breaker(), s.now())
	if err != nil {
		return circuitView{}, err
	}
	v := circuitView{State: e.State, Source: e.Source, OpenedAt: utc(e.OpenedAt), SleepWindowMS: e.SleepWindow.Milliseconds(),
		ForcedUntil: utc(e.ForcedUntil)}
	if e.ForcedState != nil {
		forced := string(*e.ForcedState)
		v.ForcedState = &forced
	}
	if snap := e.Live; snap != nil {
		v.Window.Successes, v.Window.Failures = snap.Successes, snap.Failures
		if snap.State == breaker.HalfOpen {
			v.HalfOpen = &struct {
				ProbesIssued   int `json:"probes_issued"`
				ProbeSuccesses int `json:"probe_successes"`
				ProbeFailures  int `json:"probe_failures"`
			}{snap.ProbesIssued, snap.ProbeSuccesses, snap.ProbeFailures}
		}
	}
	return v, nil
}

// webhookHealth answers GET /v1/webhooks/{id}/health.
func (s *Server) webhookHealth(c *gin.Context) {
	w, err := s.loadWebhook(c)
	if err != nil {
		abort(c, err)
		return
	}
	cv, err := s.circuit(c, w)
	if err != nil {
		abort(c, err)
		return
	}
	h, err := s.deliveries.Health(c.Request.Context(), w.ID, s.now())
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"webhook_id": w.ID, "active": w.Active, "circuit_breaker": cv, "recent": h,
		"last_success_at": h.LastSuccessAt})
}

type circuitAction struct {
	Action          *string `json:"action"`
	DurationSeconds *int64  `json:"duration_seconds"`
}

const maxForceSeconds = 30 * 24 * 60 * 60

// overrideCircuit answers PATCH /v1/webhooks/{id}/circuit-breaker: reset,
// force_open or force_close (for duration_seconds, or until reset).
func (s *Server) overrideCircuit(c *gin.Context) {
	w, err := s.loadWebhook(c)
	if err != nil {
		abort(c, err)
		return
	}
	var in circuitAction
	if err := decodeJSON(c, maxAdminBody, &in); err != nil {
		abort(c, err)
		return
	}
	if in.Action == nil {
		abort(c, fielderr.New("action", "is required: reset, force_open or force_close"))
		return
	}
	var until *time.Time
	if in.DurationSeconds != nil {
		if *in.Action == "reset" {
			abort(c, fielderr.New("duration_seconds", "does not apply to reset"))
			return
		}
		if err := fielderr.InRange("duration_seconds", *in.DurationSeconds, 1, maxForceSeconds); err != nil {
			abort(c, err)
			return
		}
		t := s.now().UTC().Add(time.Duration(*in.DurationSeconds) * time.Second).Truncate(time.Microsecond)
		until = &t
	}
	ctx := c.Request.Context()
	switch *in.Action {
	case "reset":
		if err = s.overrides.Reset(ctx, w.ID); err == nil {
			if rerr := s.breaker.Reset(ctx, w.ID.String()); rerr != nil {
				abort(c, newError(http.StatusServiceUnavailable, "redis_unavailable",
					"the override is cleared, but the live circuit could not be reset because Redis is unreachable; try again"))
				return
			}
		}
	case "force_open":
		err = s.overrides.Force(ctx, w.ID, "open", until)
	case "force_close":
		err = s.overrides.Force(ctx, w.ID, "closed", until)
	default:
		abort(c, fielderr.New("action", "must be reset, force_open or force_close, got %q", *in.Action))
		return
	}
	if err != nil {
		abort(c, err)
		return
	}
	s.recordAudit(c, audit.CircuitOverridden, "webhook", w.ID, map[string]any{"action": *in.Action, "until": until})
	logger(c).Info("circuit breaker override", "webhook_id", w.ID.String(), "action", *in.Action, "until", until)
	cv, err := s.circuit(c, w)
	if err != nil {
		abort(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"webhook_id": w.ID, "circuit_breaker": cv})
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
