-- A webhook's deliveries filtered by pending or retrying were found by
-- walking deliveries_webhook_idx (webhook_id, id) through every delivery
-- the webhook ever had until a page of unfinished ones turned up: on a
-- healthy webhook, its whole history at every request. Cancelling the
-- deliveries of a deleted webhook, and releasing those a paused one held,
-- walked it the same way.
--
-- deliveries_unfinished_idx holds the unfinished deliveries of each
-- webhook, in id order. Built here, it holds only them; afterwards an
-- entry stays until a vacuum after its delivery finished (readers mark it
-- dead, and skip it, but still read its page). webhook_unfinished_floors
-- keeps, for each webhook, an id at or before its oldest unfinished
-- delivery, which the lists move forward as they read (internal/history,
-- UnfinishedFloor): a list reads the index from there, not from the
-- webhook's first delivery.
CREATE INDEX deliveries_unfinished_idx ON deliveries (webhook_id, id)
    WHERE status IN ('pending', 'retrying');

CREATE TABLE webhook_unfinished_floors (
    webhook_id uuid PRIMARY KEY REFERENCES webhooks (id) ON DELETE CASCADE,
    floor      uuid NOT NULL
) WITH (fillfactor = 50);

GRANT SELECT, INSERT, UPDATE ON webhook_unfinished_floors TO hookline_api;
