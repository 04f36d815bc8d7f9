// Accounts (several per provider) in mcp-connect-client (the built dist/, as installed), against a
// stub fetch: what the requests carry and how the answers, errors and events are read. Needs no
// demo.
//
//   node --test clients/typescript/tests/accounts.test.mjs

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { Client, ConnectError } from 'mcp-connect-client';
import { tokenOrElicit } from 'mcp-connect-client/mcp-sdk';
import { parseEvent } from 'mcp-connect-client/webhooks';

const TOKEN = {
  access_token: 't', token_type: 'Bearer', expires_at: null, scopes: ['api'], connection_id: 'c2',
  account: { id: '1234', label: 'kate@work.example', nickname: 'Work' },
  metadata: {}, params: {}, credential_type: 'oauth2',
};
const SELECT = {
  error: 'account_selection_required',
  message: 'kate has 2 sandbox accounts: name one with `account` (its id or label)',
  accounts: [
    { id: '1', label: 'kate', nickname: null, connection_id: 'c1', default: true },
    { id: '1234', label: 'kate@work.example', nickname: 'Work', connection_id: 'c2', default: false },
  ],
};

/** A client whose calls get `answers` ({status, body}) in turn; the JSON bodies it sent are collected. */
function stub(...answers) {
  const sent = [];
  const fetchStub = async (_url, init) => {
    sent.push(init.body === undefined ? {} : JSON.parse(init.body));
    const a = answers.shift();
    return new Response(JSON.stringify(a.body), { status: a.status });
  };
  return { client: new Client('http://connect.test', 'k', { fetch: fetchStub, maxRetries: 0 }), sent };
}
const rejects = async (p) => {
  try { await p; } catch (e) { return e; }
  assert.fail('expected a rejection');
};

describe('account requests', () => {
  test("token names the account only when given, and reads the answer's account", async () => {
    const { client, sent } = stub({ status: 200, body: TOKEN }, { status: 200, body: TOKEN });
    const token = await client.token({ provider: 'sandbox', subject: 'kate', account: 'Work' });
    assert.deepEqual(sent[0], { provider: 'sandbox', subject: 'kate', account: 'Work' });
    assert.deepEqual(token.account, { id: '1234', label: 'kate@work.example', nickname: 'Work' });
    await client.token({ provider: 'sandbox', subject: 'kate' });
    assert.equal('account' in sent[1], false);
  });

  test('createElicitation sends add_account only when set', async () => {
    const el = { id: 'e', url: 'http://connect.test/connect/e', status: 'pending', mcp: {} };
    const { client, sent } = stub({ status: 201, body: el }, { status: 201, body: el });
    await client.createElicitation({ provider: 'sandbox', subject: 'kate', addAccount: true });
    assert.deepEqual(sent[0], { provider: 'sandbox', subject: 'kate', add_account: true });
    await client.createElicitation({ provider: 'sandbox', subject: 'kate', addAccount: false });
    assert.equal('add_account' in sent[1], false);
  });

  test('connections carry their account and which is the default', async () => {
    const row = { id: 'c1', subject: 'kate', provider: 'sandbox', status: 'active', scopes: ['api'], has_refresh_token: true, account_label: 'kate', created_at: 'x', updated_at: 'x' };
    const { client } = stub({ status: 200, body: { connections: [{ ...row, account: { id: '1', label: 'kate' }, default: true }, { ...row, id: 'c3' }] } });
    const [one, old] = await client.connections({ subject: 'kate' });
    assert.deepEqual([one.account, one.default, one.account_label], [{ id: '1', label: 'kate' }, true, 'kate']);
    assert.deepEqual([old.account, old.default], [undefined, undefined], 'a service before accounts');
  });
});

describe('account errors', () => {
  test('insufficient_scope carries the missing scopes', async () => {
    const { client } = stub({ status: 403, body: { error: 'insufficient_scope', message: 'm', missing_scopes: ['admin', 'write'] } });
    const e = await rejects(client.token({ provider: 'sandbox', subject: 'kate', scopes: ['admin', 'write'] }));
    assert.ok(e instanceof ConnectError);
    assert.deepEqual([e.status, e.missingScopes, e.isInsufficientScope], [403, ['admin', 'write'], true]);
    assert.deepEqual([e.needsAccountSelection, e.needsAuthorization, e.accounts], [false, false, []]);
  });

  test('account_selection_required lists the accounts to choose from', async () => {
    const { client } = stub({ status: 409, body: SELECT });
    const e = await rejects(client.token({ provider: 'sandbox', subject: 'kate' }));
    assert.deepEqual([e.status, e.needsAccountSelection, e.needsAuthorization, e.missingScopes], [409, true, false, []]);
    assert.deepEqual(e.accounts, SELECT.accounts);
  });

  test('other errors carry neither, and odd entries are skipped', () => {
    for (const body of [{ error: 'not_connected', message: 'm' }, { error: 'insufficient_scope', message: 'm', missing_scopes: null, accounts: null }]) {
      const e = ConnectError.fromBody(403, body);
      assert.deepEqual([e.missingScopes, e.accounts], [[], []]);
    }
    const e = ConnectError.fromBody(409, { error: 'account_selection_required', message: 'm', accounts: ['x', { id: '1' }], missing_scopes: [1, 'a'] });
    assert.deepEqual([e.accounts, e.missingScopes], [[{ id: '1', label: null, nickname: null, connection_id: '', default: false }], ['a']]);
  });
});

test('connection and completion events carry the account', () => {
  const data = { client_id: 'demo-mcp', subject: 'kate', provider: 'sandbox', connection_id: 'c2' };
  const revoked = parseEvent({ type: 'connection.revoked', timestamp: 't', data: { ...data, account: { id: '1234', label: null, nickname: 'Work' } } });
  assert.deepEqual(revoked.data.account, { id: '1234', label: null, nickname: 'Work' });
  assert.equal(parseEvent({ type: 'elicitation.declined', timestamp: 't', data }).data.account, undefined);
});

describe('tokenOrElicit passes the account through (a stand-in for the SDK server)', () => {
  const server = { getClientCapabilities: () => ({}) };

  test('the account reaches the token request', async () => {
    const { client, sent } = stub({ status: 200, body: TOKEN });
    const token = await tokenOrElicit(server, client, { provider: 'sandbox', subject: 'kate', account: 'Work' });
    assert.equal(token.account.nickname, 'Work');
    assert.deepEqual(sent, [{ provider: 'sandbox', subject: 'kate', account: 'Work', elicit: true }]);
  });

  test('a scope upgrade still pending after a wait is another round, not a failure', async () => {
    const params = { mode: 'url', url: 'http://connect.test/connect/e', message: 'm', elicitationId: 'e' };
    const el = { id: 'e', url: params.url, message: 'm', status: 'pending', mcp: { '2025-11-25': { params, error: { code: -32042, message: 'm', data: { elicitations: [params] } } } } };
    const { client, sent } = stub(
      { status: 409, body: { error: 'authorization_required', message: 'm', elicitation: el } },
      { status: 403, body: { error: 'insufficient_scope', message: 'm', missing_scopes: ['admin'] } },
      { status: 200, body: TOKEN },
    );
    const notified = [];
    const urlServer = {
      getClientCapabilities: () => ({ elicitation: { url: {} } }),
      elicitInput: async () => ({ action: 'accept' }),
      createElicitationCompletionNotifier: (id) => async () => { notified.push(id); },
    };
    const token = await tokenOrElicit(urlServer, client, { provider: 'sandbox', subject: 'kate', scopes: ['admin'], account: 'Work' }, { waitSeconds: 1 });
    assert.equal(token.access_token, 't');
    assert.deepEqual(notified, ['e']);
    assert.deepEqual(sent.slice(1), [1, 2].map(() => ({ provider: 'sandbox', subject: 'kate', scopes: ['admin'], account: 'Work', elicitation_id: 'e', wait_seconds: 1 })));
  });

  test('account_selection_required reaches the caller', async () => {
    const { client } = stub({ status: 409, body: SELECT });
    const e = await rejects(tokenOrElicit(server, client, { provider: 'sandbox', subject: 'kate' }));
    assert.equal(e.needsAccountSelection, true);
    assert.deepEqual(e.accounts.map((a) => a.id), ['1', '1234']);
  });
});
