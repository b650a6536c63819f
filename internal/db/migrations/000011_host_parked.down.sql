DROP INDEX IF EXISTS deliveries_host_parked_idx;
