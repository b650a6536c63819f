package event

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/tracing"
)

// MaxBatch is the most events one PublishBatch takes.
const MaxBatch = 500

// ErrBatchTooLarge refuses a batch of more than MaxBatch events.
var ErrBatchTooLarge = fmt.Errorf("a batch holds at most %d events", MaxBatch)

// BatchResult answers one event of a batch: its Result, or the error that
// refused it alone.
type BatchResult struct {
	Result Result
	Err    error
}

// PublishBatch publishes reqs for tenantID and answers each in order, as
// Publish would have: accepted, replayed, or refused (a field error,
// ErrIdempotencyConflict). The events it accepts are committed together,
// by one statement, so that they are all stored or none is; it returns
// after that commit. A refused event does not refuse the others. An error
// of the batch as a whole (the database unreachable) is returned alone,
// and then no event of it was stored.
//
// Unlike Publish, a batch does not join the group commit: it is already a
// group, and its events must not be split over several commits.
func (s *Service) PublishBatch(ctx context.Context, tenantID uuid.UUID, reqs []Request) ([]BatchResult, error) {
	if len(reqs) > MaxBatch {
		return nil, ErrBatchTooLarge
	}
	ctx, span := s.tracer.Start(ctx, "hookline.publish_batch", trace.SpanKindProducer)
	defer span.End()
	out, err := s.publishBatch(ctx, tenantID, reqs)
	if span.IsRecording() {
		span.SetAttributes(tracing.TenantID.String(tenantID.String()), attribute.Int("hookline.events", len(reqs)))
		tracing.Fail(span, err)
	}
	return out, err
}

func (s *Service) publishBatch(ctx context.Context, tenantID uuid.UUID, reqs []Request) ([]BatchResult, error) {
	out := make([]BatchResult, len(reqs))
	ps := make([]*pending, 0, len(reqs))
	at := make([]int, 0, len(reqs)) // at[i]: the index in reqs of ps[i]
	given := make([]bool, len(reqs))
	hashes := make([][]byte, len(reqs))
	parent := tracing.Parent{}
	if s.tracer.On() {
		parent = tracing.ParentOf(ctx)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	for i, r := range reqs {
		given[i] = r.IdempotencyKey != ""
		hash, err := normalize(&r)
		if err != nil {
			out[i].Err = err
			continue
		}
		hashes[i] = hash
		if given[i] {
			res, ok, err := s.cached(ctx, tenantID, r.IdempotencyKey, hash)
			if ok || err != nil {
				out[i] = BatchResult{Result: res, Err: err}
				continue
			}
		}
		p := newPending(tenantID, r, hash, now)
		p.trace = parent
		if p.req.CorrelationID == "" {
			p.req.CorrelationID = p.id.String()
		}
		ps, at = append(ps, p), append(at, i)
	}
	if err := s.commitBatch(ctx, tenantID, ps); err != nil {
		return nil, err
	}
	for j, p := range ps {
		i := at[j]
		out[i] = s.answer(ctx, p, given[i])
	}
	return out, nil
}

// commitBatch commits ps, all of tenantID, by one statement; again, with
// the tenant's filters loaded afresh, while the view it was evaluated
// against turns out stale (every event of it is then left out, the view
// being the tenant's).
func (s *Service) commitBatch(ctx context.Context, tenantID uuid.UUID, ps []*pending) error {
	if len(ps) == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		view, err := s.filters.view(ctx, tenantID, attempt > 0)
		if err != nil {
			return err
		}
		for _, p := range ps {
			p.view = view
			p.refused = view.refused(p.req.EventType, p.req.Source, p.req.Data, s.log)
		}
		if err := s.commits.commitAll(ctx, ps); err != nil {
			return err
		}
		if !ps[0].stale {
			return nil
		}
		if attempt == maxStaleViews {
			return fmt.Errorf("publish batch: the tenant's webhook filters changed at each of %d attempts", attempt+1)
		}
	}
}

// answer is the result of p once committed: accepted and handed to the
// outbox, or, its key being taken (by an earlier event or one of the same
// batch), the original event or a conflict.
func (s *Service) answer(ctx context.Context, p *pending, givenKey bool) BatchResult {
	if !p.inserted {
		res, err := s.existing(ctx, p.tenantID, p.req.IdempotencyKey, p.hash)
		if err != nil && !errors.Is(err, ErrIdempotencyConflict) {
			s.log.ErrorContext(ctx, "publish batch: load the event of a taken key", "error", err)
		}
		return BatchResult{Result: res, Err: err}
	}
	s.dispatch.Enqueue(p.tasks...)
	metrics.DeliveriesCreated.Add(float64(len(p.tasks)))
	res := Result{ID: p.id, IdempotencyKey: p.req.IdempotencyKey, EventType: p.req.EventType, Priority: p.req.Priority,
		Deliveries: len(p.tasks), CreatedAt: p.createdAt}
	if givenKey {
		s.remember(ctx, p.tenantID, res, p.hash)
	}
	return BatchResult{Result: res}
}
