-- The admin console's sign-in sessions and its audit log.
--
-- A session row is named by the SHA-256 of the random id its cookie
-- carries: a leaked table names no live cookie. It holds the configured
-- token's name (never the token) and a fingerprint of the token's value,
-- so that a token removed from the configuration, or rotated under the same
-- name, ends its sessions. Every replica reads the same rows.
CREATE TABLE console_sessions (
    id_hash      bytea PRIMARY KEY,
    token_name   text NOT NULL,
    token_print  bytea NOT NULL,
    csrf_token   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX console_sessions_expires_at ON console_sessions (expires_at);

-- One row per console action: who (the session's token name), what, when,
-- on what (a kind and an id, with the org when known), and how it ended.
CREATE TABLE console_audit (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text NOT NULL,
    action       text NOT NULL,
    target_kind  text NOT NULL DEFAULT '',
    target_id    text NOT NULL DEFAULT '',
    org_id       text NOT NULL DEFAULT '',
    outcome      text NOT NULL,
    detail       text NOT NULL DEFAULT ''
);
CREATE INDEX console_audit_org_id ON console_audit (org_id, id);
CREATE INDEX console_audit_actor ON console_audit (actor, id);

---- create above / drop below ----

DROP TABLE console_audit;
DROP TABLE console_sessions;
