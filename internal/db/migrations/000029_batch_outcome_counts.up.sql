-- A batch operation's succeeded and failed counts were recounted every
-- second from all of its deliveries (through deliveries_batch_idx, one
-- heap visit an entry without a vacuum): a batch of a million retries
-- read a million entries a second for as long as it ran. Now each
-- statement that ends retries of a batch adds them to the batch's
-- counters in batch_outcomes, in the same transaction, and the dlq's
-- tracking sums those (a few rows a batch) into batch_operations every
-- second (dlq.Runner.TrackOutcomes).
--
-- Writes to batch operations and to deliveries wait while this runs (in
-- that order, the order in which a batch's chunk takes them), so that no
-- retry ends between the recount below and the trigger.
LOCK TABLE batch_operations, deliveries IN SHARE ROW EXCLUSIVE MODE;

-- A batch's counters, spread over shards so that concurrent statements
-- ending its retries seldom wait for one another; the batch's counts are
-- their sums. Only the trigger writes them: nothing that holds the batch
-- operation's own row (its chunks, its cancel) waits for them, or they
-- for it.
CREATE TABLE batch_outcomes (
    batch_operation_id uuid NOT NULL REFERENCES batch_operations (id) ON DELETE CASCADE,
    shard              smallint NOT NULL,
    succeeded          bigint NOT NULL DEFAULT 0,
    failed             bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_operation_id, shard)
);
GRANT SELECT ON batch_outcomes TO hookline_dlq;

-- deliveries_batch_outcomes adds the deliveries a statement moved from
-- pending or retrying to succeeded (succeeded) or to exhausted or
-- cancelled (failed) to their batches' counters. It runs as the owner of
-- the schema (SECURITY DEFINER, search path fixed below): the worker's
-- role, which ends most deliveries, neither reads nor writes batch
-- operations otherwise. The rows that ended are the new rows in a final
-- state less the old rows already in one (a final state is final), an
-- EXCEPT rather than a join of the two transition tables, which PL/pgSQL
-- would plan once per connection for the row counts of its first
-- statement (migration 21).
CREATE FUNCTION deliveries_batch_outcomes() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_rows n
                   WHERE n.batch_operation_id IS NOT NULL AND n.status IN ('succeeded', 'exhausted', 'cancelled')) THEN
        RETURN NULL;
    END IF;
    INSERT INTO batch_outcomes AS o (batch_operation_id, shard, succeeded, failed)
    SELECT e.batch_operation_id, floor(random() * 4)::smallint,
        count(*) FILTER (WHERE e.status = 'succeeded'), count(*) FILTER (WHERE e.status <> 'succeeded')
    FROM (SELECT n.id, n.batch_operation_id, n.status FROM new_rows n
          WHERE n.batch_operation_id IS NOT NULL AND n.status IN ('succeeded', 'exhausted', 'cancelled')
          EXCEPT
          SELECT o.id, o.batch_operation_id, o.status FROM old_rows o
          WHERE o.status IN ('succeeded', 'exhausted', 'cancelled')) AS e
    GROUP BY e.batch_operation_id
    ORDER BY e.batch_operation_id
    ON CONFLICT (batch_operation_id, shard) DO UPDATE SET
        succeeded = o.succeeded + excluded.succeeded, failed = o.failed + excluded.failed;
    RETURN NULL;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION deliveries_batch_outcomes() SET search_path = %I, pg_temp', current_schema());
END $$;

CREATE TRIGGER deliveries_batch_outcomes AFTER UPDATE ON deliveries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION deliveries_batch_outcomes();

-- The counters of every batch whose counts can still change: the running
-- ones, the cancelled ones still counting, and any with a retry under
-- way, recounted from their retries.
INSERT INTO batch_outcomes (batch_operation_id, shard, succeeded, failed)
SELECT b.id, 0,
    count(d.id) FILTER (WHERE d.status = 'succeeded'),
    count(d.id) FILTER (WHERE d.status IN ('exhausted', 'cancelled'))
FROM batch_operations b LEFT JOIN deliveries d ON d.batch_operation_id = b.id
WHERE b.state = 'running'
   OR (b.state = 'cancelled' AND b.succeeded + b.failed < b.processed)
   OR b.id IN (SELECT batch_operation_id FROM deliveries
               WHERE batch_operation_id IS NOT NULL AND status IN ('pending', 'retrying'))
GROUP BY b.id;
