package history

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestCountParts(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := day.Add(d); return &x }
	h, m := time.Hour, time.Minute
	days := func(from, to *time.Time) rollupRange { return rollupRange{from: from, to: to} }
	hours := func(from, to *time.Time) rollupRange { return rollupRange{hourly: true, from: from, to: to} }
	raw := func(from, to *time.Time) [2]time.Time { return [2]time.Time{*from, *to} }
	for name, tc := range map[string]struct {
		from, to *time.Time
		want     parts
	}{
		"no bounds":            {want: parts{rollups: []rollupRange{days(nil, nil)}}},
		"from midnight":        {from: at(0), want: parts{rollups: []rollupRange{days(at(0), nil)}}},
		"from an hour":         {from: at(5 * h), want: parts{rollups: []rollupRange{days(at(24*h), nil), hours(at(5*h), at(24*h))}}},
		"from a minute":        {from: at(5*h + 7*m), want: parts{rollups: []rollupRange{days(at(24*h), nil), hours(at(6*h), at(24*h))}, raw: [][2]time.Time{raw(at(5*h+7*m), at(6*h))}}},
		"to a minute":          {to: at(30*h + 7*m), want: parts{rollups: []rollupRange{days(nil, at(24*h)), hours(at(24*h), at(30*h))}, raw: [][2]time.Time{raw(at(30*h), at(30*h+7*m))}}},
		"to midnight":          {to: at(48 * h), want: parts{rollups: []rollupRange{days(nil, at(48*h))}}},
		"across whole days":    {from: at(5*h + 7*m), to: at(72*h + 30*m), want: parts{rollups: []rollupRange{days(at(24*h), at(72*h)), hours(at(6*h), at(24*h))}, raw: [][2]time.Time{raw(at(5*h+7*m), at(6*h)), raw(at(72*h), at(72*h+30*m))}}},
		"no whole day":         {from: at(5*h + 7*m), to: at(29*h + 30*m), want: parts{rollups: []rollupRange{hours(at(6*h), at(29*h))}, raw: [][2]time.Time{raw(at(5*h+7*m), at(6*h)), raw(at(29*h), at(29*h+30*m))}}},
		"within an hour":       {from: at(5*h + 7*m), to: at(5*h + 50*m), want: parts{raw: [][2]time.Time{raw(at(5*h+7*m), at(5*h+50*m))}}},
		"across one hour edge": {from: at(5*h + 50*m), to: at(6*h + 10*m), want: parts{raw: [][2]time.Time{raw(at(5*h+50*m), at(6*h+10*m))}}},
		"hours on the hour":    {from: at(5 * h), to: at(9 * h), want: parts{rollups: []rollupRange{hours(at(5*h), at(9*h))}}},
		"days on midnight":     {from: at(0), to: at(72 * h), want: parts{rollups: []rollupRange{days(at(0), at(72*h))}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := countParts(tc.from, tc.to)
			require.Equal(t, len(tc.want.rollups), len(got.rollups), "%+v", got)
			for i, w := range tc.want.rollups {
				g := got.rollups[i]
				require.Equal(t, w.hourly, g.hourly, "range %d", i)
				require.True(t, sameTime(w.from, g.from) && sameTime(w.to, g.to), "range %d: %v-%v, want %v-%v", i, g.from, g.to, w.from, w.to)
			}
			require.Equal(t, len(tc.want.raw), len(got.raw), "%+v", got.raw)
			for i := range tc.want.raw {
				require.True(t, tc.want.raw[i][0].Equal(got.raw[i][0]) && tc.want.raw[i][1].Equal(got.raw[i][1]), "raw %d: %v", i, got.raw[i])
			}
		})
	}
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

func ptrTime(t time.Time) *time.Time { return &t }

// The DLQ counted from the rollups, kept by the triggers through
// exhaustion, retries (the first and later ones) and deletion, is what
// counting the deliveries themselves gives, for every filter.
func TestDeadLetterCountsFromRollupsMatchTheDeliveries(t *testing.T) {
	t.Parallel()
	f := newSeriesFixture(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now().UTC()
	types := []string{"order.created", "order.paid", "user.deleted"}
	categories := []string{"timeout", "server_error", "client_error"}
	hooks := []uuid.UUID{f.one, f.two, f.deleted}
	var exhausted []uuid.UUID
	for i := 0; i < 120; i++ {
		hook, typ := hooks[rng.IntN(len(hooks))], types[rng.IntN(len(types))]
		at := now.Add(-time.Duration(rng.IntN(5*24*60)) * time.Minute)
		var id uuid.UUID
		require.NoError(t, f.pool.QueryRow(ctx, `WITH e AS (
    INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data)
    VALUES (uuidv7(), $1, $2, gen_random_uuid()::text, '\x00', 'normal', '{}') RETURNING id)
INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, created_at)
SELECT uuidv7(), $1, e.id, $3, 'normal', $4 FROM e RETURNING id`, f.a, typ, hook, at).Scan(&id))
		switch rng.IntN(4) {
		case 0: // still pending
		case 1:
			f.exec(`UPDATE deliveries SET status = 'succeeded', completed_at = $2 WHERE id = $1`, id, at)
		default:
			cat := categories[rng.IntN(len(categories))]
			if rng.IntN(5) == 0 {
				cat = "" // a poison message: no category
			}
			f.exec(`UPDATE deliveries SET status = 'retrying' WHERE id = $1`, id)
			f.exec(`UPDATE deliveries SET status = 'exhausted', completed_at = $2, failure_category = nullif($3, '') WHERE id = $1`, id, at, cat)
			exhausted = append(exhausted, id)
		}
	}
	// Retries: some once, some twice (the second retry hides nothing more),
	// one retried original deleted, one retry deleted again.
	retry := func(of uuid.UUID) uuid.UUID {
		var id uuid.UUID
		require.NoError(t, f.pool.QueryRow(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, retry_of)
SELECT uuidv7(), tenant_id, event_id, webhook_id, 'normal', id FROM deliveries WHERE id = $1 RETURNING id`, of).Scan(&id))
		return id
	}
	for i, id := range exhausted[:len(exhausted)/2] {
		r := retry(id)
		f.exec(`UPDATE deliveries SET status = 'succeeded', completed_at = now() WHERE id = $1`, r)
		if i%3 == 0 {
			retry(id)
		}
	}
	f.exec(`DELETE FROM deliveries WHERE id = $1`, exhausted[0])
	f.exec(`DELETE FROM deliveries WHERE id = $1`, exhausted[len(exhausted)-1])
	// The only retry of an original, deleted: the original is back in the
	// DLQ. Both retries of another, deleted in one statement: the same.
	f.exec(`DELETE FROM deliveries WHERE retry_of = $1`, exhausted[1])
	f.exec(`DELETE FROM deliveries WHERE retry_of = $1`, exhausted[3])

	r := NewReader(f.pool)
	day := now.Truncate(24 * time.Hour)
	times := []*time.Time{nil, ptrTime(day.Add(-3 * 24 * time.Hour)), ptrTime(now.Add(-50 * time.Hour)),
		ptrTime(day.Add(-24*time.Hour + 7*time.Hour)), ptrTime(day.Add(-24*time.Hour + 7*time.Hour + 20*time.Minute)),
		ptrTime(now.Add(-26 * time.Hour)), ptrTime(now.Add(time.Hour))}
	filters := []DeadLetterFilter{{}, {WebhookIDs: []uuid.UUID{f.one}}, {EventTypes: []string{"order.paid", "user.deleted"}},
		{FailureCategories: []string{"timeout", UnknownCategory}}, {WebhookIDs: []uuid.UUID{f.two, f.deleted}, EventTypes: []string{"order.created"}}}
	checked := 0
	for _, filter := range filters {
		for _, from := range times {
			for _, to := range times {
				if from != nil && to != nil && !from.Before(*to) {
					continue
				}
				for _, retried := range []bool{false, true} {
					q := DeadLetterQuery{Filter: filter, IncludeRetried: retried}
					q.Filter.From, q.Filter.To = from, to
					got, err := r.CountDeadLetters(ctx, f.a, q)
					require.NoError(t, err)
					want := countDirectly(t, f, q)
					require.Equal(t, want, got, "filter %+v from %v to %v retried %v", filter, from, to, retried)
					checked++
				}
			}
		}
	}
	require.Greater(t, checked, 100)
	total, err := r.CountDeadLetters(ctx, f.a, DeadLetterQuery{})
	require.NoError(t, err)
	require.Greater(t, total.Total, 10, "the fixture has a DLQ to count")
	other, err := r.CountDeadLetters(ctx, f.b, DeadLetterQuery{})
	require.NoError(t, err)
	require.Zero(t, other.Total, "another tenant's DLQ is its own")
}

// countDirectly counts the DLQ from the deliveries, as before rollups.
func countDirectly(t *testing.T, f *seriesFixture, q DeadLetterQuery) DeadLetterCounts {
	t.Helper()
	args := q.Filter.Args(f.a)
	args["include_retried"] = q.IncludeRetried
	rows, err := f.pool.Query(context.Background(), deadLetterCountsSQL, args)
	require.NoError(t, err)
	c := DeadLetterCounts{ByCategory: map[string]int{}}
	var cat string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&cat, &n}, func() error {
		c.ByCategory[cat] = n
		c.Total += n
		return nil
	})
	require.NoError(t, err)
	return c
}
