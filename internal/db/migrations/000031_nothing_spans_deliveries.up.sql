-- Nothing but the primary key spans every row of deliveries, so that the
-- table can be partitioned by week and a week dropped whole (as the event
-- log is, migration 16).
--
-- An exhausted delivery's one unfinished retry, and a recovery's one
-- delivery of an event to its webhook, are held by locks taken before the
-- insert and a check after them (package dlq), not by unique indexes. What
-- the two foreign keys that named deliveries did when one was deleted
-- (a retry's retry_of set to NULL, the retained attempts deleted), the
-- retention statement that deletes it does, for which the dlq may now
-- delete retained attempts. Instant: no table is read.
DROP INDEX deliveries_one_recovery_idx;
DROP INDEX deliveries_one_retry_idx;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_retry_of_fkey;
ALTER TABLE delivery_attempts_retained DROP CONSTRAINT delivery_attempts_retained_delivery_id_fkey;
GRANT DELETE ON delivery_attempts_retained TO hookline_dlq;
