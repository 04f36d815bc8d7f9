// End-to-end: headless Chromium drives the real mcp-connect binary against real OIDC/OAuth peers
// (tests/peers, oidc-provider), once on SQLite and once on a fresh PostgreSQL database.
//
//   cargo build && (cd tests/peers && npm ci) && node --test tests/e2e/
//
// Environment:
//   MCP_CONNECT_BIN     binary to test (default target/debug/mcp-connect)
//   CHROMIUM            browser executable (default /usr/bin/chromium)
//   E2E_POSTGRES_URL    server URL without database (default postgres://postgres@127.0.0.1:5432)
//   E2E_DATABASES       comma list to run, default "sqlite,postgres"
//   E2E_RUST_LOG        RUST_LOG for the service (default "info,mcp_connect=debug")
//   E2E_VERBOSE=1       echo service and peer logs to stderr as they arrive

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { startPeers } from '../peers/peers.mjs';

// playwright-core is installed with the peers (tests/peers/package.json).
const require = createRequire(new URL('../peers/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = path.resolve(ROOT, process.env.MCP_CONNECT_BIN || 'target/debug/mcp-connect');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const PG_URL = (process.env.E2E_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432').replace(/\/+$/, '');
const DATABASES = (process.env.E2E_DATABASES || 'sqlite,postgres').split(',').map((s) => s.trim()).filter(Boolean);
const VERBOSE = process.env.E2E_VERBOSE === '1';
// Screenshots of the pages go to docs/screenshots/ only when asked (UPDATE_SCREENSHOTS=1), so a
// test run leaves the working tree clean.
const SCREENSHOTS = process.env.UPDATE_SCREENSHOTS === '1'
  ? path.join(ROOT, 'docs', 'screenshots')
  : path.join(os.tmpdir(), 'mcp-connect-screenshots');
const STEP_TIMEOUT = 20_000;

const IDENTITY_SECRET = 'identity-secret';
const UPSTREAM_SECRET = 'upstream-secret';

const children = new Set();
const cleanups = [];
let browser;

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function tcpReachable(host, port, timeoutMs = 1000) {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok) => { socket.destroy(); resolve(ok); };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

const toml = (value) => JSON.stringify(value);  // a JSON string is a valid TOML basic string

function writeConfig(dir, { port, databaseUrl, encryptionKey, apiKey, identity, upstream }) {
  const file = path.join(dir, 'mcp-connect.toml');
  fs.writeFileSync(file, `public_url = ${toml(`http://127.0.0.1:${port}`)}
listen = ${toml(`127.0.0.1:${port}`)}
database_url = ${toml(databaseUrl)}
encryption_keys = [${toml(`k1:${encryptionKey}`)}]

[identity]
issuer = ${toml(identity)}
client_id = "mcp-connect"
client_secret = ${toml(IDENTITY_SECRET)}

[[clients]]
id = "demo-mcp"
api_key = ${toml(apiKey)}
providers = ["acme"]

[providers.acme]
issuer = ${toml(upstream)}
client_id = "mcp-connect-upstream"
client_secret = ${toml(UPSTREAM_SECRET)}
scopes = ["openid", "offline_access", "api"]
`, { mode: 0o600 });
  return file;
}

// Runs the binary with its output captured; the environment carries no MCP_CONNECT_* overrides.
function startService(configFile, label) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MCP_CONNECT_')));
  env.RUST_LOG = process.env.E2E_RUST_LOG || 'info,mcp_connect=debug';
  env.NO_COLOR = '1';
  const child = spawn(BIN, ['serve', '--config', configFile], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  const service = { child, output: '', exited: null };
  const collect = (chunk) => {
    const text = chunk.toString('utf8');
    service.output += text;
    if (VERBOSE) process.stderr.write(text.replace(/^(?=.)/gm, `[mcp-connect ${label}] `));
  };
  child.stdout.on('data', collect);
  child.stderr.on('data', collect);
  child.on('exit', (code, signal) => {
    service.exited = { code, signal };
    children.delete(child);
  });
  child.on('error', (err) => {
    service.exited = { error: err.message };
    children.delete(child);
  });
  return service;
}

async function stopChild(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

function logTail(service, lines = 40) {
  return service.output.split('\n').slice(-lines).join('\n');
}

async function waitReady(base, service, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer';
  while (Date.now() < deadline) {
    if (service.exited) {
      throw new Error(`mcp-connect exited during start-up (${JSON.stringify(service.exited)}):\n${logTail(service)}`);
    }
    try {
      const res = await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(2000) });
      if (res.status === 200) return;
      last = `HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`;
    } catch (err) {
      last = err.cause?.code ?? err.message;
    }
    await sleep(200);
  }
  throw new Error(`GET /readyz never answered 200 (last: ${last}):\n${logTail(service)}`);
}

// Starts peers + mcp-connect for one database; returns everything a test needs.
async function startStack(kind) {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const peerLogs = [];
  const peers = await startPeers({
    connectUrl: base,
    providerName: 'acme',
    log: (line) => {
      peerLogs.push(line);
      if (VERBOSE) process.stderr.write(`[peers ${kind}] ${line}\n`);
    },
  });
  cleanups.push(() => peers.close());

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `mcp-connect-e2e-${kind}-`));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  let databaseUrl;
  let dropDatabase = () => {};
  if (kind === 'sqlite') {
    databaseUrl = `sqlite://${dir}/db.sqlite`;
  } else {
    const name = `mcp_connect_e2e_${crypto.randomBytes(6).toString('hex')}`;
    databaseUrl = `${PG_URL}/${name}`;
    dropDatabase = () => {
      const u = new URL(PG_URL);
      spawnSync('psql', [
        '-h', u.hostname, '-p', u.port || '5432', '-U', decodeURIComponent(u.username || 'postgres'), '-d', 'postgres',
        '-c', `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`,
      ], { stdio: 'ignore', env: { ...process.env, PGPASSWORD: decodeURIComponent(u.password || '') } });
    };
  }

  const secrets = {
    apiKey: crypto.randomBytes(32).toString('base64url'),
    encryptionKey: crypto.randomBytes(32).toString('base64'),
  };
  const configFile = writeConfig(dir, {
    port, databaseUrl, ...secrets, identity: peers.identity, upstream: peers.upstream,
  });
  const service = startService(configFile, kind);
  // Registered after the database cleanup so they run first (cleanups run in reverse).
  cleanups.push(dropDatabase);
  cleanups.push(() => stopChild(service.child));
  await waitReady(base, service);

  const api = async (method, p, body) => {
    const res = await fetch(`${base}${p}`, {
      method,
      headers: {
        authorization: `Bearer ${secrets.apiKey}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let json;
    try { json = JSON.parse(text); } catch { json = undefined; }
    return { status: res.status, json, text };
  };

  return { kind, base, peers, peerLogs, service, secrets, api, databaseUrl };
}

// Tracks the status of the last main-frame document load of a page.
function trackDocuments(page) {
  const state = { last: null };
  page.on('response', async (res) => {
    const req = res.request();
    if (req.isNavigationRequest() && req.frame() === page.mainFrame()) {
      state.last = { url: res.url(), status: res.status() };
      if (VERBOSE) {
        const origin = req.method() === 'POST' ? ` Origin: ${(await req.allHeaders()).origin ?? '(none)'}` : '';
        process.stderr.write(`[browser] ${req.method()} ${res.url().split('?')[0]}${origin} -> ${res.status()}\n`);
      }
    }
  });
  return state;
}

async function newPage() {
  const context = await browser.newContext({ viewport: { width: 1000, height: 800 } });
  context.setDefaultTimeout(STEP_TIMEOUT);
  context.setDefaultNavigationTimeout(STEP_TIMEOUT);
  const page = await context.newPage();
  const docs = trackDocuments(page);
  return { context, page, docs };
}

const originOf = (url) => new URL(url).origin;

// Runs a test body; on failure, appends the last service and peer log lines to the error.
function withLogs(getStack, fn) {
  return async (t) => {
    try {
      await fn(t);
    } catch (err) {
      const stack = getStack();
      if (stack && err && typeof err.message === 'string') {
        err.message += `\n--- last mcp-connect log lines ---\n${logTail(stack.service, 25)}`
          + `\n--- last peer log lines ---\n${stack.peerLogs.slice(-15).join('\n')}`;
      }
      throw err;
    }
  };
}

async function waitForOrigin(page, origin, what) {
  try {
    await page.waitForURL((u) => u.origin === origin, { waitUntil: 'load' });
  } catch (err) {
    const text = await page.locator('body').innerText({ timeout: 1000 }).catch(() => '');
    throw new Error(`expected to reach ${what} (${origin}) but the browser is at ${page.url()}${
      page.url().startsWith('chrome-error:') ? ' (a network error: did a server die?)' : ''}:\n${text.slice(0, 600)}`, { cause: err });
  }
}

async function signIn(page, issuer, user, what) {
  await waitForOrigin(page, issuer, what);
  await page.locator('input[name="login"]').fill(user);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

// From a connect URL to mcp-connect's consent page, signing in at the identity issuer if asked.
async function openConnectUrl(stack, page, url, user) {
  await page.goto(url);
  if (originOf(page.url()) === stack.peers.identity) {
    await signIn(page, stack.peers.identity, user, 'the identity login page');
  }
  await waitForOrigin(page, stack.base, 'mcp-connect after identity sign-in');
}

async function createElicitation(stack, subject) {
  const res = await stack.api('POST', '/v1/elicitations', { subject, provider: 'acme' });
  assert.equal(res.status, 201, `POST /v1/elicitations for ${subject}: ${res.status} ${res.text}`);
  assert.equal(res.json.status, 'pending');
  assert.ok(res.json.id, 'elicitation has an id');
  assert.ok(res.json.url.startsWith(`${stack.base}/connect/`), `connect URL on public_url: ${res.json.url}`);
  return res.json;
}

async function elicitationStatus(stack, id, wait = 0) {
  const res = await stack.api('GET', `/v1/elicitations/${encodeURIComponent(id)}${wait ? `?wait=${wait}` : ''}`);
  assert.equal(res.status, 200, `GET /v1/elicitations/${id}: ${res.status} ${res.text}`);
  return res.json;
}

before(async () => {
  assert.ok(fs.existsSync(BIN), `mcp-connect binary not found at ${BIN}: run \`cargo build\` or set MCP_CONNECT_BIN`);
  assert.ok(fs.existsSync(CHROMIUM), `Chromium not found at ${CHROMIUM}: install it or set CHROMIUM`);
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic',
    ],
  });
});

after(async () => {
  await browser?.close().catch(() => {});
  for (const cleanup of cleanups.reverse()) {
    try { await cleanup(); } catch { /* best effort */ }
  }
  for (const child of children) child.kill('SIGKILL');
});

for (const kind of ['sqlite', 'postgres']) {
  describe(`browser flow on ${kind}`, { skip: !DATABASES.includes(kind) && `E2E_DATABASES=${DATABASES.join(',')}` }, () => {
    let stack;
    let alice;            // alice's browser context, signed in at mcp-connect after the first test
    let aliceToken;       // access token returned by /v1/tokens
    let pendingForAlice;  // elicitation id left pending by the phishing attempt

    before(async () => {
      if (kind === 'postgres') {
        const u = new URL(PG_URL);
        if (!(await tcpReachable(u.hostname, Number(u.port || 5432)))) {
          throw new Error(`PostgreSQL not reachable at ${PG_URL} (set E2E_DATABASES=sqlite to skip it)`);
        }
      }
      stack = await startStack(kind);
    });

    after(async () => {
      await alice?.context.close().catch(() => {});
      if (stack) await stopChild(stack.service.child);
    });

    test('user connects: identity sign-in, consent, upstream sign-in and Allow, then tokens work', withLogs(() => stack, async () => {
      const elicitation = await createElicitation(stack, 'alice');
      alice = await newPage();
      const { page, docs } = alice;

      await openConnectUrl(stack, page, elicitation.url, 'alice');
      const cont = page.getByRole('button', { name: 'Continue' });
      await cont.waitFor();
      assert.equal(docs.last?.status, 200, `consent page status (${docs.last?.url})`);
      const consentText = await page.locator('body').innerText();
      assert.match(consentText, /demo-mcp/, 'consent page names the MCP client');
      assert.match(consentText, /acme/i, 'consent page names the provider');
      for (const scope of ['openid', 'offline_access', 'api']) {
        assert.ok(consentText.includes(scope), `consent page lists scope ${scope}`);
      }
      assert.equal(await page.getByRole('button', { name: 'Decline' }).count(), 1, 'consent page has Decline');
      if (kind === 'sqlite') await page.screenshot({ path: path.join(SCREENSHOTS, 'consent.png'), fullPage: true });

      await cont.click();
      await signIn(page, stack.peers.upstream, 'alice', 'the upstream login page');
      await page.getByRole('button', { name: 'Allow' }).click();
      await waitForOrigin(page, stack.base, 'mcp-connect after upstream consent');
      await page.waitForLoadState('load');
      assert.equal(docs.last?.status, 200, `done page status (${docs.last?.url}): ${(await page.content()).slice(0, 500)}`);

      const status = await elicitationStatus(stack, elicitation.id, 10);
      assert.equal(status.status, 'completed', JSON.stringify(status));
      assert.ok(status.connection_id, 'completed elicitation names its connection');

      const tok = await stack.api('POST', '/v1/tokens', { subject: 'alice', provider: 'acme' });
      assert.equal(tok.status, 200, `POST /v1/tokens: ${tok.text}`);
      assert.ok(tok.json.access_token, 'access_token returned');
      assert.equal(tok.json.connection_id, status.connection_id);
      aliceToken = tok.json.access_token;
      assert.ok(stack.peers.upstreamIssued.access_token.includes(aliceToken), 'the token is one the upstream issued');

      const me = await fetch(`${stack.peers.upstream}/api/whoami`, { headers: { authorization: `Bearer ${aliceToken}` } });
      assert.equal(me.status, 200);
      assert.equal((await me.json()).sub, 'alice');
      assert.equal(stack.peers.upstreamStats.authorization_code, 1, 'one code redeemed upstream');
    }));

    test('a browser signed in as bob is refused on alice\'s connect URL and nothing changes', withLogs(() => stack, async (t) => {
      if (!aliceToken) { t.skip('needs the first test to pass'); return; }
      const elicitation = await createElicitation(stack, 'alice');
      pendingForAlice = elicitation.id;
      const codesBefore = stack.peers.upstreamStats.authorization_code;
      const bob = await newPage();
      try {
        const { page, docs } = bob;
        await openConnectUrl(stack, page, elicitation.url, 'bob');
        await page.waitForLoadState('load');
        assert.equal(docs.last?.status, 403, `refusal status (${docs.last?.url})`);
        assert.equal(await page.getByRole('button', { name: 'Continue' }).count(), 0, 'no Continue button');
        const text = await page.locator('body').innerText();
        assert.ok(!/alice/i.test(text), `the refusal reveals nothing about the other user:\n${text}`);
        if (kind === 'sqlite') await page.screenshot({ path: path.join(SCREENSHOTS, 'refused.png'), fullPage: true });

        // Reloading (now with bob's session, no sign-in round trip) is refused just the same.
        const again = await page.goto(elicitation.url);
        assert.equal(again.status(), 403, 'refused at /connect with an existing session');
      } finally {
        await bob.context.close();
      }

      assert.equal((await elicitationStatus(stack, elicitation.id)).status, 'pending', 'alice\'s elicitation is untouched');
      const bobToken = await stack.api('POST', '/v1/tokens', { subject: 'bob', provider: 'acme' });
      assert.equal(bobToken.json?.error, 'not_connected', `bob has no connection: ${bobToken.status} ${bobToken.text}`);
      assert.ok(bobToken.status >= 400 && bobToken.status < 500, `not_connected is a 4xx: ${bobToken.status}`);
      assert.equal(stack.peers.upstreamStats.authorization_code, codesBefore, 'no upstream flow ran');
      const aliceStill = await stack.api('POST', '/v1/tokens', { subject: 'alice', provider: 'acme' });
      assert.equal(aliceStill.status, 200, `alice's connection still works: ${aliceStill.text}`);
    }));

    test('Decline on the consent page declines the elicitation', withLogs(() => stack, async (t) => {
      if (!alice || !pendingForAlice) { t.skip('needs the earlier tests to pass'); return; }
      const elicitation = await createElicitation(stack, 'alice');
      assert.equal(elicitation.id, pendingForAlice, 'the still-pending elicitation is reused');
      const { page, docs } = alice;
      await openConnectUrl(stack, page, elicitation.url, 'alice');
      await page.getByRole('button', { name: 'Decline' }).click();
      await page.waitForLoadState('load');
      assert.equal(originOf(page.url()), stack.base, 'declining stays on mcp-connect');
      assert.ok(docs.last?.status < 400, `decline page status ${docs.last?.status}`);
      assert.equal(await page.getByRole('button', { name: 'Continue' }).count(), 0);
      const status = await elicitationStatus(stack, elicitation.id, 10);
      assert.equal(status.status, 'declined', JSON.stringify(status));
    }));

    test('no secret, token or code appears in the service logs', () => {
      assert.ok(stack, 'service started');
      const logs = stack.service.output;
      assert.ok(logs.length > 0, 'the service logged something');
      const secrets = {
        'API key': stack.secrets.apiKey,
        'encryption key': stack.secrets.encryptionKey,
        'identity client secret': IDENTITY_SECRET,
        'upstream client secret': UPSTREAM_SECRET,
      };
      if (aliceToken) secrets['access token from /v1/tokens'] = aliceToken;
      for (const [label, values] of [
        ['upstream access token', stack.peers.upstreamIssued.access_token],
        ['upstream refresh token', stack.peers.upstreamIssued.refresh_token],
        ['upstream authorization code', stack.peers.upstreamIssued.authorization_code],
        ['identity access token', stack.peers.identityIssued.access_token],
        ['identity authorization code', stack.peers.identityIssued.authorization_code],
      ]) {
        values.forEach((v, i) => { secrets[`${label} #${i + 1}`] = v; });
      }
      const redact = (line) => Object.entries(secrets)
        .reduce((acc, [label, v]) => (v ? acc.replaceAll(v, `<${label}>`) : acc), line);
      const leaks = Object.entries(secrets)
        .filter(([, v]) => v && logs.includes(v))
        .map(([label, v]) => `${label} in: ${redact(logs.split('\n').find((l) => l.includes(v))).slice(0, 400)}`);
      assert.deepEqual(leaks, [], `secrets found in the service logs:\n${leaks.join('\n')}`);
    });
  });
}
