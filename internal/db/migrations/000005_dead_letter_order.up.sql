-- The DLQ is listed in the order deliveries were exhausted (completed_at,
-- then id), paged from the last delivery of the previous page.
CREATE INDEX deliveries_dead_letter_order_idx ON deliveries (tenant_id, completed_at, id)
    WHERE status = 'exhausted';
