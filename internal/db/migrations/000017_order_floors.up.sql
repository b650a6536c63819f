-- An ordered webhook's checks (docs/DESIGN.md §9) find the unfinished
-- deliveries of an order key through deliveries_order_idx, from the key's
-- first entry. That index keeps an entry for every delivery of the key
-- until a vacuum, so each check read the whole history of the key: 2,127
-- index pages at its 300,000th delivery.
--
-- order_floors holds, for a key, a point at or before every unfinished
-- delivery of the key in (event_id, id) order; the checks read from it.
-- A release moves it up to the key's new first unfinished delivery (no
-- later than five minutes before the release, for publishes still
-- committing); a retry or recovery that gives the key a delivery of an
-- older event moves it down to that delivery. A key without a row is read
-- from its first entry. Its rows are updated in place, on no indexed
-- column, so the updates are HOT and leave nothing for a vacuum.
CREATE TABLE order_floors (
    order_key text PRIMARY KEY,
    event_id  uuid NOT NULL,
    id        uuid NOT NULL
) WITH (fillfactor = 50);

GRANT SELECT, INSERT, UPDATE ON order_floors TO hookline_api, hookline_worker, hookline_dlq;
