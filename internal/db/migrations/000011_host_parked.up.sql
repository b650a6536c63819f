-- The deliveries parked for their endpoint host's next free connection, by
-- webhook: a worker that finds the host fast again brings their times
-- forward (schedule.Hasten), instead of leaving them parked at the pace a
-- stall showed.
CREATE INDEX deliveries_host_parked_idx ON deliveries (webhook_id, next_attempt_at)
    WHERE park_reason = 'host_busy' AND status IN ('pending', 'retrying');
