// Shared pieces of the browser end-to-end tests: starting the peers and the real binary on a
// fresh SQLite or PostgreSQL database, a headless Chromium, and page helpers.
// (browser.test.mjs predates this module and still carries its own copies.)

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

import { startPeers } from '../peers/peers.mjs';

// playwright-core is installed with the peers (tests/peers/package.json).
const require = createRequire(new URL('../peers/package.json', import.meta.url));
const { chromium } = require('playwright-core');

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BIN = path.resolve(ROOT, process.env.MCP_CONNECT_BIN || 'target/debug/mcp-connect');
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const PG_URL = (process.env.E2E_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432').replace(/\/+$/, '');
export const DATABASES = (process.env.E2E_DATABASES || 'sqlite,postgres').split(',').map((s) => s.trim()).filter(Boolean);
export const VERBOSE = process.env.E2E_VERBOSE === '1';
// Screenshots of the pages go to docs/screenshots/ only when asked (UPDATE_SCREENSHOTS=1), so a
// test run leaves the working tree clean.
export const SCREENSHOTS = process.env.UPDATE_SCREENSHOTS === '1'
  ? path.join(ROOT, 'docs', 'screenshots')
  : path.join(os.tmpdir(), 'mcp-connect-screenshots');
export const STEP_TIMEOUT = 20_000;

export const IDENTITY_SECRET = 'identity-secret';
export const UPSTREAM_SECRET = 'upstream-secret';

const children = new Set();
const cleanups = [];
let browser;

/** Launches the shared headless Chromium (once per test file). */
export async function launchBrowser() {
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
}

/** Closes the browser, runs every cleanup (newest first), kills leftover children. */
export async function closeAll() {
  // A browser that does not close in 10 s is left to Playwright, which kills it when this
  // process exits: a hung close must not hang the run.
  let timer;
  await Promise.race([
    browser?.close().catch(() => {}),
    new Promise((resolve) => { timer = setTimeout(resolve, 10_000); }),
  ]);
  clearTimeout(timer);
  for (const cleanup of cleanups.reverse()) {
    try { await cleanup(); } catch { /* best effort */ }
  }
  for (const child of children) child.kill('SIGKILL');
}

export const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

export async function freePort() {
  const { port, release } = await reservePort();
  await release();
  return port;
}

// A free loopback port, held until `release()`. Whatever starts between choosing a port and
// binding it (the OAuth peers, their outgoing connections) takes ephemeral ports of its own,
// and could be handed that very port: mcp-connect then fails to start with "Address already in
// use". Held, it is only free for the moment mcp-connect takes to start.
export function reservePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      resolve({ port, release: () => new Promise((done) => srv.close(() => done())) });
    });
  });
}

export function tcpReachable(host, port, timeoutMs = 1000) {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok) => { socket.destroy(); resolve(ok); };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export const toml = (value) => JSON.stringify(value);  // a JSON string is a valid TOML basic string

export function writeConfig(dir, { port, databaseUrl, encryptionKey, apiKey, identity, upstream, extraToml = '' }) {
  const file = path.join(dir, 'mcp-connect.toml');
  fs.writeFileSync(file, `public_url = ${toml(`http://127.0.0.1:${port}`)}
listen = ${toml(`127.0.0.1:${port}`)}
database_url = ${toml(databaseUrl)}
encryption_keys = [${toml(`k1:${encryptionKey}`)}]
outbound_allow_cidrs = ["127.0.0.0/8"]

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
${extraToml}`, { mode: 0o600 });
  return file;
}

// Runs the binary with its output captured; the environment carries no MCP_CONNECT_* overrides.
export function startService(configFile, label) {
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

export async function stopChild(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

export function logTail(service, lines = 40) {
  return service.output.split('\n').slice(-lines).join('\n');
}

export async function waitReady(base, service, timeoutMs = 60_000) {
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
export async function startStack(kind, { extraToml = '' } = {}) {
  const { port, release } = await reservePort();
  cleanups.push(release);
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
    port, databaseUrl, ...secrets, identity: peers.identity, upstream: peers.upstream, extraToml,
  });
  await release();
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
export function trackDocuments(page) {
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

// `options` go to the browser context (e.g. `locale: 'zh-CN'`, `colorScheme: 'dark'`).
export async function newPage(options = {}) {
  const context = await browser.newContext({ viewport: { width: 1000, height: 800 }, ...options });
  context.setDefaultTimeout(STEP_TIMEOUT);
  context.setDefaultNavigationTimeout(STEP_TIMEOUT);
  const page = await context.newPage();
  const docs = trackDocuments(page);
  return { context, page, docs };
}

export const originOf = (url) => new URL(url).origin;

// Runs a test body; on failure, appends the last service and peer log lines to the error.
export function withLogs(getStack, fn) {
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

export async function waitForOrigin(page, origin, what) {
  try {
    await page.waitForURL((u) => u.origin === origin, { waitUntil: 'load' });
  } catch (err) {
    const text = await page.locator('body').innerText({ timeout: 1000 }).catch(() => '');
    throw new Error(`expected to reach ${what} (${origin}) but the browser is at ${page.url()}${
      page.url().startsWith('chrome-error:') ? ' (a network error: did a server die?)' : ''}:\n${text.slice(0, 600)}`, { cause: err });
  }
}

export async function signIn(page, issuer, user, what) {
  await waitForOrigin(page, issuer, what);
  await page.locator('input[name="login"]').fill(user);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

// From a connect URL to mcp-connect's consent page, signing in at the identity issuer if asked.
export async function openConnectUrl(stack, page, url, user) {
  await page.goto(url);
  if (originOf(page.url()) === stack.peers.identity) {
    await signIn(page, stack.peers.identity, user, 'the identity login page');
  }
  await waitForOrigin(page, stack.base, 'mcp-connect after identity sign-in');
}

export async function createElicitation(stack, subject) {
  const res = await stack.api('POST', '/v1/elicitations', { subject, provider: 'acme' });
  assert.equal(res.status, 201, `POST /v1/elicitations for ${subject}: ${res.status} ${res.text}`);
  assert.equal(res.json.status, 'pending');
  assert.ok(res.json.id, 'elicitation has an id');
  assert.ok(res.json.url.startsWith(`${stack.base}/connect/`), `connect URL on public_url: ${res.json.url}`);
  return res.json;
}

export async function elicitationStatus(stack, id, wait = 0) {
  const res = await stack.api('GET', `/v1/elicitations/${encodeURIComponent(id)}${wait ? `?wait=${wait}` : ''}`);
  assert.equal(res.status, 200, `GET /v1/elicitations/${id}: ${res.status} ${res.text}`);
  return res.json;
}


