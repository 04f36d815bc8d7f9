// The proxy (`Client#proxy`, `ANY /v1/proxy/{provider}/{path}`) in mcp-connect-client (the built
// dist/, as installed): what a call sends and how answers are told apart, against a stub fetch;
// then real round trips through the real `mcp-connect demo` (MCP_CONNECT_BIN, default
// target/debug/mcp-connect) to its sandbox provider's whoami.
//
//   node --test clients/typescript/tests/proxy.test.mjs

import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { Client, ConnectError, OWN_ERROR_HEADER, TOKEN_REFRESHED_HEADER, TRANSPORT_ERROR, tokenRefreshed } from 'mcp-connect-client';
import { mcpToken, startDemo, userOpens } from './demo.mjs';

const rejects = async (p) => {
  try { await p; } catch (e) { return e; }
  assert.fail('expected a rejection');
};

describe('what a proxied call sends and how its answer is read (a stub fetch)', () => {
  /** A client whose calls get `answers` ({status, body, headers} or an Error) in turn. */
  function stub(...answers) {
    const sent = [];
    const fetchStub = async (url, init) => {
      sent.push({ url: String(url), init, headers: new Headers(init.headers) });
      const a = answers.shift();
      if (a instanceof Error) throw a;
      return new Response(typeof a.body === 'string' ? a.body : JSON.stringify(a.body), { status: a.status, headers: a.headers ?? {} });
    };
    return { client: new Client('http://connect.test/base/', 'the-api-key', { fetch: fetchStub }), sent };
  }

  test('the path as given below /v1/proxy/{provider}/, the query, the method, the body and who it is for', async () => {
    const { client, sent } = stub({ status: 201, body: { ok: 1 }, headers: { 'x-provider': 'yes' } });
    const r = await client.proxy({
      provider: 'github', path: '/repos/o/r/issues?state=open', method: 'post', subjectToken: 'mcp-token', account: 'work',
      headers: { 'content-type': 'application/json', 'x-custom': 'kept', 'subject-token': 'not this one', 'connect-subject': 'nor this', authorization: 'Bearer not-this' },
      query: { labels: 'a b' }, body: '{"title":"t"}',
    });
    assert.equal(r.status, 201);
    assert.equal(r.headers.get('x-provider'), 'yes');
    assert.deepEqual(await r.json(), { ok: 1 });
    const [s] = sent;
    assert.equal(s.url, 'http://connect.test/base/v1/proxy/github/repos/o/r/issues?state=open&labels=a+b');
    assert.equal(s.init.method, 'POST');
    assert.equal(s.init.body, '{"title":"t"}');
    assert.equal(s.init.redirect, 'manual', 'a redirect is the provider\'s answer, not followed');
    assert.equal(s.headers.get('authorization'), 'Bearer the-api-key');
    assert.equal(s.headers.get('subject-token'), 'mcp-token');
    assert.equal(s.headers.get('connect-subject'), null, 'who the call is for comes from the request\'s fields alone');
    assert.equal(s.headers.get('connect-account'), 'work');
    assert.equal(s.headers.get('x-custom'), 'kept');
    assert.ok(!s.url.includes('mcp-token'), 'the MCP token never goes into the URL');

    const { client: c2, sent: sent2 } = stub({ status: 200, body: {} });
    await c2.proxy({ provider: 'sandbox', path: 'whoami', subject: 'alice' });
    assert.equal(sent2[0].url, 'http://connect.test/base/v1/proxy/sandbox/whoami');
    assert.deepEqual([sent2[0].init.method, sent2[0].init.body, sent2[0].headers.get('connect-subject'), sent2[0].headers.get('subject-token')], ['GET', undefined, 'alice', null]);
  });

  test('paths mcp-connect refuses go as written; paths fetch would rewrite are refused before anything is sent', async () => {
    for (const path of ['a//b', 'a%2Fb', '%252e%252e/x', 'a%zzb']) {
      const { client, sent } = stub({ status: 200, body: {} });
      await client.proxy({ provider: 'p', path, subject: 's' });
      assert.equal(sent[0].url, `http://connect.test/base/v1/proxy/p/${path}`, path);
    }
    for (const [provider, path] of [['p', '../../tokens'], ['p', 'a/%2e%2E/b'], ['p', 'a/./b'], ['p', 'a\\b'], ['p', 'a\tb'], ['p', 'x#y'], ['..', 'tokens']]) {
      const { client, sent } = stub({ status: 200, body: {} });
      const e = await rejects(client.proxy({ provider, path, subject: 's' }));
      assert.ok(e instanceof ConnectError, String(e));
      assert.deepEqual([e.code, e.status, sent.length], ['invalid_request', undefined, 0], `${provider} ${path}`);
    }
  });

  test("mcp-connect's own answers (MCP-Connect-Error) reject; the provider's, whatever their status, resolve", async () => {
    const own = { 'mcp-connect-error': 'not_connected', 'content-type': 'application/json' };
    const { client, sent } = stub(
      { status: 404, headers: own, body: { error: 'not_connected', message: 'alice has not connected sandbox' } },
      { status: 404, headers: { 'content-type': 'application/json' }, body: { message: 'Not Found' } },
      { status: 429, headers: { 'mcp-connect-error': 'rate_limited', 'retry-after': '0' }, body: { error: 'rate_limited', message: 'slow down' } },
      { status: 401, headers: { [TOKEN_REFRESHED_HEADER]: 'true' }, body: { message: 'Bad credentials' } },
      new TypeError('fetch failed'),
    );
    let e = await rejects(client.proxy({ provider: 'sandbox', path: 'whoami', subject: 'alice' }));
    assert.ok(e instanceof ConnectError);
    assert.deepEqual([e.code, e.status, e.apiMessage], ['not_connected', 404, 'alice has not connected sandbox']);
    const r = await client.proxy({ provider: 'sandbox', path: 'nope', subject: 'alice' });
    assert.deepEqual([r.status, tokenRefreshed(r), await r.json()], [404, false, { message: 'Not Found' }]);
    e = await rejects(client.proxy({ provider: 'sandbox', path: 'whoami', subject: 'alice' }));
    assert.deepEqual([e.code, e.status, e.retryAfter, sent.length], ['rate_limited', 429, 0, 3], 'not retried');
    const refused = await client.proxy({ provider: 'sandbox', path: 'upload', method: 'PUT', body: 'x'.repeat(100_000), subject: 'alice' });
    assert.deepEqual([refused.status, tokenRefreshed(refused)], [401, true]);
    e = await rejects(client.proxy({ provider: 'sandbox', path: 'whoami', subject: 'alice' }));
    assert.deepEqual([e.code, e.status, sent.length], [TRANSPORT_ERROR, undefined, 5], 'a transport failure is not retried');
    assert.equal(OWN_ERROR_HEADER, 'mcp-connect-error');
  });
});

describe('round trips through the demo to the sandbox provider', () => {
  let demo;
  let connect;
  const STEP = { timeout: 90_000 };

  before(async () => {
    demo = await startDemo();
    connect = new Client(demo.base, demo.apiKey);
    // paula connects two sandbox accounts: "paula" (her default) and "paula-work".
    await userOpens((await connect.createElicitation({ provider: 'sandbox', subject: 'paula' })).url, 'paula');
    await userOpens((await connect.createElicitation({ provider: 'sandbox', subject: 'paula', addAccount: true })).url, 'paula', 'continue', 'paula-work');
  });
  after(async () => { await demo?.stop(); });

  test('the sandbox answers for the user the MCP token names, and the caller never sees the token', STEP, async () => {
    const r = await connect.proxy({ provider: 'sandbox', path: 'whoami', subjectToken: await mcpToken(demo.base, 'paula') });
    assert.equal(r.status, 200);
    const text = await r.text();
    const me = JSON.parse(text);
    assert.equal(me.sub, 'paula');
    assert.equal(me.client_id !== undefined, true, text);
    // The demo's client may also fetch the token: the one the proxy used is not in its answer.
    const { access_token: token } = await connect.token({ provider: 'sandbox', subject: 'paula' });
    assert.ok(token.length > 10);
    assert.ok(!text.includes(token), 'the provider token is not in the body');
    for (const [name, value] of r.headers) assert.ok(!value.includes(token), `the provider token is not in ${name}`);
    assert.equal(r.headers.get('set-cookie'), null);
    assert.equal(r.headers.get(OWN_ERROR_HEADER), null);
    assert.equal(tokenRefreshed(r), false);

    // Named by subject, and by account.
    assert.equal((await (await connect.proxy({ provider: 'sandbox', path: 'whoami', subject: 'paula' })).json()).sub, 'paula');
    const work = await connect.proxy({ provider: 'sandbox', path: '/whoami', subject: 'paula', account: 'paula-work' });
    assert.equal((await work.json()).sub, 'paula-work');
  });

  test("the provider's non-2xx answers come back as responses", STEP, async () => {
    const missing = await connect.proxy({ provider: 'sandbox', path: 'no-such-endpoint', subject: 'paula' });
    assert.equal(missing.status, 404);
    assert.equal(missing.headers.get(OWN_ERROR_HEADER), null);
    await missing.arrayBuffer();
    const post = await connect.proxy({ provider: 'sandbox', path: 'whoami', method: 'POST', subject: 'paula', headers: { 'content-type': 'application/json' }, body: '{"a":1}' });
    assert.equal(post.status, 405, 'whoami is GET only at the sandbox');
    assert.equal(post.headers.get(OWN_ERROR_HEADER), null);
    await post.arrayBuffer();
  });

  test("mcp-connect's own refusals reject with ConnectError", STEP, async () => {
    let e = await rejects(connect.proxy({ provider: 'sandbox', path: 'whoami', subjectToken: await mcpToken(demo.base, 'quinn') }));
    assert.ok(e instanceof ConnectError);
    assert.deepEqual([e.code, e.status], ['not_connected', 404]);
    e = await rejects(connect.proxy({ provider: 'sandbox', path: 'whoami', subject: 'paula', account: 'paula-home' }));
    assert.deepEqual([e.code, e.status], ['not_connected', 404]);
    e = await rejects(connect.proxy({ provider: 'sandbox', path: 'whoami', subjectToken: 'not-a-token' }));
    assert.deepEqual([e.code, e.status], ['invalid_subject_token', 401]);
    e = await rejects(new Client(demo.base, 'not-the-key').proxy({ provider: 'sandbox', path: 'whoami', subject: 'paula' }));
    assert.deepEqual([e.code, e.status], ['unauthorized', 401]);
    // Paths that would leave the API base, sent as written: mcp-connect answers 400.
    for (const path of ['a//whoami', 'a%2Fwhoami', '%252e%252e/whoami']) {
      e = await rejects(connect.proxy({ provider: 'sandbox', path, subject: 'paula' }));
      assert.deepEqual([e.code, e.status], ['invalid_request', 400], path);
      assert.ok(e.apiMessage, path);
    }
    // `..` cannot go through fetch as written (it would be resolved, to another endpoint of
    // mcp-connect's): refused by the client, as mcp-connect refuses it when it does arrive.
    e = await rejects(connect.proxy({ provider: 'sandbox', path: '../../tokens', method: 'POST', subject: 'paula' }));
    assert.deepEqual([e.code, e.status], ['invalid_request', undefined]);
    const raw = await new Promise((resolve, reject) => {
      const u = new URL(demo.base);
      const q = http.request({ host: u.hostname, port: u.port, path: '/v1/proxy/sandbox/../whoami', headers: { authorization: `Bearer ${demo.apiKey}`, 'connect-subject': 'paula' } }, (res) => {
        let body = '';
        res.on('data', (c) => { body += c; });
        res.on('end', () => resolve({ status: res.statusCode, own: res.headers[OWN_ERROR_HEADER], body }));
      });
      q.on('error', reject);
      q.end();
    });
    assert.deepEqual([raw.status, raw.own, JSON.parse(raw.body).error], [400, 'invalid_request', 'invalid_request']);
  });
});
