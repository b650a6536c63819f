package retention

// The SQL of the retention job. Batch statements handle one page of at
// most $3 rows with an id above $1 (the previous page's last) and below $2
// (the UUIDv7 bound of the cutoff, so that the primary key finds them), and
// return the page's last id (NULL once there is none) and the rows they
// changed. Every candidate is checked again against its creation time ($4),
// which the id only approximates.

const (
	tryLockSQL = `SELECT pg_try_advisory_lock(hashtext('hookline.retention'))`
	unlockSQL  = `SELECT pg_advisory_unlock(hashtext('hookline.retention'))`
)

// resolvedSQL is true for an exhausted delivery d once a retry of it
// succeeded, or a retry of that retry, and so on: a chain of retries that
// ends in a success resolves every delivery in it.
const resolvedSQL = `EXISTS (
    WITH RECURSIVE chain AS (
        SELECT r.id, r.status FROM deliveries r WHERE r.retry_of = d.id
        UNION ALL
        SELECT r.id, r.status FROM deliveries r JOIN chain c ON r.retry_of = c.id
    )
    SELECT 1 FROM chain WHERE chain.status = 'succeeded')`

// keptSQL is true for a delivery d that outlives the retention age, with
// its attempts and its event's payload: one still in flight, or exhausted
// and not resolved (it stays in the DLQ).
const keptSQL = `(d.status IN ('pending', 'retrying') OR (d.status = 'exhausted' AND NOT ` + resolvedSQL + `))`

// doneSQL is true for a delivery d that retention deletes once it is old:
// succeeded, cancelled, or exhausted and resolved.
const doneSQL = `(d.status IN ('succeeded', 'cancelled') OR (d.status = 'exhausted' AND ` + resolvedSQL + `))`

// goneCTEs delete the old deliveries that are done with among page (ids),
// with their retained attempts, and name them gone. A retry goes with or
// after the delivery it retried: its retry_of becomes NULL when that
// delivery is deleted (unlinked), and resolvedSQL follows retry_of, so
// deleting a retry first would cut an older exhausted delivery off the
// retry that resolved it and keep it for good. So a delivery goes when it
// retries nothing (any more), or when the delivery it retries goes in the
// same statement. No foreign key names deliveries (so that a week of them
// can go whole): the statement does what ON DELETE would.
const goneCTEs = `done AS MATERIALIZED (
    SELECT d.id, d.retry_of FROM deliveries d JOIN page p ON d.id = p.id
    WHERE d.created_at < $4 AND ` + doneSQL + `
), deletable AS (
    SELECT id FROM done WHERE retry_of IS NULL
    UNION
    SELECT done.id FROM done JOIN deletable x ON done.retry_of = x.id
), gone AS (
    DELETE FROM deliveries d USING deletable x WHERE d.id = x.id
    RETURNING d.id
), unlinked AS (
    UPDATE deliveries r SET retry_of = NULL FROM gone g
    WHERE r.retry_of = g.id AND NOT EXISTS (SELECT 1 FROM deletable x WHERE x.id = r.id)
), gone_attempts AS (
    DELETE FROM delivery_attempts_retained a USING gone g WHERE a.delivery_id = g.id
)`

// pruneDeliveriesSQL deletes old deliveries that are done with from a
// partition of deliveries that is not a week (%s): the default one, which
// holds the deliveries dropped weeks kept (see dropDeliveryPartitions), and
// deliveries_before, the table of a release before the weeks, until it
// goes whole. It lists the page's others in retention_kept, for the runs
// after to look at again (the step's floor passes them). Pages go in id
// order, so that a retry comes with or after the delivery it retried.
// Their retained attempts go with them; those still in the attempt log go
// with their partition.
const pruneDeliveriesSQL = `WITH RECURSIVE page AS MATERIALIZED (
    SELECT id FROM %[1]s WHERE id > $1 AND id < $2 ORDER BY id LIMIT $3
), ` + goneCTEs + `, kept AS (
    INSERT INTO retention_kept (step, id)
    SELECT 'deliveries', p.id FROM page p WHERE NOT EXISTS (SELECT 1 FROM gone g WHERE g.id = p.id)
    ON CONFLICT DO NOTHING
)
SELECT (SELECT id FROM page ORDER BY id DESC LIMIT 1), (SELECT count(*) FROM gone)`

// revisitDeliveriesSQL deletes the deliveries of a page of retention_kept
// that are done with now, and takes them off the list, with the ones gone
// otherwise (their webhook deleted, say). The statement's subqueries see
// the rows its deletion removes, so the list's check names them.
const revisitDeliveriesSQL = `WITH RECURSIVE page AS MATERIALIZED (
    SELECT id FROM retention_kept WHERE step = 'deliveries' AND id > $1 AND id < $2 ORDER BY id LIMIT $3
), ` + goneCTEs + `, released AS (
    DELETE FROM retention_kept k USING page
    WHERE k.step = 'deliveries' AND k.id = page.id
      AND (EXISTS (SELECT 1 FROM gone g WHERE g.id = k.id) OR NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.id = k.id))
)
SELECT (SELECT id FROM page ORDER BY id DESC LIMIT 1), (SELECT count(*) FROM gone)`

// pruneEventsSQL deletes old events that have no delivery left from a
// partition of the event log that is not a week (%s): the default one,
// which holds the events dropped weeks kept (see dropEventPartitions) and
// any whose id fell in no week, and events_before, the table of a release
// before the weeks, until it goes whole. The weeks go whole. Events
// replaying one of them keep its id in replay_of.
const pruneEventsSQL = `WITH page AS MATERIALIZED (
    SELECT id FROM %[1]s WHERE id > $1 AND id < $2 ORDER BY id LIMIT $3
), gone AS (
    DELETE FROM %[1]s e USING page
    WHERE e.id = page.id AND e.created_at < $4
      AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id)
    RETURNING 1
)
SELECT (SELECT id FROM page ORDER BY id DESC LIMIT 1), (SELECT count(*) FROM gone)`

// rowPartitionsSQL lists the partitions of $1 (events or deliveries)
// whose rows retention deletes one by one: all but the weeks.
const rowPartitionsSQL = `SELECT c.oid::regclass::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::text::regclass AND c.relname !~ ('^' || $1::text || '_[0-9]{8}$')
ORDER BY c.relname`

// prunedCTE clears the payload of the old events among page (ids) that no
// delivery needs any more, and names them pruned: none of their deliveries
// is kept (every one succeeded, was cancelled, or was exhausted and
// resolved). An event with no delivery at all has nothing left to deliver
// either.
const prunedCTE = `pruned AS (
    UPDATE events e SET data = NULL FROM page
    WHERE e.id = page.id AND e.created_at < $4 AND e.data IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id AND ` + keptSQL + `)
    RETURNING e.id
)`

// prunePayloadsSQL clears the payload of old events that are fully
// delivered, and lists the page's others in retention_kept.
// events_payload_idx holds only events that still have a payload.
const prunePayloadsSQL = `WITH page AS MATERIALIZED (
    SELECT id FROM events WHERE id > $1 AND id < $2 AND data IS NOT NULL ORDER BY id LIMIT $3
), ` + prunedCTE + `, kept AS (
    INSERT INTO retention_kept (step, id)
    SELECT 'payloads', p.id FROM page p WHERE NOT EXISTS (SELECT 1 FROM pruned x WHERE x.id = p.id)
    ON CONFLICT DO NOTHING
)
SELECT (SELECT id FROM page ORDER BY id DESC LIMIT 1), (SELECT count(*) FROM pruned)`

// revisitPayloadsSQL clears the payloads of a page of retention_kept that
// no delivery needs now, and takes them off the list, with the events gone
// or cleared otherwise.
const revisitPayloadsSQL = `WITH page AS MATERIALIZED (
    SELECT id FROM retention_kept WHERE step = 'payloads' AND id > $1 AND id < $2 ORDER BY id LIMIT $3
), ` + prunedCTE + `, released AS (
    DELETE FROM retention_kept k USING page
    WHERE k.step = 'payloads' AND k.id = page.id
      AND (EXISTS (SELECT 1 FROM pruned x WHERE x.id = k.id) OR NOT EXISTS (SELECT 1 FROM events e WHERE e.id = k.id AND e.data IS NOT NULL))
)
SELECT (SELECT id FROM page ORDER BY id DESC LIMIT 1), (SELECT count(*) FROM pruned)`

// floorSQL reads a step's floor (every row of the step with a smaller id
// was handled: deleted, cleared, or listed in retention_kept; the nil
// UUID, below every id, when the step never completed a run) and when its
// list was last looked at again (NULL: never). setFloorSQL moves the floor
// up to $2; revisitedSQL records a look at the list at $2.
const (
	floorSQL = `SELECT coalesce(f.floor, '00000000-0000-0000-0000-000000000000'::uuid), f.revisited_at
FROM (SELECT) one LEFT JOIN retention_floors f ON f.step = $1`
	setFloorSQL = `INSERT INTO retention_floors AS f (step, floor) VALUES ($1, $2)
ON CONFLICT (step) DO UPDATE SET floor = excluded.floor WHERE f.floor < excluded.floor`
	revisitedSQL = `INSERT INTO retention_floors AS f (step, floor, revisited_at)
VALUES ($1, '00000000-0000-0000-0000-000000000000', $2)
ON CONFLICT (step) DO UPDATE SET revisited_at = excluded.revisited_at`
)

// pruneDefaultSQL deletes one page of old rows of the default attempt
// partition, which has no day to drop, once their delivery is gone; the
// rows of deliveries still there stay (the delivery reader reads them
// there). The page is keyed by
// (delivery_id, attempt_number) after ($1, $2), before $3, at most $4 rows.
const pruneDefaultSQL = `WITH page AS MATERIALIZED (
    SELECT delivery_id, attempt_number, delivery_created_at FROM delivery_attempts_default
    WHERE (delivery_id, attempt_number) > ($1, $2) AND delivery_created_at < $3
    ORDER BY delivery_id, attempt_number LIMIT $4
), gone AS (
    DELETE FROM delivery_attempts_default a USING page
    WHERE a.delivery_id = page.delivery_id AND a.attempt_number = page.attempt_number
      AND a.delivery_created_at = page.delivery_created_at
      AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.id = a.delivery_id)
    RETURNING 1
), last AS (
    SELECT delivery_id, attempt_number FROM page ORDER BY delivery_id DESC, attempt_number DESC LIMIT 1
)
SELECT (SELECT delivery_id FROM last), (SELECT attempt_number FROM last), (SELECT count(*) FROM gone)`

// oldPartitionsSQL lists the range partitions of the attempt log whose
// upper bound is at or before $1, oldest first, with their bounds read
// back from the catalog ($2 and $3 extract them from the bound expression)
// in this session's time zone, whatever the one that created them. The
// default partition has no bounds and never matches.
const oldPartitionsSQL = `SELECT name, lo, hi FROM (
    SELECT c.oid::regclass::text AS name,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $2)::timestamptz AS lo,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $3)::timestamptz AS hi
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'delivery_attempts'::regclass
) p
WHERE hi <= $1
ORDER BY hi`

const (
	lowerBoundPattern = `FROM \('([^']+)'\)`
	upperBoundPattern = `TO \('([^']+)'\)`
)

// attemptColumns are the columns copied into delivery_attempts_retained.
const attemptColumns = `delivery_id, delivery_created_at, attempt_number, tenant_id, webhook_id, status_code,
    failure_category, error, duration_ms, response_headers, response_body_sample, scheduled_at, executed_at`

// inFlightSQL lists the deliveries created in [$3, $4) that are still in
// flight: the only ones that can add attempts to that day's partition. The
// ids $1 and $2 bound them loosely, for the primary key.
const inFlightSQL = `SELECT id FROM deliveries
WHERE id >= $1 AND id < $2 AND ($3::timestamptz IS NULL OR created_at >= $3) AND created_at < $4
  AND status IN ('pending', 'retrying')`

// The statements below take the partition's name (%s), as the catalog
// quotes it.
const (
	countPartitionSQL = `SELECT count(*) FROM %s`

	// copyKeptSQL copies the attempts of the partition's deliveries still
	// there: the kept ones (the deliveries step, which runs first, deleted
	// the others), and any done with since they were listed, which stay
	// until the next look at the list.
	copyKeptSQL = `INSERT INTO delivery_attempts_retained (` + attemptColumns + `)
SELECT ` + prefixedAttemptColumns + ` FROM %s a JOIN deliveries d ON d.id = a.delivery_id
ON CONFLICT (delivery_id, attempt_number) DO NOTHING`

	// copyDeliveriesSQL copies the attempts of the deliveries $1, by the
	// partition's primary key.
	copyDeliveriesSQL = `INSERT INTO delivery_attempts_retained (` + attemptColumns + `)
SELECT ` + prefixedAttemptColumns + ` FROM %s a WHERE a.delivery_id = ANY($1)
ON CONFLICT (delivery_id, attempt_number) DO NOTHING`

	// lockAttemptsSQL stops every reader and writer of the attempt log
	// (they all go through the parent), in the order that DROP takes its
	// locks (parent, then partition), so that nothing deadlocks with it.
	lockAttemptsSQL = `LOCK TABLE ONLY delivery_attempts IN ACCESS EXCLUSIVE MODE`
)

// dropPartitionSQL drops the partition $1 through the definer function of
// the migrations: the dlq process's role does not own the attempt log.
const dropPartitionSQL = `SELECT drop_attempt_partition($1::regclass)`

const prefixedAttemptColumns = `a.delivery_id, a.delivery_created_at, a.attempt_number, a.tenant_id, a.webhook_id,
    a.status_code, a.failure_category, a.error, a.duration_ms, a.response_headers, a.response_body_sample,
    a.scheduled_at, a.executed_at`

// pruneSessionsSQL deletes, up to $1 at a time, the portal sessions over
// for a day (expired or ended): their link and their cookie are dead, and
// the audit log keeps that they were opened.
const pruneSessionsSQL = `WITH page AS (
    SELECT id FROM portal_sessions
    WHERE least(expires_at, coalesce(ended_at, expires_at)) < now() - interval '1 day'
    LIMIT $1
)
DELETE FROM portal_sessions p USING page WHERE p.id = page.id`

// prunePausesSQL deletes, up to $2 at a time, the pauses of webhooks that
// ended before the attempt cutoff ($1): a recovery reaches back no further
// than the events retention keeps.
const prunePausesSQL = `WITH page AS (
    SELECT webhook_id, paused_at FROM webhook_pauses WHERE resumed_at < $1 LIMIT $2
)
DELETE FROM webhook_pauses w USING page WHERE w.webhook_id = page.webhook_id AND w.paused_at = page.paused_at`

// The rollups of periods before the attempt cutoff summarise history that
// is gone; a DLQ rollup goes once everything it counted was deleted (DLQ
// entries themselves are never removed while unresolved). $2 at a time.
const (
	pruneDeliveryRollupsSQL = `WITH page AS (
    SELECT scope_id, hourly, at, shard FROM delivery_rollups WHERE at < $1 LIMIT $2
)
DELETE FROM delivery_rollups r USING page
WHERE (r.scope_id, r.hourly, r.at, r.shard) = (page.scope_id, page.hourly, page.at, page.shard)`
	pruneAttemptRollupsSQL = `WITH page AS (
    SELECT scope_id, hourly, at, shard FROM attempt_rollups WHERE at < $1 LIMIT $2
)
DELETE FROM attempt_rollups r USING page
WHERE (r.scope_id, r.hourly, r.at, r.shard) = (page.scope_id, page.hourly, page.at, page.shard)`
	pruneDeadLetterRollupsSQL = `WITH page AS (
    SELECT tenant_id, hourly, at, webhook_id, event_type, failure_category FROM dead_letter_rollups
    WHERE at < $1 AND exhausted = 0 AND retried = 0 LIMIT $2
)
DELETE FROM dead_letter_rollups r USING page
WHERE (r.tenant_id, r.hourly, r.at, r.webhook_id, r.event_type, r.failure_category)
    = (page.tenant_id, page.hourly, page.at, page.webhook_id, page.event_type, page.failure_category)`
)

// oldWeeksSQL lists the range partitions of $3 (events or deliveries:
// the weeks, and the table of a release before them) whose upper bound (a
// UUIDv7, read back from the catalog by $2) is at or below $1, oldest
// first. The default partition has no bound and never matches.
const oldWeeksSQL = `SELECT name FROM (
    SELECT c.oid::regclass::text AS name, substring(pg_get_expr(c.relpartbound, c.oid) FROM $2)::uuid AS hi
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = $3::text::regclass
) p
WHERE hi <= $1
ORDER BY hi`

// oldestWeekSQL returns the lower bound (read back by $1) of the oldest
// week of deliveries left, NULL when there is none.
const oldestWeekSQL = `SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM $1)::uuid AS lo
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'deliveries'::regclass AND c.relname ~ '^deliveries_[0-9]{8}$'
UNION ALL SELECT NULL
ORDER BY lo NULLS LAST LIMIT 1`

// prepareDeliverySwapSQL makes the partition of the week $1's kept
// deliveries when there are more than $2 of them. retireDeliveryPartitionSQL
// detaches the partition $1, moving its kept deliveries to the default
// partition when there are at most $2 of them, or swaps it for the
// partition of its kept ones (see the functions in migrations 33, 34 and
// 37), and returns how many it kept, NULL when it left a partition of kept
// deliveries as it was; dropDetachedSQL drops the detached ones.
const (
	prepareDeliverySwapSQL     = `SELECT prepare_delivery_swap($1::regclass, $2)`
	retireDeliveryPartitionSQL = `SELECT retire_delivery_partition($1::regclass, $2)`
	dropDetachedSQL            = `SELECT drop_detached_deliveries()`
)

// dropEventPartitionSQL drops the partition $1 (see the function in
// migration 16) and returns how many of its events it kept.
const dropEventPartitionSQL = `SELECT drop_event_partition($1::regclass)`
