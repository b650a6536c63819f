DROP TABLE webhook_unfinished_floors;
DROP INDEX deliveries_unfinished_idx;
