// End-to-end: `mcp-connect demo` as a newcomer runs it. Starts the real binary on a free port
// with a fresh data folder, reads what it prints, and drives headless Chromium through the pages
// it names (development issuer sign-in, mcp-connect consent, sandbox sign-in and Allow), then
// follows the printed API calls until the sandbox's whoami answers for alice.
//
//   cargo build && (cd tests/peers && npm ci) && node --test tests/e2e/demo.test.mjs
//
// Environment (see lib.mjs): MCP_CONNECT_BIN (default target/debug/mcp-connect), CHROMIUM
// (default /usr/bin/chromium), E2E_VERBOSE=1 to echo the demo's output.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { BIN, ROOT, VERBOSE, closeAll, launchBrowser, newPage, stopChild } from './lib.mjs';

let demo;
let dir;

// Starts the demo and resolves with what it printed once the banner is complete.
function startDemo(dataDir) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MCP_CONNECT_')));
  env.NO_COLOR = '1';
  const child = spawn(BIN, ['demo', '--port', '0', '--data-dir', dataDir], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const state = { child, stdout: '', stderr: '' };
  child.stderr.on('data', (c) => {
    state.stderr += c;
    if (VERBOSE) process.stderr.write(`[demo] ${c}`);
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no banner within 60 s:\n${state.stdout}\n${state.stderr}`)), 60_000);
    child.stdout.on('data', (c) => {
      state.stdout += c;
      if (VERBOSE) process.stderr.write(`[demo stdout] ${c}`);
      if (/^Ctrl-C/m.test(state.stdout)) {
        clearTimeout(timer);
        resolve(state);
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the demo exited (${code}):\n${state.stdout}\n${state.stderr}`));
    });
  });
}

function parse(text) {
  const base = /mcp-connect demo is running at (\S+)/.exec(text)?.[1];
  const apiKey = /API key of the MCP server "demo-mcp": (\S+)/.exec(text)?.[1];
  const lines = text.split('\n').map((l) => l.trim());
  const connectUrl = lines.find((l) => base && l.startsWith(`${base}/connect/`));
  const curls = lines.filter((l) => l.startsWith('curl '));
  assert.ok(base && apiKey && connectUrl, `banner incomplete:\n${text}`);
  // Create, complete without a person (/dev/complete), token, whoami, whoami through the proxy.
  assert.equal(curls.length, 5, `five curl commands:\n${text}`);
  assert.ok(curls[4].includes(`${base}/v1/proxy/`), `the fifth calls through the proxy:\n${text}`);
  assert.ok(curls[1].includes(`${base}/dev/complete`) && curls[1].includes(connectUrl), `the second completes the connect URL:\n${text}`);
  return { base, apiKey, connectUrl, curls };
}

before(async () => {
  await launchBrowser();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-connect-demo-e2e-'));
  demo = await startDemo(path.join(dir, 'demo-data'));
});

after(async () => {
  if (demo) await stopChild(demo.child);
  await closeAll();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('a browser follows the printed connect URL and whoami then answers for alice', async () => {
  const printed = parse(demo.stdout);
  const { context, page, docs } = await newPage();
  try {
    // The development issuer's sign-in, visibly marked.
    await page.goto(printed.connectUrl);
    await page.waitForURL((u) => u.pathname.startsWith('/dev/issuer/'));
    await assertDevelopmentOnly(page);
    await page.locator('input[name="login"]').fill('alice');
    await page.getByRole('button', { name: 'Sign in' }).click();

    // mcp-connect's own consent page (not a development page).
    const cont = page.getByRole('button', { name: 'Continue' });
    await cont.waitFor();
    const consent = await page.locator('body').innerText();
    assert.match(consent, /Demo MCP server/);
    assert.match(consent, /Sandbox/);
    assert.doesNotMatch(consent, /development only/i, 'the service\'s own pages are not marked as development');
    await cont.click();

    // The sandbox: sign in, then Allow.
    await page.waitForURL((u) => u.pathname.startsWith('/dev/sandbox/'));
    await assertDevelopmentOnly(page);
    await page.locator('input[name="login"]').fill('alice');
    await page.getByRole('button', { name: 'Sign in' }).click();
    const allow = page.getByRole('button', { name: 'Allow' });
    await allow.waitFor();
    await assertDevelopmentOnly(page);
    assert.match(await page.locator('body').innerText(), /alice/);
    await allow.click();

    await page.getByRole('heading', { name: 'Sandbox is connected' }).waitFor();
    assert.equal(docs.last?.status, 200, `done page status (${docs.last?.url})`);
  } finally {
    await context.close();
  }

  // The printed calls: the token, then whoami with it.
  const body = JSON.stringify({ subject: 'alice', provider: 'sandbox' });
  const tok = await fetch(`${printed.base}/v1/tokens`, {
    method: 'POST',
    headers: { authorization: `Bearer ${printed.apiKey}`, 'content-type': 'application/json' },
    body,
  });
  const token = await tok.json();
  assert.equal(tok.status, 200, JSON.stringify(token));
  const whoamiUrl = printed.curls[3].split(/\s+/).find((w) => w.startsWith('http'));
  const me = await fetch(whoamiUrl, { headers: { authorization: `Bearer ${token.access_token}` } });
  assert.equal(me.status, 200);
  assert.equal((await me.json()).sub, 'alice');
});

async function assertDevelopmentOnly(page) {
  const banner = page.getByText('Development only.', { exact: false });
  assert.ok(await banner.first().isVisible(), `no visible "development only" on ${page.url()}`);
}
