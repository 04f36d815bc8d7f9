-- Which apps may use a connection (`connection_clients`) is cached with the connection's row
-- (src/grants/cache.rs), so every write to it is logged in `connection_changes` too, in the
-- writing transaction and the same way as a write to the row itself (migration 0016). Triggers,
-- so no write is missed: not an operator's SQL, not a previous binary's during a rolling upgrade.
CREATE TRIGGER connection_clients_changed_insert AFTER INSERT ON connection_clients BEGIN
    INSERT INTO connection_changes (connection_id, changed_at)
    VALUES (NEW.connection_id, CAST(strftime('%s', 'now') AS INTEGER));
END;

CREATE TRIGGER connection_clients_changed_update AFTER UPDATE ON connection_clients BEGIN
    INSERT INTO connection_changes (connection_id, changed_at)
    VALUES (OLD.connection_id, CAST(strftime('%s', 'now') AS INTEGER));
    INSERT INTO connection_changes (connection_id, changed_at)
    VALUES (NEW.connection_id, CAST(strftime('%s', 'now') AS INTEGER));
END;

CREATE TRIGGER connection_clients_changed_delete AFTER DELETE ON connection_clients BEGIN
    INSERT INTO connection_changes (connection_id, changed_at)
    VALUES (OLD.connection_id, CAST(strftime('%s', 'now') AS INTEGER));
END;
