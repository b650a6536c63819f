-- A circuit's hold and release (internal/breaker) found the deliveries
-- parked behind it through deliveries_circuit_parked_idx (webhook_id),
-- which keeps an entry for every delivery ever parked behind the circuit
-- until a vacuum: each hold and release read them all (216 index pages
-- after 20,000 parked and released). Keyed by (webhook_id, id), the index
-- is read from the webhook's unfinished floor (webhook_unfinished_floors,
-- package unfinished), which the worker now moves too.
DROP INDEX deliveries_circuit_parked_idx;
CREATE INDEX deliveries_circuit_parked_idx ON deliveries (webhook_id, id)
    WHERE park_reason = 'circuit_open' AND status IN ('pending', 'retrying');

GRANT SELECT, INSERT, UPDATE ON webhook_unfinished_floors TO hookline_worker;
