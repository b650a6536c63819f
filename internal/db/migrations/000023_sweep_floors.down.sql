REVOKE SELECT, INSERT, UPDATE ON webhook_unfinished_floors FROM hookline_dlq;
DROP TABLE dead_letter_sweep_floor;
DROP INDEX deliveries_unrecorded_idx;
