-- Post-deploy (run once every process runs the release that brought 0022): a user may now hold
-- several accounts at one provider. Releases before 0022 name the table's UNIQUE (issuer,
-- subject, provider) in their `ON CONFLICT`, so none may run after this. SQLite cannot drop a
-- table constraint: the table is rebuilt with the same columns, rows, indexes and triggers,
-- without it (no foreign key refers to it).
-- contract-step: only releases before 0022 use (issuer, subject, provider) as a conflict target
CREATE TABLE connections_rebuilt (
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
    params           TEXT,
    metadata         TEXT,
    account_id       TEXT NOT NULL DEFAULT '',
    nickname         TEXT,
    default_at       BIGINT,
    organization     TEXT NOT NULL DEFAULT '',
    client_organization TEXT NOT NULL DEFAULT ''
);
INSERT INTO connections_rebuilt (id, issuer, subject, provider, status, scopes, token_type, access_token,
    refresh_token, expires_at, account_label, created_at, updated_at, last_refresh_at, last_error,
    refresh_failures, token_version, params, metadata, account_id, nickname, default_at, organization, client_organization)
SELECT id, issuer, subject, provider, status, scopes, token_type, access_token,
    refresh_token, expires_at, account_label, created_at, updated_at, last_refresh_at, last_error,
    refresh_failures, token_version, params, metadata, account_id, nickname, default_at, organization, client_organization
FROM connections;
-- contract-step: the rebuilt table replaces it, same rows
DROP TABLE connections;
-- contract-step: the rebuilt table takes the old name
ALTER TABLE connections_rebuilt RENAME TO connections;
CREATE INDEX connections_subject ON connections (subject);
CREATE INDEX connections_expires ON connections (status, expires_at);
CREATE INDEX connections_refresh_due ON connections (status, last_refresh_at);
CREATE UNIQUE INDEX connections_account ON connections (issuer, organization, subject, provider, account_id);
CREATE TRIGGER connections_changed_insert AFTER INSERT ON connections BEGIN
    INSERT INTO connection_changes (connection_id, changed_at)
    VALUES (NEW.id, CAST(strftime('%s', 'now') AS INTEGER));
END;
CREATE TRIGGER connections_changed_update AFTER UPDATE ON connections BEGIN
    INSERT INTO connection_changes (connection_id, changed_at)
    VALUES (NEW.id, CAST(strftime('%s', 'now') AS INTEGER));
END;
CREATE TRIGGER connections_changed_delete AFTER DELETE ON connections BEGIN
    INSERT INTO connection_changes (connection_id, changed_at)
    VALUES (OLD.id, CAST(strftime('%s', 'now') AS INTEGER));
END;
CREATE TRIGGER connections_added_user AFTER INSERT ON connections BEGIN
    INSERT INTO connection_changes (connection_id, changed_at)
    VALUES ('user:' || NEW.provider || '/' || NEW.subject, CAST(strftime('%s', 'now') AS INTEGER));
END;
