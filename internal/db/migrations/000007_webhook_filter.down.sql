REVOKE SELECT (filter) ON webhooks FROM hookline_dlq;
DROP INDEX IF EXISTS webhooks_filtered_idx;
ALTER TABLE webhooks DROP COLUMN IF EXISTS filter;
