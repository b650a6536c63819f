package retention

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/testlog"
)

// fixture is a fresh database with one tenant and one webhook, and helpers
// that write rows at any time in the past, as the publish path and the
// workers would have.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	pool    *pgxpool.Pool
	tenant  uuid.UUID
	webhook uuid.UUID
	logs    *testlog.Buffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), pool: dbtest.New(t),
		tenant: uuid.Must(uuid.NewV7()), webhook: uuid.Must(uuid.NewV7()), logs: &testlog.Buffer{}}
	// Partitions as a live system has them, from yesterday on; none left
	// from the day the template database was made.
	f.exec(`DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'delivery_attempts'::regclass AND c.relname ~ '^delivery_attempts_[0-9]{8}$'
               AND to_date(right(c.relname, 8), 'YYYYMMDD') < current_date - 1 LOOP
        EXECUTE format('DROP TABLE %I', r.relname);
    END LOOP;
    PERFORM ensure_attempt_partitions(14);
END $$`)
	// The event log as a live system has it once the events from before
	// its partitioning are gone: weeks from yesterday's on (eventWeek adds
	// older ones), the default partition for the rest.
	// Deliveries likewise (deliveryWeek adds older weeks).
	f.exec(`ALTER TABLE events DETACH PARTITION events_before`)
	f.exec(`DROP TABLE events_before`)
	f.exec(`ALTER TABLE deliveries DETACH PARTITION deliveries_before`)
	f.exec(`DROP TABLE deliveries_before`)
	f.exec(`SELECT ensure_event_partitions(14)`)
	f.exec(`INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
		VALUES ($1, 't', 1, 1, 1, 1)`, f.tenant)
	f.exec(`INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
		VALUES ($1, $2, 'http://example.com', '{order.created}', 's', '{}', '{}', '{}')`, f.webhook, f.tenant)
	return f
}

// job returns a Job with the default settings that logs into f.logs.
func (f *fixture) job() *Job {
	return New(f.pool, config.Default().Retention, slog.New(slog.NewTextHandler(f.logs, nil)))
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.pool.Exec(f.ctx, sql, args...)
	require.NoError(f.t, err)
}

// event inserts an event created at at, with a payload.
func (f *fixture) event(at time.Time) uuid.UUID {
	f.t.Helper()
	id := v7At(at)
	f.exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data, created_at)
		VALUES ($1, $2, 'order.created', $3, '\x00', 'normal', '{"n": 1}', $4)`, id, f.tenant, id.String(), at)
	return id
}

// delivery inserts a delivery of event created at at, in status, with
// attempts attempts recorded.
func (f *fixture) delivery(event uuid.UUID, at time.Time, status string, retryOf *uuid.UUID, attempts int) uuid.UUID {
	f.t.Helper()
	id := v7At(at)
	f.exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, attempt_count, retry_of, created_at)
		VALUES ($1, $2, $3, $4, 'normal', $5, $6, $7, $8)`, id, f.tenant, event, f.webhook, status, attempts, retryOf, at)
	for n := 1; n <= attempts; n++ {
		f.attempt(id, at, n)
	}
	return id
}

// attempt records attempt n of the delivery created at createdAt.
func (f *fixture) attempt(delivery uuid.UUID, createdAt time.Time, n int) {
	f.t.Helper()
	f.exec(`INSERT INTO delivery_attempts (delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id,
		status_code, duration_ms, scheduled_at, executed_at) VALUES ($1, $2, $3, $4, $5, 500, 10, $6, $6)`,
		delivery, createdAt, n, f.tenant, f.webhook, createdAt.Add(time.Duration(n)*time.Second))
}

// partition creates the attempt log's partition of the UTC day of at and
// returns its name.
func (f *fixture) partition(at time.Time) string {
	f.t.Helper()
	day := at.UTC().Truncate(24 * time.Hour)
	name := "delivery_attempts_" + day.Format("20060102")
	f.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF delivery_attempts FOR VALUES FROM ('%s') TO ('%s')`,
		name, day.Format(time.RFC3339), day.Add(24*time.Hour).Format(time.RFC3339)))
	return name
}

// eventWeek creates the partition of the event log for the week (from
// Monday, UTC) that at falls in, and returns its name.
func (f *fixture) eventWeek(at time.Time) string {
	f.t.Helper()
	return f.week("events", at)
}

// deliveryWeek creates the partition of deliveries for the week that at
// falls in, and returns its name.
func (f *fixture) deliveryWeek(at time.Time) string {
	f.t.Helper()
	return f.week("deliveries", at)
}

// weekPartitions makes the week of deliveries and of events holding at,
// and at's day of attempts, and returns their names.
func (f *fixture) weekPartitions(at time.Time) (deliveries, events, attempts string) {
	f.t.Helper()
	return f.deliveryWeek(at), f.eventWeek(at), f.partition(at)
}

// week creates parent's partition for the week (from Monday, UTC) that at
// falls in, and returns its name.
func (f *fixture) week(parent string, at time.Time) string {
	f.t.Helper()
	day := at.UTC().Truncate(24 * time.Hour)
	monday := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	name := parent + "_" + monday.Format("20060102")
	f.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		name, parent, idBound(monday), idBound(monday.AddDate(0, 0, 7))))
	return name
}

// longReader starts a transaction that has read table and holds its lock
// until the test ends or it is rolled back.
func (f *fixture) longReader(table string) pgx.Tx {
	f.t.Helper()
	reader, err := f.pool.Begin(f.ctx)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = reader.Rollback(context.Background()) })
	_, err = reader.Exec(f.ctx, `SELECT count(*) FROM `+table)
	require.NoError(f.t, err)
	return reader
}

func (f *fixture) exists(table string) bool {
	f.t.Helper()
	var ok bool
	require.NoError(f.t, f.pool.QueryRow(f.ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok))
	return ok
}

func (f *fixture) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.pool.QueryRow(f.ctx, sql, args...).Scan(&n))
	return n
}

func (f *fixture) deliveryExists(id uuid.UUID) bool {
	return f.count(`SELECT count(*) FROM deliveries WHERE id = $1`, id) == 1
}

func (f *fixture) eventExists(id uuid.UUID) bool {
	return f.count(`SELECT count(*) FROM events WHERE id = $1`, id) == 1
}

func (f *fixture) hasPayload(event uuid.UUID) bool {
	return f.count(`SELECT count(*) FROM events WHERE id = $1 AND data IS NOT NULL`, event) == 1
}

// v7At returns a random UUIDv7 made at t.
func v7At(t time.Time) uuid.UUID {
	var u uuid.UUID
	_, _ = rand.Read(u[:])
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(t.UnixMilli()))
	copy(u[:6], ts[2:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}
