-- Serving a platform (docs/DESIGN.md §18): service keys that act for the
-- tenants of their set, audit rows that say which kind of credential acted,
-- portal sessions for a tenant's own customers, and each tenant's portal
-- settings.

-- A service key is created by the admin. It acts for one tenant per
-- request (the Hookline-Tenant header), within its scopes, and only for the
-- tenants of its set: tenant_ids NULL is every tenant. Stored like API
-- keys: a SHA-256 hash of the whole key and a prefix in clear.
CREATE TABLE service_keys (
    id            uuid PRIMARY KEY,
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    prefix        text NOT NULL,
    key_hash      bytea NOT NULL UNIQUE,
    scopes        text[] NOT NULL CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['publish', 'read', 'manage']),
    tenant_ids    uuid[] CHECK (tenant_ids IS NULL OR cardinality(tenant_ids) BETWEEN 1 AND 1000),
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    expires_at    timestamptz,
    revoked_at    timestamptz
);

-- Who acted: actor_type is 'api_key' (actor_key_id), 'service_key'
-- (actor_service_key_id, acting for the row's tenant), 'portal' (a portal
-- session, opened by actor_service_key_id or by the admin when it is NULL),
-- 'admin' or 'system'. The rows written before this migration are given
-- theirs; a process of the previous version, still running during a
-- rolling deploy, writes '' (read as those were: see audit.listSQL).
ALTER TABLE audit_log
    ADD COLUMN actor_type text NOT NULL DEFAULT '',
    ADD COLUMN actor_service_key_id uuid REFERENCES service_keys (id) ON DELETE SET NULL;
UPDATE audit_log SET actor_type = CASE WHEN action = 'webhook.auto_disabled' THEN 'system'
    WHEN actor_key_id IS NOT NULL THEN 'api_key' ELSE 'admin' END;

-- How a tenant's portal looks and where it may be embedded: display name,
-- logo URL, accent colour and the origins allowed to frame it.
ALTER TABLE tenants ADD COLUMN portal jsonb NOT NULL DEFAULT '{}';

-- A portal session starts as a one-time link: token_hash is the SHA-256 of
-- the link's token, usable once (used_at) before link_expires_at. The
-- browser that used it holds a signed cookie naming the session, valid
-- until expires_at unless the session is ended (ended_at).
CREATE TABLE portal_sessions (
    id                      uuid PRIMARY KEY,
    tenant_id               uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    token_hash              bytea NOT NULL UNIQUE,
    created_by_service_key  uuid REFERENCES service_keys (id) ON DELETE SET NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    link_expires_at         timestamptz NOT NULL,
    used_at                 timestamptz,
    expires_at              timestamptz NOT NULL,
    ended_at                timestamptz
);
CREATE INDEX portal_sessions_tenant_idx ON portal_sessions (tenant_id, created_at);

GRANT SELECT, INSERT, UPDATE ON service_keys, portal_sessions TO hookline_api;
-- dlq: retention deletes portal sessions a day after they end, and webhook
-- pauses older than what it keeps of events.
GRANT SELECT, DELETE ON portal_sessions TO hookline_dlq;
GRANT DELETE ON webhook_pauses TO hookline_dlq;
