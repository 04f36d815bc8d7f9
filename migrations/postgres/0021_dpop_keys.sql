-- The DPoP key pair (RFC 9449) mcp-connect proves possession with at an upstream MCP server's
-- authorization server that advertises `dpop_signing_alg_values_supported`, and at the MCP
-- server itself: one per provider and authorization server, made once and shared by every
-- replica (the tokens it obtained are bound to it). `private_key` is the PKCS#8 document of an
-- ES256 key, sealed (AAD: mcp-connect/v1/dpop_key/<provider>/<issuer>).
CREATE TABLE dpop_keys (
    provider    TEXT NOT NULL,
    issuer      TEXT NOT NULL,
    private_key TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (provider, issuer)
);
