-- The functions as migration 34 made them, with their search_path.
DROP FUNCTION prepare_delivery_swap(regclass, bigint);

CREATE OR REPLACE FUNCTION retire_delivery_partition(part regclass, move_at_most bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    lo uuid;
    hi uuid;
    name text;
    kept_name text;
    kept bigint;
    kept_of text;
    kept_rows text;
    kept_ids text;
    r record;
BEGIN
    SELECT c.relname,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$FROM \('([^']+)'\)$r$)::uuid,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$TO \('([^']+)'\)$r$)::uuid
    INTO name, lo, hi
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhrelid = part AND i.inhparent = 'deliveries'::regclass;
    IF hi IS NULL THEN
        RAISE EXCEPTION '% is not a range partition of deliveries', part USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- The rows drop_delivery_partition keeps, each with its version
    -- (xmin), whole or by id; each part found by its partial index.
    kept_of := 'SELECT %2$s FROM %1$s t WHERE status IN (''pending'', ''retrying'') AND webhook_id IS NOT NULL
        UNION ALL SELECT %2$s FROM %1$s t WHERE status = ''exhausted''
        UNION ALL SELECT %2$s FROM %1$s t WHERE retry_of IS NOT NULL AND status IN (''succeeded'', ''cancelled'')';
    kept_rows := format(kept_of, part, 't AS kept_row, t.xmin AS v');
    kept_ids := format(kept_of, part, 't.id, t.xmin AS v');
    IF name !~ '^deliveries_([0-9]{8}|before)$' THEN
        -- A partition of kept deliveries, which retention empties one by
        -- one: it goes once it holds few, whatever they are, and is not
        -- read further before.
        EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %s) x', part, greatest(move_at_most, 0) + 1) INTO kept;
        IF kept > move_at_most THEN
            RETURN NULL;
        END IF;
        RETURN drop_delivery_partition(part);
    END IF;
    EXECUTE 'SELECT count(*) FROM (' || kept_ids || ') k' INTO kept;
    IF kept <= move_at_most THEN
        RETURN drop_delivery_partition(part);
    END IF;

    kept_name := name || '_kept';
    EXECUTE format('CREATE TABLE %I (LIKE deliveries INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)', kept_name);
    CREATE TEMPORARY TABLE kept_versions (id uuid PRIMARY KEY, v xid NOT NULL) ON COMMIT DROP;
    -- One statement, so that the copy and the versions are of one
    -- snapshot.
    EXECUTE format('WITH k AS MATERIALIZED (%s), copied AS (INSERT INTO %I SELECT (k.kept_row).* FROM k)
        INSERT INTO kept_versions SELECT (k.kept_row).id, k.v FROM k', kept_rows, kept_name);
    INSERT INTO retention_kept (step, id) SELECT 'deliveries', id FROM kept_versions ON CONFLICT DO NOTHING;
    -- What the attach would otherwise check under the lock: the range by
    -- a CHECK it can prove it from, the foreign keys by constraints it
    -- can adopt, validated here.
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%s id < %L)', kept_name, kept_name || '_range',
        CASE WHEN lo IS NULL THEN '' ELSE format('id >= %L AND', lo) END, hi);
    FOR r IN SELECT pg_get_constraintdef(c.oid) AS def FROM pg_constraint c
             WHERE c.conrelid = 'deliveries'::regclass AND c.contype = 'f' LOOP
        EXECUTE format('ALTER TABLE %I ADD %s NOT VALID', kept_name, r.def);
    END LOOP;
    FOR r IN SELECT c.conname FROM pg_constraint c WHERE c.conrelid = kept_name::regclass AND c.contype = 'f' LOOP
        EXECUTE format('ALTER TABLE %I VALIDATE CONSTRAINT %I', kept_name, r.conname);
    END LOOP;
    EXECUTE format('GRANT SELECT ON %I TO hookline_dlq', kept_name);

    -- The partitioned table first, as in drop_delivery_partition.
    LOCK TABLE ONLY deliveries IN ACCESS EXCLUSIVE MODE;
    EXECUTE 'CREATE TEMPORARY TABLE kept_now ON COMMIT DROP AS ' || kept_ids;
    -- The rows changed or gone since the copy, and the ones now kept
    -- that it lacks: out of the copy, and in again as they are now.
    CREATE TEMPORARY TABLE kept_changed ON COMMIT DROP AS
        SELECT coalesce(c.id, o.id) AS id, c.id IS NOT NULL AS kept
        FROM kept_now c FULL JOIN kept_versions o ON o.id = c.id
        WHERE c.v IS DISTINCT FROM o.v;
    EXECUTE format('DELETE FROM %I n USING kept_changed x WHERE n.id = x.id', kept_name);
    EXECUTE format('INSERT INTO %I SELECT t.* FROM %s t WHERE t.id IN (SELECT id FROM kept_changed WHERE kept)', kept_name, part);
    SELECT count(*) INTO kept FROM kept_now;
    DELETE FROM delivery_attempts_retained a
    WHERE a.delivery_id >= coalesce(lo, '00000000-0000-0000-0000-000000000000'::uuid) AND a.delivery_id < hi
      AND NOT EXISTS (SELECT 1 FROM kept_now k WHERE k.id = a.delivery_id);
    EXECUTE format('ALTER TABLE deliveries DETACH PARTITION %s', part);
    EXECUTE format('ALTER TABLE deliveries ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%L)', kept_name,
        CASE WHEN lo IS NULL THEN 'MINVALUE' ELSE quote_literal(lo) END, hi);
    -- Its indexes named as a week's are (deliveries_20261102_kept_outbox_idx).
    FOR r IN SELECT c.relname AS own, p.relname AS parent_index
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             JOIN pg_inherits h ON h.inhrelid = i.indexrelid JOIN pg_class p ON p.oid = h.inhparent
             WHERE i.indrelid = kept_name::regclass AND c.relname <> kept_name || substr(p.relname, length('deliveries') + 1) LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.own, kept_name || substr(r.parent_index, length('deliveries') + 1));
    END LOOP;
    -- The week itself is dropped by drop_detached_deliveries, after.
    RETURN kept;
END $$;

CREATE OR REPLACE FUNCTION drop_detached_deliveries() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    r record;
    n bigint := 0;
BEGIN
    FOR r IN SELECT c.oid::regclass AS t FROM pg_class c
             WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
               AND c.relname ~ '^deliveries_([0-9]{8}|before)(_kept)?$' LOOP
        EXECUTE format('DROP TABLE %s', r.t);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION retire_delivery_partition(regclass, bigint) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION drop_detached_deliveries() SET search_path = %I, pg_temp', current_schema());
END $$;
DROP FUNCTION kept_deliveries_query(regclass, text);
DROP FUNCTION delivery_partition_bounds(regclass);
