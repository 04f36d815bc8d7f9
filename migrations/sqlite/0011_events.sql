-- Completion signals for API clients: one row per event per client. The same rows feed the
-- `GET /v1/events` stream (by `seq`) and, when the client has a webhook, the delivery outbox
-- (`next_attempt_ms` is set while a delivery is due; NULL once delivered, given up, or never due).
CREATE TABLE events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    client_id       TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    payload         TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_ms BIGINT,
    delivered_at    BIGINT,
    failed_at       BIGINT,
    last_error      TEXT
);
CREATE INDEX events_client ON events (client_id, seq);
CREATE INDEX events_due ON events (next_attempt_ms);
CREATE INDEX events_created ON events (created_at);
