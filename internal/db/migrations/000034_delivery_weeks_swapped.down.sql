DROP FUNCTION retire_delivery_partition(regclass, bigint);
CREATE OR REPLACE FUNCTION drop_detached_deliveries() RETURNS bigint
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
