package console

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/breaker"
	"github.com/hookline/hookline/internal/webhook"
)

// circuitView is a webhook's circuit as the pages show it: the live state
// from Redis (or the last persisted one when Redis is unreachable), with
// the operator's override on top.
type circuitView struct {
	State       breaker.State
	Source      string
	OpenedAt    *time.Time
	ForcedState *string
	ForcedUntil *time.Time
	Successes   int
	Failures    int
	// Off: the webhook's breaker is disabled, so no state applies and
	// there is nothing to override.
	Off bool
}

func (c *Console) circuit(ctx context.Context, w webhook.Webhook) (circuitView, error) {
	e, err := breaker.Resolve(ctx, c.breaker, c.overrides, w.ID, w.CircuitBreakerConfig.Breaker(), c.now())
	if err != nil {
		return circuitView{}, err
	}
	return viewOf(e, w), nil
}

// circuits is circuit of each of hooks, read together.
func (c *Console) circuits(ctx context.Context, hooks []webhook.Webhook) ([]circuitView, error) {
	in := make([]breaker.Circuit, len(hooks))
	for i, w := range hooks {
		in[i] = breaker.Circuit{WebhookID: w.ID, Config: w.CircuitBreakerConfig.Breaker()}
	}
	es, err := breaker.ResolveAll(ctx, c.breaker, c.overrides, in, c.now())
	if err != nil {
		return nil, err
	}
	out := make([]circuitView, len(hooks))
	for i, e := range es {
		out[i] = viewOf(e, hooks[i])
	}
	return out, nil
}

// viewOf is w's circuit e as the pages show it.
func viewOf(e breaker.Effective, w webhook.Webhook) circuitView {
	v := circuitView{State: e.State, Source: e.Source, OpenedAt: e.OpenedAt, ForcedUntil: e.ForcedUntil,
		Off: !w.CircuitBreakerConfig.Enabled}
	if e.ForcedState != nil {
		forced := string(*e.ForcedState)
		v.ForcedState = &forced
	}
	if e.Live != nil {
		v.Successes, v.Failures = e.Live.Successes, e.Live.Failures
	}
	return v
}

// forceDurations are the choices of the force forms, in seconds (0: until
// reset).
var forceDurations = map[string]time.Duration{"0": 0, "900": 15 * time.Minute, "3600": time.Hour, "86400": 24 * time.Hour}

// overrideCircuit resets, forces open or forces closed a webhook's circuit
// with the stores the REST API's PATCH .../circuit-breaker uses.
func (c *Console) overrideCircuit(ctx *gin.Context) {
	w, ok := c.loadWebhook(ctx)
	if !ok {
		return
	}
	action := ctx.PostForm("action")
	dur, ok := forceDurations[ctx.DefaultPostForm("duration_seconds", "0")]
	if !ok {
		c.webhookPageWith(ctx, w, http.StatusBadRequest, "Choose one of the offered durations.")
		return
	}
	var until *time.Time
	if dur > 0 && action != "reset" {
		t := c.now().UTC().Add(dur).Truncate(time.Microsecond)
		until = &t
	}
	rctx := ctx.Request.Context()
	var err error
	switch action {
	case "reset":
		if err = c.overrides.Reset(rctx, w.ID); err == nil {
			if rerr := c.breaker.Reset(rctx, w.ID.String()); rerr != nil {
				c.webhookPageWith(ctx, w, http.StatusServiceUnavailable,
					"The override is cleared, but the live circuit could not be reset because Redis is unreachable; try again.")
				return
			}
		}
	case "force_open":
		err = c.overrides.Force(rctx, w.ID, "open", until)
	case "force_close":
		err = c.overrides.Force(rctx, w.ID, "closed", until)
	default:
		c.webhookPageWith(ctx, w, http.StatusBadRequest, "Unknown circuit breaker action.")
		return
	}
	if err != nil {
		c.fail(ctx, err)
		return
	}
	c.recordAudit(ctx, audit.CircuitOverridden, "webhook", w.ID.String(), map[string]any{"action": action, "until": until})
	c.log.Info("circuit breaker override", "webhook_id", w.ID.String(), "action", action, "until", until, "via", "console")
	ctx.Redirect(http.StatusSeeOther, root(ctx)+"/webhooks/"+w.ID.String()+"?notice="+action)
}
