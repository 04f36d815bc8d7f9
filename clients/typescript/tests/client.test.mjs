// mcp-connect-client (the built dist/, as installed) against the real `mcp-connect demo`
// (MCP_CONNECT_BIN, default target/debug/mcp-connect), and its MCP helper with the official
// TypeScript SDK client.
//
//   npm ci --prefix clients/typescript && node --test clients/typescript/tests/

import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { ElicitRequestSchema, ElicitationCompleteNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import {
  Client, ConnectError, MCP_2026_07_28, TRANSPORT_ERROR, Verifier, WebhookError,
  createParams, inputRequest, inputRequiredResult, urlElicitationRequiredError,
} from 'mcp-connect-client';
import { Completions, DEFAULT_MAX_ROUNDS, NotConnectedError, tokenOrElicit } from 'mcp-connect-client/mcp-sdk';
import { mcpToken, sleep, startDemo, userOpens } from './demo.mjs';

let demo;
let connect;
const STEP = { timeout: 90_000 };

before(async () => {
  demo = await startDemo();
  connect = new Client(demo.base, demo.apiKey);
});
after(async () => { await demo?.stop(); });

const whoami = async (accessToken) => {
  const r = await fetch(`${demo.base}/dev/sandbox/api/whoami`, { headers: { authorization: `Bearer ${accessToken}` } });
  assert.equal(r.status, 200);
  return (await r.json()).sub;
};
const rejects = async (p) => {
  try { await p; } catch (e) { return e; }
  assert.fail('expected a rejection');
};

describe('the API against the demo', () => {
  test('token, elicitation, wait, connections, revoke and the event stream', STEP, async () => {
    let e = await rejects(connect.token({ provider: 'sandbox', subject: 'alice' }));
    assert.ok(e instanceof ConnectError);
    assert.deepEqual([e.code, e.status, e.elicitation], ['not_connected', 404, undefined]);

    e = await rejects(connect.token({ provider: 'sandbox', subject: 'alice', elicit: true }));
    assert.deepEqual([e.code, e.status, e.needsAuthorization], ['authorization_required', 409, true]);
    const el = e.elicitation;
    assert.ok(el.url.startsWith(`${demo.base}/connect/`), el.url);
    assert.deepEqual([el.subject, el.provider, el.status], ['alice', 'sandbox', 'pending']);
    assert.match(el.message, /Sandbox/);
    assert.equal(inputRequest(el).params.url, el.url);
    assert.deepEqual(inputRequiredResult(el, 'connect'), { resultType: 'input_required', inputRequests: { connect: el.mcp[MCP_2026_07_28] }, requestState: el.request_state });
    assert.equal(createParams(el).elicitationId, el.id);
    assert.equal(urlElicitationRequiredError(el).code, -32042);

    const created = await connect.createElicitation({ provider: 'sandbox', subject: 'alice' });
    assert.ok(created.url.startsWith(`${demo.base}/connect/`));
    assert.equal((await connect.getElicitation(el.id)).status, 'pending');
    const t0 = Date.now();
    assert.equal((await connect.waitElicitation(el.id, 1)).status, 'pending');
    assert.ok(Date.now() - t0 >= 900, 'the wait held the request');

    const user = sleep(500).then(() => userOpens(el.url, 'alice'));
    const done = await connect.waitElicitation(el.id, 30);
    await user;
    assert.equal(done.status, 'completed');
    assert.ok(done.connection_id);

    const token = await connect.token({ provider: 'sandbox', subject: 'alice', requestState: el.request_state, waitSeconds: 5 });
    assert.equal(token.connection_id, done.connection_id);
    assert.equal(await whoami(token.access_token), 'alice');
    assert.equal((await connect.token({ provider: 'sandbox', subject: 'alice', scopes: ['api'] })).connection_id, token.connection_id);
    // Proof of subject: alice's MCP access token alone names her.
    const proved = await connect.token({ provider: 'sandbox', subjectToken: await mcpToken(demo.base, 'alice') });
    assert.equal(proved.connection_id, token.connection_id);

    const [conn, ...more] = await connect.connections({ subject: 'alice' });
    assert.deepEqual(more, []);
    assert.deepEqual([conn.id, conn.subject, conn.provider, conn.status], [token.connection_id, 'alice', 'sandbox', 'active']);
    assert.equal(conn.has_refresh_token, true, 'the sandbox hands out refresh tokens');
    const refreshed = await connect.token({ provider: 'sandbox', subject: 'alice', forceRefresh: true });
    assert.notEqual(refreshed.access_token, token.access_token, 'forceRefresh refreshed');
    assert.equal(await whoami(refreshed.access_token), 'alice');
    assert.deepEqual((await connect.connections({ subjectToken: await mcpToken(demo.base, 'alice') })).map((c) => c.id), [conn.id]);

    const gone = await connect.revoke(conn.id);
    assert.equal(gone.connection_id, conn.id);
    assert.equal(gone.tokens_deleted, true);
    assert.deepEqual((await connect.connections({ subject: 'alice' })).filter((c) => c.status === 'active'), []);
    e = await rejects(connect.token({ provider: 'sandbox', subject: 'alice' }));
    assert.equal(e.code, 'not_connected');

    // The completion signal for this client, replayed from the start of the stream.
    const seen = [];
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), 15_000);
    for await (const m of connect.events({ lastEventId: 0, signal: stop.signal })) {
      seen.push([m.event.type, m.event.data.elicitation_id ?? m.event.data.connection_id]);
      if (m.event.type === 'connection.revoked' && m.event.data.connection_id === conn.id) break;
    }
    clearTimeout(timer);
    stop.abort();
    assert.ok(seen.some(([type, id]) => type === 'elicitation.completed' && id === el.id), JSON.stringify(seen));
  });

  test('a second account is added, listed, named and reported', STEP, async () => {
    let e = await rejects(connect.token({ provider: 'sandbox', subject: 'kate', elicit: true }));
    const el = e.elicitation;
    await userOpens(el.url, 'kate');
    const first = await connect.token({ provider: 'sandbox', subject: 'kate' });
    assert.deepEqual(first.account, { id: 'kate', label: 'kate' });

    // A scope the grant lacks, asked without elicit: what is missing, not a connect URL.
    e = await rejects(connect.token({ provider: 'sandbox', subject: 'kate', scopes: ['api', 'admin'] }));
    assert.deepEqual([e.code, e.status, e.missingScopes, e.isInsufficientScope, e.elicitation], ['insufficient_scope', 403, ['admin'], true, undefined]);

    const added = await connect.createElicitation({ provider: 'sandbox', subject: 'kate', addAccount: true });
    assert.notEqual(added.id, el.id);
    await userOpens(added.url, 'kate', 'continue', 'kate-work');
    const conns = new Map((await connect.connections({ subject: 'kate' })).map((c) => [c.account?.id, c]));
    assert.deepEqual([...conns.keys()].sort(), ['kate', 'kate-work']);
    assert.deepEqual([conns.get('kate').default, conns.get('kate-work').default], [true, false]);
    const work = conns.get('kate-work');
    assert.deepEqual([work.account, work.account_label], [{ id: 'kate-work', label: 'kate-work' }, 'kate-work']);

    // Without `account`: the default one; with it: the one named.
    assert.equal((await connect.token({ provider: 'sandbox', subject: 'kate' })).connection_id, first.connection_id);
    const named = await connect.token({ provider: 'sandbox', subject: 'kate', account: 'kate-work' });
    assert.deepEqual([named.connection_id, named.account], [work.id, work.account]);
    assert.equal(await whoami(named.access_token), 'kate-work');
    e = await rejects(connect.token({ provider: 'sandbox', subject: 'kate', account: 'kate-home' }));
    assert.equal(e.code, 'not_connected');

    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), 15_000);
    let event;
    for await (const m of connect.events({ lastEventId: 0, signal: stop.signal })) {
      if (m.event.data.elicitation_id === added.id) { event = m.event; break; }
    }
    clearTimeout(timer);
    stop.abort();
    assert.deepEqual([event?.type, event?.data.account], ['elicitation.completed', work.account]);
  });

  test('a user who declines ends the wait with authorization_declined', STEP, async () => {
    const el = await connect.createElicitation({ provider: 'sandbox', subject: 'dora' });
    const user = sleep(300).then(() => userOpens(el.url, 'dora', 'decline'));
    const e = await rejects(connect.token({ provider: 'sandbox', subject: 'dora', elicitationId: el.id, waitSeconds: 30 }));
    await user;
    assert.equal(e.isDeclined, true, String(e));
    assert.equal(e.elicitationId, el.id);
    assert.equal((await connect.getElicitation(el.id)).status, 'declined');
  });

  test('errors carry the API code, message and status', STEP, async () => {
    let e = await rejects(new Client(demo.base, 'not-the-key').token({ provider: 'sandbox', subject: 'alice' }));
    assert.deepEqual([e.code, e.status], ['unauthorized', 401]);
    assert.ok(e.apiMessage);
    e = await rejects(connect.getElicitation('no-such-elicitation'));
    assert.deepEqual([e.code, e.status], ['not_found', 404]);
    e = await rejects(connect.token({ provider: 'sandbox', subject: 'alice', requestState: 'v1.forged', waitSeconds: 1 }));
    assert.deepEqual([e.code, e.status, e.reason], ['invalid_request_state', 400, 'invalid']);
    e = await rejects(connect.token({ provider: 'sandbox', subjectToken: 'not-a-token' }));
    assert.deepEqual([e.code, e.status], ['invalid_subject_token', 401]);
    e = await rejects(new Client('http://127.0.0.1:9', 'k', { maxRetries: 0 }).connections({ subject: 'alice' }));
    assert.deepEqual([e.code, e.status], [TRANSPORT_ERROR, undefined]);
    assert.ok(!JSON.stringify(connect).includes(demo.apiKey), 'the key stays out of JSON');
  });
});

describe('retries (a stub fetch counts the calls)', () => {
  const stub = (answers) => {
    const calls = [];
    const last = answers[answers.length - 1];
    const fetchStub = async (url, init) => {
      calls.push(`${init.method} ${new URL(url).pathname}`);
      const a = answers.length > 1 ? answers.shift() : last;
      if (a instanceof Error) throw a;
      return new Response(JSON.stringify(a.body), { status: a.status, headers: a.headers ?? {} });
    };
    return { client: new Client('http://connect.test', 'k', { fetch: fetchStub }), calls };
  };
  const limited = { status: 429, headers: { 'retry-after': '0' }, body: { error: 'rate_limited', message: 'slow down' } };
  const ok = { status: 200, body: { access_token: 't', token_type: 'Bearer', connection_id: 'c' } };

  test('429 with a short Retry-After is retried, a bounded number of times', async () => {
    let s = stub([limited, limited, ok]);
    assert.equal((await s.client.token({ provider: 'p', subject: 's' })).access_token, 't');
    assert.equal(s.calls.length, 3);
    s = stub([limited, limited, limited, ok]);
    const e = await rejects(s.client.token({ provider: 'p', subject: 's' }));
    assert.deepEqual([e.code, e.retryAfter, s.calls.length], ['rate_limited', 0, 3]);
  });

  test('a long Retry-After reaches the caller at once', async () => {
    const s = stub([{ status: 429, headers: { 'retry-after': '120' }, body: { error: 'rate_limited', message: 'm' } }]);
    const e = await rejects(s.client.connections({ subject: 's' }));
    assert.deepEqual([e.retryAfter, s.calls.length], [120, 1]);
  });

  test('transport failures are retried for reads only', async () => {
    const down = new TypeError('fetch failed');
    let s = stub([down, { status: 200, body: { connections: [] } }]);
    assert.deepEqual(await s.client.connections({ subject: 's' }), []);
    assert.equal(s.calls.length, 2);
    for (const call of [(c) => c.token({ provider: 'p', subject: 's' }), (c) => c.revoke('conn'), (c) => c.createElicitation({ provider: 'p', subject: 's' })]) {
      s = stub([down, { status: 200, body: {} }]);
      const e = await rejects(call(s.client));
      assert.deepEqual([e.code, s.calls.length], [TRANSPORT_ERROR, 1]);
    }
  });
});

describe('webhook verification', () => {
  // Signed by the service's own `mcp_connect::signals::events::sign` (clients/rust/tests/
  // webhook_vectors.rs checks that it produces each one); the last is an event as it sends them.
  const VECTORS = JSON.parse(fs.readFileSync(new URL('../../testdata/webhook-vectors.json', import.meta.url), 'utf8'))
    .vectors.map((v) => [v.secret, v.webhook_id, v.webhook_timestamp, v.body, v.signature]);

  test('vectors signed by the service verify, and any change is refused', () => {
    assert.ok(VECTORS.length >= 2);
    for (const [secret, id, ts, body, sig] of VECTORS) {
      const v = new Verifier(secret);
      const now = Number(ts);
      v.verifySignature(id, ts, sig, body, now);
      v.verifySignature(id, ts, `v1,bm9wZQ== ${sig}`, Buffer.from(body), now);
      for (const bad of [[id, ts, sig, `${body} `], ['msg_other', ts, sig, body], [id, String(now + 1), sig, body], [id, ts, sig.replace('v1,', 'v2,'), body]]) {
        assert.throws(() => v.verifySignature(...bad, now), WebhookError);
      }
      assert.throws(() => v.verifySignature(id, ts, sig, body, now + 301), /too old/);
      assert.throws(() => new Verifier(`whsec_${Buffer.from('another key of 24 bytes!').toString('base64')}`).verifySignature(id, ts, sig, body, now), WebhookError);
    }
  });

  test('verify reads the headers (Node or fetch style) and parses the event', () => {
    const [secret, id, ts, body, sig] = VECTORS[VECTORS.length - 1];
    const v = new Verifier(secret);
    const event = v.verify({ 'Webhook-Id': id, 'webhook-timestamp': ts, 'webhook-signature': sig }, Buffer.from(body), Number(ts));
    assert.deepEqual([event.type, event.data.subject, event.data.provider], ['elicitation.completed', 'alice', 'sandbox']);
    assert.deepEqual(event.data.account, { id: 'alice-work', label: 'alice-work' });
    assert.equal(v.verify(new Headers({ 'webhook-id': id, 'webhook-timestamp': ts, 'webhook-signature': sig }), body, Number(ts)).type, 'elicitation.completed');
    assert.throws(() => v.verify({ 'webhook-id': id, 'webhook-timestamp': ts }, body, Number(ts)), /webhook-signature/);
  });

  test('secrets must be whsec_ + base64', () => {
    for (const bad of ['MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'whsec_', 'whsec_not base64!']) assert.throws(() => new Verifier(bad), WebhookError);
    assert.ok(!JSON.stringify(new Verifier('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')).includes('MfKQ'));
  });
});

describe('tokenOrElicit in an McpServer tool, called by the official SDK client (2025-11-25)', () => {
  async function call(subject, { url = true, onElicit, opts } = {}) {
    const mcp = new McpServer({ name: 'helper-test', version: '0.0.0' });
    mcp.registerTool('whoami', { description: 'who you are at the sandbox' }, async () => {
      const token = await tokenOrElicit(mcp.server, connect, { provider: 'sandbox', subject }, opts);
      return { content: [{ type: 'text', text: `sandbox says you are ${await whoami(token.access_token)}` }] };
    });
    const client = new McpClient({ name: 'helper-test-client', version: '0.0.0' }, { capabilities: { elicitation: url ? { url: {} } : { form: {} } } });
    const asked = [];
    const completed = [];
    const followUps = [];
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params);
      const { action, then } = onElicit(req.params);
      if (then) followUps.push(then());
      return { action };
    });
    client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => { completed.push(n.params.elicitationId); });
    const [ct, st] = InMemoryTransport.createLinkedPair();
    await mcp.connect(st);
    await client.connect(ct);
    try {
      let result;
      let error;
      try { result = await client.callTool({ name: 'whoami', arguments: {} }, undefined, { timeout: 80_000 }); } catch (e) { error = e; }
      await Promise.all(followUps);
      for (let i = 0; i < 20 && result && !result.isError && completed.length === 0; i += 1) await sleep(50);
      return { result, error, asked, completed, text: result?.content?.map((c) => c.text).join('') };
    } finally {
      await client.close();
    }
  }

  test('elicitation/create, the user connects, the completion notification, provider data', STEP, async () => {
    const r = await call('erin', { onElicit: (p) => ({ action: 'accept', then: () => sleep(500).then(() => userOpens(p.url, 'erin')) }) });
    assert.equal(r.error, undefined, String(r.error));
    assert.equal(r.text, 'sandbox says you are erin');
    assert.equal(r.asked.length, 1);
    assert.equal(r.asked[0].mode, 'url');
    assert.ok(r.asked[0].url.startsWith(`${demo.base}/connect/`));
    assert.deepEqual(r.completed, [r.asked[0].elicitationId]);
  });

  test('a named account that is not connected is asked for, then served', STEP, async () => {
    const mcp = new McpServer({ name: 'helper-test', version: '0.0.0' });
    mcp.registerTool('whoami', { description: 'who you are at the sandbox' }, async () => {
      const token = await tokenOrElicit(mcp.server, connect, { provider: 'sandbox', subject: 'lena', account: 'lena-work' });
      return { content: [{ type: 'text', text: `sandbox says you are ${await whoami(token.access_token)}` }] };
    });
    const client = new McpClient({ name: 'helper-test-client', version: '0.0.0' }, { capabilities: { elicitation: { url: {} } } });
    const users = [];
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      users.push(sleep(500).then(() => userOpens(req.params.url, 'lena', 'continue', 'lena-work')));
      return { action: 'accept' };
    });
    const [ct, st] = InMemoryTransport.createLinkedPair();
    await mcp.connect(st);
    await client.connect(ct);
    try {
      const result = await client.callTool({ name: 'whoami', arguments: {} }, undefined, { timeout: 80_000 });
      await Promise.all(users);
      assert.equal(users.length, 1);
      assert.equal(result.content.map((c) => c.text).join(''), 'sandbox says you are lena-work');
    } finally {
      await client.close();
    }
  });

  test('decline in the client ends the call with a sentence', STEP, async () => {
    const r = await call('fred', { onElicit: () => ({ action: 'decline' }) });
    assert.equal(r.result.isError, true);
    assert.equal(r.text, 'Not connected to sandbox: you chose to decline.');
    assert.deepEqual(r.completed, []);
  });

  test('a user who never finishes gets an answer after maxRounds', STEP, async () => {
    const t0 = Date.now();
    const r = await call('gwen', { onElicit: () => ({ action: 'accept' }), opts: { maxRounds: 2, waitSeconds: 1 } });
    assert.equal(r.result.isError, true);
    assert.match(r.text, /^Still not connected to sandbox/);
    assert.equal(r.asked.length, 1);
    assert.ok(Date.now() - t0 < 20_000);
    assert.equal(DEFAULT_MAX_ROUNDS, 3);
    assert.ok(new NotConnectedError('m', 'rounds', 'p') instanceof Error);
  });

  test("mode 'error': -32042 to a client with URL elicitation; Completions notifies it from the event stream; the retry succeeds", STEP, async () => {
    const completions = new Completions(connect);
    const stop = new AbortController();
    // From the stream's start: earlier tests' events replay too, and are not this test's to notify.
    const listening = completions.listen({ signal: stop.signal, retryMs: 100, lastEventId: 0 });
    const mcp = new McpServer({ name: 'helper-test', version: '0.0.0' });
    mcp.registerTool('whoami', { description: 'who you are at the sandbox' }, async () => {
      const token = await tokenOrElicit(mcp.server, connect, { provider: 'sandbox', subject: 'ines' }, { mode: 'error', completions });
      return { content: [{ type: 'text', text: `sandbox says you are ${await whoami(token.access_token)}` }] };
    });
    const client = new McpClient({ name: 'helper-test-client', version: '0.0.0' }, { capabilities: { elicitation: { url: {} } } });
    client.setRequestHandler(ElicitRequestSchema, async () => assert.fail('no elicitation/create expected'));
    const completed = [];
    client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => { completed.push(n.params.elicitationId); });
    const [ct, st] = InMemoryTransport.createLinkedPair();
    await mcp.connect(st);
    await client.connect(ct);
    try {
      const e = await rejects(client.callTool({ name: 'whoami', arguments: {} }));
      assert.equal(e.code, -32042, String(e));
      const [params] = e.data.elicitations;
      assert.ok(params.url.startsWith(`${demo.base}/connect/`));
      assert.equal(completions.size, 1);
      await sleep(300);
      assert.deepEqual(completed, [], 'nothing before the user finished');
      await userOpens(params.url, 'ines');
      for (let i = 0; i < 100 && completed.length === 0; i += 1) await sleep(100);
      assert.deepEqual(completed, [params.elicitationId], 'notifications/elicitation/complete reached the client');
      assert.equal(completions.size, 0, 'forgotten once notified');
      const result = await client.callTool({ name: 'whoami', arguments: {} });
      assert.equal(result.content.map((c) => c.text).join(''), 'sandbox says you are ines');
    } finally {
      stop.abort();
      await listening;
      await client.close();
    }
  });

  test('a client without URL elicitation gets -32042 with the connect URL', STEP, async () => {
    const r = await call('hana', { url: false, onElicit: () => assert.fail('no elicitation/create expected') });
    assert.equal(r.error?.code, -32042, String(r.error));
    const [params] = r.error.data.elicitations;
    assert.equal(params.mode, 'url');
    assert.ok(params.url.startsWith(`${demo.base}/connect/`));
    assert.ok(params.elicitationId);
  });
});
