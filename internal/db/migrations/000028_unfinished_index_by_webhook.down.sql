CREATE INDEX deliveries_unfinished_any_idx ON deliveries (webhook_id, id)
    WHERE status IN ('pending', 'retrying');
DROP INDEX deliveries_unfinished_idx;
ALTER INDEX deliveries_unfinished_any_idx RENAME TO deliveries_unfinished_idx;
