-- deliveries_unfinished_idx holds each webhook's unfinished deliveries,
-- and, until a vacuum, an entry for every delivery that was ever
-- unfinished. Its predicate (pending or retrying) was implied by every
-- statement that names those states, so the planner could read it whole
-- where another index serves: once the table's statistics show almost no
-- unfinished delivery, it costs the index as a page or two, whatever the
-- entries it holds. The waker, the outbox relay and its backlog gauge
-- then walked every delivery since the last vacuum at each pass (1,200
-- pages a pass at 400,000 deliveries, ten passes a second for the waker).
--
-- The index now also requires webhook_id IS NOT NULL (true of every row:
-- the column is NOT NULL). A statement implies that only through a clause
-- on webhook_id, which every reader of the index has (one webhook, a list
-- of them, a join on the webhook); the scans that find due deliveries
-- have none, and can no longer choose it. Built here, it holds only the
-- deliveries unfinished now.
CREATE INDEX deliveries_unfinished_by_webhook_idx ON deliveries (webhook_id, id)
    WHERE status IN ('pending', 'retrying') AND webhook_id IS NOT NULL;
DROP INDEX deliveries_unfinished_idx;
ALTER INDEX deliveries_unfinished_by_webhook_idx RENAME TO deliveries_unfinished_idx;
