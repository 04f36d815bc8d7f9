// An MCP server (official TypeScript SDK, protocol 2025-11-25) whose tools need the user's token
// at a provider, and get it from mcp-connect:
//   whoami        asks with `elicitation/create` (URL mode), waits for the user to finish, then
//                 sends `notifications/elicitation/complete` and answers;
//   whoami_later  answers at once with the -32042 error (URLElicitationRequiredError); mcp-connect's
//                 event stream (GET /v1/events) says when the user is done, and the server sends
//                 `notifications/elicitation/complete` to the client that started it.
//
// It validates the user's MCP access token (a JWT from MCP_ISSUER for this server's resource) and
// forwards it to mcp-connect as `subject_token`, the proof of who is asking.
//
//   npm ci && MCP_CONNECT_URL=http://127.0.0.1:8080 MCP_CONNECT_API_KEY=... PROVIDER=acme \
//   PROVIDER_API=https://api.acme.test/whoami MCP_ISSUER=https://auth.example.com PORT=8766 npx tsx server.ts
// (Against `mcp-connect demo`: see docs/mcp-integration.md, "Run it against the demo".)
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { ElicitRequestURLParams, UrlElicitationRequiredError } from '@modelcontextprotocol/sdk/types.js';
import { createRemoteJWKSet, jwtVerify } from 'jose';

const env = (k: string) => process.env[k] ?? (() => { throw new Error(`set ${k}`); })();
const [CONNECT, KEY, PROVIDER, PROVIDER_API] = ['MCP_CONNECT_URL', 'MCP_CONNECT_API_KEY', 'PROVIDER', 'PROVIDER_API'].map(env);
const PORT = Number(process.env.PORT ?? 8766);
// MCP authorization: the user's access token must be a JWT from MCP_ISSUER (its JWKS) for this
// server's resource (MCP_AUDIENCE; against `mcp-connect demo`, whose tokens are all for
// http://127.0.0.1:8765/mcp, that value whatever PORT is); the subject is its `sub`. Without
// MCP_ISSUER, fixed tokens (DEMO_USERS=token=user,...) stand in.
const ISSUER = process.env.MCP_ISSUER;
const AUDIENCE = process.env.MCP_AUDIENCE ?? `http://127.0.0.1:${PORT}/mcp`;
const USERS = new Map((process.env.DEMO_USERS ?? '').split(',').filter(Boolean).map((p) => p.split('=') as [string, string]));
let jwks: ReturnType<typeof createRemoteJWKSet> | undefined;
async function verify(token: string): Promise<string | undefined> {
  if (!ISSUER) return USERS.get(token);
  if (!jwks) {
    const meta = await (await fetch(`${ISSUER}/.well-known/openid-configuration`)).json();
    jwks = createRemoteJWKSet(new URL(meta.jwks_uri));
  }
  try {
    const { payload } = await jwtVerify(token, jwks, { issuer: ISSUER, audience: AUDIENCE });
    return payload.sub;
  } catch { return undefined; }
}

const connectApi = async (body: object) => {
  const r = await fetch(`${CONNECT}/v1/tokens`, { method: 'POST', body: JSON.stringify(body), headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' } });
  return { ok: r.ok, body: await r.json() };
};
const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });
const callProvider = async (token: string) => {
  const me = await (await fetch(PROVIDER_API, { headers: { authorization: `Bearer ${token}` } })).json();
  return text(`${PROVIDER} says you are ${me.sub}`);
};

// Elicitations whose completion a client is waiting to hear about: id -> notifier for its session.
const completions = new Map<string, () => Promise<void>>();

function build(subject: string) {
  const mcp = new McpServer({ name: 'whoami-typescript', version: '0.0.0' });
  // Proof of subject: the token that came with THIS call (the SDK hands each request's
  // `req.auth` to the tool as `extra.authInfo`), checked again by mcp-connect. Not the session's
  // first token: the client refreshes its token while the session lives on, and mcp-connect
  // refuses an expired one.
  const token = (authInfo: AuthInfo | undefined, more = {}) => {
    const proof = ISSUER ? { subject_token: authInfo?.token } : {};
    return connectApi({ subject, ...proof, provider: PROVIDER, elicit: true, ...more });
  };

  mcp.registerTool('whoami', { description: `Who you are at ${PROVIDER} (asks you to connect first if needed)` }, async ({ authInfo }) => {
    const first = await token(authInfo);
    if (first.ok) return callProvider(first.body.access_token);
    const el = first.body.elicitation;
    if (!el) throw new Error(first.body.message);
    const { action } = await mcp.server.elicitInput(el.mcp['2025-11-25'].params as ElicitRequestURLParams);
    if (action !== 'accept') return text(`Not connected to ${PROVIDER}: you chose to ${action}.`);
    // `accept` only means the user opened the URL: mcp-connect says when the flow is done.
    for (let round = 0; round < 5; round += 1) { // a cap, then a friendly answer below
      const done = await token(authInfo, { elicitation_id: el.id, wait_seconds: 60 });
      if (done.ok) {
        await mcp.server.createElicitationCompletionNotifier(el.id)();
        return callProvider(done.body.access_token);
      }
      if (done.body.error === 'authorization_declined') break;
    }
    return text(`Still not connected to ${PROVIDER}. Open the link whenever you are ready, then ask again.`);
  });

  mcp.registerTool('whoami_later', { description: `Who you are at ${PROVIDER}; retry after connecting` }, async ({ authInfo }) => {
    const r = await token(authInfo);
    if (r.ok) return callProvider(r.body.access_token);
    const el = r.body.elicitation;
    if (!el) throw new Error(r.body.message);
    completions.set(el.id, mcp.server.createElicitationCompletionNotifier(el.id));
    const { error } = el.mcp['2025-11-25'];
    throw new UrlElicitationRequiredError(error.data.elicitations, error.message);
  });
  return mcp;
}

// Listens to mcp-connect's event stream and tells each waiting client that its elicitation ended.
async function listen() {
  for (;;) {
    try {
      const r = await fetch(`${CONNECT}/v1/events`, { headers: { authorization: `Bearer ${KEY}` } });
      let buf = '';
      for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
        buf += Buffer.from(chunk).toString('utf8');
        for (let end; (end = buf.indexOf('\n\n')) >= 0; buf = buf.slice(end + 2)) {
          const data = buf.slice(0, end).split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5)).join('');
          const id = data && JSON.parse(data).data.elicitation_id;
          const notify = id && completions.get(id);
          if (notify) { completions.delete(id); await notify().catch(() => {}); }
        }
      }
    } catch { /* reconnect below */ }
    await new Promise((r) => { setTimeout(r, 1000); });
  }
}

const sessions = new Map<string, { subject: string; transport: StreamableHTTPServerTransport }>();

http.createServer(async (req: http.IncomingMessage & { auth?: AuthInfo }, res) => {
  const accessToken = (req.headers.authorization ?? '').replace(/^Bearer /i, '');
  const subject = await verify(accessToken);
  if (!subject) { res.writeHead(401, { 'www-authenticate': 'Bearer' }).end(); return; }
  // Every request's own token, for its tool calls (`extra.authInfo`).
  req.auth = { token: accessToken, clientId: '', scopes: [], extra: { subject } };
  const id = req.headers['mcp-session-id'] as string | undefined;
  let session = id ? sessions.get(id) : undefined;
  if (session && session.subject !== subject) { res.writeHead(403).end(); return; }
  if (!session) {
    if (id) { res.writeHead(404).end(); return; }
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: randomUUID,
      onsessioninitialized: (sid) => { sessions.set(sid, { subject, transport }); },
    });
    transport.onclose = () => { if (transport.sessionId) sessions.delete(transport.sessionId); };
    await build(subject).connect(transport);
    session = { subject, transport };
  }
  await session.transport.handleRequest(req, res);
}).listen(PORT, '127.0.0.1', () => { void listen(); });
