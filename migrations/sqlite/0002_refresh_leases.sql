-- Refresh leases: on SQLite, the cross-process lock that keeps a refresh token from being
-- redeemed twice at once. Held leases are renewed while the refresh runs; a crashed holder's
-- lease runs out. (Postgres uses transaction-scoped advisory locks instead.)
CREATE TABLE refresh_leases (
    connection_id TEXT PRIMARY KEY,
    owner         TEXT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
