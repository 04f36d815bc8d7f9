-- Every write to a connection row tells every replica, in the writing transaction (so only on
-- commit): replicas keep a cache of recently used rows (src/token_cache.rs) and drop a row when
-- told. A trigger rather than calls in the code, so no write is ever missed: not one added later,
-- not an operator's SQL, not a previous binary's during a rolling upgrade. The channel is the
-- one replicas already listen on; the payload's prefix keeps it apart from elicitation ids.
CREATE FUNCTION mcp_connect_connection_changed() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('mcp_connect_elicitations', 'connection:' || OLD.id);
    ELSE
        PERFORM pg_notify('mcp_connect_elicitations', 'connection:' || NEW.id);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER connections_changed AFTER INSERT OR UPDATE OR DELETE ON connections
    FOR EACH ROW EXECUTE FUNCTION mcp_connect_connection_changed();

-- New outbox events wake `GET /v1/events` streams and webhook senders on every replica
-- (`events:<client id>`), instead of each stream polling the table.
CREATE FUNCTION mcp_connect_event_recorded() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('mcp_connect_elicitations', 'events:' || NEW.client_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER events_recorded AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION mcp_connect_event_recorded();
