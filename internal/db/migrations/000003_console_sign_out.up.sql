-- Console sign-out ends the session on the server (docs/SECURITY.md). A
-- session cookie is signed and carries its own expiry, so that any api
-- process accepts it without shared state; a copy of it would therefore
-- stay valid until that expiry after the operator signed out. Signing out
-- records the session here, and every console request refuses a recorded
-- one. A row matters only until the session would have expired.
CREATE TABLE console_sessions_ended (
    -- SHA-256 of the session's random nonce (the cookie carries the nonce).
    session_hash bytea PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX console_sessions_ended_expiry_idx ON console_sessions_ended (expires_at);

-- end_console_session records a sign-out and forgets those of sessions
-- expired by now, so that the table stays the size of the sessions still
-- alive. It is how the api, which deletes nothing, removes those rows and
-- only those.
CREATE FUNCTION end_console_session(session bytea, tenant uuid, expires timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER AS $$
    DELETE FROM console_sessions_ended WHERE expires_at < now();
    INSERT INTO console_sessions_ended (session_hash, tenant_id, expires_at) VALUES (session, tenant, expires)
    ON CONFLICT (session_hash) DO NOTHING;
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION end_console_session(bytea, uuid, timestamptz) SET search_path = %I, pg_temp', current_schema());
END $$;
REVOKE EXECUTE ON FUNCTION end_console_session(bytea, uuid, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION end_console_session(bytea, uuid, timestamptz) TO hookline_api;
GRANT SELECT ON console_sessions_ended TO hookline_api;
