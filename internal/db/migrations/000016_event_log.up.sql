-- The event log becomes append-only and partitioned by week, dropped whole
-- by retention (docs/DATA.md, "The event log"), instead of deleted row by
-- row: with autovacuum off, a deleted row's space was never reused, and
-- with it on, vacuum had to walk the whole table.
--
-- Events are partitioned by their id, a UUIDv7 that begins with its time
-- in milliseconds, so that a lookup by id reads one partition. A table
-- partitioned that way cannot hold a unique key without the id, so the
-- idempotency key moves to event_keys (below), and the two foreign keys
-- that named events go: retention drops a week only after moving the
-- events that deliveries still need (in flight, or in the DLQ) to the
-- default partition, and nothing else removes an event.
--
-- An existing table becomes the partition of everything before the week
-- after this migration, as it is: no row is copied, and its indexes serve
-- the partition, but for the idempotency key's, which is built again
-- without uniqueness (a scan of the table, under lock; see
-- docs/OPERATIONS.md, Upgrading).

-- uuidv7_floor(ts) is the smallest UUIDv7 of the millisecond ts falls in
-- (as retention's idBound): every UUIDv7 made earlier sorts below it.
CREATE FUNCTION uuidv7_floor(ts timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '70000000000000000000')::uuid
$$;

ALTER TABLE deliveries DROP CONSTRAINT deliveries_event_id_fkey;
ALTER TABLE events DROP CONSTRAINT events_replay_of_fkey;

ALTER TABLE events RENAME TO events_before;
ALTER INDEX events_pkey RENAME TO events_before_pkey;
ALTER INDEX events_tenant_idx RENAME TO events_before_tenant_idx;
ALTER INDEX events_tenant_type_idx RENAME TO events_before_tenant_type_idx;
ALTER INDEX events_payload_idx RENAME TO events_before_payload_idx;

CREATE TABLE events (LIKE events_before INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (id))
    PARTITION BY RANGE (id);
ALTER TABLE events ADD CONSTRAINT events_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE;
CREATE INDEX events_tenant_idx ON events (tenant_id, id);
CREATE INDEX events_tenant_type_idx ON events (tenant_id, event_type, id);
CREATE INDEX events_payload_idx ON events (id) WHERE data IS NOT NULL;
-- GET /v1/events?idempotency_key= finds an event by its key, whatever its
-- age; no longer unique (event_keys is).
CREATE INDEX events_key_idx ON events (tenant_id, idempotency_key);

-- The default partition holds the events a dropped week kept, and any
-- event whose id falls in no week (an id that is not a UUIDv7).
CREATE TABLE events_default PARTITION OF events DEFAULT;

DO $$
DECLARE
    bound uuid := uuidv7_floor((date_trunc('week', now() AT TIME ZONE 'UTC') + interval '7 days') AT TIME ZONE 'UTC');
BEGIN
    INSERT INTO events_default SELECT * FROM events_before WHERE id >= bound;
    DELETE FROM events_before WHERE id >= bound;
    ALTER TABLE events_before DROP CONSTRAINT events_tenant_id_idempotency_key_key;
    EXECUTE format('ALTER TABLE events ATTACH PARTITION events_before FOR VALUES FROM (MINVALUE) TO (%L)', bound);
END $$;

-- event_keys makes an idempotency key unique for at least a day (docs/API.md):
-- an event's key is stored for the UTC day it was published and for the
-- next, so that a repeat within 24 hours, whatever the hour, meets one of
-- them in the primary key. Days are partitions, dropped the day after next.
CREATE TABLE event_keys (
    tenant_id       uuid NOT NULL,
    idempotency_key text NOT NULL,
    day             date NOT NULL,
    event_id        uuid NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key, day)
) PARTITION BY RANGE (day);
CREATE TABLE event_keys_default PARTITION OF event_keys DEFAULT;

-- ensure_event_partitions creates the weeks of the event log and the days
-- of event_keys from yesterday to days_ahead days ahead, and drops the
-- days of event_keys before yesterday (it gives up a drop it cannot lock
-- within a second, for the next call). Safe to call concurrently and
-- repeatedly; every process calls it with ensure_attempt_partitions.
CREATE FUNCTION ensure_event_partitions(days_ahead integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    d date;
    name text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('hookline.event_partitions'));
    FOR d IN SELECT generate_series(date_trunc('week', (today - 1)::timestamp), (today + days_ahead)::timestamp, interval '7 days')::date LOOP
        name := 'events_' || to_char(d, 'YYYYMMDD');
        IF to_regclass(name) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)', name,
                    uuidv7_floor(d::timestamp AT TIME ZONE 'UTC'), uuidv7_floor((d + 7)::timestamp AT TIME ZONE 'UTC'));
            EXCEPTION WHEN invalid_object_definition OR check_violation THEN
                -- The week overlaps the partition of the events before
                -- this schema, or some of its events went to the default
                -- partition: it stays there.
                NULL;
            END;
        END IF;
    END LOOP;
    FOR d IN SELECT generate_series((today - 1)::timestamp, (today + days_ahead)::timestamp, interval '1 day')::date LOOP
        name := 'event_keys_' || to_char(d, 'YYYYMMDD');
        IF to_regclass(name) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF event_keys FOR VALUES FROM (%L) TO (%L)', name, d, d + 1);
            EXCEPTION WHEN check_violation THEN
                NULL; -- keys of that day went to the default partition
            END;
        END IF;
    END LOOP;
    PERFORM set_config('lock_timeout', '1s', true);
    FOR name IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = 'event_keys'::regclass AND c.relname ~ '^event_keys_[0-9]{8}$'
                  AND to_date(right(c.relname, 8), 'YYYYMMDD') < today - 1 LOOP
        BEGIN
            EXECUTE format('DROP TABLE %I', name);
        EXCEPTION WHEN lock_not_available THEN
            NULL;
        END;
    END LOOP;
    DELETE FROM event_keys_default WHERE day < today - 1;
END $$;

-- drop_event_partition drops one week of the event log for retention, in
-- the caller's transaction, and returns how many of its events it kept:
-- those that deliveries still name, moved to the default partition first.
-- The caller holds the lock that keeps deliveries from being added to old
-- events meanwhile (eventlog.LockDropsSQL) and bounds the wait for the lock
-- on the event log (lock_timeout).
CREATE FUNCTION drop_event_partition(part regclass) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    lo uuid;
    hi uuid;
    kept bigint;
BEGIN
    SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$FROM \('([^']+)'\)$r$)::uuid,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$TO \('([^']+)'\)$r$)::uuid
    INTO lo, hi
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhrelid = part AND i.inhparent = 'events'::regclass;
    IF hi IS NULL THEN
        RAISE EXCEPTION '% is not a weekly partition of events', part USING ERRCODE = 'insufficient_privilege';
    END IF;
    EXECUTE format('CREATE TEMPORARY TABLE kept_events ON COMMIT DROP AS SELECT * FROM %s p
        WHERE p.id IN (SELECT d.event_id FROM deliveries d WHERE d.event_id >= %L AND d.event_id < %L)',
        part, coalesce(lo, '00000000-0000-0000-0000-000000000000'::uuid), hi);
    SELECT count(*) INTO kept FROM kept_events;
    EXECUTE format('ALTER TABLE events DETACH PARTITION %s', part);
    INSERT INTO events SELECT * FROM kept_events;
    EXECUTE format('DROP TABLE %s', part);
    DROP TABLE kept_events;
    RETURN kept;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ensure_event_partitions(integer) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION drop_event_partition(regclass) SET search_path = %I, pg_temp', current_schema());
END $$;
REVOKE EXECUTE ON FUNCTION ensure_event_partitions(integer), drop_event_partition(regclass) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ensure_event_partitions(integer) TO hookline_api, hookline_worker, hookline_dlq;
GRANT EXECUTE ON FUNCTION drop_event_partition(regclass) TO hookline_dlq;

-- The roles keep what they had on events; the partitions are read and
-- written through it, but for retention's rows of the default partition.
GRANT SELECT, INSERT ON events TO hookline_api, hookline_worker;
GRANT SELECT, INSERT, DELETE, UPDATE (data) ON events TO hookline_dlq;
GRANT SELECT, DELETE ON events_default TO hookline_dlq;
GRANT SELECT, INSERT ON event_keys TO hookline_api, hookline_worker, hookline_dlq;

-- The keys of the last two days' events, so that their repeats are still
-- found.
SELECT ensure_event_partitions(14);
INSERT INTO event_keys (tenant_id, idempotency_key, day, event_id)
SELECT e.tenant_id, e.idempotency_key, k.day, e.id
FROM events e, LATERAL (VALUES ((e.created_at AT TIME ZONE 'UTC')::date), ((e.created_at AT TIME ZONE 'UTC')::date + 1)) AS k(day)
WHERE e.created_at >= now() - interval '2 days'
  AND k.day >= (now() AT TIME ZONE 'UTC')::date - 1
ON CONFLICT DO NOTHING;
