-- The token-endpoint authentication method an upstream MCP authorization server registered
-- mcp-connect with (RFC 7591 `token_endpoint_auth_method`: client_secret_basic,
-- client_secret_post or none). NULL on rows registered before it was recorded: those asked for
-- `none` and use Basic when a secret was issued anyway.
ALTER TABLE mcp_clients ADD COLUMN token_endpoint_auth_method TEXT;
