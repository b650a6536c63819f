DROP FUNCTION drop_delivery_partition(regclass);
DROP FUNCTION drop_detached_deliveries();
REVOKE SELECT ON deliveries_default FROM hookline_dlq;
DO $$
BEGIN
    IF to_regclass('deliveries_before') IS NOT NULL THEN
        REVOKE SELECT ON deliveries_before FROM hookline_dlq;
    END IF;
END $$;
