#!/usr/bin/env node
// An MCP server's side of RFC 8693 token exchange, done by a standard OAuth library
// (panva's openid-client): discover mcp-connect's authorization-server metadata (RFC 8414) from
// its public URL, authenticate with client_secret_basic, and run the token-exchange grant.
//
// Input: one JSON object on argv[2]:
//   {"server": "http://127.0.0.1:PORT", "client_id": "...", "client_secret": "...",
//    "params": {"subject_token": "...", "subject_token_type": "...", "audience": "...", ...}}
// Output: one JSON line on stdout:
//   {"ok": true, "tokens": {...}}                       the token response
//   {"ok": false, "kind": "...", "error": "...", "status": 400, "body": {...},
//    "www_authenticate": "..."}                         how the library reported the refusal

import * as client from 'openid-client';

const GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';

async function main() {
  const input = JSON.parse(process.argv[2]);
  const config = await client.discovery(
    new URL(input.server),
    input.client_id,
    undefined,
    client.ClientSecretBasic(input.client_secret),
    // Our metadata is RFC 8414's, not OpenID Connect discovery; the tests run on loopback http.
    { algorithm: 'oauth2', execute: [client.allowInsecureRequests] },
  );
  try {
    const tokens = await client.genericGrantRequest(config, input.grant_type ?? GRANT, input.params);
    return { ok: true, tokens: { ...tokens }, token_endpoint: config.serverMetadata().token_endpoint };
  } catch (err) {
    const out = { ok: false, kind: err.name, code: err.code, error: err.error, status: err.status };
    if (err instanceof client.ResponseBodyError) {
      out.body = err.cause;
    } else if (err instanceof client.WWWAuthenticateChallengeError) {
      out.www_authenticate = err.response.headers.get('www-authenticate');
      out.body = await err.response.json().catch(() => null);
      out.error = out.body?.error;
    } else {
      out.message = String(err.message);
    }
    return out;
  }
}

main().then(
  (result) => { process.stdout.write(`${JSON.stringify(result)}\n`); },
  (err) => { process.stderr.write(`${err.stack}\n`); process.exit(1); },
);
