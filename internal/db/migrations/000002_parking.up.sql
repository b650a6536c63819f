-- Deferred deliveries wait in Postgres, not in the broker (docs/SCHEDULING.md).
-- park_reason says why a parked delivery waits:
--   order         behind an earlier delivery of its order key; released by
--                 whoever finishes that one (no time)
--   rate_limited  for its own reserved slot in the token buckets
--   circuit_open  for the half-open decision of its webhook's circuit;
--                 released at once when the circuit closes or is reset
--   host_busy     for its endpoint host's next estimated free connection
--   tenant_share  for its tenant's next estimated free worker slot
--   backoff       for its next retry (a backoff of a second or more)
--   inactive, unverified  for the webhook to be enabled or verified
--   released      nothing any more: its wait was ended by a decision (a
--                 circuit closed or reset); woken at once
-- Every reason but order is woken at next_attempt_at by the workers' wakers;
-- next_attempt_at NULL means "until an operator acts" (a circuit forced
-- open without an end).
ALTER TABLE deliveries ADD COLUMN park_reason text
    CHECK (park_reason IN ('order', 'backoff', 'rate_limited', 'circuit_open', 'host_busy', 'tenant_share',
                           'inactive', 'unverified', 'released'));
UPDATE deliveries SET park_reason = 'order' WHERE parked_at IS NOT NULL;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_parked_with_reason
    CHECK ((parked_at IS NULL) = (park_reason IS NULL));

-- The wakers' scan: parked deliveries in order of their time.
CREATE INDEX deliveries_wake_idx ON deliveries (next_attempt_at)
    WHERE parked_at IS NOT NULL AND park_reason <> 'order' AND status IN ('pending', 'retrying');
-- A circuit's release: the deliveries parked behind it.
CREATE INDEX deliveries_circuit_parked_idx ON deliveries (webhook_id)
    WHERE park_reason = 'circuit_open' AND status IN ('pending', 'retrying');
