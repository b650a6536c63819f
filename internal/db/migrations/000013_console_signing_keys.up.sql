-- The keys that sign console and portal session cookies and CSRF tokens
-- (docs/SECURITY.md). They used to be derived from the admin token, which
-- made every cookie and sign-in form a sample against which guesses of
-- that token could be checked offline. Each key is 32 random bytes, sealed
-- with the secret keyring (security.secret_keys; in clear without one, as
-- webhook secrets are), made by the first api process that needs one and
-- shared by all of them. The newest signs; every key here verifies, so
-- that "api rotate-console-key" adds a key without signing anyone out and
-- deletes the keys older than the one it replaces.
CREATE TABLE console_signing_keys (
    id          integer PRIMARY KEY CHECK (id > 0),
    sealed_key  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The api makes the first key, and "api rotate-secret-key", which runs
-- under the api's role, seals the keys again; rotating ("api
-- rotate-console-key") deletes keys, which only the owner of the schema
-- does.
GRANT SELECT, INSERT, UPDATE (sealed_key) ON console_signing_keys TO hookline_api;
