package history

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// seriesFixture is a fresh database with two tenants: a has webhooks one,
// two and a deleted one, b has other.
type seriesFixture struct {
	t                        *testing.T
	pool                     *pgxpool.Pool
	a, b                     uuid.UUID
	one, two, deleted, other uuid.UUID
}

func newSeriesFixture(t *testing.T) *seriesFixture {
	t.Helper()
	f := &seriesFixture{t: t, pool: dbtest.New(t), a: uuid.New(), b: uuid.New(),
		one: uuid.New(), two: uuid.New(), deleted: uuid.New(), other: uuid.New()}
	for _, tenant := range []uuid.UUID{f.a, f.b} {
		f.exec(`INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
			VALUES ($1, 't', 1, 1, 1, 1)`, tenant)
	}
	for hook, tenant := range map[uuid.UUID]uuid.UUID{f.one: f.a, f.two: f.a, f.deleted: f.a, f.other: f.b} {
		f.exec(`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
			VALUES ($1, $2, 'http://example.com', '{order.created}', 's', '{}', '{}', '{}')`, hook, tenant)
	}
	f.exec(`UPDATE webhooks SET deleted_at = now() WHERE id = $1`, f.deleted)
	return f
}

func (f *seriesFixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.pool.Exec(context.Background(), sql, args...)
	require.NoError(f.t, err)
}

// attempt records an attempt of a delivery created a second before it, by
// the webhook's tenant as the worker would; status 0 is an attempt without
// an answer.
func (f *seriesFixture) attempt(hook uuid.UUID, at time.Time, status, ms int) {
	f.t.Helper()
	var code *int
	if status != 0 {
		code = &status
	}
	f.exec(`INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id,
		status_code, duration_ms, scheduled_at, executed_at)
		SELECT $1, $2, 1, w.tenant_id, w.id, $3, $4, $5, $5 FROM webhooks w WHERE w.id = $6`,
		uuid.New(), at.Add(-time.Second), code, ms, at, hook)
}

func (f *seriesFixture) series(tenant uuid.UUID, hook *uuid.UUID, window time.Duration, buckets int, now time.Time) Series {
	f.t.Helper()
	s, err := NewReader(f.pool).Series(context.Background(), tenant, hook, window, buckets, now)
	require.NoError(f.t, err)
	return s
}

// bucketOf is the expected bucket at start: counts, then the percentiles
// of the durations ms as the rollups' histograms estimate them (the
// estimate itself is tested in latency_test.go).
func bucketOf(start time.Time, attempts, successes int64, ms ...int) Bucket {
	b := Bucket{Start: start, Attempts: attempts, Successes: successes, Failures: attempts - successes}
	h := histogram{}
	for _, d := range ms {
		h[latencyBucket(d)]++
	}
	b.P50MS, b.P95MS = h.percentile(0.5), h.percentile(0.95)
	return b
}

func TestSeriesCountsEachBucketOfTheWebhookAndTheTenant(t *testing.T) {
	t.Parallel()
	f := newSeriesFixture(t)
	// Not on a minute: the window ends with now's minute.
	now := time.Now().UTC().Add(-17*time.Second - 123456789)
	end := now.Truncate(time.Minute).Add(time.Minute)
	since := end.Add(-time.Hour)
	at := func(minutes int) time.Time { return since.Add(time.Duration(minutes) * time.Minute) }

	// Buckets of ten minutes, the first starting at since.
	f.attempt(f.one, since, 200, 10)                       // 0: on the window's start, counted
	f.attempt(f.one, at(5), 500, 30)                       // 0
	f.attempt(f.one, at(9).Add(59*time.Second), 0, 20)     // 0: no answer, a failure
	f.attempt(f.one, at(20), 201, 100)                     // 2: on a bucket's start, in that bucket
	f.attempt(f.one, at(30), 200, 10)                      // 3
	f.attempt(f.one, at(31), 204, 20)                      // 3
	f.attempt(f.one, at(32), 299, 30)                      // 3
	f.attempt(f.one, at(33), 300, 40)                      // 3: a redirect is no success
	f.attempt(f.one, end.Add(-time.Microsecond), 502, 7)   // 5: the last moment in the window
	f.attempt(f.one, end, 200, 1000)                       // at the end: outside
	f.attempt(f.one, since.Add(-time.Microsecond), 200, 1) // before the window: outside
	f.attempt(f.one, end.Add(-30*time.Hour), 200, 1)       // long before: outside
	f.attempt(f.two, at(1), 200, 50)                       // the tenant's other webhook
	f.attempt(f.deleted, at(59), 200, 67)                  // a deleted webhook, still the tenant's traffic
	f.attempt(f.other, at(1), 200, 5000)                   // another tenant
	f.attempt(f.other, end.Add(-time.Minute), 500, 5000)   // another tenant

	hook := f.series(f.a, &f.one, time.Hour, 6, now)
	require.Equal(t, since, hook.Start)
	require.Equal(t, end, hook.End)
	require.Equal(t, 10*time.Minute, hook.Step)
	require.Equal(t, []Bucket{
		bucketOf(at(0), 3, 1, 10, 30, 20),
		bucketOf(at(10), 0, 0),
		bucketOf(at(20), 1, 1, 100),
		bucketOf(at(30), 4, 3, 10, 20, 30, 40),
		bucketOf(at(40), 0, 0),
		bucketOf(at(50), 1, 0, 7),
	}, hook.Buckets)

	tenant := f.series(f.a, nil, time.Hour, 6, now)
	require.Equal(t, []Bucket{
		bucketOf(at(0), 4, 2, 10, 30, 20, 50),
		bucketOf(at(10), 0, 0),
		bucketOf(at(20), 1, 1, 100),
		bucketOf(at(30), 4, 3, 10, 20, 30, 40),
		bucketOf(at(40), 0, 0),
		bucketOf(at(50), 2, 1, 7, 67),
	}, tenant.Buckets)
	require.InDelta(t, 25, *tenant.Buckets[3].P50MS, 25*0.1, "an estimate near the exact median")

	rate := tenant.Buckets[3].SuccessRate()
	require.NotNil(t, rate)
	require.InDelta(t, 0.75, *rate, 1e-9)
	require.Nil(t, tenant.Buckets[1].SuccessRate())
}

// A webhook of another tenant, named by the id, shows nothing of its
// attempts; nor does a tenant without traffic.
func TestSeriesStaysInsideTheTenant(t *testing.T) {
	t.Parallel()
	f := newSeriesFixture(t)
	now := time.Now().UTC().Truncate(time.Minute)
	f.attempt(f.other, now.Add(-90*time.Minute), 200, 5)
	f.attempt(f.other, now.Add(-time.Minute), 200, 5)

	for _, hook := range []*uuid.UUID{&f.other, &f.one, nil} {
		s := f.series(f.a, hook, 2*time.Hour, 4, now)
		require.Len(t, s.Buckets, 4)
		for i, b := range s.Buckets {
			require.Equal(t, bucketOf(now.Add(-2*time.Hour+time.Duration(i)*30*time.Minute), 0, 0), b)
		}
	}
	require.Equal(t, []int64{0, 1, 0, 1}, attempts(f.series(f.b, nil, 2*time.Hour, 4, now)))
	require.Equal(t, []int64{0, 1, 0, 1}, attempts(f.series(f.b, &f.other, 2*time.Hour, 4, now)))
}

// A day in buckets of a quarter of an hour: every bucket present, the
// attempts older than the day left out.
func TestSeriesOfADay(t *testing.T) {
	t.Parallel()
	f := newSeriesFixture(t)
	now := time.Now().UTC().Truncate(15 * time.Minute)
	f.attempt(f.one, now.Add(-24*time.Hour), 200, 5)
	f.attempt(f.one, now.Add(-24*time.Hour-time.Second), 200, 5)
	f.attempt(f.one, now.Add(-12*time.Hour+time.Minute), 200, 5)
	f.attempt(f.one, now.Add(-time.Second), 200, 5)

	s := f.series(f.a, &f.one, 24*time.Hour, 96, now)
	require.Len(t, s.Buckets, 96)
	want := make([]int64, 96)
	want[0], want[48], want[95] = 1, 1, 1
	require.Equal(t, want, attempts(s))
	for i, b := range s.Buckets {
		require.Equal(t, now.Add(-24*time.Hour+time.Duration(i)*15*time.Minute), b.Start)
	}
}

func attempts(s Series) []int64 {
	out := []int64{}
	for _, b := range s.Buckets {
		out = append(out, b.Attempts)
	}
	return out
}

func TestSeriesRefusesWindowsThatDoNotDivide(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		window  time.Duration
		buckets int
		ok      bool
	}{
		{time.Hour, 60, true},
		{24 * time.Hour, 96, true},
		{24 * time.Hour, MaxSeriesBuckets, true},
		{time.Hour, 1, true},
		{time.Hour, 0, false},
		{time.Hour, -1, false},
		{24 * time.Hour, MaxSeriesBuckets + 1, false},
		{0, 10, false},
		{-time.Hour, 10, false},
		{time.Hour, 7, false},               // 8m34.285714285s
		{time.Hour, 120, false},             // half minutes, finer than the rollups
		{time.Millisecond, 3, false},        // divides into nanoseconds only
		{3 * time.Minute, 3, true},          // a minute each
		{time.Hour + time.Second, 1, false}, // not whole minutes
		{25 * time.Hour, 1500, false},       // a minute each, but too many
		{time.Hour + time.Minute, 61, true}, // whole minutes
	} {
		step, err := seriesStep(tc.window, tc.buckets)
		if !tc.ok {
			require.Error(t, err, "%s in %d", tc.window, tc.buckets)
			continue
		}
		require.NoError(t, err, "%s in %d", tc.window, tc.buckets)
		require.Equal(t, tc.window, step*time.Duration(tc.buckets))
	}
	_, err := NewReader(nil).Series(context.Background(), uuid.New(), nil, time.Hour, 7, time.Now())
	require.ErrorContains(t, err, "does not divide")
}
