-- The dlq's tracking of batch outcomes (every second) found the open
-- batches, running or cancelled with retries still under way, by reading
-- every batch ever made. Running ones have batch_operations_open_idx;
-- this index holds the cancelled ones still counting.
CREATE INDEX batch_operations_cancelled_idx ON batch_operations (finished_at)
    WHERE state = 'cancelled' AND succeeded + failed < processed;
