-- A week's partition of kept deliveries gets its foreign keys in a
-- transaction of its own, before the swap.
--
-- Adding a foreign key takes a lock on the referenced table (tenants,
-- webhooks, batch_operations) that holds its writers until the commit.
-- retire_delivery_partition (migration 34) added them, validated them and
-- then waited for the lock of deliveries in one transaction, so every
-- writer of those tables waited through all of it: among them the
-- worker's attempt records, whose statement keeps each webhook's
-- failing_since.
--
-- prepare_delivery_swap makes the partition of a week's kept deliveries
-- and commits it, with its foreign keys NOT VALID and the version (xmin)
-- each row was copied at in a table beside it (the week's name and
-- _kept_versions); those locks last from the foreign keys to that commit,
-- a few milliseconds. retire_delivery_partition then validates them, which
-- holds no writer, and swaps the week for it under the lock of deliveries
-- as before, copying again only the rows whose version changed. Called
-- without a prepared partition, it prepares one in its own transaction,
-- as before. A prepared partition left by a run that stopped between the
-- two is dropped by drop_detached_deliveries, and prepared again.
-- The name and bounds of part, a range partition of deliveries (an
-- exception for any other table), and the query of its deliveries to keep
-- (in flight, exhausted, or retrying another), selecting cols of each (t):
-- for the two functions below.
CREATE FUNCTION delivery_partition_bounds(part regclass, OUT name text, OUT lo uuid, OUT hi uuid)
LANGUAGE plpgsql STABLE AS $$
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
END $$;

CREATE FUNCTION kept_deliveries_query(part regclass, cols text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT format('SELECT %2$s FROM %1$s t WHERE status IN (''pending'', ''retrying'') AND webhook_id IS NOT NULL
        UNION ALL SELECT %2$s FROM %1$s t WHERE status = ''exhausted''
        UNION ALL SELECT %2$s FROM %1$s t WHERE retry_of IS NOT NULL AND status IN (''succeeded'', ''cancelled'')', part, cols)
$$;
REVOKE EXECUTE ON FUNCTION delivery_partition_bounds(regclass) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION kept_deliveries_query(regclass, text) FROM PUBLIC;

CREATE FUNCTION prepare_delivery_swap(part regclass, move_at_most bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    hi uuid;
    lo uuid;
    name text;
    kept_name text;
    versions_name text;
    kept bigint;
    r record;
BEGIN
    SELECT b.name, b.lo, b.hi INTO name, lo, hi FROM delivery_partition_bounds(part) b;
    IF name !~ '^deliveries_([0-9]{8}|before)$' THEN
        RETURN NULL; -- a partition of kept deliveries is never swapped
    END IF;
    kept_name := name || '_kept';
    versions_name := name || '_kept_versions';
    -- One prepared before by a run that stopped short.
    EXECUTE format('DROP TABLE IF EXISTS %I, %I', kept_name, versions_name);
    EXECUTE 'SELECT count(*) FROM (' || kept_deliveries_query(part, 't.id') || ') k' INTO kept;
    IF kept <= move_at_most THEN
        RETURN NULL; -- few enough to move under the lock
    END IF;

    EXECUTE format('CREATE TABLE %I (LIKE deliveries INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)', kept_name);
    EXECUTE format('CREATE TABLE %I (id uuid PRIMARY KEY, v xid NOT NULL)', versions_name);
    -- One statement, so that the copy and the versions are of one
    -- snapshot.
    EXECUTE format('WITH k AS MATERIALIZED (%s), copied AS (INSERT INTO %I SELECT (k.kept_row).* FROM k)
        INSERT INTO %I SELECT (k.kept_row).id, k.v FROM k', kept_deliveries_query(part, 't AS kept_row, t.xmin AS v'),
        kept_name, versions_name);
    EXECUTE format('INSERT INTO retention_kept (step, id) SELECT ''deliveries'', id FROM %I ON CONFLICT DO NOTHING', versions_name);
    -- What the attach would otherwise check under the lock: the range by
    -- a CHECK it can prove it from, the foreign keys by constraints it
    -- can adopt, validated by retire_delivery_partition.
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%s id < %L)', kept_name, kept_name || '_range',
        CASE WHEN lo IS NULL THEN '' ELSE format('id >= %L AND', lo) END, hi);
    FOR r IN SELECT pg_get_constraintdef(c.oid) AS def FROM pg_constraint c
             WHERE c.conrelid = 'deliveries'::regclass AND c.contype = 'f' LOOP
        EXECUTE format('ALTER TABLE %I ADD %s NOT VALID', kept_name, r.def);
    END LOOP;
    EXECUTE format('GRANT SELECT ON %I TO hookline_dlq', kept_name);
    RETURN kept;
END $$;

-- retire_delivery_partition as in migration 34, but for the swap: it uses
-- the partition prepare_delivery_swap made, or prepares one itself.
CREATE OR REPLACE FUNCTION retire_delivery_partition(part regclass, move_at_most bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    lo uuid;
    hi uuid;
    name text;
    kept_name text;
    versions_name text;
    kept bigint;
    r record;
BEGIN
    SELECT b.name, b.lo, b.hi INTO name, lo, hi FROM delivery_partition_bounds(part) b;
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
    kept_name := name || '_kept';
    versions_name := name || '_kept_versions';
    IF to_regclass(quote_ident(versions_name)) IS NULL
       OR NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = to_regclass(quote_ident(kept_name)) AND NOT c.relispartition) THEN
        -- Not prepared (or only half of it is left): prepared here, in
        -- this transaction, as migration 34 did.
        IF prepare_delivery_swap(part, move_at_most) IS NULL THEN
            RETURN drop_delivery_partition(part);
        END IF;
    END IF;
    FOR r IN SELECT c.conname FROM pg_constraint c
             WHERE c.conrelid = kept_name::regclass AND c.contype = 'f' AND NOT c.convalidated LOOP
        EXECUTE format('ALTER TABLE %I VALIDATE CONSTRAINT %I', kept_name, r.conname);
    END LOOP;

    -- The partitioned table first, as in drop_delivery_partition.
    LOCK TABLE ONLY deliveries IN ACCESS EXCLUSIVE MODE;
    EXECUTE 'CREATE TEMPORARY TABLE kept_now ON COMMIT DROP AS ' || kept_deliveries_query(part, 't.id, t.xmin AS v');
    -- The rows changed or gone since the copy, and the ones now kept
    -- that it lacks: out of the copy, and in again as they are now.
    EXECUTE format('CREATE TEMPORARY TABLE kept_changed ON COMMIT DROP AS
        SELECT coalesce(c.id, o.id) AS id, c.id IS NOT NULL AS kept
        FROM kept_now c FULL JOIN %I o ON o.id = c.id
        WHERE c.v IS DISTINCT FROM o.v', versions_name);
    EXECUTE format('DELETE FROM %I n USING kept_changed x WHERE n.id = x.id', kept_name);
    EXECUTE format('INSERT INTO %I SELECT t.* FROM %s t WHERE t.id IN (SELECT id FROM kept_changed WHERE kept)', kept_name, part);
    INSERT INTO retention_kept (step, id) SELECT 'deliveries', x.id FROM kept_changed x WHERE x.kept ON CONFLICT DO NOTHING;
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
    EXECUTE format('DROP TABLE %I', versions_name);
    -- The week itself is dropped by drop_detached_deliveries, after.
    RETURN kept;
END $$;

-- drop_detached_deliveries drops a prepared partition that was never
-- swapped in, and its versions, too.
CREATE OR REPLACE FUNCTION drop_detached_deliveries() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    r record;
    n bigint := 0;
BEGIN
    FOR r IN SELECT c.oid::regclass AS t FROM pg_class c
             WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
               AND c.relname ~ '^deliveries_([0-9]{8}|before)(_kept(_versions)?)?$' LOOP
        EXECUTE format('DROP TABLE %s', r.t);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- CREATE OR REPLACE resets a function's settings: each definer function
-- here gets its search_path again.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION prepare_delivery_swap(regclass, bigint) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION retire_delivery_partition(regclass, bigint) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION drop_detached_deliveries() SET search_path = %I, pg_temp', current_schema());
END $$;
REVOKE EXECUTE ON FUNCTION prepare_delivery_swap(regclass, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION prepare_delivery_swap(regclass, bigint) TO hookline_dlq;
