// An MCP server (official TypeScript SDK, protocol 2025-11-25) whose tools need the user's token
// at a provider, and get it from mcp-connect:
//   whoami        asks with `elicitation/create` (URL mode), waits for the user to finish, then
//                 sends `notifications/elicitation/complete` and answers;
//   whoami_later  answers at once with the -32042 error (URLElicitationRequiredError); mcp-connect's
//                 event stream (GET /v1/events) says when the user is done, and the server sends
//                 `notifications/elicitation/complete` to the client that started it.
// Both are one call of `tokenOrElicit` from the mcp-connect-client package (clients/typescript),
// which talks to mcp-connect and builds the MCP answers; what is left here is the tool logic.
//   whoami_via_proxy  never holds the token: mcp-connect's proxy (/v1/proxy/PROVIDER/PROXY_PATH,
//                 default `whoami`) calls the provider with it. "Not connected" is asked as
//                 `whoami` asks it, through the API alone (what a `token_access = "proxy"` client
//                 may use: no /v1/tokens).
//
// It validates the user's MCP access token (a JWT from MCP_ISSUER for this server's resource) and
// forwards it to mcp-connect as `subject_token`, the proof of who is asking.
//
//   npm ci && MCP_CONNECT_URL=http://127.0.0.1:8080 MCP_CONNECT_API_KEY=... PROVIDER=acme \
//   PROVIDER_API=https://api.acme.test/whoami MCP_ISSUER=https://auth.example.com PORT=8766 npx tsx server.ts
// (PROXY_PATH: whoami_via_proxy's path below the provider's API base URL, default `whoami`.)
// (Against `mcp-connect demo`: see docs/mcp-integration.md, "Run it against the demo".)
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { UrlElicitationRequiredError, type ElicitRequestURLParams } from '@modelcontextprotocol/sdk/types.js';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { Client, ConnectError, MCP_2025_11_25, type ProxyRequest, type Token } from 'mcp-connect-client';
import { Completions, NotConnectedError, tokenOrElicit } from 'mcp-connect-client/mcp-sdk';

const env = (k: string) => process.env[k] ?? (() => { throw new Error(`set ${k}`); })();
const [CONNECT, KEY, PROVIDER, PROVIDER_API] = ['MCP_CONNECT_URL', 'MCP_CONNECT_API_KEY', 'PROVIDER', 'PROVIDER_API'].map(env);
const PORT = Number(process.env.PORT ?? 8766);
const PROXY_PATH = process.env.PROXY_PATH ?? 'whoami';
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

const connect = new Client(CONNECT, KEY);
const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });
const callProvider = async (token: Token) => {
  const me = await (await fetch(PROVIDER_API, { headers: { authorization: `Bearer ${token.access_token}` } })).json();
  return text(`${PROVIDER} says you are ${me.sub}`);
};
// Through the proxy: the provider's answer comes back; the token stays at mcp-connect.
const viaProxy = async (ask: ProxyRequest) => {
  const r = await connect.proxy(ask);
  if (!r.ok) return { ...text(`${PROVIDER} answered ${r.status}`), isError: true };
  const me = await r.json();
  return text(`${PROVIDER} says you are ${me.sub} (through mcp-connect's proxy)`);
};
// "Not connected" for the proxy, as `tokenOrElicit` asks it for `whoami`, through the API alone:
// a connect URL (POST /v1/elicitations), `elicitation/create` (the -32042 error for a client
// without URL elicitation), then at most three waits of 20 s at mcp-connect (GET
// /v1/elicitations/{id}?wait=20) and `notifications/elicitation/complete`.
async function connectFirst(server: Server, who: { provider: string; subject: string; subjectToken?: string }) {
  const el = await connect.createElicitation(who);
  const era = el.mcp[MCP_2025_11_25];
  if (!server.getClientCapabilities()?.elicitation?.url) {
    throw new UrlElicitationRequiredError(era.error.data.elicitations as ElicitRequestURLParams[], era.error.message);
  }
  const { action } = await server.elicitInput(era.params as ElicitRequestURLParams);
  if (action !== 'accept') throw new NotConnectedError(`Not connected to ${PROVIDER}: you chose to ${action}.`, action, PROVIDER);
  for (let round = 0; round < 3; round += 1) {
    // `accept` only means the user went to the URL: mcp-connect says when the flow is done.
    const now = await connect.waitElicitation(el.id, 20);
    if (now.status === 'completed') {
      await server.createElicitationCompletionNotifier(el.id)();
      return;
    }
    if (now.status === 'declined') throw new NotConnectedError(`Not connected to ${PROVIDER}: you declined.`, 'declined', PROVIDER);
    if (now.status !== 'pending') throw new NotConnectedError(`Not connected to ${PROVIDER}: the connect link ${now.status === 'expired' ? 'expired' : 'failed'}.`, now.status, PROVIDER);
  }
  throw new NotConnectedError(`Still not connected to ${PROVIDER}. Open the link whenever you are ready, then ask again.`, 'rounds', PROVIDER);
}
// Tells each client answered -32042 when its user is done, from mcp-connect's event stream
// (GET /v1/events): one listener for the whole process.
const completions = new Completions(connect);

function build(subject: string) {
  const mcp = new McpServer({ name: 'whoami-typescript', version: '0.0.0' });
  // Proof of subject: the token that came with THIS call (the SDK hands each request's
  // `req.auth` to the tool as `extra.authInfo`), checked again by mcp-connect. Not the session's
  // first token: the client refreshes its token while the session lives on, and mcp-connect
  // refuses an expired one.
  const who = (authInfo: AuthInfo | undefined) => ({ provider: PROVIDER, subject, subjectToken: ISSUER ? authInfo?.token : undefined });

  // elicitation/create, then waits for the user (at most three rounds of 20 s), sends
  // notifications/elicitation/complete and returns the token.
  mcp.registerTool('whoami', { description: `Who you are at ${PROVIDER} (asks you to connect first if needed)` }, async ({ authInfo }) => {
    try {
      return await callProvider(await tokenOrElicit(mcp.server, connect, who(authInfo)));
    } catch (e) {
      // Declined, cancelled or not finished in time: a plain answer rather than a tool error.
      if (e instanceof NotConnectedError) return text(e.message);
      throw e;
    }
  });

  // Answers at once with -32042 (URLElicitationRequiredError); `completions` tells the client
  // when to call again.
  mcp.registerTool('whoami_later', { description: `Who you are at ${PROVIDER}; retry after connecting` }, async ({ authInfo }) => (
    callProvider(await tokenOrElicit(mcp.server, connect, who(authInfo), { mode: 'error', completions }))
  ));

  // The proxy: mcp-connect calls the provider with the user's token; this server never sees it.
  mcp.registerTool('whoami_via_proxy', { description: `Who you are at ${PROVIDER}, asked through mcp-connect's proxy (asks you to connect first if needed)` }, async ({ authInfo }) => {
    const ask = { ...who(authInfo), path: PROXY_PATH };
    try {
      return await viaProxy(ask);
    } catch (e) {
      // mcp-connect's own answer (never the provider's 404): ask the user to connect.
      if (!(e instanceof ConnectError && (e.code === 'not_connected' || e.code === 'reauthorization_required'))) throw e;
    }
    try {
      await connectFirst(mcp.server, who(authInfo));
    } catch (e) {
      if (e instanceof NotConnectedError) return text(e.message);
      throw e;
    }
    return viaProxy(ask);
  });
  return mcp;
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
}).listen(PORT, '127.0.0.1', () => {
  // Reconnects by itself; a failure is worth a line (a wrong API key shows up here first).
  void completions.listen({ onError: (e) => { console.error(`mcp-connect event stream: ${e}`); } });
});
