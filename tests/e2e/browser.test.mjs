// End-to-end: headless Chromium drives the real mcp-connect binary against real OIDC/OAuth peers
// (tests/peers, oidc-provider), once on SQLite and once on a fresh PostgreSQL database.
//
//   cargo build && (cd tests/peers && npm ci) && node --test tests/e2e/
//
// Environment:
//   MCP_CONNECT_BIN     binary to test (default target/debug/mcp-connect)
//   CHROMIUM            browser executable (default /usr/bin/chromium)
//   E2E_POSTGRES_URL    server URL without database (default postgres://postgres@127.0.0.1:5432)
//   E2E_DATABASES       comma list to run, default "sqlite,postgres"
//   E2E_RUST_LOG        RUST_LOG for the service (default "info,mcp_connect=debug")
//   E2E_VERBOSE=1       echo service and peer logs to stderr as they arrive

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  DATABASES, IDENTITY_SECRET, PG_URL, SCREENSHOTS, UPSTREAM_SECRET,
  closeAll, createElicitation, elicitationStatus, launchBrowser, newPage, openConnectUrl, originOf,
  signIn, startStack, stopChild, tcpReachable, waitForOrigin, withLogs,
} from './lib.mjs';

before(launchBrowser);
after(closeAll);

for (const kind of ['sqlite', 'postgres']) {
  describe(`browser flow on ${kind}`, { skip: !DATABASES.includes(kind) && `E2E_DATABASES=${DATABASES.join(',')}` }, () => {
    let stack;
    let alice;            // alice's browser context, signed in at mcp-connect after the first test
    let aliceToken;       // access token returned by /v1/tokens
    let pendingForAlice;  // elicitation id left pending by the phishing attempt

    before(async () => {
      if (kind === 'postgres') {
        const u = new URL(PG_URL);
        if (!(await tcpReachable(u.hostname, Number(u.port || 5432)))) {
          throw new Error(`PostgreSQL not reachable at ${PG_URL} (set E2E_DATABASES=sqlite to skip it)`);
        }
      }
      stack = await startStack(kind);
    });

    after(async () => {
      await alice?.context.close().catch(() => {});
      if (stack) await stopChild(stack.service.child);
    });

    test('user connects: identity sign-in, consent, upstream sign-in and Allow, then tokens work', withLogs(() => stack, async () => {
      const elicitation = await createElicitation(stack, 'alice');
      alice = await newPage();
      const { page, docs } = alice;

      await openConnectUrl(stack, page, elicitation.url, 'alice');
      const cont = page.getByRole('button', { name: 'Continue' });
      await cont.waitFor();
      assert.equal(docs.last?.status, 200, `consent page status (${docs.last?.url})`);
      const consentText = await page.locator('body').innerText();
      assert.match(consentText, /demo-mcp/, 'consent page names the MCP client');
      assert.match(consentText, /acme/i, 'consent page names the provider');
      for (const scope of ['openid', 'offline_access', 'api']) {
        assert.ok(consentText.includes(scope), `consent page lists scope ${scope}`);
      }
      assert.equal(await page.getByRole('button', { name: 'Decline' }).count(), 1, 'consent page has Decline');
      if (kind === 'sqlite') await page.screenshot({ path: path.join(SCREENSHOTS, 'consent.png'), fullPage: true });

      await cont.click();
      await signIn(page, stack.peers.upstream, 'alice', 'the upstream login page');
      await page.getByRole('button', { name: 'Allow' }).click();
      await waitForOrigin(page, stack.base, 'mcp-connect after upstream consent');
      await page.waitForLoadState('load');
      assert.equal(docs.last?.status, 200, `done page status (${docs.last?.url}): ${(await page.content()).slice(0, 500)}`);

      const status = await elicitationStatus(stack, elicitation.id, 10);
      assert.equal(status.status, 'completed', JSON.stringify(status));
      assert.ok(status.connection_id, 'completed elicitation names its connection');

      const tok = await stack.api('POST', '/v1/tokens', { subject: 'alice', provider: 'acme' });
      assert.equal(tok.status, 200, `POST /v1/tokens: ${tok.text}`);
      assert.ok(tok.json.access_token, 'access_token returned');
      assert.equal(tok.json.connection_id, status.connection_id);
      aliceToken = tok.json.access_token;
      assert.ok(stack.peers.upstreamIssued.access_token.includes(aliceToken), 'the token is one the upstream issued');

      const me = await fetch(`${stack.peers.upstream}/api/whoami`, { headers: { authorization: `Bearer ${aliceToken}` } });
      assert.equal(me.status, 200);
      assert.equal((await me.json()).sub, 'alice');
      assert.equal(stack.peers.upstreamStats.authorization_code, 1, 'one code redeemed upstream');
    }));

    test('a browser signed in as bob is refused on alice\'s connect URL and nothing changes', withLogs(() => stack, async (t) => {
      if (!aliceToken) { t.skip('needs the first test to pass'); return; }
      const elicitation = await createElicitation(stack, 'alice');
      pendingForAlice = elicitation.id;
      const codesBefore = stack.peers.upstreamStats.authorization_code;
      const bob = await newPage();
      try {
        const { page, docs } = bob;
        await openConnectUrl(stack, page, elicitation.url, 'bob');
        await page.waitForLoadState('load');
        assert.equal(docs.last?.status, 403, `refusal status (${docs.last?.url})`);
        assert.equal(await page.getByRole('button', { name: 'Continue' }).count(), 0, 'no Continue button');
        const text = await page.locator('body').innerText();
        assert.ok(!/alice/i.test(text), `the refusal reveals nothing about the other user:\n${text}`);
        if (kind === 'sqlite') await page.screenshot({ path: path.join(SCREENSHOTS, 'refused.png'), fullPage: true });

        // Reloading (now with bob's session, no sign-in round trip) is refused just the same.
        const again = await page.goto(elicitation.url);
        assert.equal(again.status(), 403, 'refused at /connect with an existing session');
      } finally {
        await bob.context.close();
      }

      assert.equal((await elicitationStatus(stack, elicitation.id)).status, 'pending', 'alice\'s elicitation is untouched');
      const bobToken = await stack.api('POST', '/v1/tokens', { subject: 'bob', provider: 'acme' });
      assert.equal(bobToken.json?.error, 'not_connected', `bob has no connection: ${bobToken.status} ${bobToken.text}`);
      assert.ok(bobToken.status >= 400 && bobToken.status < 500, `not_connected is a 4xx: ${bobToken.status}`);
      assert.equal(stack.peers.upstreamStats.authorization_code, codesBefore, 'no upstream flow ran');
      const aliceStill = await stack.api('POST', '/v1/tokens', { subject: 'alice', provider: 'acme' });
      assert.equal(aliceStill.status, 200, `alice's connection still works: ${aliceStill.text}`);
    }));

    test('Decline on the consent page declines the elicitation', withLogs(() => stack, async (t) => {
      if (!alice || !pendingForAlice) { t.skip('needs the earlier tests to pass'); return; }
      const elicitation = await createElicitation(stack, 'alice');
      assert.equal(elicitation.id, pendingForAlice, 'the still-pending elicitation is reused');
      const { page, docs } = alice;
      await openConnectUrl(stack, page, elicitation.url, 'alice');
      await page.getByRole('button', { name: 'Decline' }).click();
      await page.waitForLoadState('load');
      assert.equal(originOf(page.url()), stack.base, 'declining stays on mcp-connect');
      assert.ok(docs.last?.status < 400, `decline page status ${docs.last?.status}`);
      assert.equal(await page.getByRole('button', { name: 'Continue' }).count(), 0);
      const status = await elicitationStatus(stack, elicitation.id, 10);
      assert.equal(status.status, 'declined', JSON.stringify(status));
    }));

    test('no secret, token or code appears in the service logs', () => {
      assert.ok(stack, 'service started');
      const logs = stack.service.output;
      assert.ok(logs.length > 0, 'the service logged something');
      const secrets = {
        'API key': stack.secrets.apiKey,
        'encryption key': stack.secrets.encryptionKey,
        'identity client secret': IDENTITY_SECRET,
        'upstream client secret': UPSTREAM_SECRET,
      };
      if (aliceToken) secrets['access token from /v1/tokens'] = aliceToken;
      for (const [label, values] of [
        ['upstream access token', stack.peers.upstreamIssued.access_token],
        ['upstream refresh token', stack.peers.upstreamIssued.refresh_token],
        ['upstream authorization code', stack.peers.upstreamIssued.authorization_code],
        ['identity access token', stack.peers.identityIssued.access_token],
        ['identity authorization code', stack.peers.identityIssued.authorization_code],
      ]) {
        values.forEach((v, i) => { secrets[`${label} #${i + 1}`] = v; });
      }
      const redact = (line) => Object.entries(secrets)
        .reduce((acc, [label, v]) => (v ? acc.replaceAll(v, `<${label}>`) : acc), line);
      const leaks = Object.entries(secrets)
        .filter(([, v]) => v && logs.includes(v))
        .map(([label, v]) => `${label} in: ${redact(logs.split('\n').find((l) => l.includes(v))).slice(0, 400)}`);
      assert.deepEqual(leaks, [], `secrets found in the service logs:\n${leaks.join('\n')}`);
    });
  });
}
