// The real `mcp-connect demo` for the tests: started on a free port with a fresh data folder,
// read from its banner, and a user who completes a connect URL by walking its plain HTML forms
// (development issuer sign-in, consent, sandbox sign-in, Allow or Decline) over HTTP.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const BIN = path.resolve(ROOT, process.env.MCP_CONNECT_BIN || 'target/debug/mcp-connect');

export async function startDemo() {
  if (!fs.existsSync(BIN)) throw new Error(`mcp-connect binary not found at ${BIN}: run \`cargo build\` or set MCP_CONNECT_BIN`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-connect-ts-client-'));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MCP_CONNECT_')));
  env.NO_COLOR = '1';
  const child = spawn(BIN, ['demo', '--port', '0', '--data-dir', path.join(dir, 'data')], { env, stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no banner within 60 s:\n${out}`)), 60_000);
    child.stdout.on('data', (c) => {
      out += c;
      if (/^Ctrl-C/m.test(out)) { clearTimeout(timer); resolve(); }
    });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`the demo exited (${code}):\n${out}`)); });
  });
  const base = /mcp-connect demo is running at (\S+)/.exec(out)?.[1];
  const apiKey = /API key of the MCP server "demo-mcp": (\S+)/.exec(out)?.[1];
  if (!base || !apiKey) throw new Error(`banner incomplete:\n${out}`);
  return {
    base,
    apiKey,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => { child.once('exit', resolve); });
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(t);
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The user's MCP access token from the development issuer (as an MCP client gets it). */
export async function mcpToken(base, user) {
  const r = await fetch(`${base}/dev/issuer/mcp-token`, { method: 'POST', body: new URLSearchParams({ user }) });
  if (!r.ok) throw new Error(`mcp-token: ${r.status}`);
  return (await r.json()).access_token;
}

function forms(html) {
  const found = [];
  for (const m of html.matchAll(/<form[^>]*action="([^"]*)"[^>]*>([\s\S]*?)<\/form>/g)) {
    const fields = {};
    for (const i of m[2].matchAll(/<input[^>]*type="hidden"[^>]*>/g)) {
      const name = /name="([^"]*)"/.exec(i[0])?.[1];
      const value = /value="([^"]*)"/.exec(i[0])?.[1] ?? '';
      if (name) fields[name] = value.replace(/&amp;/g, '&');
    }
    found.push({ action: m[1].replace(/&amp;/g, '&'), fields });
  }
  return found;
}

/** The user opens the connect URL: signs in at the development issuer, then Continue (sign in and
 * Allow at the sandbox, as `sandboxLogin`: another name there is another account of theirs, by
 * default `user`) or Decline on mcp-connect's consent page. Returns the last page's HTML. */
export async function userOpens(connectUrl, user, choice = 'continue', sandboxLogin = user) {
  const origin = new URL(connectUrl).origin;
  const jar = new Map();
  const go = async (url, init = {}) => {
    let target = new URL(url, origin);
    let req = init;
    for (let hop = 0; hop < 10; hop += 1) {
      const r = await fetch(target, {
        ...req,
        redirect: 'manual',
        headers: { ...(req.headers ?? {}), origin, cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; ') },
      });
      for (const c of r.headers.getSetCookie()) {
        const [kv] = c.split(';');
        const i = kv.indexOf('=');
        jar.set(kv.slice(0, i), kv.slice(i + 1));
      }
      const loc = r.headers.get('location');
      if (r.status >= 300 && r.status < 400 && loc) { target = new URL(loc, target); req = {}; continue; }
      if (!r.ok) throw new Error(`${target.pathname}: HTTP ${r.status}: ${(await r.text()).slice(0, 500)}`);
      return { url: target, html: await r.text() };
    }
    throw new Error('too many redirects');
  };
  const post = async (page, actionContains, more) => {
    const f = forms(page.html).find((x) => x.action.includes(actionContains));
    if (!f) throw new Error(`no form posting to ${actionContains} on ${page.url}:\n${page.html.slice(0, 1500)}`);
    return go(new URL(f.action, page.url), {
      method: 'POST',
      body: new URLSearchParams({ ...f.fields, ...more }),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
  };
  let page = await go(connectUrl);
  if (page.url.pathname.startsWith('/dev/issuer/')) page = await post(page, '/dev/issuer/', { login: user });
  page = await post(page, '/connect/', { action: choice });
  if (choice !== 'continue') return page.html;
  page = await post(page, '/dev/sandbox/authorize/login', { login: sandboxLogin });
  page = await post(page, '/dev/sandbox/authorize/decision', { decision: 'allow' });
  if (!/is connected/.test(page.html)) throw new Error(`not connected after Allow (${page.url}):\n${page.html.slice(0, 1500)}`);
  return page.html;
}

export const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });
