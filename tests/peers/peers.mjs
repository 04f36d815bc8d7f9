#!/usr/bin/env node
// Real OpenID Connect / OAuth 2 peers for mcp-connect's tests, built on `oidc-provider`.
//
// Two issuers, each on its own OS-chosen port on 127.0.0.1:
//   identity – plays the MCP authorization server: OIDC, client "mcp-connect", automatic consent.
//   upstream – plays a third-party provider (think GitHub): client "mcp-connect-upstream",
//              explicit Allow/Deny consent, rotating refresh tokens, revocation, introspection,
//              plus test hooks (/api/whoami, /__stats, /__stall, /__fail).
//
// CLI: node peers.mjs --connect-url http://127.0.0.1:PORT [--provider-name acme] [--access-token-ttl 3600]
// prints one JSON line {"identity": ..., "upstream": ...} on stdout, logs on stderr, and exits when
// stdin closes or on SIGTERM/SIGINT. As a module: `startPeers(options)` (see below).

import crypto from 'node:crypto';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { realpathSync } from 'node:fs';
import { format } from 'node:util';

// oidc-provider prints notices with console.info (stdout!) and warnings with console.warn. Route
// them to the peers' log instead, so stdout carries only the JSON line and test output stays
// readable. Loaded lazily so this is in place before the library's import-time warning.
const libraryMessages = [];
let libraryLog = null;
for (const method of ['info', 'warn']) {
  const original = console[method].bind(console);
  console[method] = (...args) => {
    const text = format(...args);
    if (!text.startsWith('oidc-provider ')) return original(...args);
    if (libraryLog) libraryLog(text);
    else libraryMessages.push(text);
    return undefined;
  };
}
let Provider;
async function loadProvider(log) {
  libraryLog = log;
  Provider ??= (await import('oidc-provider')).default;
  for (const text of libraryMessages.splice(0)) log(text);
}

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

function escapeHtml(value) {
  return String(value ?? '').replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
  }[c]));
}

function page(title, body) {
  return `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>${escapeHtml(title)}</title>
<style>body{font-family:sans-serif;max-width:32rem;margin:3rem auto}button{margin-right:.5rem}</style>
</head>
<body>
<h1>${escapeHtml(title)}</h1>
${body}
</body>
</html>
`;
}

function send(res, status, contentType, body, headers = {}) {
  res.writeHead(status, {
    'content-type': contentType,
    'cache-control': 'no-store',
    ...headers,
  });
  res.end(body);
}

const sendJson = (res, status, value) => send(res, status, 'application/json', JSON.stringify(value));
const sendHtml = (res, status, html) => send(res, status, 'text/html; charset=utf-8', html);

async function readForm(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 64 * 1024) throw new Error('form body too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function listen(server) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve(server.address().port);
    });
  });
}

function rsaJwk() {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), use: 'sig', alg: 'RS256', kid: crypto.randomUUID() };
}

// Organisations (mcp-connect's `[identity] organization_claim`): a login `someone@org` belongs
// to organisation `org` (claim `org_id`), and administers it when it starts with `admin.`
// (claim `org_role`); other logins belong to none. In ID tokens and MCP access tokens alike.
function orgClaims(id) {
  const m = /^(.+)@([A-Za-z0-9_-]+)$/.exec(id);
  if (!m) return {};
  return { org_id: m[2], org_role: m[1].startsWith('admin.') ? 'admin' : 'member' };
}

// Accounts exist for any non-empty login name: `sub` is exactly what was typed.
async function findAccount(_ctx, id) {
  if (typeof id !== 'string' || id === '') return undefined;
  return {
    accountId: id,
    async claims() {
      return { sub: id, name: id, preferred_username: id, ...orgClaims(id) };
    },
  };
}

// Grants every scope/claim the authorization request asked for (what "Allow" means).
async function grantEverything(provider, details) {
  const { prompt, params, session } = details;
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
  if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  return grant.save();
}

function loginPage(label, uid, details, error) {
  const client = details.params.client_id;
  return page(`Sign in to ${label}`, `
<p>Application <strong>${escapeHtml(client)}</strong> asks you to sign in.</p>
${error ? `<p role="alert" class="error">${escapeHtml(error)}</p>` : ''}
<form method="post" action="/interaction/${escapeHtml(uid)}">
  <label>User name <input name="login" autocomplete="username" autofocus required></label>
  <button type="submit">Sign in</button>
</form>`);
}

function consentPage(label, uid, details) {
  const scopes = String(details.params.scope ?? '').split(' ').filter(Boolean);
  return page(`Authorize ${details.params.client_id} at ${label}`, `
<p>Signed in as <strong class="account">${escapeHtml(details.session.accountId)}</strong>.</p>
<p>Application <strong class="client">${escapeHtml(details.params.client_id)}</strong> requests:</p>
<ul class="scopes">${scopes.map((s) => `<li>${escapeHtml(s)}</li>`).join('')}</ul>
<form method="post" action="/interaction/${escapeHtml(uid)}">
  <button type="submit" name="decision" value="allow">Allow</button>
  <button type="submit" name="decision" value="deny">Deny</button>
</form>`);
}

// Our own interaction UI (devInteractions is off): plain forms that a browser or a bare HTTP
// client can drive. `autoConsent` grants consent without showing a page.
async function handleInteraction(provider, req, res, { label, autoConsent, log, stats }) {
  const uid = new URL(req.url, 'http://x').pathname.split('/')[2];
  let details;
  try {
    details = await provider.interactionDetails(req, res);
  } catch (err) {
    log(`interaction ${uid}: ${err.name} ${err.message}`);
    sendHtml(res, 400, page('Sign-in session expired', `<p>${escapeHtml(err.message)}. Start again from the application.</p>`));
    return;
  }
  if (details.uid !== uid) {
    sendHtml(res, 400, page('Interaction mismatch', '<p>This page does not belong to the current sign-in.</p>'));
    return;
  }
  const promptName = details.prompt.name;

  if (req.method === 'GET') {
    if (promptName === 'login') {
      sendHtml(res, 200, loginPage(label, uid, details));
      return;
    }
    if (promptName === 'consent') {
      if (autoConsent) {
        const grantId = await grantEverything(provider, details);
        log(`auto-consent for ${details.session.accountId} (${details.params.scope})`);
        await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
        return;
      }
      sendHtml(res, 200, consentPage(label, uid, details));
      return;
    }
    sendHtml(res, 400, page('Unsupported prompt', `<p>${escapeHtml(promptName)}</p>`));
    return;
  }

  if (req.method !== 'POST') {
    send(res, 405, 'text/plain', 'method not allowed\n', { allow: 'GET, POST' });
    return;
  }
  const form = await readForm(req);
  if (promptName === 'login') {
    const login = (form.get('login') ?? '').trim();
    if (!login) {
      sendHtml(res, 400, loginPage(label, uid, details, 'Type a user name.'));
      return;
    }
    stats.logins += 1;
    log(`login as ${JSON.stringify(login)}`);
    await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
    return;
  }
  if (promptName === 'consent') {
    const decision = autoConsent ? 'allow' : form.get('decision');
    if (decision === 'allow') {
      stats.consents_allowed += 1;
      const grantId = await grantEverything(provider, details);
      log(`consent allowed for ${details.session.accountId} (${details.params.scope})`);
      await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
      return;
    }
    if (decision === 'deny') {
      stats.consents_denied += 1;
      log(`consent denied for ${details.session.accountId}`);
      await provider.interactionFinished(req, res, {
        error: 'access_denied',
        error_description: 'End-User denied the authorization request',
      }, { mergeWithLastSubmission: false });
      return;
    }
    sendHtml(res, 400, consentPage(label, uid, details));
    return;
  }
  sendHtml(res, 400, page('Unsupported prompt', `<p>${escapeHtml(promptName)}</p>`));
}

async function renderError(ctx, out, error) {
  ctx.type = 'html';
  ctx.body = page('Error', `<p class="error">${escapeHtml(out.error)}</p><p>${escapeHtml(out.error_description)}</p>`);
  void error;
}

function baseConfig({ cookiePrefix, log }) {
  return {
    jwks: { keys: [rsaJwk()] },
    findAccount,
    renderError,
    // Distinct cookie names per peer: browsers scope cookies by host, not port, so both peers
    // and mcp-connect share one cookie jar on 127.0.0.1.
    cookies: {
      keys: [crypto.randomBytes(32).toString('base64url')],
      names: {
        session: `${cookiePrefix}_session`,
        interaction: `${cookiePrefix}_interaction`,
        resume: `${cookiePrefix}_interaction_resume`,
      },
      // Plain http on 127.0.0.1: no `secure` attribute (oidc-provider only adds it on https).
      long: { httpOnly: true, sameSite: 'lax' },
      short: { httpOnly: true, sameSite: 'lax' },
    },
    pkce: { required: () => true },
    features: {
      devInteractions: { enabled: false },
      // Only the client a token was issued to may revoke or introspect it.
      revocation: { enabled: true, allowedPolicy: async (_ctx, client, token) => client.clientId === token.clientId },
      introspection: { enabled: true, allowedPolicy: async (_ctx, client, token) => client.clientId === token.clientId },
      rpInitiatedLogout: { enabled: true },
      resourceIndicators: { enabled: false },
    },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    ttl: {
      AccessToken: 3600,
      AuthorizationCode: 60,
      IdToken: 3600,
      Interaction: 3600,
      Session: 14 * 24 * 3600,
      Grant: 14 * 24 * 3600,
    },
    claims: {
      openid: ['sub', 'org_id', 'org_role'],
      profile: ['name', 'preferred_username'],
    },
    clientBasedCORS: () => false,
  };
}

// The identity peer also issues MCP access tokens (resource indicators) and lets mcp-connect
// introspect the tokens of its users (proof of subject).
function identityConfig(base) {
  return {
    ...base,
    // The ID token carries the user's claims (organisation included), not only `sub`.
    conformIdTokenClaims: false,
    extraTokenClaims: async (_ctx, token) => (token.accountId ? orgClaims(token.accountId) : undefined),
    ttl: {
      ...base.ttl,
      AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? 3600,
    },
    features: {
      ...base.features,
      resourceIndicators: mcpResources(3600),
      introspection: {
        enabled: true,
        allowedPolicy: async (_ctx, client, token) => client.clientId === token.clientId || client.clientId === 'mcp-connect',
      },
    },
  };
}

function newStats() {
  return {
    authorization_code: 0,
    refresh_token: 0,
    refresh_invalid_grant: 0,
    token_errors: 0,
    revocations: 0,
    revoked_tokens: [],
    introspections: 0,
    logins: 0,
    consents_allowed: 0,
    consents_denied: 0,
    stalled_requests: 0,
    failed_requests: 0,
    // Per client id: authorization requests, and successful token endpoint grants.
    authorize_by_client: {},
    grants_by_client: {},
  };
}

// Every token/code value a peer hands out, so tests can assert none of them shows up in logs.
// Opaque tokens and codes: the value is the jti.
function newIssued() {
  return { authorization_code: [], access_token: [], refresh_token: [] };
}

function trackIssued(provider, issued) {
  for (const kind of Object.keys(issued)) {
    provider.on(`${kind}.saved`, (t) => {
      if (!issued[kind].includes(t.jti)) issued[kind].push(t.jti);
    });
  }
}

function instrument(provider, stats, log) {
  provider.use(async (ctx, next) => {
    if (ctx.path === '/auth' && typeof ctx.query.client_id === 'string') {
      const c = ctx.query.client_id;
      stats.authorize_by_client[c] = (stats.authorize_by_client[c] ?? 0) + 1;
    }
    await next();
  });
  provider.on('grant.success', (ctx) => {
    const gty = ctx.oidc.params?.grant_type;
    if (gty in stats && typeof stats[gty] === 'number') stats[gty] += 1;
    const client = ctx.oidc.client?.clientId;
    if (client) {
      const by = (stats.grants_by_client[client] ??= {});
      by[gty] = (by[gty] ?? 0) + 1;
    }
    log(`token endpoint: ${gty} ok`);
  });
  provider.on('grant.error', (ctx, err) => {
    const gty = ctx.oidc?.params?.grant_type;
    stats.token_errors += 1;
    if (gty === 'refresh_token' && err.error === 'invalid_grant') stats.refresh_invalid_grant += 1;
    log(`token endpoint: ${gty} failed: ${err.error} (${err.error_detail ?? err.error_description ?? ''})`);
  });
  provider.on('refresh_token.consumed', () => log('refresh token consumed (rotated)'));
  provider.on('grant.revoked', (_ctx, grantId) => log(`grant ${grantId} revoked`));
  provider.on('server_error', (_ctx, err) => log(`server_error: ${err.stack ?? err}`));
  for (const event of ['authorization.error', 'revocation.error', 'introspection.error', 'userinfo.error']) {
    provider.on(event, (_ctx, err) => log(`${event}: ${err.error} (${err.error_description ?? ''})`));
  }
}

function requestLogger(log) {
  return async (ctx, next) => {
    await next();
    log(`${ctx.method} ${ctx.path} -> ${ctx.status}`);
  };
}

// Counts successful revocations; records which token kind was revoked and its jti.
function revocationCounter(stats) {
  return async (ctx, next) => {
    await next();
    if (ctx.method === 'POST' && ctx.path === '/token/revocation') {
      stats.revocations += 1;
      const entities = ctx.oidc?.entities ?? {};
      for (const kind of ['AccessToken', 'RefreshToken', 'ClientCredentials']) {
        if (entities[kind]) {
          const type = { AccessToken: 'access_token', RefreshToken: 'refresh_token', ClientCredentials: 'client_credentials' }[kind];
          stats.revoked_tokens.push({ type, jti: entities[kind].jti });
        }
      }
      if (ctx.status === 200 && !Object.keys(entities).some((k) => k.endsWith('Token'))) {
        stats.revoked_tokens.push({ type: 'unknown', jti: null });
      }
    }
  };
}

// /__stall and /__fail act on the token endpoint only.
function tokenFaults(faults, stats, log) {
  return async (ctx, next) => {
    if (ctx.method === 'POST' && ctx.path === '/token') {
      if (faults.failCount > 0) {
        faults.failCount -= 1;
        stats.failed_requests += 1;
        log(`token endpoint: injected failure ${faults.failStatus} (${faults.failCount} left)`);
        ctx.status = faults.failStatus;
        ctx.type = 'json';
        ctx.set('cache-control', 'no-store');
        ctx.body = { error: 'temporarily_unavailable', error_description: 'injected by /__fail' };
        return;
      }
      if (faults.stallMs > 0) {
        stats.stalled_requests += 1;
        log(`token endpoint: stalling ${faults.stallMs} ms`);
        await sleep(faults.stallMs);
        // A caller that died while we stalled never got its request through: model a request
        // lost on the way (the provider did not act on it), so a crashed lock holder leaves the
        // grant intact, as it would if it crashed before sending.
        if (ctx.req.socket.destroyed || ctx.req.aborted) {
          stats.abandoned_requests = (stats.abandoned_requests ?? 0) + 1;
          log('token endpoint: caller went away during the stall; request dropped');
          return;
        }
      }
    }
    await next();
  };
}

// The MCP client's redirect URI at the identity peer (never served: a test reads the code off it).
export const MCP_CLIENT_REDIRECT = 'http://127.0.0.1:9/mcp-client/callback';

// Access tokens for MCP resources (RFC 8707 `resource`): any https resource; a JWT (audience =
// the resource) unless the resource ends in `/opaque`, which gets an opaque token (introspection).
// A resource with `/short` in its path, or any resource asked for by the client
// `mcp-client-short`, gets tokens that expire after 2 seconds (a user whose MCP client refreshes
// its token during a session).
function mcpResources(accessTokenTtl) {
  return {
    enabled: true,
    defaultResource: async () => undefined,
    useGrantedResource: async () => true,
    getResourceServerInfo: async (_ctx, resource, client) => {
      if (!resource.startsWith('https://')) throw new Error('resource must be https');
      return {
        scope: 'mcp',
        audience: resource,
        accessTokenTTL: resource.includes('/short') || client?.clientId === 'mcp-client-short' ? 2 : accessTokenTtl,
        accessTokenFormat: resource.endsWith('/opaque') ? 'opaque' : 'jwt',
        jwt: { sign: { alg: 'RS256' } },
      };
    },
  };
}

async function startIdentity({ connectUrl, log }) {
  const server = http.createServer();
  const port = await listen(server);
  const issuer = `http://127.0.0.1:${port}`;
  const stats = newStats();
  const issued = newIssued();
  const provider = new Provider(issuer, {
    ...identityConfig(baseConfig({ cookiePrefix: `identity${port}`, log })),
    clients: [{
      client_id: 'mcp-connect',
      client_secret: 'identity-secret',
      redirect_uris: [`${connectUrl}/auth/callback`],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'RS256',
    }, {
      // An MCP client (public, PKCE): gets the user's access tokens for MCP resources, which MCP
      // servers forward to mcp-connect as `subject_token`.
      client_id: 'mcp-client',
      redirect_uris: [MCP_CLIENT_REDIRECT],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    }, {
      // The same, with access tokens that expire after 2 seconds.
      client_id: 'mcp-client-short',
      redirect_uris: [MCP_CLIENT_REDIRECT],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    }],
    scopes: ['openid', 'profile', 'mcp'],
  });
  instrument(provider, stats, log);
  trackIssued(provider, issued);
  provider.use(requestLogger(log));
  const callback = provider.callback();
  server.on('request', (req, res) => {
    const { pathname } = new URL(req.url, issuer);
    const route = async () => {
      if (pathname.startsWith('/interaction/')) {
        await handleInteraction(provider, req, res, { label: 'the identity provider', autoConsent: true, log, stats });
      } else if (pathname === '/__stats' && req.method === 'GET') {
        sendJson(res, 200, stats);
      } else if (pathname === '/__issued' && req.method === 'GET') {
        sendJson(res, 200, issued);
      } else {
        callback(req, res);
      }
    };
    route().catch((err) => {
      log(`identity: ${req.method} ${pathname}: ${err.stack ?? err}`);
      if (!res.headersSent) sendJson(res, 500, { error: 'server_error' });
      else res.end();
    });
  });
  return { server, issuer, provider, stats, issued };
}

async function startUpstream({ connectUrl, providerName, accessTokenTtl, authMethod, log }) {
  const server = http.createServer();
  const port = await listen(server);
  const issuer = `http://127.0.0.1:${port}`;
  const stats = newStats();
  const issued = newIssued();
  const faults = { stallMs: 0, failCount: 0, failStatus: 503 };
  const base = baseConfig({ cookiePrefix: `upstream${port}`, log });
  const baseTtl = base.ttl;
  const provider = new Provider(issuer, {
    ...base,
    clients: [{
      client_id: 'mcp-connect-upstream',
      client_secret: 'upstream-secret',
      redirect_uris: [`${connectUrl}/oauth/${providerName}/callback`],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: authMethod,
      id_token_signed_response_alg: 'RS256',
    }, {
      // An organisation's own OAuth app (mcp-connect's `[providers.NAME.organizations."ORG"]`).
      client_id: 'org-app',
      client_secret: 'org-app-secret',
      redirect_uris: [`${connectUrl}/oauth/${providerName}/callback`],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: authMethod,
      id_token_signed_response_alg: 'RS256',
    }],
    scopes: ['openid', 'offline_access', 'api', 'files'],
    ttl: {
      ...baseTtl,
      AccessToken: accessTokenTtl,
      RefreshToken: 14 * 24 * 3600,
    },
    rotateRefreshToken: true,
    // Like GitHub Apps: a refresh token with every authorization_code grant, whatever the scopes.
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    expiresWithSession: async () => false,
    // Show the consent page on every authorization request: only a grant made in this very
    // interaction counts, never one remembered from the browser session.
    loadExistingGrant: async (ctx) => {
      const grantId = ctx.oidc.result?.consent?.grantId;
      return grantId ? ctx.oidc.provider.Grant.find(grantId) : undefined;
    },
  });
  instrument(provider, stats, log);
  trackIssued(provider, issued);
  provider.use(requestLogger(log));
  provider.use(revocationCounter(stats));
  provider.use(tokenFaults(faults, stats, log));
  provider.on('introspection.success', () => { stats.introspections += 1; });
  const callback = provider.callback();

  async function whoami(req, res) {
    const header = req.headers.authorization ?? '';
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    const unauthorized = (why) => {
      log(`whoami: 401 (${why})`);
      send(res, 401, 'application/json', JSON.stringify({ error: 'invalid_token' }), {
        'www-authenticate': 'Bearer error="invalid_token"',
      });
    };
    if (!match) return unauthorized('no bearer token');
    const token = await provider.AccessToken.find(match[1]);
    if (!token) return unauthorized('unknown, expired or revoked token');
    if (token.isExpired) return unauthorized('expired');
    if (!['mcp-connect-upstream', 'org-app'].includes(token.clientId)) return unauthorized('foreign client');
    return sendJson(res, 200, { sub: token.accountId, scope: token.scope, client_id: token.clientId, exp: token.exp });
  }

  server.on('request', (req, res) => {
    const url = new URL(req.url, issuer);
    const { pathname } = url;
    const route = async () => {
      if (pathname.startsWith('/interaction/')) {
        await handleInteraction(provider, req, res, { label: providerName, autoConsent: false, log, stats });
      } else if (pathname === '/api/whoami' && req.method === 'GET') {
        await whoami(req, res);
      } else if (pathname === '/__stats' && req.method === 'GET') {
        sendJson(res, 200, { ...stats, stall_ms: faults.stallMs, fail_remaining: faults.failCount });
      } else if (pathname === '/__issued' && req.method === 'GET') {
        sendJson(res, 200, issued);
      } else if (pathname === '/__stall' && req.method === 'POST') {
        const ms = Number(url.searchParams.get('ms') ?? '0');
        if (!Number.isFinite(ms) || ms < 0) return sendJson(res, 400, { error: 'invalid ms' });
        faults.stallMs = ms;
        log(`__stall: token endpoint stalls ${ms} ms`);
        return sendJson(res, 200, { stall_ms: ms });
      } else if (pathname === '/__fail' && req.method === 'POST') {
        const status = Number(url.searchParams.get('status') ?? '503');
        const count = Number(url.searchParams.get('count') ?? '1');
        if (!Number.isInteger(status) || status < 400 || status > 599 || !Number.isInteger(count) || count < 0) {
          return sendJson(res, 400, { error: 'invalid status or count' });
        }
        faults.failStatus = status;
        faults.failCount = count;
        log(`__fail: next ${count} token calls answer ${status}`);
        return sendJson(res, 200, { status, count });
      } else {
        callback(req, res);
      }
      return undefined;
    };
    route().catch((err) => {
      log(`upstream: ${req.method} ${pathname}: ${err.stack ?? err}`);
      if (!res.headersSent) sendJson(res, 500, { error: 'server_error' });
      else res.end();
    });
  });
  return { server, issuer, provider, stats, issued, faults };
}

function closeServer(server) {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections?.();
  });
}

/**
 * Starts both peers. Options:
 *   connectUrl      mcp-connect's public URL (required), e.g. "http://127.0.0.1:8080"
 *   providerName    provider key in mcp-connect's config (default "acme")
 *   accessTokenTtl  upstream access token lifetime in seconds (default 3600)
 *   upstreamAuthMethod  token endpoint auth of the upstream client (default client_secret_basic)
 *   log             function(line) for diagnostics (default: stderr)
 * Returns { identity, upstream, identityStats, upstreamStats, upstreamFaults, identityIssued,
 * upstreamIssued, close() } – the stats/issued objects are live (the same data as /__stats, /__issued).
 */
export async function startPeers({
  connectUrl,
  providerName = 'acme',
  accessTokenTtl = 3600,
  upstreamAuthMethod = 'client_secret_basic',
  log = (line) => process.stderr.write(`${line}\n`),
} = {}) {
  if (!connectUrl) throw new Error('connectUrl is required');
  const base = String(connectUrl).replace(/\/+$/, '');
  await loadProvider(log);
  const identity = await startIdentity({ connectUrl: base, log: (l) => log(`[identity] ${l}`) });
  const upstream = await startUpstream({
    connectUrl: base,
    providerName,
    accessTokenTtl: Number(accessTokenTtl),
    authMethod: upstreamAuthMethod,
    log: (l) => log(`[upstream] ${l}`),
  });
  return {
    identity: identity.issuer,
    upstream: upstream.issuer,
    identityStats: identity.stats,
    upstreamStats: upstream.stats,
    upstreamFaults: upstream.faults,
    identityIssued: identity.issued,
    upstreamIssued: upstream.issued,
    async close() {
      await Promise.all([closeServer(identity.server), closeServer(upstream.server)]);
    },
  };
}

function parseArgs(argv) {
  const opts = {};
  const names = {
    '--connect-url': 'connectUrl',
    '--provider-name': 'providerName',
    '--access-token-ttl': 'accessTokenTtl',
    '--upstream-auth-method': 'upstreamAuthMethod',
  };
  for (let i = 0; i < argv.length; i += 1) {
    let [flag, value] = argv[i].split(/=(.*)/s, 2);
    if (flag === '--ignore-stdin') { opts.ignoreStdin = true; continue; }
    if (flag === '--help' || flag === '-h') { opts.help = true; continue; }
    const key = names[flag];
    if (!key) throw new Error(`unknown argument ${flag}`);
    if (value === undefined) {
      i += 1;
      value = argv[i];
    }
    if (value === undefined) throw new Error(`${flag} needs a value`);
    opts[key] = value;
  }
  return opts;
}

async function main() {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`peers: ${err.message}\n`);
    process.exit(2);
  }
  if (opts.help || !opts.connectUrl) {
    process.stderr.write('usage: node peers.mjs --connect-url http://127.0.0.1:PORT [--provider-name acme] [--access-token-ttl 3600] [--upstream-auth-method client_secret_basic] [--ignore-stdin]\n');
    process.exit(opts.help ? 0 : 2);
  }
  const ttl = Number(opts.accessTokenTtl ?? 3600);
  if (!Number.isInteger(ttl) || ttl <= 0) {
    process.stderr.write('peers: --access-token-ttl must be a positive integer (seconds)\n');
    process.exit(2);
  }
  const peers = await startPeers({ ...opts, accessTokenTtl: ttl });
  let stopping = false;
  const stop = async (why) => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`peers: stopping (${why})\n`);
    const timer = setTimeout(() => process.exit(0), 2000);
    timer.unref();
    await peers.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  if (!opts.ignoreStdin) {
    process.stdin.on('end', () => stop('stdin closed'));
    process.stdin.on('close', () => stop('stdin closed'));
    process.stdin.on('error', () => stop('stdin error'));
    process.stdin.resume();
  }
  process.stdout.write(`${JSON.stringify({ identity: peers.identity, upstream: peers.upstream })}\n`);
}

const isMain = (() => {
  try {
    return realpathSync(process.argv[1] ?? '') === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
})();

if (isMain) {
  main().catch((err) => {
    process.stderr.write(`peers: ${err.stack ?? err}\n`);
    process.exit(1);
  });
}
