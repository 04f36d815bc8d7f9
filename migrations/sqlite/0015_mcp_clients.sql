-- Clients registered by RFC 7591 dynamic registration at the authorization servers of upstream
-- MCP servers (`kind = "mcp"` providers whose server does not take Client ID Metadata
-- Documents): one per provider, authorization server and redirect URI, shared by every replica.
-- The secret, when the server issues one, is sealed (AAD: mcp_client:<provider>:<issuer>).
CREATE TABLE mcp_clients (
    provider      TEXT NOT NULL,
    issuer        TEXT NOT NULL,
    redirect_uri  TEXT NOT NULL,
    client_id     TEXT NOT NULL,
    client_secret TEXT,
    registered_at BIGINT NOT NULL,
    PRIMARY KEY (provider, issuer, redirect_uri)
);
