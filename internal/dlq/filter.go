package dlq

import (
	"log/slog"

	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/filter"
	"github.com/hookline/hookline/internal/metrics"
)

// A retry, single or in a batch, is a new delivery of an event to a
// webhook, so the webhook's payload filter decides it as it is now: a
// webhook whose filter was changed so as to refuse the event does not
// receive it again. A single retry is refused (ErrFilteredOut); a batch
// skips the delivery.

// filterColumnsSQL reads, beside a delivery (d) of an event (e) to a
// webhook (w), the webhook's filter and, when it has one, what it judges
// of the event.
const filterColumnsSQL = `w.filter, e.event_type, e.source,
    CASE WHEN w.filter <> '' THEN e.data END`

// filteredEvent is what filterColumnsSQL reads.
type filteredEvent struct {
	expr, eventType, source string
	data                    []byte
}

// filterCheck evaluates filters for retries, compiling each expression
// once.
type filterCheck struct {
	programs *filter.Cache
	log      *slog.Logger
}

func newFilterCheck() filterCheck {
	return filterCheck{programs: filter.NewCache(0), log: slog.Default()}
}

func (r *Runner) filterCheck() filterCheck {
	return filterCheck{programs: r.programs, log: r.log}
}

// passes reports whether the event may be delivered to the webhook: it has
// no filter, or its filter is true for the event. A filter that no longer
// compiles, a payload that cannot be read and a run-time error are no
// (counted in hookline_filter_errors_total).
func (c filterCheck) passes(f filteredEvent, webhookID uuid.UUID) bool {
	if f.expr == "" {
		return true
	}
	p, err := c.programs.Program(f.expr)
	ev := &filter.Event{EventType: f.eventType, Source: f.source}
	if err == nil {
		if ev.Data, err = filter.DecodeData(f.data); err == nil {
			var ok bool
			if ok, err = p.Match(ev); err == nil {
				return ok
			}
		}
	}
	reason := filter.Reason(err)
	metrics.FilterErrors.WithLabelValues(reason).Inc()
	c.log.Debug("webhook filter failed on a retried event: not retried", "webhook_id", webhookID.String(),
		"event_type", f.eventType, "reason", reason, "error", err)
	return false
}
