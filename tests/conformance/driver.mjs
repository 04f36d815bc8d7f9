// The client command the MCP conformance suite runs for each scenario: `node driver.mjs <serverUrl>`.
//
// It plays an MCP server that gets its users' tokens from mcp-connect, the way
// docs/mcp-integration.md tells one to: it starts the test peers and the real mcp-connect binary
// with a `kind = "mcp"` provider whose `resource` is the scenario's server, asks `POST /v1/tokens`
// with `elicit`, walks the connect URL in headless Chromium (identity sign-in, mcp-connect's
// consent page, the scenario's authorization server), fetches the token and speaks MCP to the
// server with it. Every OAuth step towards the scenario's servers is mcp-connect's own; this
// command only uses the documented API and the browser.
//
// The suite sets MCP_CONFORMANCE_SCENARIO, MCP_CONFORMANCE_PROTOCOL_VERSION (the wire: 2025-11-25
// is stateful with `initialize`, 2026-07-28 stateless with `_meta` on every request) and, for
// some scenarios, MCP_CONFORMANCE_CONTEXT (pre-registered client credentials).
//
// Exit status 0 when the MCP calls succeeded, 1 otherwise (the scenario's checks decide whether
// that was right: a client must fail against a mismatched resource or issuer).

import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { startPeers } from '../peers/peers.mjs';
import {
  IDENTITY_SECRET, closeAll, launchBrowser, logTail, newPage, signIn, sleep,
  reservePort, startService, stopChild, toml, waitForOrigin, waitReady,
} from '../e2e/lib.mjs';

const PROVIDER = 'conf';
const USER = 'alice';
// Re-authorizations per MCP request after a 401/403 challenge: with the first authorization at
// most three, the bound the suite's scope-retry-limit scenario asks for.
const MAX_REAUTH = 2;
const STATELESS_WIRES = new Set(['2026-07-28']);

const serverUrl = process.argv[2];
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? '(unnamed)';
const wire = process.env.MCP_CONFORMANCE_PROTOCOL_VERSION || '2025-11-25';
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || '{}');
const verbose = process.env.CONFORMANCE_VERBOSE === '1';

const say = (line) => process.stderr.write(`[driver] ${line}\n`);

// What the driver is doing, for the watchdog's line.
let stage = 'starting';
// The suite gives a run 60 s and then stops waiting, but a driver stuck in a step without a
// bound of its own (a browser that never finishes launching or closing) would keep the suite's
// pipe open and hang the whole run. Leave before that, saying where: `process.exit` also makes
// Playwright kill the browser it launched.
const WATCHDOG_MS = 55_000;
setTimeout(() => {
  say(`no end after ${WATCHDOG_MS / 1000} s (stuck ${stage}): giving up`);
  process.exit(1);
}, WATCHDOG_MS).unref();

async function startStack() {
  const { port, release } = await reservePort();
  const base = `http://127.0.0.1:${port}`;
  const peerLogs = [];
  const peers = await startPeers({ connectUrl: base, providerName: PROVIDER, log: (l) => peerLogs.push(l) })
    .finally(release);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-connect-conformance-'));
  const apiKey = crypto.randomBytes(32).toString('base64url');
  // Pre-registered credentials (auth/pre-registration) are what an operator would configure.
  const preRegistered = context.client_id
    ? `client_id = ${toml(context.client_id)}\n${context.client_secret ? `client_secret = ${toml(context.client_secret)}\n` : ''}`
    : '';
  const configFile = path.join(dir, 'mcp-connect.toml');
  fs.writeFileSync(configFile, `public_url = ${toml(base)}
listen = ${toml(`127.0.0.1:${port}`)}
database_url = ${toml(`sqlite://${dir}/db.sqlite`)}
encryption_keys = [${toml(`k1:${crypto.randomBytes(32).toString('base64')}`)}]
# The scenario's servers listen on "localhost", which may resolve to either loopback.
outbound_allow_cidrs = ["127.0.0.0/8", "::1/128"]

[identity]
issuer = ${toml(peers.identity)}
client_id = "mcp-connect"
client_secret = ${toml(IDENTITY_SECRET)}

[[clients]]
id = "conformance-driver"
api_key = ${toml(apiKey)}
providers = [${toml(PROVIDER)}]

[providers.${PROVIDER}]
kind = "mcp"
display_name = "Conformance scenario"
resource = ${toml(serverUrl)}
${preRegistered}`, { mode: 0o600 });
  const service = startService(configFile, 'conformance');
  const stack = { base, peers, peerLogs, service, dir };
  try {
    await waitReady(base, service);
  } catch (err) {
    await stopStack(stack);
    throw err;
  }
  stack.api = async (method, p, body) => {
    const res = await fetch(`${base}${p}`, {
      method,
      headers: {
        authorization: `Bearer ${apiKey}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let json;
    try { json = JSON.parse(text); } catch { json = undefined; }
    return { status: res.status, json, text };
  };
  return stack;
}

async function stopStack(stack) {
  await stopChild(stack.service.child).catch(() => {});
  await stack.peers.close().catch(() => {});
  fs.rmSync(stack.dir, { recursive: true, force: true });
}

// Opens the connect URL and goes through identity sign-in, the consent page (Continue) and the
// scenario's authorization server, until mcp-connect shows its done page or any page answers an
// error. Returns the elicitation's status afterwards.
async function walk(stack, elicitation) {
  const { page, context: browserContext, docs } = await newPage();
  try {
    await page.goto(elicitation.url);
    if (new URL(page.url()).origin === stack.peers.identity) {
      await signIn(page, stack.peers.identity, USER, 'the identity sign-in page');
    }
    await waitForOrigin(page, stack.base, 'mcp-connect after identity sign-in');
    docs.last = null;
    await page.getByRole('button', { name: 'Continue' }).click();
    const deadline = Date.now() + 20_000;
    for (;;) {
      const last = docs.last;
      const at = new URL(page.url());
      if (last && (last.status >= 400 || (at.origin === stack.base && at.pathname === '/done'))) break;
      if (Date.now() > deadline) break;
      await sleep(100);
    }
    await page.waitForLoadState('load').catch(() => {});
    const text = (await page.locator('body').innerText({ timeout: 2000 }).catch(() => '')).replace(/\s+/g, ' ').trim();
    say(`browser ended at ${page.url().split('?')[0]} (HTTP ${docs.last?.status ?? '?'}): ${text.slice(0, 300)}`);
  } finally {
    await browserContext.close().catch(() => {});
  }
  const res = await stack.api('GET', `/v1/elicitations/${encodeURIComponent(elicitation.id)}?wait=2`);
  const status = res.json?.status ?? `HTTP ${res.status}`;
  say(`elicitation ${elicitation.id}: ${status}${res.json?.reason ? ` (${res.json.reason})` : ''}`);
  return status;
}

// A token from mcp-connect; walks the browser when it answers with an elicitation. Every ask
// names the next MCP request (`dpop`, docs/mcp-integration.md): for a DPoP-bound token the answer
// carries the proof for it; other tokens ignore it. Returns {token, type, proof}.
async function obtainToken(stack, { scopes, forceRefresh = false, nonce } = {}) {
  const dpop = { htm: 'POST', htu: serverUrl, ...(nonce ? { nonce } : {}) };
  const ask = { subject: USER, provider: PROVIDER, elicit: true, dpop, ...(scopes ? { scopes } : {}) };
  let res = await stack.api('POST', '/v1/tokens', { ...ask, ...(forceRefresh ? { force_refresh: true } : {}) });
  if (verbose || res.status !== 200 || forceRefresh || scopes) {
    say(`POST /v1/tokens${scopes ? ` scopes=${scopes.join(' ')}` : ''}${forceRefresh ? ' force_refresh' : ''}: ${res.status} ${res.json?.error ?? ''}`);
  }
  if (res.status === 409 && res.json?.elicitation?.url) {
    const status = await walk(stack, res.json.elicitation);
    if (status !== 'completed') throw new Error(`the elicitation ended ${status}, no token`);
    res = await stack.api('POST', '/v1/tokens', ask);
    say(`POST /v1/tokens after the connect flow: ${res.status} ${res.json?.error ?? ''}`);
  }
  if (res.status !== 200 || !res.json?.access_token) {
    throw new Error(`POST /v1/tokens answered ${res.status}: ${res.text.slice(0, 300)}`);
  }
  return { token: res.json.access_token, type: res.json.token_type, proof: res.json.dpop_proof };
}

const isDpop = (grant) => grant.type?.toLowerCase() === 'dpop';

// RFC 6750 challenge parameters (quoted or token values) of the Bearer scheme.
function bearerChallenge(header) {
  const params = {};
  if (!header) return params;
  const re = /([A-Za-z0-9_-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))/g;
  for (const m of header.matchAll(re)) params[m[1].toLowerCase()] = m[2] !== undefined ? m[2].replace(/\\(.)/g, '$1') : m[3];
  return params;
}

// One JSON-RPC message over Streamable HTTP; the answer may be JSON or an SSE stream.
let nextId = 1;
async function rpc(grant, method, params, { notification = false } = {}) {
  const headers = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    // RFC 9449 §7.1: a DPoP-bound token goes with its scheme and the proof for this request.
    authorization: isDpop(grant) ? `DPoP ${grant.token}` : `Bearer ${grant.token}`,
    ...(isDpop(grant) ? { dpop: grant.proof } : {}),
  };
  let body = { jsonrpc: '2.0', method, ...(params === undefined ? {} : { params }) };
  if (STATELESS_WIRES.has(wire)) {
    headers['mcp-protocol-version'] = wire;
    body.params = {
      ...(body.params ?? {}),
      _meta: {
        'io.modelcontextprotocol/protocolVersion': wire,
        'io.modelcontextprotocol/clientInfo': { name: 'mcp-connect-conformance-driver', version: '1.0.0' },
        'io.modelcontextprotocol/clientCapabilities': {},
      },
    };
  } else if (method !== 'initialize') {
    headers['mcp-protocol-version'] = wire;
  }
  const id = notification ? undefined : nextId++;
  if (id !== undefined) body = { ...body, id };
  const res = await fetch(serverUrl, { method: 'POST', headers, body: JSON.stringify(body) });
  const text = await res.text();
  if (verbose) say(`${method} -> ${res.status} ${text.slice(0, 200)}`);
  if (res.status === 401 || res.status === 403) {
    const nonce = res.headers.get('dpop-nonce') ?? undefined;
    return { challenge: { status: res.status, nonce, ...bearerChallenge(res.headers.get('www-authenticate')) } };
  }
  if (notification) {
    if (res.status >= 300) throw new Error(`${method}: HTTP ${res.status} ${text.slice(0, 200)}`);
    return {};
  }
  let message;
  if ((res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    for (const line of text.split('\n')) {
      if (!line.startsWith('data:')) continue;
      try {
        const m = JSON.parse(line.slice(5));
        if (m.id === id) message = m;
      } catch { /* not JSON: skip */ }
    }
  } else {
    try { message = JSON.parse(text); } catch { /* below */ }
  }
  if (!message) throw new Error(`${method}: HTTP ${res.status}, no JSON-RPC answer: ${text.slice(0, 200)}`);
  if (message.error) throw new Error(`${method}: JSON-RPC error ${message.error.code} ${message.error.message}`);
  return { result: message.result };
}

// Sends an MCP request with the current token; on a 401 or 403 challenge asks mcp-connect again
// (force_refresh after a 401, the challenge's scopes as the call's `scopes`), at most MAX_REAUTH times.
// A DPoP-bound token needs a fresh proof for every request (with the server's latest nonce).
async function call(session, method, params, options) {
  let nonceRetried = false;
  for (let attempt = 0; ; ) {
    if (isDpop(session.grant) && session.grant.proofUsed) {
      session.grant = await obtainToken(session.stack, { nonce: session.nonce });
    }
    session.grant.proofUsed = true;
    const answer = await rpc(session.grant, method, params, options);
    if (!answer.challenge) return answer.result;
    const { status, scope, error, nonce } = answer.challenge;
    say(`${method}: HTTP ${status}${error ? ` ${error}` : ''}${scope ? ` scope="${scope}"` : ''}${nonce ? ' with DPoP-Nonce' : ''}`);
    // RFC 9449 §9: the resource server wants its nonce in the proof; ask again with it, once.
    if (error === 'use_dpop_nonce' && nonce && isDpop(session.grant) && !nonceRetried) {
      nonceRetried = true;
      session.nonce = nonce;
      continue;
    }
    if (attempt >= MAX_REAUTH) throw new Error(`${method}: still HTTP ${status} after ${MAX_REAUTH} re-authorizations`);
    attempt++;
    const scopes = scope ? scope.split(' ').filter(Boolean) : undefined;
    const before = session.grant.token;
    session.grant = await obtainToken(session.stack, { scopes, forceRefresh: status === 401, nonce: session.nonce });
    if (session.grant.token === before) throw new Error(`${method}: mcp-connect handed back the refused token`);
  }
}

async function speakMcp(session) {
  if (!STATELESS_WIRES.has(wire)) {
    const init = await call(session, 'initialize', {
      protocolVersion: wire,
      capabilities: {},
      clientInfo: { name: 'mcp-connect-conformance-driver', version: '1.0.0' },
    });
    say(`initialize: server ${init?.serverInfo?.name} at ${init?.protocolVersion}`);
    await call(session, 'notifications/initialized', undefined, { notification: true });
  }
  const list = await call(session, 'tools/list', {});
  const tools = list?.tools ?? [];
  say(`tools/list: ${tools.map((t) => t.name).join(', ') || '(none)'}`);
  if (tools[0]) {
    await call(session, 'tools/call', { name: tools[0].name, arguments: {} });
    say(`tools/call ${tools[0].name}: ok`);
  }
}

async function main() {
  if (!serverUrl) throw new Error('usage: driver.mjs <serverUrl>');
  say(`${scenario} on the ${wire} wire against ${serverUrl}`);
  stage = 'launching the browser';
  await launchBrowser();
  stage = 'starting the peers and mcp-connect';
  const stack = await startStack();
  try {
    stage = 'getting a token from mcp-connect';
    const session = { stack, grant: await obtainToken(stack) };
    stage = 'speaking MCP to the scenario\'s server';
    await speakMcp(session);
  } catch (err) {
    say(`--- last mcp-connect log lines ---\n${logTail(stack.service, verbose ? 60 : 15)}`);
    throw err;
  } finally {
    stage = 'stopping the peers and mcp-connect';
    await stopStack(stack);
  }
}

let code = 0;
try {
  await main();
  say('done');
} catch (err) {
  say(`failed: ${err.message}`);
  code = 1;
}
stage = 'closing the browser';
await closeAll();
// stderr is a pipe to the suite: let it drain before exiting.
await new Promise((resolve) => { process.stderr.write('', resolve); });
process.exit(code);
