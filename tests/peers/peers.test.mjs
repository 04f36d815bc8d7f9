#!/usr/bin/env node
// Self-test of the peers with a plain HTTP client (no browser): `node --test tests/peers/`.
// Drives code + PKCE flows against both issuers and checks the behaviour mcp-connect's tests rely
// on: refresh rotation with invalid_grant on reuse, revocation, /api/whoami, Deny, the fault hooks.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, test } from 'node:test';

import { MCP_CLIENT_REDIRECT, startPeers } from './peers.mjs';

const CONNECT = 'http://127.0.0.1:1';  // never contacted: redirects to it are captured, not followed
const logs = [];
let peers;

before(async () => {
  peers = await startPeers({
    connectUrl: CONNECT,
    accessTokenTtl: 2,
    log: (line) => logs.push(line),
  });
});
after(async () => {
  await peers?.close();
  if (process.env.PEERS_DEBUG) process.stderr.write(`${logs.join('\n')}\n`);
});

class Jar {
  #cookies = new Map();

  store(response) {
    for (const line of response.headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(';');
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      const expired = attrs.some((a) => {
        const [k, v] = a.trim().split('=');
        if (k.toLowerCase() === 'max-age') return Number(v) <= 0;
        if (k.toLowerCase() === 'expires') return Date.parse(v) < Date.now();
        return false;
      });
      if (expired || value === '') this.#cookies.delete(name);
      else this.#cookies.set(name, value);
    }
  }

  header() {
    return [...this.#cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  }
}

const b64url = (buf) => Buffer.from(buf).toString('base64url');
const basic = (id, secret) => `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString('base64')}`;

async function request(jar, url, init = {}) {
  const res = await fetch(url, {
    ...init,
    redirect: 'manual',
    headers: { ...(init.headers ?? {}), cookie: jar.header() },
  });
  jar.store(res);
  return res;
}

// Follows redirects until one leaves the peer (to the client's redirect URI) or a page is shown.
async function follow(jar, url, init) {
  let res = await request(jar, url, init);
  for (let hops = 0; hops < 10; hops += 1) {
    if (res.status < 300 || res.status >= 400) return { res, url };
    url = new URL(res.headers.get('location'), url).href;
    if (url.startsWith(CONNECT) || url.startsWith(MCP_CLIENT_REDIRECT)) return { res, url, redirected: true };
    res = await request(jar, url);
  }
  throw new Error('too many redirects');
}

function formAction(html, pageUrl) {
  const m = /<form method="post" action="([^"]+)"/.exec(html);
  assert.ok(m, 'page has a POST form');
  return new URL(m[1].replace(/&amp;/g, '&'), pageUrl).href;
}

async function submit(jar, pageUrl, html, fields) {
  return follow(jar, formAction(html, pageUrl), {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(fields).toString(),
  });
}

async function authorize({ issuer, clientId, redirectUri, scope, login, decision, resource, jar = new Jar() }) {
  const verifier = b64url(crypto.randomBytes(32));
  const challenge = b64url(crypto.createHash('sha256').update(verifier).digest());
  const state = b64url(crypto.randomBytes(16));
  const nonce = b64url(crypto.randomBytes(16));
  const auth = new URL('/auth', issuer);
  auth.search = new URLSearchParams({
    client_id: clientId,
    response_type: 'code',
    redirect_uri: redirectUri,
    scope,
    state,
    nonce,
    code_challenge: challenge,
    code_challenge_method: 'S256',
    ...(resource ? { resource } : {}),
  }).toString();
  let step = await follow(jar, auth.href);
  const pages = [];
  while (!step.redirected) {
    assert.equal(step.res.status, 200, `unexpected status ${step.res.status} at ${step.url}`);
    const html = await step.res.text();
    pages.push(html);
    if (html.includes('name="login"')) {
      step = await submit(jar, step.url, html, { login });
    } else if (html.includes('name="decision"')) {
      step = await submit(jar, step.url, html, { decision });
    } else {
      assert.fail(`unexpected page at ${step.url}: ${html}`);
    }
  }
  const back = new URL(step.url);
  assert.equal(`${back.origin}${back.pathname}`, redirectUri, 'redirected to the registered redirect_uri');
  assert.equal(back.searchParams.get('state'), state);
  assert.equal(back.searchParams.get('iss'), issuer, 'RFC 9207 iss in the authorization response');
  return { params: back.searchParams, verifier, nonce, pages, jar };
}

async function token(issuer, clientId, secret, form) {
  const res = await fetch(new URL('/token', issuer), {
    method: 'POST',
    headers: {
      authorization: basic(clientId, secret),
      'content-type': 'application/x-www-form-urlencoded',
    },
    body: new URLSearchParams(form).toString(),
  });
  return { status: res.status, body: await res.json() };
}

const upstreamClient = () => ({
  issuer: peers.upstream,
  clientId: 'mcp-connect-upstream',
  redirectUri: `${CONNECT}/oauth/acme/callback`,
  scope: 'openid offline_access api',
});

async function upstreamTokens(login) {
  const { params, verifier } = await authorize({ ...upstreamClient(), login, decision: 'allow' });
  const res = await token(peers.upstream, 'mcp-connect-upstream', 'upstream-secret', {
    grant_type: 'authorization_code',
    code: params.get('code'),
    redirect_uri: `${CONNECT}/oauth/acme/callback`,
    code_verifier: verifier,
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

const whoami = (accessToken) => fetch(new URL('/api/whoami', peers.upstream), {
  headers: { authorization: `Bearer ${accessToken}` },
});
const stats = async () => (await fetch(new URL('/__stats', peers.upstream))).json();

test('discovery of both issuers', async () => {
  for (const issuer of [peers.identity, peers.upstream]) {
    assert.match(issuer, /^http:\/\/127\.0\.0\.1:\d+$/);
    const doc = await (await fetch(`${issuer}/.well-known/openid-configuration`)).json();
    assert.equal(doc.issuer, issuer);
    assert.deepEqual(doc.code_challenge_methods_supported, ['S256']);
    assert.equal(doc.authorization_response_iss_parameter_supported, true);
  }
  const up = await (await fetch(`${peers.upstream}/.well-known/openid-configuration`)).json();
  assert.ok(up.revocation_endpoint && up.introspection_endpoint);
  assert.ok(['openid', 'offline_access', 'api'].every((s) => up.scopes_supported.includes(s)));
});

test('identity: login without consent page, RS256 ID token with sub = typed name', async () => {
  const redirectUri = `${CONNECT}/auth/callback`;
  const { params, verifier, nonce, pages } = await authorize({
    issuer: peers.identity, clientId: 'mcp-connect', redirectUri, scope: 'openid profile', login: 'alice',
  });
  assert.equal(pages.length, 1, 'only the login page is shown');
  const res = await token(peers.identity, 'mcp-connect', 'identity-secret', {
    grant_type: 'authorization_code', code: params.get('code'), redirect_uri: redirectUri, code_verifier: verifier,
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const [header, payload] = res.body.id_token.split('.').slice(0, 2).map((p) => JSON.parse(Buffer.from(p, 'base64url')));
  assert.equal(header.alg, 'RS256');
  assert.equal(payload.sub, 'alice');
  assert.equal(payload.iss, peers.identity);
  assert.equal(payload.aud, 'mcp-connect');
  assert.equal(payload.nonce, nonce);
  assert.equal(res.body.refresh_token, undefined);
});

test('identity: MCP access tokens are JWTs for the resource; mcp-client-short\'s expire after 2 s', async () => {
  const resource = 'https://mcp.example.test/';
  for (const [clientId, ttl] of [['mcp-client', 3600], ['mcp-client-short', 2]]) {
    const { params, verifier } = await authorize({
      issuer: peers.identity, clientId, redirectUri: MCP_CLIENT_REDIRECT, scope: 'openid mcp', login: 'alice', resource,
    });
    const res = await fetch(new URL('/token', peers.identity), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'authorization_code', code: params.get('code'), redirect_uri: MCP_CLIENT_REDIRECT,
        code_verifier: verifier, client_id: clientId, resource,
      }).toString(),
    });
    const body = await res.json();
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.equal(body.expires_in, ttl, clientId);
    const claims = JSON.parse(Buffer.from(body.access_token.split('.')[1], 'base64url'));
    assert.equal(claims.aud, resource, clientId);
    assert.equal(claims.sub, 'alice');
    assert.equal(claims.exp - claims.iat, ttl, clientId);
  }
});

test('identity: wrong secret, missing PKCE and foreign redirect_uri are refused', async () => {
  const redirectUri = `${CONNECT}/auth/callback`;
  const { params, verifier } = await authorize({
    issuer: peers.identity, clientId: 'mcp-connect', redirectUri, scope: 'openid', login: 'alice',
  });
  const bad = await token(peers.identity, 'mcp-connect', 'wrong', {
    grant_type: 'authorization_code', code: params.get('code'), redirect_uri: redirectUri, code_verifier: verifier,
  });
  assert.equal(bad.status, 401);
  assert.equal(bad.body.error, 'invalid_client');

  const noPkce = await fetch(`${peers.identity}/auth?${new URLSearchParams({
    client_id: 'mcp-connect', response_type: 'code', redirect_uri: redirectUri, scope: 'openid', state: 'x',
  })}`, { redirect: 'manual' });
  assert.match(noPkce.headers.get('location'), /error=invalid_request/);

  const foreign = await fetch(`${peers.identity}/auth?${new URLSearchParams({
    client_id: 'mcp-connect', response_type: 'code', redirect_uri: `${CONNECT}/auth/callback/x`, scope: 'openid', state: 'x',
  })}`, { redirect: 'manual' });
  assert.equal(foreign.status, 400, 'redirect_uri must match exactly');
});

test('upstream: consent page, tokens, whoami, refresh rotation, reuse gives invalid_grant', async () => {
  const before0 = await stats();
  const first = await upstreamTokens('carol');
  assert.ok(first.access_token && first.refresh_token, 'refresh token issued with the code grant');
  assert.equal(first.token_type, 'Bearer');
  // offline_access is granted only with prompt=consent (OIDC Core 11); the refresh token comes anyway.
  assert.deepEqual(first.scope.split(' ').sort(), ['api', 'openid']);
  assert.ok(!first.access_token.includes('.'), 'opaque access token');

  const me = await whoami(first.access_token);
  assert.equal(me.status, 200);
  assert.equal((await me.json()).sub, 'carol');
  assert.equal((await whoami('nope')).status, 401);
  assert.equal((await fetch(new URL('/api/whoami', peers.upstream))).status, 401);

  const refreshed = await token(peers.upstream, 'mcp-connect-upstream', 'upstream-secret', {
    grant_type: 'refresh_token', refresh_token: first.refresh_token,
  });
  assert.equal(refreshed.status, 200, JSON.stringify(refreshed.body));
  assert.notEqual(refreshed.body.refresh_token, first.refresh_token, 'rotated');
  assert.equal((await (await whoami(refreshed.body.access_token)).json()).sub, 'carol');

  const reuse = await token(peers.upstream, 'mcp-connect-upstream', 'upstream-secret', {
    grant_type: 'refresh_token', refresh_token: first.refresh_token,
  });
  assert.equal(reuse.status, 400);
  assert.equal(reuse.body.error, 'invalid_grant');

  const issued = await (await fetch(new URL('/__issued', peers.upstream))).json();
  assert.ok(issued.access_token.includes(first.access_token));
  assert.ok(issued.refresh_token.includes(first.refresh_token));
  assert.ok(issued.refresh_token.includes(refreshed.body.refresh_token));
  assert.ok(issued.authorization_code.length >= 1);

  const after0 = await stats();
  assert.equal(after0.authorization_code - before0.authorization_code, 1);
  assert.equal(after0.refresh_token - before0.refresh_token, 1);
  assert.equal(after0.refresh_invalid_grant - before0.refresh_invalid_grant, 1);
});

test('upstream: access tokens expire after --access-token-ttl', async () => {
  const t = await upstreamTokens('dave');
  assert.equal(t.expires_in, 2);
  assert.equal((await whoami(t.access_token)).status, 200);
  await new Promise((r) => { setTimeout(r, 2500); });
  assert.equal((await whoami(t.access_token)).status, 401);
});

test('upstream: revocation (RFC 7009) and introspection', async () => {
  const t = await upstreamTokens('erin');
  const introspect = async (tok) => (await fetch(new URL('/token/introspection', peers.upstream), {
    method: 'POST',
    headers: { authorization: basic('mcp-connect-upstream', 'upstream-secret'), 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token: tok }).toString(),
  })).json();
  assert.equal((await introspect(t.access_token)).active, true);

  const before0 = await stats();
  const res = await fetch(new URL('/token/revocation', peers.upstream), {
    method: 'POST',
    headers: { authorization: basic('mcp-connect-upstream', 'upstream-secret'), 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token: t.refresh_token, token_type_hint: 'refresh_token' }).toString(),
  });
  assert.equal(res.status, 200);
  const after0 = await stats();
  assert.equal(after0.revocations - before0.revocations, 1);
  assert.deepEqual(after0.revoked_tokens.at(-1).type, 'refresh_token');

  const again = await token(peers.upstream, 'mcp-connect-upstream', 'upstream-secret', {
    grant_type: 'refresh_token', refresh_token: t.refresh_token,
  });
  assert.equal(again.body.error, 'invalid_grant');
  // Revoking the refresh token revokes the grant, and with it its access tokens.
  assert.equal((await whoami(t.access_token)).status, 401);
  assert.equal((await introspect(t.access_token)).active, false);
});

test('upstream: Deny redirects with error=access_denied', async () => {
  const { params, pages } = await authorize({ ...upstreamClient(), login: 'frank', decision: 'deny' });
  assert.equal(params.get('error'), 'access_denied');
  assert.equal(params.get('code'), null);
  assert.ok(pages.some((p) => p.includes('>Allow</button>') && p.includes('>Deny</button>')));
});

test('upstream: consent is asked again on every authorization in the same browser', async () => {
  const jar = new Jar();
  const one = await authorize({ ...upstreamClient(), login: 'gina', decision: 'allow', jar });
  assert.equal(one.pages.length, 2, 'login + consent');
  const two = await authorize({ ...upstreamClient(), login: 'gina', decision: 'deny', jar });
  assert.equal(two.pages.length, 1, 'session kept: consent only');
  assert.equal(two.params.get('error'), 'access_denied');
});

test('upstream: /__fail and /__stall act on the token endpoint', async () => {
  const t = await upstreamTokens('hank');
  assert.equal((await fetch(`${peers.upstream}/__fail?status=503&count=2`, { method: 'POST' })).status, 200);
  for (let i = 0; i < 2; i += 1) {
    const r = await token(peers.upstream, 'mcp-connect-upstream', 'upstream-secret', {
      grant_type: 'refresh_token', refresh_token: t.refresh_token,
    });
    assert.equal(r.status, 503);
    assert.equal(r.body.error, 'temporarily_unavailable');
  }
  await fetch(`${peers.upstream}/__stall?ms=700`, { method: 'POST' });
  const started = Date.now();
  const ok = await token(peers.upstream, 'mcp-connect-upstream', 'upstream-secret', {
    grant_type: 'refresh_token', refresh_token: t.refresh_token,
  });
  assert.equal(ok.status, 200, 'the refresh token was not consumed by the injected failures');
  assert.ok(Date.now() - started >= 650, 'stalled');
  await fetch(`${peers.upstream}/__stall?ms=0`, { method: 'POST' });
  const quick = Date.now();
  await token(peers.upstream, 'mcp-connect-upstream', 'upstream-secret', { grant_type: 'refresh_token', refresh_token: ok.body.refresh_token });
  assert.ok(Date.now() - quick < 500);
});
