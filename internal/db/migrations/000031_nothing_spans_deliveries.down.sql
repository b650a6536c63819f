REVOKE DELETE ON delivery_attempts_retained FROM hookline_dlq;
ALTER TABLE delivery_attempts_retained ADD CONSTRAINT delivery_attempts_retained_delivery_id_fkey
    FOREIGN KEY (delivery_id) REFERENCES deliveries (id) ON DELETE CASCADE;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_retry_of_fkey
    FOREIGN KEY (retry_of) REFERENCES deliveries (id) ON DELETE SET NULL;
CREATE UNIQUE INDEX deliveries_one_retry_idx ON deliveries (retry_of)
    WHERE retry_of IS NOT NULL AND status IN ('pending', 'retrying');
CREATE UNIQUE INDEX deliveries_one_recovery_idx ON deliveries (event_id, webhook_id)
    WHERE batch_operation_id IS NOT NULL AND retry_of IS NULL;
