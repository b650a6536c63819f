CREATE INDEX batch_operations_cancelled_idx ON batch_operations (finished_at)
    WHERE state = 'cancelled' AND succeeded + failed < processed;
DROP TRIGGER deliveries_batch_outcomes ON deliveries;
DROP FUNCTION deliveries_batch_outcomes();
