-- A batch operation's succeeded and failed counts were recounted every
-- second from all of its deliveries (through deliveries_batch_idx, one
-- heap visit an entry without a vacuum): a batch of a million retries
-- read a million entries a second for as long as it ran. Now each
-- statement that ends deliveries of a batch adds them to its counts, in
-- the same transaction: the counts are exact, current at every commit,
-- and the dlq's tracking only completes the batches whose outcomes are
-- all in (dlq.Runner.TrackOutcomes).
--
-- Writes to deliveries wait while this runs, so that no delivery ends
-- between the recount below and the trigger: the recount reads the
-- deliveries of the open batches alone.
LOCK TABLE deliveries IN SHARE ROW EXCLUSIVE MODE;

-- deliveries_batch_outcomes adds the deliveries a statement moved
-- from pending or retrying to succeeded (succeeded) or to exhausted or
-- cancelled (failed) to the counts of their batch operations. It runs as
-- the owner of the schema (SECURITY DEFINER, search path fixed below):
-- the worker's role, which ends most deliveries, neither reads nor
-- writes batch operations otherwise. The batches are locked in id order,
-- before the rollups (statement triggers fire in name order, and this
-- one's name sorts first), the order in which a batch's own transactions
-- take them: its heartbeat, then its inserts' rollups.
CREATE FUNCTION deliveries_batch_outcomes() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    ids uuid[];
    succeeded_n bigint[];
    failed_n bigint[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_rows n
                   WHERE n.batch_operation_id IS NOT NULL AND n.status IN ('succeeded', 'exhausted', 'cancelled')) THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(e.id ORDER BY e.id), array_agg(e.succeeded ORDER BY e.id), array_agg(e.failed ORDER BY e.id)
    INTO ids, succeeded_n, failed_n
    FROM (SELECT n.batch_operation_id AS id,
              count(*) FILTER (WHERE n.status = 'succeeded') AS succeeded,
              count(*) FILTER (WHERE n.status <> 'succeeded') AS failed
          FROM new_rows n JOIN old_rows o ON o.id = n.id
          WHERE n.batch_operation_id IS NOT NULL AND n.status IN ('succeeded', 'exhausted', 'cancelled')
            AND o.status IN ('pending', 'retrying')
          GROUP BY n.batch_operation_id) e;
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM batch_operations WHERE id = ANY (ids) ORDER BY id FOR UPDATE;
    UPDATE batch_operations b SET succeeded = b.succeeded + e.succeeded, failed = b.failed + e.failed
    FROM unnest(ids, succeeded_n, failed_n) AS e (id, succeeded, failed)
    WHERE b.id = e.id;
    RETURN NULL;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION deliveries_batch_outcomes() SET search_path = %I, pg_temp', current_schema());
END $$;

CREATE TRIGGER deliveries_batch_outcomes AFTER UPDATE ON deliveries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION deliveries_batch_outcomes();

-- The counts of the batches the tracking still counted, as it would have
-- at its next pass: the running ones, and the cancelled ones of the last
-- day whose retries had not all ended.
UPDATE batch_operations b SET succeeded = c.succeeded, failed = c.failed
FROM (SELECT o.id,
          count(d.id) FILTER (WHERE d.status = 'succeeded') AS succeeded,
          count(d.id) FILTER (WHERE d.status IN ('exhausted', 'cancelled')) AS failed
      FROM batch_operations o LEFT JOIN deliveries d ON d.batch_operation_id = o.id
      WHERE o.state = 'running'
         OR (o.state = 'cancelled' AND o.succeeded + o.failed < o.processed AND o.finished_at > now() - interval '1 day')
      GROUP BY o.id) c
WHERE b.id = c.id;

-- It found the cancelled batches still counting; nothing reads them now,
-- and without an index on them the counts' updates are HOT.
DROP INDEX batch_operations_cancelled_idx;
