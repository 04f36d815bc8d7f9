-- Which apps may use a connection (`connection_clients`) is cached with the connection's row
-- (src/grants/cache.rs), so every write to it tells every replica too, in the writing transaction
-- and the same way as a write to the row itself (migration 0016): `connection:<id>` on the
-- channel replicas listen on. A trigger, so no write is missed: not an operator's SQL, not a
-- previous binary's during a rolling upgrade.
CREATE FUNCTION mcp_connect_connection_clients_changed() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM pg_notify('mcp_connect_elicitations', 'connection:' || OLD.connection_id);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM pg_notify('mcp_connect_elicitations', 'connection:' || NEW.connection_id);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER connection_clients_changed AFTER INSERT OR UPDATE OR DELETE ON connection_clients
    FOR EACH ROW EXECUTE FUNCTION mcp_connect_connection_clients_changed();
