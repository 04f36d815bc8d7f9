// End-to-end with the official MCP SDKs as real peers, on loopback, with headless Chromium:
//   - Python SDK client <-> examples/python/server.py (protocol 2026-07-28: InputRequiredResult +
//     requestState), the tool returning data fetched upstream with the stored token;
//   - TypeScript SDK client <-> examples/typescript/server.ts (protocol 2025-11-25:
//     elicitation/create, the -32042 error, notifications/elicitation/complete);
//   - decline and cancel (in the MCP client and on mcp-connect's consent page) end the call
//     cleanly; forged, altered and replayed requestState are refused;
//   - the TypeScript example forwards each call's own MCP access token (one refreshed during
//     the session);
//   - the TypeScript example's whoami_via_proxy: the provider called through mcp-connect's proxy
//     (the token never reaches the example), after the same elicitation/create;
//   - the runnable clients examples/python/client.py and examples/typescript/client.ts against
//     `mcp-connect demo` and the example servers, each connect URL completed with
//     POST /dev/complete (the Python one also calls whoami_via_proxy, the sandbox's whoami
//     through mcp-connect's proxy).
//
//   cargo build && scripts/test   (or: node --test tests/sdk/; DEBUG_EVENTS=1 prints what the
//   Python client saw, E2E_VERBOSE=1 echoes every process)
//
// Needs: the mcp-connect binary, tests/peers/node_modules, Chromium, a Python venv with the
// `mcp` and mcp-connect-client packages (PYTHON, default tests/sdk/.venv/bin/python) and
// examples/typescript/node_modules.
// Tests whose tool is missing are skipped with a message saying how to get it.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { MCP_CLIENT_REDIRECT, startPeers } from '../peers/peers.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = path.resolve(ROOT, process.env.MCP_CONNECT_BIN || 'target/debug/mcp-connect');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const PYTHON = path.resolve(ROOT, process.env.PYTHON || 'tests/sdk/.venv/bin/python');
const TS_DIR = path.join(ROOT, 'examples', 'typescript');
const VERBOSE = process.env.E2E_VERBOSE === '1';
// No step may hang the suite: a client waiting for an answer that never comes fails instead.
const STEP = { timeout: 120_000 };

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });
const toml = (v) => JSON.stringify(v);

// Each user's MCP access token at the example servers: a real JWT from the identity peer for the
// examples' MCP resource (what an MCP client gets by signing its user in). The examples validate
// it against the peer's JWKS and forward it to mcp-connect as `subject_token`, which mcp-connect
// requires from them (`require_subject_token`).
const USERS = ['alice', 'bob', 'carol', 'dave', 'erin', 'frank', 'gina', 'hank', 'ivan', 'judy', 'lena'];
const MCP_RESOURCE = 'https://mcp.example.test/';
const TOKENS = new Map();
const tokenOf = (user) => TOKENS.get(user) ?? assert.fail(`no MCP access token for ${user}`);

// Authorization code + PKCE at the identity peer as an MCP client, with `resource`. The client
// `mcp-client-short` gets tokens that expire after 2 seconds.
async function mcpAccessToken(issuer, user, clientId = 'mcp-client') {
  const jar = new Map();
  const go = async (url, opts = {}) => {
    const r = await fetch(url, { ...opts, redirect: 'manual', headers: { ...(opts.headers ?? {}), cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; ') } });
    for (const c of r.headers.getSetCookie()) { const [kv] = c.split(';'); const i = kv.indexOf('='); jar.set(kv.slice(0, i), kv.slice(i + 1)); }
    return r;
  };
  const verifier = crypto.randomBytes(32).toString('base64url');
  const auth = new URL(`${issuer}/auth`);
  for (const [k, v] of Object.entries({
    response_type: 'code', client_id: clientId, redirect_uri: MCP_CLIENT_REDIRECT, scope: 'openid mcp', state: 's',
    code_challenge: crypto.createHash('sha256').update(verifier).digest('base64url'), code_challenge_method: 'S256', resource: MCP_RESOURCE,
  })) auth.searchParams.set(k, v);
  let r = await go(new URL((await go(auth)).headers.get('location'), issuer));
  const action = (await r.text()).match(/action="([^"]+)"/)[1];
  r = await go(new URL(action, issuer), { method: 'POST', body: new URLSearchParams({ login: user }), headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  let loc = new URL(r.headers.get('location'), issuer);
  for (let i = 0; i < 6 && !loc.href.startsWith(MCP_CLIENT_REDIRECT); i += 1) {
    r = await go(loc);
    loc = new URL(r.headers.get('location'), issuer);
  }
  const t = await (await fetch(`${issuer}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code: loc.searchParams.get('code'), redirect_uri: MCP_CLIENT_REDIRECT, code_verifier: verifier, client_id: clientId, resource: MCP_RESOURCE }),
  })).json();
  assert.ok(t.access_token, JSON.stringify(t));
  return t.access_token;
}

function missing() {
  const why = {};
  if (!fs.existsSync(BIN)) why.all = `mcp-connect binary not found at ${BIN}: run \`cargo build\``;
  else if (!fs.existsSync(CHROMIUM)) why.all = `Chromium not found at ${CHROMIUM}`;
  else if (!fs.existsSync(path.join(ROOT, 'tests/peers/node_modules'))) why.all = 'run `npm ci --prefix tests/peers`';
  const venv = 'python3 -m venv tests/sdk/.venv && tests/sdk/.venv/bin/pip install -r examples/python/requirements.txt';
  if (!fs.existsSync(PYTHON)) why.python = `no Python with the mcp package at ${PYTHON}: ${venv}`;
  else if (spawnSync(PYTHON, ['-c', 'import mcp, mcp_connect_client.mcp_sdk']).status !== 0) why.python = `${PYTHON} lacks mcp or mcp-connect-client: ${venv}`;
  if (!fs.existsSync(path.join(TS_DIR, 'node_modules/mcp-connect-client'))) why.typescript = 'run `npm ci --prefix examples/typescript`';
  return why;
}
const MISSING = missing();
for (const [what, why] of Object.entries(MISSING)) process.stderr.write(`tests/sdk: skipping ${what}: ${why}\n`);

const children = new Set();
const cleanups = [];
let browser;
let stack;

async function freePort() {
  const { port, release } = await reservePort();
  await release();
  return port;
}

// A free loopback port held until `release()`, so that nothing started meanwhile (the OAuth
// peers) is handed it as an ephemeral port of its own (tests/e2e/lib.mjs says more).
function reservePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      resolve({ port, release: () => new Promise((done) => srv.close(() => done())) });
    });
  });
}

// A child process whose output is kept (and echoed with E2E_VERBOSE=1).
function run(label, cmd, args, opts = {}) {
  const child = spawn(cmd, args, { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'], ...opts });
  children.add(child);
  const out = { child, output: '' };
  const collect = (chunk) => {
    const text = chunk.toString('utf8');
    out.output += text;
    if (VERBOSE) process.stderr.write(text.replace(/^(?=.)/gm, `[${label}] `));
  };
  child.stderr.on('data', collect);
  if (!opts.keepStdout) child.stdout.on('data', collect);
  child.on('exit', () => children.delete(child));
  return out;
}

async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

async function waitFor(url, proc, what, ok = (s) => s < 500) {
  const deadline = Date.now() + 60_000;
  let last = 'no answer';
  while (Date.now() < deadline) {
    if (proc.child.exitCode !== null) throw new Error(`${what} exited during start-up:\n${proc.output.slice(-3000)}`);
    try {
      const r = await fetch(url, { signal: AbortSignal.timeout(2000) });
      if (ok(r.status)) return;
      last = `HTTP ${r.status}`;
    } catch (err) { last = err.cause?.code ?? err.message; }
    await sleep(200);
  }
  throw new Error(`${what} never came up at ${url} (${last}):\n${proc.output.slice(-3000)}`);
}

async function startStack() {
  const { port, release } = await reservePort();
  cleanups.push(release);
  const base = `http://127.0.0.1:${port}`;
  const peerLogs = [];
  const peers = await startPeers({ connectUrl: base, log: (l) => { peerLogs.push(l); if (VERBOSE) process.stderr.write(`[peers] ${l}\n`); } });
  cleanups.push(() => peers.close());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-connect-sdk-'));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  const apiKey = crypto.randomBytes(32).toString('base64url');
  const config = path.join(dir, 'mcp-connect.toml');
  fs.writeFileSync(config, `public_url = ${toml(base)}
listen = ${toml(`127.0.0.1:${port}`)}
database_url = ${toml(`sqlite://${dir}/db.sqlite`)}
encryption_keys = [${toml(`k1:${crypto.randomBytes(32).toString('base64')}`)}]
outbound_allow_cidrs = ["127.0.0.0/8"]

[identity]
issuer = ${toml(peers.identity)}
client_id = "mcp-connect"
client_secret = "identity-secret"

[[clients]]
id = "demo-mcp"
name = "Demo MCP"
api_key = ${toml(apiKey)}
providers = ["acme"]
subject_token_audience = ${toml(MCP_RESOURCE)}
require_subject_token = true

[providers.acme]
display_name = "Acme"
issuer = ${toml(peers.upstream)}
client_id = "mcp-connect-upstream"
client_secret = "upstream-secret"
scopes = ["openid", "offline_access", "api"]
# Where /v1/proxy/acme/... goes (the examples' whoami_via_proxy).
api_base_url = ${toml(`${peers.upstream}/api`)}
`, { mode: 0o600 });
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MCP_CONNECT_')));
  await release();
  const service = run('mcp-connect', BIN, ['serve', '--config', config], { env: { ...env, RUST_LOG: 'info,mcp_connect=debug', NO_COLOR: '1' } });
  cleanups.push(() => stop(service.child));
  await waitFor(`${base}/readyz`, service, 'mcp-connect', (s) => s === 200);

  const exampleEnv = {
    ...env,
    MCP_CONNECT_URL: base,
    MCP_CONNECT_API_KEY: apiKey,
    PROVIDER: 'acme',
    PROVIDER_API: `${peers.upstream}/api/whoami`,
    MCP_ISSUER: peers.identity,
    MCP_AUDIENCE: MCP_RESOURCE,
  };
  for (const user of USERS) TOKENS.set(user, await mcpAccessToken(peers.identity, user));
  // As the example server would call it for `user`: with the user's token as proof of subject.
  const api = async (method, p, user) => {
    const r = await fetch(`${base}${p}`, { method, headers: { authorization: `Bearer ${apiKey}`, 'subject-token': tokenOf(user) } });
    return { status: r.status, json: await r.json().catch(() => undefined) };
  };
  return { base, peers, peerLogs, service, exampleEnv, api };
}

before(async () => {
  if (MISSING.all) return;
  const require = createRequire(new URL('../peers/package.json', import.meta.url));
  const { chromium } = require('playwright-core');
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  });
  stack = await startStack();
});

after(async () => {
  await browser?.close().catch(() => {});
  for (const c of cleanups.reverse()) { try { await c(); } catch { /* best effort */ } }
  for (const child of children) child.kill('SIGKILL');
});

// On failure, append what the service and the example server said.
function withLogs(getServer, fn) {
  return async (t) => {
    try { await fn(t); } catch (err) {
      if (err && typeof err.message === 'string' && stack) {
        err.message += `\n--- mcp-connect ---\n${stack.service.output.split('\n').slice(-25).join('\n')}`
          + `\n--- example server ---\n${(getServer()?.output ?? '').slice(-3000)}`
          + `\n--- peers ---\n${stack.peerLogs.slice(-10).join('\n')}`;
      }
      throw err;
    }
  };
}

async function waitForOrigin(page, origin, what) {
  try {
    await page.waitForURL((u) => u.origin === origin, { waitUntil: 'load', timeout: 20_000 });
  } catch (err) {
    const body = await page.locator('body').innerText({ timeout: 1000 }).catch(() => '');
    throw new Error(`expected ${what} (${origin}), the browser is at ${page.url()}:\n${body.slice(0, 500)}`, { cause: err });
  }
}

// The user opens the connect URL: signs in at the identity issuer, then Continue (sign-in and
// Allow at the provider) or Decline on mcp-connect's consent page.
async function userOpens(url, user, choice = 'continue') {
  const context = await browser.newContext();
  const page = await context.newPage();
  try {
    await page.goto(url);
    if (new URL(page.url()).origin === stack.peers.identity) {
      await page.locator('input[name="login"]').fill(user);
      await page.getByRole('button', { name: 'Sign in' }).click();
    }
    await waitForOrigin(page, stack.base, 'mcp-connect consent page');
    if (choice === 'decline') {
      await page.getByRole('button', { name: 'Decline' }).click();
      await page.waitForLoadState('load');
      return;
    }
    await page.getByRole('button', { name: 'Continue' }).click();
    await waitForOrigin(page, stack.peers.upstream, 'the provider login page');
    await page.locator('input[name="login"]').fill(user);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('button', { name: 'Allow' }).click();
    await waitForOrigin(page, stack.base, 'mcp-connect after Allow');
    assert.match(await page.locator('body').innerText(), /connected/i);
  } finally {
    await context.close();
  }
}

function assertConnectUrl(url) {
  assert.ok(url.startsWith(`${stack.base}/connect/`), `a connect URL on mcp-connect: ${url}`);
}

describe('Python SDK client and the Python example server (2026-07-28)', { skip: MISSING.all || MISSING.python }, () => {
  let server;
  let mcpUrl;

  before(async () => {
    const port = await freePort();
    server = run('python server', PYTHON, ['examples/python/server.py', '--port', String(port)], { env: stack.exampleEnv });
    cleanups.push(() => stop(server.child));
    mcpUrl = `http://127.0.0.1:${port}/mcp`;
    await waitFor(mcpUrl, server, 'the Python example server');
  });

  // Runs the official Python client; `onElicit(params)` returns the action to answer with.
  async function pythonClient(args, onElicit) {
    const proc = run('python client', PYTHON, ['tests/sdk/python_client.py', mcpUrl, ...args], { env: process.env, keepStdout: true });
    const events = [];
    const lines = readline.createInterface({ input: proc.child.stdout });
    const pending = [];
    for await (const line of lines) {
      const ev = JSON.parse(line);
      events.push(ev);
      if (ev.event === 'elicit') pending.push(onElicit(ev.params).then(({ action, after: then }) => {
        proc.child.stdin.write(`${action}\n`);
        return then?.();
      }));
      if (ev.event === 'result' || ev.event === 'error') break;
    }
    await Promise.all(pending);
    if (process.env.DEBUG_EVENTS) process.stderr.write(`${JSON.stringify(events)}\n`);
    await stop(proc.child);
    assert.ok(events.length > 0, `the Python client printed nothing:\n${proc.output}`);
    return events;
  }

  test('input required, the browser connects, the retry with requestState returns upstream data', STEP, withLogs(() => server, async () => {
    const asked = [];
    const events = await pythonClient([tokenOf('alice'), 'call'], async (params) => {
      asked.push(params);
      // accept = the user agreed to open the URL; the flow itself finishes after the retry began.
      return { action: 'accept', after: () => userOpens(params.url, 'alice') };
    });
    assert.equal(events[0].protocol, '2026-07-28', 'the SDKs speak 2026-07-28');
    assert.equal(asked.length, 1, `one URL request: ${JSON.stringify(asked)}`);
    assert.equal(asked[0].mode, 'url');
    assertConnectUrl(asked[0].url);
    assert.equal(asked[0].elicitationId, undefined, '2026-07-28 URL requests carry no elicitationId');
    assert.match(asked[0].message, /Acme/);
    const result = events.at(-1);
    assert.equal(result.event, 'result', JSON.stringify(events));
    assert.equal(result.is_error, false, result.text);
    assert.equal(result.text, 'acme says you are alice');
  }));

  for (const [user, action] of [['bob', 'decline'], ['carol', 'cancel']]) {
    test(`${action} in the MCP client ends the tool call cleanly and connects nothing`, STEP, withLogs(() => server, async () => {
      const events = await pythonClient([tokenOf(user), 'call'], async () => ({ action }));
      const result = events.at(-1);
      assert.equal(result.event, 'result', JSON.stringify(events));
      assert.equal(result.is_error, false);
      assert.equal(result.text, `Not connected to acme: you chose to ${action}.`);
      const list = await stack.api('GET', `/v1/connections?subject=${user}`, user);
      assert.deepEqual(list.json.connections, []);
    }));
  }

  test('Decline on the consent page ends the retried call with "declined"', STEP, withLogs(() => server, async () => {
    const events = await pythonClient([tokenOf('dave'), 'call'], async (params) => (
      { action: 'accept', after: () => userOpens(params.url, 'dave', 'decline') }));
    const result = events.at(-1);
    assert.equal(result.event, 'result', JSON.stringify(events));
    assert.equal(result.text, 'Not connected to acme: you declined.');
  }));

  test('forged, altered and replayed requestState are refused', STEP, withLogs(() => server, async () => {
    const events = await pythonClient([tokenOf('erin'), 'forged', tokenOf('frank')], async () => ({ action: 'cancel' }));
    const r = events.at(-1);
    assert.equal(r.event, 'result', JSON.stringify(events));
    assert.equal(r.first, 'InputRequiredResult');
    for (const kind of ['forged', 'altered', 'replayed']) {
      assert.equal(r[kind].refused, true, `${kind} requestState refused: ${JSON.stringify(r[kind])}`);
      assert.notEqual(r[kind].kind, 'InputRequiredResult', `${kind}: no new round on a bad state`);
    }
    for (const user of ['erin', 'frank']) {
      const list = await stack.api('GET', `/v1/connections?subject=${user}`, user);
      assert.deepEqual(list.json.connections, [], `${user} is not connected`);
    }
  }));
});

describe('TypeScript SDK client and the TypeScript example server (2025-11-25)', { skip: MISSING.all || MISSING.typescript }, () => {
  let server;
  let mcpUrl;
  let sdk;

  before(async () => {
    const port = await freePort();
    const tsx = path.join(TS_DIR, 'node_modules/.bin/tsx');
    server = run('ts server', tsx, [path.join(TS_DIR, 'server.ts')], { env: { ...stack.exampleEnv, PORT: String(port) } });
    cleanups.push(() => stop(server.child));
    mcpUrl = `http://127.0.0.1:${port}/mcp`;
    await waitFor(mcpUrl, server, 'the TypeScript example server', (s) => s === 401);
    const require = createRequire(path.join(TS_DIR, 'package.json'));
    sdk = {
      ...require('@modelcontextprotocol/sdk/client/index.js'),
      ...require('@modelcontextprotocol/sdk/client/streamableHttp.js'),
      ...require('@modelcontextprotocol/sdk/types.js'),
    };
  });

  // The official client, declaring URL elicitation; `onElicit(params)` answers elicitation/create.
  async function tsClient(user, onElicit) {
    const client = new sdk.Client({ name: 'sdk-e2e', version: '0.0.0' }, { capabilities: { elicitation: { url: {} } } });
    const asked = [];
    const completed = [];
    const followUps = [];
    client.setRequestHandler(sdk.ElicitRequestSchema, async (req) => {
      asked.push(req.params);
      const { action, after: then } = await onElicit(req.params);
      if (then) followUps.push(then());
      return { action };
    });
    client.setNotificationHandler(sdk.ElicitationCompleteNotificationSchema, (n) => { completed.push(n.params.elicitationId); });
    const transport = new sdk.StreamableHTTPClientTransport(new URL(mcpUrl), {
      requestInit: { headers: { authorization: `Bearer ${tokenOf(user)}` } },
    });
    await client.connect(transport);
    return { client, transport, asked, completed, followUps };
  }

  const textOf = (r) => r.content.map((c) => c.text).join('');

  test('elicitation/create, the browser connects, the completion notification arrives, upstream data returns', STEP, withLogs(() => server, async () => {
    const c = await tsClient('gina', async (params) => ({ action: 'accept', after: () => userOpens(params.url, 'gina') }));
    try {
      assert.equal(c.transport.protocolVersion, '2025-11-25');
      const result = await c.client.callTool({ name: 'whoami', arguments: {} }, undefined, { timeout: 90_000 });
      await Promise.all(c.followUps);
      assert.equal(textOf(result), 'acme says you are gina');
      assert.equal(c.asked.length, 1);
      assert.equal(c.asked[0].mode, 'url');
      assertConnectUrl(c.asked[0].url);
      assert.ok(c.asked[0].elicitationId, '2025-11-25 URL requests carry an elicitationId');
      assert.match(c.asked[0].message, /Acme/);
      for (let i = 0; i < 50 && c.completed.length === 0; i += 1) await sleep(100);
      assert.deepEqual(c.completed, [c.asked[0].elicitationId], 'notifications/elicitation/complete reached the client');
    } finally { await c.client.close(); }
  }));

  for (const [user, action] of [['hank', 'decline'], ['ivan', 'cancel']]) {
    test(`${action} of elicitation/create ends the tool call cleanly`, STEP, withLogs(() => server, async () => {
      const c = await tsClient(user, async () => ({ action }));
      try {
        const result = await c.client.callTool({ name: 'whoami', arguments: {} });
        assert.equal(textOf(result), `Not connected to acme: you chose to ${action}.`);
        assert.ok(!result.isError);
        assert.deepEqual(c.completed, []);
      } finally { await c.client.close(); }
    }));
  }

  test('whoami_via_proxy: elicitation/create, the browser connects, the answer comes through the proxy; then at once', STEP, withLogs(() => server, async () => {
    const c = await tsClient('lena', async (params) => ({ action: 'accept', after: () => userOpens(params.url, 'lena') }));
    try {
      const result = await c.client.callTool({ name: 'whoami_via_proxy', arguments: {} }, undefined, { timeout: 90_000 });
      await Promise.all(c.followUps);
      assert.equal(textOf(result), "acme says you are lena (through mcp-connect's proxy)");
      assert.ok(!result.isError);
      assert.equal(c.asked.length, 1, 'asked to connect once');
      assertConnectUrl(c.asked[0].url);
      for (let i = 0; i < 50 && c.completed.length === 0; i += 1) await sleep(100);
      assert.deepEqual(c.completed, [c.asked[0].elicitationId], 'notifications/elicitation/complete reached the client');
      const again = await c.client.callTool({ name: 'whoami_via_proxy', arguments: {} });
      assert.equal(textOf(again), "acme says you are lena (through mcp-connect's proxy)");
      assert.equal(c.asked.length, 1, 'connected: not asked again');
      // The call went through mcp-connect's proxy, counted by provider and status class.
      const metrics = await (await fetch(`${stack.base}/metrics`)).text();
      assert.match(metrics, /mcp_connect_proxy_requests_total\{provider="acme",class="2xx"\} [1-9]/, 'the proxy was used');
    } finally { await c.client.close(); }
  }));

  test('-32042 carries the URL; mcp-connect\'s event stream drives the completion notification; the retry succeeds', STEP, withLogs(() => server, async () => {
    const c = await tsClient('judy', async () => { throw new Error('no elicitation/create expected'); });
    try {
      let err;
      try { await c.client.callTool({ name: 'whoami_later', arguments: {} }); } catch (e) { err = e; }
      assert.ok(err, 'the first call fails');
      assert.equal(err.code, -32042, `URLElicitationRequiredError: ${err}`);
      const [params] = err.data.elicitations;
      assert.equal(params.mode, 'url');
      assertConnectUrl(params.url);
      assert.ok(params.elicitationId);
      assert.match(params.message, /Acme/);
      await userOpens(params.url, 'judy');
      for (let i = 0; i < 100 && c.completed.length === 0; i += 1) await sleep(100);
      assert.deepEqual(c.completed, [params.elicitationId], 'notifications/elicitation/complete reached the client');
      const result = await c.client.callTool({ name: 'whoami_later', arguments: {} });
      assert.equal(textOf(result), 'acme says you are judy');
    } finally { await c.client.close(); }
  }));

  test('each call forwards its own MCP token: after the client refreshes an expired one, mcp-connect sees the new one', STEP, withLogs(() => server, async () => {
    let bearer = await mcpAccessToken(stack.peers.identity, 'kim', 'mcp-client-short');
    // The client's token changes during the session, as an SDK client's auth provider does it.
    const client = new sdk.Client({ name: 'sdk-e2e', version: '0.0.0' }, { capabilities: { elicitation: { url: {} } } });
    const transport = new sdk.StreamableHTTPClientTransport(new URL(mcpUrl), {
      fetch: (url, init) => {
        const headers = new Headers(init?.headers);
        headers.set('authorization', `Bearer ${bearer}`);
        return fetch(url, { ...init, headers });
      },
    });
    await client.connect(transport);
    try {
      // The session's first token lives 2 s; mcp-connect allows 5 s of clock skew.
      await sleep(8000);
      bearer = await mcpAccessToken(stack.peers.identity, 'kim');
      let err;
      let result;
      try { result = await client.callTool({ name: 'whoami_later', arguments: {} }); } catch (e) { err = e; }
      // mcp-connect took the refreshed token as proof of kim and answered "connect first";
      // with the session's first token it would have refused it as expired.
      assert.equal(err?.code, -32042, `expected -32042, got ${err ?? JSON.stringify(result)}`);
      assertConnectUrl(err.data.elicitations[0].url);
    } finally { await client.close(); }
  }));
});

// The runnable example clients (examples/*/client.*) as an author runs them against
// `mcp-connect demo`, with POST /dev/complete in place of the person at the browser.
describe('the example clients against the demo, each connect URL completed with POST /dev/complete', { skip: MISSING.all }, () => {
  let base;
  let apiKey;

  before(async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-connect-sdk-demo-'));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MCP_CONNECT_')));
    const demo = run('demo', BIN, ['demo', '--port', '0', '--data-dir', path.join(dir, 'demo-data')], { env: { ...env, NO_COLOR: '1' }, keepStdout: true });
    cleanups.push(() => stop(demo.child));
    const banner = await new Promise((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`no banner within 60 s:\n${out}\n${demo.output}`)), 60_000);
      demo.child.stdout.on('data', (chunk) => {
        out += chunk.toString('utf8');
        if (out.includes('Ctrl-C')) { clearTimeout(timer); resolve(out); }
      });
      demo.child.once('exit', () => reject(new Error(`the demo exited:\n${out}\n${demo.output}`)));
    });
    base = /mcp-connect demo is running at (\S+)/.exec(banner)[1];
    apiKey = /API key of the MCP server "demo-mcp": (\S+)/.exec(banner)[1];
  });

  // What docs/mcp-integration.md tells an author to start the example servers with.
  const serverEnv = () => ({
    ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MCP_CONNECT_'))),
    MCP_CONNECT_URL: base,
    MCP_CONNECT_API_KEY: apiKey,
    PROVIDER: 'sandbox',
    PROVIDER_API: `${base}/dev/sandbox/api/whoami`,
    MCP_ISSUER: `${base}/dev/issuer`,
    MCP_AUDIENCE: 'http://127.0.0.1:8765/mcp',
  });

  async function demoToken(user) {
    const r = await fetch(`${base}/dev/issuer/mcp-token`, { method: 'POST', body: new URLSearchParams({ user }) });
    const t = await r.json();
    assert.equal(r.status, 200, JSON.stringify(t));
    return t.access_token;
  }

  // Runs an example client as `user`: each URL it prints is completed with POST /dev/complete,
  // then Enter is pressed, as the client asks its user to.
  async function runClient(label, cmd, args, user) {
    const proc = run(label, cmd, args, { env: { ...process.env, MCP_TOKEN: await demoToken(user) }, keepStdout: true });
    const exited = new Promise((resolve) => { proc.child.once('exit', (code) => resolve(code)); });
    const lines = [];
    const completed = [];
    for await (const line of readline.createInterface({ input: proc.child.stdout })) {
      lines.push(line);
      const url = /^Open: (\S+)$/.exec(line)?.[1];
      if (!url) continue;
      const r = await fetch(`${base}/dev/complete`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ url, user }),
      });
      completed.push({ status: r.status, body: await r.json() });
      proc.child.stdin.write('\n');
    }
    const code = await exited;
    assert.equal(code, 0, `${label} failed:\n${lines.join('\n')}\n${proc.output}`);
    assert.equal(completed.length, 1, `one URL to open:\n${lines.join('\n')}`);
    assert.equal(completed[0].status, 200, JSON.stringify(completed[0].body));
    assert.equal(completed[0].body.status, 'completed', JSON.stringify(completed[0].body));
    return lines;
  }

  test('examples/python/client.py: the URL, then the tool\'s answer, then the same call at once, then through the proxy', { ...STEP, skip: MISSING.python }, withLogs(() => null, async () => {
    const port = await freePort();
    const server = run('python server', PYTHON, ['examples/python/server.py', '--port', String(port)], { env: serverEnv() });
    cleanups.push(() => stop(server.child));
    await waitFor(`http://127.0.0.1:${port}/mcp`, server, 'the Python example server');
    const lines = await runClient('python client', PYTHON, ['examples/python/client.py', `http://127.0.0.1:${port}/mcp`], 'alice');
    assert.ok(lines.includes('whoami: sandbox says you are alice'), lines.join('\n'));
    assert.ok(lines.includes('whoami again: sandbox says you are alice'), lines.join('\n'));
    // The same question through mcp-connect's proxy (the sandbox's /api/whoami below its
    // api_base_url), answered for the same user without a second URL.
    assert.ok(lines.includes("whoami_via_proxy: sandbox says you are alice (through mcp-connect's proxy)"), lines.join('\n'));
    await stop(server.child);
  }));

  for (const [tool, user, how] of [['whoami_later', 'bob', ''], ['whoami', 'carol', ''], ['whoami_via_proxy', 'dave', " (through mcp-connect's proxy)"]]) {
    test(`examples/typescript/client.ts with ${tool}: the URL, then the tool's answer, then the same call at once`, { ...STEP, skip: MISSING.typescript }, withLogs(() => null, async () => {
      const port = await freePort();
      const tsx = path.join(TS_DIR, 'node_modules/.bin/tsx');
      const server = run('ts server', tsx, [path.join(TS_DIR, 'server.ts')], { env: { ...serverEnv(), PORT: String(port) } });
      cleanups.push(() => stop(server.child));
      await waitFor(`http://127.0.0.1:${port}/mcp`, server, 'the TypeScript example server', (s) => s === 401);
      const lines = await runClient('ts client', tsx, [path.join(TS_DIR, 'client.ts'), `http://127.0.0.1:${port}/mcp`, tool], user);
      assert.ok(lines.includes(`${tool}: sandbox says you are ${user}${how}`), lines.join('\n'));
      assert.ok(lines.includes(`${tool} again: sandbox says you are ${user}${how}`), lines.join('\n'));
      await stop(server.child);
    }));
  }
});
