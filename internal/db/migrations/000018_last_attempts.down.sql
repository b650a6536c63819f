DROP TRIGGER attempts_last_insert ON delivery_attempts;
DROP FUNCTION attempts_last_insert();
DROP TABLE webhook_last_attempts;

CREATE INDEX delivery_attempts_webhook_idx ON delivery_attempts (webhook_id, executed_at);
