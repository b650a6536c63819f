DROP TABLE IF EXISTS portal_sessions;
ALTER TABLE tenants DROP COLUMN IF EXISTS portal;
ALTER TABLE audit_log DROP COLUMN IF EXISTS actor_service_key_id, DROP COLUMN IF EXISTS actor_type;
DROP TABLE IF EXISTS service_keys;
