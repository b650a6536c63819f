-- One table again: the partition of the rows before the weeks takes the
-- others' rows, and its name.
DO $$
DECLARE
    triggers text[];
    s text;
    r record;
BEGIN
    SELECT array_agg(pg_get_triggerdef(t.oid)) INTO triggers
    FROM pg_trigger t WHERE t.tgrelid = 'deliveries'::regclass AND NOT t.tgisinternal AND t.tgparentid = 0;
    ALTER TABLE deliveries DETACH PARTITION deliveries_before;
    INSERT INTO deliveries_before SELECT * FROM deliveries;
    DROP TABLE deliveries;
    ALTER TABLE deliveries_before RENAME TO deliveries;
    FOR r IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE i.indrelid = 'deliveries'::regclass LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.relname, 'deliveries_' || substr(r.relname, length('deliveries_before_') + 1));
    END LOOP;
    FOREACH s IN ARRAY triggers LOOP
        EXECUTE s;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION ensure_event_partitions(days_ahead integer) RETURNS void
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

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ensure_event_partitions(integer) SET search_path = %I, pg_temp', current_schema());
END $$;
