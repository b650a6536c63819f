package history

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Series is the attempts of a tenant, or of one of its webhooks, over a
// window [Start, End) cut into evenly spaced buckets, oldest first. Every
// bucket is present: a quiet one has zero attempts and no latency, so that a
// chart shows the silence instead of joining its neighbours.
type Series struct {
	Start, End time.Time
	Step       time.Duration
	Buckets    []Bucket
}

// Bucket counts the attempts executed in [Start, Start+Step). A success is
// an answer in 2xx; anything else (another status, a timeout, a refused
// connection) is a failure. The latency percentiles are nil without
// attempts.
type Bucket struct {
	Start     time.Time
	Attempts  int64
	Successes int64
	Failures  int64
	P50MS     *float64
	P95MS     *float64
}

// SuccessRate is Successes/Attempts, from 0 to 1, or nil without attempts.
func (b Bucket) SuccessRate() *float64 { return rate(b.Successes, b.Attempts) }

// MaxSeriesBuckets bounds the buckets of a Series: each is a row of the
// answer, and a chart has no use for more than a point per pixel or two.
const MaxSeriesBuckets = 1440

// A series reads attempt_rollups: the rows of the scope (the webhook, or
// the tenant) in the window (hourly rows when the buckets are whole hours
// from a whole hour, minute rows otherwise), each shard's, binned by
// bucket and summed in Postgres, their latency histograms merged per
// bucket; Go fills in the quiet buckets and turns each histogram into
// percentiles. The rows read are the window's minutes times the shards,
// whatever the traffic or the length of the history: 24 hourly rows a
// shard for a day by hour, 60 minute rows for an hour. A webhook's series
// holds the tenant boundary itself: the rollups of a webhook carry no
// tenant, so a webhook of another tenant yields nothing.
const (
	seriesScope = `scope_id = @scope AND hourly = @hourly AND at >= @since AND at < @until
  AND (@webhook::uuid IS NULL OR EXISTS (SELECT 1 FROM webhooks w WHERE w.id = @webhook::uuid AND w.tenant_id = @tenant_id))`

	seriesTotalsSQL = `SELECT floor(extract(epoch FROM at - @since::timestamptz) / @step_seconds)::int AS bin,
    sum(attempts), sum(successes)
FROM attempt_rollups WHERE ` + seriesScope + `
GROUP BY 1`

	seriesLatencySQL = `SELECT floor(extract(epoch FROM at - @since::timestamptz) / @step_seconds)::int AS bin,
    l.key::int, sum(l.value::bigint)
FROM attempt_rollups, jsonb_each_text(latency) AS l WHERE ` + seriesScope + `
GROUP BY 1, 2`
)

// Series returns the attempts of the tenant's webhook webhookID, or of all
// the tenant's webhooks when it is nil, over the window ending with now's
// minute (now itself when it is on a minute) in buckets buckets. The
// window must divide into buckets of whole minutes, the resolution of the
// rollups. Pass a now truncated to the bucket width for buckets that stay
// put from one page load to the next.
func (r *Reader) Series(ctx context.Context, tenantID uuid.UUID, webhookID *uuid.UUID, window time.Duration,
	buckets int, now time.Time) (Series, error) {
	step, err := seriesStep(window, buckets)
	if err != nil {
		return Series{}, err
	}
	until := now.UTC().Truncate(time.Minute)
	if until.Before(now) {
		until = until.Add(time.Minute)
	}
	s := Series{Start: until.Add(-window), End: until, Step: step, Buckets: make([]Bucket, buckets)}
	for i := range s.Buckets {
		s.Buckets[i].Start = s.Start.Add(time.Duration(i) * step)
	}
	args := pgx.NamedArgs{"scope": tenantID, "tenant_id": tenantID, "webhook": webhookID,
		"since": s.Start, "until": s.End, "step_seconds": int64(step / time.Second),
		"hourly": step%time.Hour == 0 && s.Start.Truncate(time.Hour).Equal(s.Start)}
	if webhookID != nil {
		args["scope"] = *webhookID
	}
	if err := r.seriesTotals(ctx, args, &s); err != nil {
		return Series{}, err
	}
	if err := r.seriesLatency(ctx, args, &s); err != nil {
		return Series{}, err
	}
	return s, nil
}

func (r *Reader) seriesTotals(ctx context.Context, args pgx.NamedArgs, s *Series) error {
	rows, err := r.pool.Query(ctx, seriesTotalsSQL, args)
	if err != nil {
		return fmt.Errorf("attempt series: %w", err)
	}
	var bin int
	var attempts, successes int64
	_, err = pgx.ForEachRow(rows, []any{&bin, &attempts, &successes}, func() error {
		if bin >= 0 && bin < len(s.Buckets) {
			b := &s.Buckets[bin]
			b.Attempts, b.Successes, b.Failures = attempts, successes, attempts-successes
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("attempt series: %w", err)
	}
	return nil
}

func (r *Reader) seriesLatency(ctx context.Context, args pgx.NamedArgs, s *Series) error {
	rows, err := r.pool.Query(ctx, seriesLatencySQL, args)
	if err != nil {
		return fmt.Errorf("attempt series: %w", err)
	}
	hists := make([]histogram, len(s.Buckets))
	var bin, bucket int
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&bin, &bucket, &n}, func() error {
		if bin >= 0 && bin < len(hists) {
			if hists[bin] == nil {
				hists[bin] = histogram{}
			}
			hists[bin][bucket] += n
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("attempt series: %w", err)
	}
	for i, h := range hists {
		s.Buckets[i].P50MS, s.Buckets[i].P95MS = h.percentile(0.5), h.percentile(0.95)
	}
	return nil
}

// seriesStep is the width of each of buckets buckets over window.
func seriesStep(window time.Duration, buckets int) (time.Duration, error) {
	if buckets < 1 || buckets > MaxSeriesBuckets {
		return 0, fmt.Errorf("attempt series: %d buckets, want 1 to %d", buckets, MaxSeriesBuckets)
	}
	step := window / time.Duration(buckets)
	if window <= 0 || step*time.Duration(buckets) != window || step%time.Minute != 0 {
		return 0, fmt.Errorf("attempt series: %s does not divide into %d buckets of whole minutes", window, buckets)
	}
	return step, nil
}
