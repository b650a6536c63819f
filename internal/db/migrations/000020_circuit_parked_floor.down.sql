REVOKE SELECT, INSERT, UPDATE ON webhook_unfinished_floors FROM hookline_worker;
DROP INDEX deliveries_circuit_parked_idx;
CREATE INDEX deliveries_circuit_parked_idx ON deliveries (webhook_id)
    WHERE park_reason = 'circuit_open' AND status IN ('pending', 'retrying');
