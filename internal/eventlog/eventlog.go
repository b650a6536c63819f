// Package eventlog holds what the writers of the event log share (docs/DATA.md,
// "The event log"): the statement that stores the idempotency keys of new
// events, and the lock that keeps deliveries from being added to the
// events of a week that retention is dropping.
package eventlog

// KeysSQL returns two common table expressions, keyed and keyed_ahead,
// that store in event_keys the idempotency keys of the events that from
// yields (a FROM item with columns id, tenant_id and idempotency_key): each
// under today's UTC day, and, for those stored, under tomorrow's. keyed
// returns the event_id of each event whose key was free today: the events
// to insert. A key that another event holds today is skipped (that event
// was published within the last day, or earlier today), as is one that
// repeats within from.
//
// Whatever the hour of two publishes less than 24 hours apart, the later
// one's day is the earlier one's day or the next, so it meets the earlier
// key in event_keys' primary key: Postgres enforces the key for at least a
// day, and for at most two, after which event_keys drops the day.
func KeysSQL(from string) string {
	return `keyed AS (
    INSERT INTO event_keys (tenant_id, idempotency_key, day, event_id)
    SELECT tenant_id, idempotency_key, (now() AT TIME ZONE 'UTC')::date, id FROM ` + from + `
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, idempotency_key, day, event_id
), keyed_ahead AS (
    INSERT INTO event_keys (tenant_id, idempotency_key, day, event_id)
    SELECT tenant_id, idempotency_key, day + 1, event_id FROM keyed
    ON CONFLICT DO NOTHING
)`
}

// OwnerSQL finds the event that holds the tenant's ($1) idempotency key
// ($2) in event_keys, with its columns cols (of events e): the event a
// publish whose key was taken repeats.
func OwnerSQL(cols string) string {
	return `SELECT ` + cols + ` FROM event_keys k JOIN events e ON e.id = k.event_id
WHERE k.tenant_id = $1 AND k.idempotency_key = $2
ORDER BY k.day DESC LIMIT 1`
}

// HoldSQL is the first statement of a transaction that adds deliveries to
// events already stored (retries, batch retries and recoveries): it waits
// while retention drops a week of the event log, and keeps it from
// starting one until the transaction ends. Retention moves the events that
// deliveries still name out of the week before dropping it; a delivery
// added between that choice and the drop would name an event gone.
// Publishes, replays, test events and notifications add deliveries to the
// new events they insert, never to an old week, and need no hold.
const HoldSQL = `SELECT pg_advisory_xact_lock_shared(hashtext('hookline.event_drops'))`

// LockDropsSQL is retention's side of HoldSQL, taken in the transaction
// that drops a week: it waits for the transactions holding it to end.
const LockDropsSQL = `SELECT pg_advisory_xact_lock(hashtext('hookline.event_drops'))`
