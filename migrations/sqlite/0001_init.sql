-- Elicitations: one request by an MCP client for one user to connect one provider.
CREATE TABLE elicitations (
    id            TEXT PRIMARY KEY,
    client_id     TEXT NOT NULL,
    issuer        TEXT NOT NULL,
    subject       TEXT NOT NULL,
    provider      TEXT NOT NULL,
    scopes        TEXT NOT NULL,
    status        TEXT NOT NULL,
    connection_id TEXT,
    failure       TEXT,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    finished_at   BIGINT
);
CREATE INDEX elicitations_pending ON elicitations (client_id, issuer, subject, provider, status);
CREATE INDEX elicitations_created ON elicitations (created_at);

-- Pending browser redirects (identity sign-in and provider authorization). The state itself is
-- never stored, only its hash; the PKCE verifier is sealed.
CREATE TABLE auth_flows (
    state_hash     TEXT PRIMARY KEY,
    kind           TEXT NOT NULL,
    binding_hash   TEXT NOT NULL,
    elicitation_id TEXT,
    provider       TEXT,
    return_to      TEXT,
    nonce          TEXT,
    verifier       TEXT,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    used_at        BIGINT
);
CREATE INDEX auth_flows_expires ON auth_flows (expires_at);

-- One user's grant at one provider. Token columns hold sealed values only.
CREATE TABLE connections (
    id               TEXT PRIMARY KEY,
    issuer           TEXT NOT NULL,
    subject          TEXT NOT NULL,
    provider         TEXT NOT NULL,
    status           TEXT NOT NULL,
    scopes           TEXT NOT NULL,
    token_type       TEXT NOT NULL,
    access_token     TEXT,
    refresh_token    TEXT,
    expires_at       BIGINT,
    account_label    TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    last_refresh_at  BIGINT,
    last_error       TEXT,
    refresh_failures BIGINT NOT NULL DEFAULT 0,
    token_version    BIGINT NOT NULL DEFAULT 0,
    UNIQUE (issuer, subject, provider)
);
CREATE INDEX connections_subject ON connections (subject);
CREATE INDEX connections_expires ON connections (status, expires_at);

-- Browser sessions (tower-sessions records as JSON).
CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    data       TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_expires ON sessions (expires_at);

-- Append-only record of security-relevant events. Never holds a secret.
CREATE TABLE audit_events (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    at             BIGINT NOT NULL,
    event          TEXT NOT NULL,
    actor          TEXT,
    issuer         TEXT,
    subject        TEXT,
    provider       TEXT,
    client_id      TEXT,
    connection_id  TEXT,
    elicitation_id TEXT,
    request_id     TEXT,
    detail         TEXT
);
CREATE INDEX audit_events_at ON audit_events (at);
CREATE INDEX audit_events_subject ON audit_events (subject, at);
