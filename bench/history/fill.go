package main

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"log"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"golang.org/x/sync/errgroup"
)

// filler writes history with COPY on the owner's connection.
type filler struct {
	url  string
	conn *pgx.Conn
	rng  *rand.Rand
	// took is the time spent copying into each table.
	took map[string]time.Duration
}

func newFiller(ctx context.Context, url string) (*filler, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	var seed [16]byte
	if _, err := cryptoRead(seed[:]); err != nil {
		return nil, err
	}
	// The history's shape is drawn at random; nothing secret comes of it.
	rng := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))) //nolint:gosec // see above
	return &filler{url: url, conn: conn, took: map[string]time.Duration{}, rng: rng}, nil
}

func (f *filler) close() { _ = f.conn.Close(context.Background()) }

// cryptoRead fills b with random bytes.
var cryptoRead = crand.Read

// eventTypes are the large tenant's types, equally common; rareType is one
// event in ten thousand, for the filters that must not read the others.
var eventTypes = []string{"order.created", "order.paid", "order.shipped", "order.cancelled", "invoice.issued",
	"invoice.paid", "user.created", "user.updated", "user.deleted", "payment.failed"}

const rareType = "audit.exported"

// delivery is one event with its one delivery and attempts, as written.
type delivery struct {
	eventID, id [16]byte
	tenant      [16]byte
	webhook     [16]byte
	eventType   string
	created     time.Time
	status      string
	attempts    int
	category    *string
	durationMS  int
}

// chunk is how many deliveries one COPY statement writes.
const chunk = 200_000

// Sizes says what fill wrote.
type Sizes struct {
	Deliveries, Attempts, Tenants int
	Days                          int
}

func (s Sizes) String() string {
	return fmt.Sprintf("%d deliveries and %d attempts over %d days, %d tenants", s.Deliveries, s.Attempts, s.Days, s.Tenants)
}

// fill writes the large tenant's history (o.deliveries over o.days,
// ending now: 2 % exhausted, 0.2 % still retrying, the rest succeeded)
// and 20 deliveries for each small tenant, then analyzes the tables.
func (f *filler) fill(ctx context.Context, o options, big tenant, small []tenant) (Sizes, error) {
	now := time.Now().UTC()
	start := now.Add(-time.Duration(o.days) * 24 * time.Hour)
	if err := f.partitions(ctx, start, now); err != nil {
		return Sizes{}, err
	}
	sizes := Sizes{Days: o.days, Tenants: len(small) + 1}
	bigID, hooks := parseID(big.ID), parseIDs(big.Webhooks)
	span := now.Sub(start)
	// The large tenant's days in o.parallel contiguous parts, each copied
	// on a connection of its own (their rollup rows are of other minutes).
	parts := make([]Sizes, o.parallel)
	g, gctx := errgroup.WithContext(ctx)
	for p := range o.parallel {
		g.Go(func() error {
			pf, err := newFiller(gctx, f.url)
			if err != nil {
				return err
			}
			defer pf.close()
			from, to := o.deliveries*p/o.parallel, o.deliveries*(p+1)/o.parallel
			var batch []delivery
			for i := from; i < to; i++ {
				at := start.Add(time.Duration(float64(span) * float64(i) / float64(o.deliveries)))
				batch = append(batch, pf.delivery(bigID, hooks[pf.rng.IntN(len(hooks))], at))
				if len(batch) == chunk || i == to-1 {
					n, err := pf.write(gctx, batch)
					if err != nil {
						return err
					}
					parts[p].Deliveries += len(batch)
					parts[p].Attempts += n
					batch = batch[:0]
					if p == 0 && parts[p].Deliveries%(10*chunk) == 0 {
						log.Printf("part 1 of %d: %d of %d deliveries written", o.parallel, parts[p].Deliveries, to-from)
					}
				}
			}
			log.Printf("part %d of %d: copy time by table %v", p+1, o.parallel, pf.took)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return sizes, err
	}
	for _, p := range parts {
		sizes.Deliveries += p.Deliveries
		sizes.Attempts += p.Attempts
	}
	var batch []delivery
	flush := func() error {
		n, err := f.write(ctx, batch)
		sizes.Deliveries += len(batch)
		sizes.Attempts += n
		batch = batch[:0]
		return err
	}
	for _, t := range small {
		id, hook := parseID(t.ID), parseID(t.Webhooks[0])
		for range 20 {
			batch = append(batch, f.delivery(id, hook, start.Add(time.Duration(f.rng.Int64N(int64(span))))))
		}
		if len(batch) >= chunk {
			if err := flush(); err != nil {
				return sizes, err
			}
		}
	}
	if err := flush(); err != nil {
		return sizes, err
	}
	_, err := f.conn.Exec(ctx, `ANALYZE`)
	return sizes, err
}

// delivery makes one delivery of webhook created at at, with its event.
func (f *filler) delivery(tenantID, webhook [16]byte, at time.Time) delivery {
	d := delivery{eventID: v7(at), id: v7(at), tenant: tenantID, webhook: webhook, created: at,
		eventType: eventTypes[f.rng.IntN(len(eventTypes))], status: "succeeded", attempts: 1,
		durationMS: 20 + f.rng.IntN(200)}
	if f.rng.IntN(10_000) == 0 {
		d.eventType = rareType
	}
	switch r := f.rng.IntN(1000); {
	case r < 20:
		d.status, d.attempts = "exhausted", 5
		d.category = &[]string{"server_error", "timeout", "client_error"}[r%3]
	case r < 22:
		d.status, d.attempts = "retrying", 2
		d.category = &[]string{"server_error", "timeout"}[r%2]
	}
	return d
}

// write copies the events, the deliveries and the attempts of batch, each
// table in one statement, and returns the attempts written.
func (f *filler) write(ctx context.Context, batch []delivery) (int, error) {
	if len(batch) == 0 {
		return 0, nil
	}
	parkedUntil := time.Now().Add(400 * 24 * time.Hour)
	events := make([][]any, len(batch))
	deliveries := make([][]any, len(batch))
	var attempts [][]any
	for i, d := range batch {
		events[i] = []any{uuidOf(d.eventID), uuidOf(d.tenant), d.eventType, "bench/history",
			fmt.Sprintf("h-%x", d.eventID), make([]byte, 32), "normal", `{"n":1}`, "", d.created}
		done := d.created.Add(time.Duration(d.attempts) * time.Minute)
		var completed, parkedAt, next *time.Time
		var reason *string
		code := 200
		switch d.status {
		case "succeeded", "exhausted":
			completed = &done
		case "retrying":
			parkedAt, next, reason = &done, &parkedUntil, ptr("backoff")
		}
		if d.category != nil {
			code = 500
		}
		deliveries[i] = []any{uuidOf(d.id), uuidOf(d.tenant), uuidOf(d.eventID), uuidOf(d.webhook), d.status, "normal",
			d.attempts, code, d.category, parkedAt, reason, next, d.created, d.created, done, completed}
		for n := 1; n <= d.attempts; n++ {
			status, category := 200, (*string)(nil)
			if d.status != "succeeded" {
				status, category = 500, d.category
			}
			executed := d.created.Add(time.Duration(n-1) * time.Minute)
			attempts = append(attempts, []any{uuidOf(d.id), d.created, n, uuidOf(d.tenant), uuidOf(d.webhook), status,
				category, d.durationMS + n, "bench/history", executed, executed})
		}
	}
	for _, c := range []struct {
		table   string
		columns []string
		rows    [][]any
	}{
		{"events", []string{"id", "tenant_id", "event_type", "source", "idempotency_key", "request_hash", "priority",
			"data", "correlation_id", "created_at"}, events},
		{"deliveries", []string{"id", "tenant_id", "event_id", "webhook_id", "status", "priority", "attempt_count",
			"last_status_code", "failure_category", "parked_at", "park_reason", "next_attempt_at", "enqueued_at",
			"created_at", "updated_at", "completed_at"}, deliveries},
		{"delivery_attempts", []string{"delivery_id", "delivery_created_at", "attempt_number", "tenant_id", "webhook_id",
			"status_code", "failure_category", "duration_ms", "response_body_sample", "scheduled_at", "executed_at"}, attempts},
	} {
		start := time.Now()
		if _, err := f.conn.CopyFrom(ctx, pgx.Identifier{c.table}, c.columns, pgx.CopyFromRows(c.rows)); err != nil {
			return 0, fmt.Errorf("copy %s: %w", c.table, err)
		}
		f.took[c.table] += time.Since(start)
	}
	return len(attempts), nil
}

// partitions makes the attempt log's daily partitions, and the weekly ones
// of the event log and of deliveries, of the days before the ones the
// product makes ahead (ensure_attempt_partitions, ensure_event_partitions),
// as a deployment running for that long would have them; by then, the
// partitions of the rows from before the weeks (events_before and
// deliveries_before, empty in a new database) are gone.
func (f *filler) partitions(ctx context.Context, from, to time.Time) error {
	for _, parent := range []string{"events", "deliveries"} {
		if _, err := f.conn.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
    IF to_regclass('%[1]s_before') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM %[1]s_before) THEN
        ALTER TABLE %[1]s DETACH PARTITION %[1]s_before;
        DROP TABLE %[1]s_before;
    END IF;
END $$`, parent)); err != nil {
			return fmt.Errorf("%s_before: %w", parent, err)
		}
	}
	day := from.UTC().Truncate(24 * time.Hour)
	for monday := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7)); !monday.After(to); monday = monday.AddDate(0, 0, 7) {
		for _, parent := range []string{"events", "deliveries"} {
			name := parent + "_" + monday.Format("20060102")
			if _, err := f.conn.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
    IF to_regclass('%[1]s') IS NULL THEN
        CREATE TABLE %[1]s PARTITION OF %[4]s FOR VALUES FROM (uuidv7_floor('%[2]s')) TO (uuidv7_floor('%[3]s'));
    END IF;
END $$`, name, monday.Format(time.RFC3339), monday.AddDate(0, 0, 7).Format(time.RFC3339), parent)); err != nil {
				return fmt.Errorf("partition %s: %w", name, err)
			}
		}
	}
	for d := from.Truncate(24 * time.Hour); !d.After(to); d = d.Add(24 * time.Hour) {
		name := "delivery_attempts_" + d.Format("20060102")
		if _, err := f.conn.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
    IF to_regclass('%[1]s') IS NULL THEN
        CREATE TABLE %[1]s PARTITION OF delivery_attempts FOR VALUES FROM ('%[2]s') TO ('%[3]s');
        GRANT SELECT ON %[1]s TO hookline_dlq;
    END IF;
END $$`, name, d.Format(time.RFC3339), d.Add(24*time.Hour).Format(time.RFC3339))); err != nil {
			return fmt.Errorf("partition %s: %w", name, err)
		}
	}
	return nil
}

// v7 is a UUIDv7 of time t.
func v7(t time.Time) [16]byte {
	var id [16]byte
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i)) //nolint:gosec // the low 48 bits, a byte at a time
	}
	_, _ = cryptoRead(id[6:])
	id[6] = id[6]&0x0f | 0x70
	id[8] = id[8]&0x3f | 0x80
	return id
}

func uuidOf(b [16]byte) pgtype.UUID { return pgtype.UUID{Bytes: b, Valid: true} }

func parseID(s string) [16]byte {
	var u pgtype.UUID
	if err := u.Scan(s); err != nil {
		panic(fmt.Sprintf("the api answered an id that is no uuid: %q", s))
	}
	return u.Bytes
}

func parseIDs(ss []string) [][16]byte {
	out := make([][16]byte, len(ss))
	for i, s := range ss {
		out[i] = parseID(s)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
