-- The worker keeps the statistics of the schema's tables current
-- (db.RunAnalyzer): without them, a deployment with autovacuum off plans
-- the delivery path from the statistics of an empty database, and with
-- autovacuum on, no partitioned table (the event log, its keys, the
-- attempt log) has statistics of its own. But ANALYZE needs the table's
-- owner, and under its least-privilege role (docs/SECURITY.md) the
-- worker owns none: Postgres skipped every table with a warning. The
-- analyzer now asks this function, which runs as the schema's owner and
-- analyzes a table of the schema, and nothing else.
CREATE FUNCTION analyze_table(t regclass) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_class c
                   WHERE c.oid = t AND c.relkind IN ('r', 'p')
                     AND c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = current_schema())) THEN
        RAISE EXCEPTION '% is not a table of schema %', t, current_schema() USING ERRCODE = 'insufficient_privilege';
    END IF;
    EXECUTE format('ANALYZE %s', t);
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION analyze_table(regclass) SET search_path = %I, pg_temp', current_schema());
END $$;
REVOKE EXECUTE ON FUNCTION analyze_table(regclass) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION analyze_table(regclass) TO hookline_worker;
