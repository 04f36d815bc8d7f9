-- Every write to a connection row is logged here, in the writing transaction: each process
-- keeps a cache of recently used rows (src/token_cache.rs) and reads this log every few
-- milliseconds to drop the rows other processes (a second `serve`, an operator command)
-- changed. Triggers rather than code, so no write is ever missed, a previous binary's included.
-- Rows older than ten minutes are pruned by the cleanup task.
CREATE TABLE connection_changes (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    connection_id TEXT NOT NULL,
    changed_at    BIGINT NOT NULL
);

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
