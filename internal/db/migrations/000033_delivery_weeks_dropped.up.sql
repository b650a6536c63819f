-- Retention drops the weeks of deliveries whole, as it does the event
-- log's (migration 16), instead of deleting their rows one by one.
--
-- drop_delivery_partition detaches one range partition of deliveries (a
-- week, or deliveries_before, the table of a release before the weeks),
-- in the caller's transaction, and returns how many of its deliveries it
-- kept. The caller bounds the wait for the lock (lock_timeout). Under that
-- lock, which holds every reader and writer of deliveries until the
-- transaction ends, it keeps, in the default partition (about 50 us a
-- row, see docs/DATA.md):
--   - the deliveries still in flight (pending, retrying);
--   - the exhausted ones, the DLQ's entries and their history;
--   - the retries of exhausted ones, whatever their state.
-- Everything a delete trigger counts is among them (the DLQ rollups of
-- exhausted deliveries and of their retries): the rows that go whole are
-- succeeded or cancelled and retry nothing, and nothing names them (only
-- an exhausted delivery is retried). The kept ones are listed in
-- retention_kept, whose daily look deletes those that are done with (an
-- exhausted delivery once a retry resolved it), with their triggers. The
-- retained attempts of the deliveries that go, go with them.
CREATE FUNCTION drop_delivery_partition(part regclass) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    lo uuid;
    hi uuid;
    kept bigint;
    kept_rows text;
    rollups text := current_setting('hookline.rollups', true);
BEGIN
    SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$FROM \('([^']+)'\)$r$)::uuid,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$TO \('([^']+)'\)$r$)::uuid
    INTO lo, hi
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhrelid = part AND i.inhparent = 'deliveries'::regclass;
    IF hi IS NULL THEN
        RAISE EXCEPTION '% is not a range partition of deliveries', part USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Three disjoint parts, each found by its partial index.
    kept_rows := format('SELECT * FROM %1$s WHERE status IN (''pending'', ''retrying'') AND webhook_id IS NOT NULL
        UNION ALL SELECT * FROM %1$s WHERE status = ''exhausted''
        UNION ALL SELECT * FROM %1$s WHERE retry_of IS NOT NULL AND status IN (''succeeded'', ''cancelled'')', part);
    -- Listed before the lock, which reads the rows into memory too: no
    -- row joins them meanwhile (the others are succeeded or cancelled, for
    -- good, and a new delivery is of a later week). One that leaves them
    -- (a delivery in flight that succeeds) goes off the list at its look.
    EXECUTE 'INSERT INTO retention_kept (step, id) SELECT ''deliveries'', k.id FROM (' || kept_rows || ') k
        ON CONFLICT DO NOTHING';
    -- The partitioned table first, as every statement through it locks
    -- it: nothing deadlocks with the detach, which locks both.
    LOCK TABLE ONLY deliveries IN ACCESS EXCLUSIVE MODE;
    EXECUTE 'CREATE TEMPORARY TABLE kept_deliveries ON COMMIT DROP AS ' || kept_rows;
    SELECT count(*) INTO kept FROM kept_deliveries;
    DELETE FROM delivery_attempts_retained a
    WHERE a.delivery_id >= coalesce(lo, '00000000-0000-0000-0000-000000000000'::uuid) AND a.delivery_id < hi
      AND NOT EXISTS (SELECT 1 FROM kept_deliveries k WHERE k.id = a.delivery_id);
    EXECUTE format('ALTER TABLE deliveries DETACH PARTITION %s', part);
    -- The kept rows were counted when they were made: no insert trigger
    -- counts them again.
    PERFORM set_config('hookline.rollups', 'process', true);
    INSERT INTO deliveries SELECT * FROM kept_deliveries;
    PERFORM set_config('hookline.rollups', coalesce(rollups, ''), true);
    DROP TABLE kept_deliveries;
    -- The detached week is dropped by drop_detached_deliveries, in a
    -- transaction of its own: Postgres unlinks a dropped table's files
    -- before it releases its locks, which would hold deliveries 1.3 s
    -- longer for a week of 4.7 million.
    RETURN kept;
END $$;

-- drop_detached_deliveries drops the weeks of deliveries (and
-- deliveries_before) that drop_delivery_partition detached: the tables of
-- those names that are no partition any more. It returns how many.
CREATE FUNCTION drop_detached_deliveries() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    r record;
    n bigint := 0;
BEGIN
    FOR r IN SELECT c.oid::regclass AS t FROM pg_class c
             WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
               AND c.relname ~ '^deliveries_([0-9]{8}|before)$' LOOP
        EXECUTE format('DROP TABLE %s', r.t);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION drop_delivery_partition(regclass) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION drop_detached_deliveries() SET search_path = %I, pg_temp', current_schema());
END $$;
REVOKE EXECUTE ON FUNCTION drop_delivery_partition(regclass), drop_detached_deliveries() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION drop_delivery_partition(regclass), drop_detached_deliveries() TO hookline_dlq;

-- Retention deletes the rows of the partitions that are not weeks one by
-- one, reading them there: the default partition and deliveries_before.
GRANT SELECT ON deliveries_default TO hookline_dlq;
DO $$
BEGIN
    IF to_regclass('deliveries_before') IS NOT NULL THEN
        GRANT SELECT ON deliveries_before TO hookline_dlq;
    END IF;
END $$;
