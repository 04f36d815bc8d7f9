-- The background refresher looks for grants idle since a time (refresh_idle_seconds) beside
-- those expiring soon (connections_expires); without this it reads the whole table.
CREATE INDEX connections_refresh_due ON connections (status, last_refresh_at);
