-- A webhook's unfinished floor stops at its oldest unfinished delivery:
-- with one delivery retrying for a day, or parked while the webhook is
-- paused, the lists of its pending and retrying deliveries and its
-- circuit's hold and release read every entry deliveries_unfinished_idx
-- kept since then. Its span (package unfinished) is a head past such
-- deliveries, and the ids of up to 100 of them: they read those by id and
-- the range from the head.
ALTER TABLE webhook_unfinished_floors ADD COLUMN head uuid,
    ADD COLUMN behind uuid[] NOT NULL DEFAULT '{}';
