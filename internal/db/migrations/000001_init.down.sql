DROP TABLE IF EXISTS audit_log, delivery_attempts_retained, batch_operations, circuit_breaker_states, delivery_attempts, deliveries, events, webhooks, api_keys, tenants CASCADE;
DROP FUNCTION IF EXISTS drop_attempt_partition(regclass);
DROP FUNCTION IF EXISTS ensure_attempt_partitions(integer);
DROP FUNCTION IF EXISTS deliveries_keep_terminal();
DROP FUNCTION IF EXISTS uuidv7();
-- The process roles belong to the cluster: they lose their grants here and
-- are dropped unless another database still grants them something.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['hookline_api', 'hookline_worker', 'hookline_dlq'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('REVOKE ALL ON SCHEMA %I FROM %I', current_schema(), r);
            BEGIN
                EXECUTE format('DROP ROLE %I', r);
            EXCEPTION WHEN dependent_objects_still_exist THEN
                NULL; -- still used by another database
            END;
        END IF;
    END LOOP;
END $$;
