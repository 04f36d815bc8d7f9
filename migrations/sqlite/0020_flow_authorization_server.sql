-- Upstream MCP servers: the authorization server a pending provider redirect went to (its
-- issuer, or its token endpoint when it has none). The callback sends the code only there:
-- when discovery names another one meanwhile (the server moved), the code and PKCE verifier
-- are not handed to the new one. NULL for other providers and for rows made before it existed.
ALTER TABLE auth_flows ADD COLUMN authorization_server TEXT;
