-- The workers' rescue of order keys whose release was lost
-- (delivery.RescueStalledKeys) looks for deliveries parked behind their
-- order key for too long. It read them through an index of every parked
-- delivery, whatever it waited for (backoff, rate limits, circuits,
-- hosts), and of finished deliveries that kept their parking (cancelled
-- with their webhook), looking at each on the heap: on a large database
-- with tens of thousands of retries waiting out their backoff, every pass
-- took 60-230 ms. This index holds only the unfinished deliveries parked
-- behind their order key; nothing else read the one it replaces.
CREATE INDEX deliveries_order_parked_idx ON deliveries (parked_at)
    WHERE park_reason = 'order' AND status IN ('pending', 'retrying');
DROP INDEX deliveries_parked_idx;
