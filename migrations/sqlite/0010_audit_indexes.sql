-- Operator views: a connection's history, and the audit log filtered by event.
CREATE INDEX audit_events_connection ON audit_events (connection_id, id);
CREATE INDEX audit_events_event ON audit_events (event, id);
