-- Deliveries are partitioned by week on their id, a UUIDv7 that begins
-- with its time, as the event log is (migration 16), so that the weeks
-- can be created ahead and dropped whole. A lookup by ids reads the
-- partitions the ids fall in: the hot statements name the ids' bounds
-- beside them (wire.IDsIn). Nothing but the primary key spans the rows
-- (migration 31).
--
-- An existing table becomes the partition of everything before the week
-- after this migration, as it is: no row is copied, its indexes, checks
-- and foreign keys serve the partition, and Postgres reads it once to
-- check that every id is below that week (see docs/OPERATIONS.md,
-- Upgrading). Ids at or above it (none that uuidv7() made) move to the
-- default partition first.

DO $$
DECLARE
    indexes text[];
    triggers text[];
    s text;
    r record;
    bound uuid := uuidv7_floor((date_trunc('week', now() AT TIME ZONE 'UTC') + interval '7 days') AT TIME ZONE 'UTC');
BEGIN
    SELECT array_agg(pg_get_indexdef(i.indexrelid)) INTO indexes
    FROM pg_index i WHERE i.indrelid = 'deliveries'::regclass AND NOT i.indisprimary;
    SELECT array_agg(pg_get_triggerdef(t.oid)) INTO triggers
    FROM pg_trigger t WHERE t.tgrelid = 'deliveries'::regclass AND NOT t.tgisinternal;
    -- The triggers are made again on the partitioned table, which gives
    -- its partitions the row triggers.
    FOR r IN SELECT tgname FROM pg_trigger WHERE tgrelid = 'deliveries'::regclass AND NOT tgisinternal LOOP
        EXECUTE format('DROP TRIGGER %I ON deliveries', r.tgname);
    END LOOP;

    ALTER TABLE deliveries RENAME TO deliveries_before;
    FOR r IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE i.indrelid = 'deliveries_before'::regclass LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.relname, 'deliveries_before_' || substr(r.relname, length('deliveries_') + 1));
    END LOOP;

    CREATE TABLE deliveries (LIKE deliveries_before INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (id))
        PARTITION BY RANGE (id);
    FOR r IN SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
             WHERE conrelid = 'deliveries_before'::regclass AND contype = 'f' LOOP
        EXECUTE format('ALTER TABLE deliveries ADD CONSTRAINT %I %s', r.conname, r.def);
    END LOOP;
    FOREACH s IN ARRAY indexes LOOP
        EXECUTE s;
    END LOOP;
    FOREACH s IN ARRAY triggers LOOP
        EXECUTE s;
    END LOOP;
    FOR r IN SELECT a.grantee::regrole AS grantee, string_agg(a.privilege_type, ', ') AS privileges
             FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid = 'deliveries_before'::regclass AND a.grantee <> c.relowner GROUP BY a.grantee LOOP
        EXECUTE format('GRANT %s ON deliveries TO %s', r.privileges, r.grantee);
    END LOOP;

    -- The default partition holds the deliveries whose id falls in no week.
    CREATE TABLE deliveries_default PARTITION OF deliveries DEFAULT;
    INSERT INTO deliveries_default SELECT * FROM deliveries_before WHERE id >= bound;
    DELETE FROM deliveries_before WHERE id >= bound;
    EXECUTE format('ALTER TABLE deliveries ATTACH PARTITION deliveries_before FOR VALUES FROM (MINVALUE) TO (%L)', bound);
END $$;

-- ensure_event_partitions also creates the weeks of deliveries, as it
-- does the event log's.
CREATE OR REPLACE FUNCTION ensure_event_partitions(days_ahead integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    d date;
    name text;
    parent text;
    idx record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('hookline.event_partitions'));
    -- Creating a partition locks its table whole: it waits at most a
    -- second for the statements under way (a week is made two weeks
    -- ahead, at the first hourly call that gets the lock), so that
    -- deliveries never queue behind it for long.
    PERFORM set_config('lock_timeout', '1s', true);
    FOR d IN SELECT generate_series(date_trunc('week', (today - 1)::timestamp), (today + days_ahead)::timestamp, interval '7 days')::date LOOP
        FOREACH parent IN ARRAY ARRAY['events', 'deliveries'] LOOP
            name := parent || '_' || to_char(d, 'YYYYMMDD');
            IF to_regclass(name) IS NULL THEN
                BEGIN
                    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)', name, parent,
                        uuidv7_floor(d::timestamp AT TIME ZONE 'UTC'), uuidv7_floor((d + 7)::timestamp AT TIME ZONE 'UTC'));
                    -- Its indexes are named after it and the partitioned
                    -- table's (deliveries_20261130_outbox_idx), as a plan
                    -- shows them.
                    FOR idx IN SELECT c.relname AS own, p.relname AS parent_index
                               FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                               JOIN pg_inherits h ON h.inhrelid = i.indexrelid JOIN pg_class p ON p.oid = h.inhparent
                               WHERE i.indrelid = name::regclass AND c.relname <> name || substr(p.relname, length(parent) + 1) LOOP
                        EXECUTE format('ALTER INDEX %I RENAME TO %I', idx.own, name || substr(idx.parent_index, length(parent) + 1));
                    END LOOP;
                EXCEPTION WHEN invalid_object_definition OR check_violation THEN
                    -- The week overlaps the partition of the rows before
                    -- the table was partitioned, or some of its rows went
                    -- to the default partition: they stay there.
                    NULL;
                WHEN lock_not_available THEN
                    NULL; -- made at a later call
                END;
            END IF;
        END LOOP;
    END LOOP;
    FOR d IN SELECT generate_series((today - 1)::timestamp, (today + days_ahead)::timestamp, interval '1 day')::date LOOP
        name := 'event_keys_' || to_char(d, 'YYYYMMDD');
        IF to_regclass(name) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF event_keys FOR VALUES FROM (%L) TO (%L)', name, d, d + 1);
            EXCEPTION WHEN check_violation THEN
                NULL; -- keys of that day went to the default partition
            WHEN lock_not_available THEN
                NULL; -- made at a later call
            END;
        END IF;
    END LOOP;
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

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ensure_event_partitions(integer) SET search_path = %I, pg_temp', current_schema());
END $$;
