DROP INDEX IF EXISTS deliveries_circuit_parked_idx;
DROP INDEX IF EXISTS deliveries_wake_idx;
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_parked_with_reason;
UPDATE deliveries SET parked_at = NULL, next_attempt_at = now(), enqueued_at = NULL
    WHERE park_reason IS NOT NULL AND park_reason <> 'order';
ALTER TABLE deliveries DROP COLUMN IF EXISTS park_reason;
