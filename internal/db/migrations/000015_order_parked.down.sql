CREATE INDEX IF NOT EXISTS deliveries_parked_idx ON deliveries (parked_at) WHERE parked_at IS NOT NULL;
DROP INDEX IF EXISTS deliveries_order_parked_idx;
