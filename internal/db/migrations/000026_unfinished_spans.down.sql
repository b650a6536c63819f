ALTER TABLE webhook_unfinished_floors DROP COLUMN behind, DROP COLUMN head;
