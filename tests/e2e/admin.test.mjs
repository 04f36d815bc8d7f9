// End-to-end for operators and users: headless Chromium signs in to /admin as an admin and as a
// non-admin (refused), searches, revokes with the confirmation step and finds the audit entry;
// a user disconnects from /account and the provider sees the revocation. Screenshots of the
// main pages (SQLite run) go to docs/screenshots/.
//
//   cargo build && (cd tests/peers && npm ci) && node --test tests/e2e/
//
// Same environment variables as browser.test.mjs.

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  DATABASES, PG_URL, SCREENSHOTS, closeAll, createElicitation, elicitationStatus, launchBrowser,
  newPage, openConnectUrl, originOf, signIn, startStack, stopChild, tcpReachable, waitForOrigin,
  withLogs,
} from './lib.mjs';

async function connectInBrowser(stack, user) {
  const elicitation = await createElicitation(stack, user);
  const ctx = await newPage();
  const { page } = ctx;
  await openConnectUrl(stack, page, elicitation.url, user);
  await page.getByRole('button', { name: 'Continue' }).click();
  await signIn(page, stack.peers.upstream, user, 'the upstream login page');
  await page.getByRole('button', { name: 'Allow' }).click();
  await waitForOrigin(page, stack.base, 'mcp-connect after upstream consent');
  const status = await elicitationStatus(stack, elicitation.id, 10);
  assert.equal(status.status, 'completed', JSON.stringify(status));
  return { ...ctx, connectionId: status.connection_id };
}

// Opens an mcp-connect page, signing in at the identity issuer if sent there.
async function openSignedIn(stack, page, p, user) {
  const res = await page.goto(`${stack.base}${p}`);
  if (originOf(page.url()) === stack.peers.identity) {
    await signIn(page, stack.peers.identity, user, 'the identity login page');
    await waitForOrigin(page, stack.base, 'mcp-connect after identity sign-in');
    await page.waitForLoadState('load');
    return null;
  }
  return res;
}

before(launchBrowser);
after(closeAll);

for (const kind of ['sqlite', 'postgres']) {
  describe(`admin and account pages on ${kind}`, { skip: !DATABASES.includes(kind) && `E2E_DATABASES=${DATABASES.join(',')}` }, () => {
    let stack;
    let alice;
    let bob;
    const shot = async (page, name) => {
      if (kind === 'sqlite') await page.screenshot({ path: path.join(SCREENSHOTS, name), fullPage: true });
    };

    before(async () => {
      if (kind === 'postgres') {
        const u = new URL(PG_URL);
        if (!(await tcpReachable(u.hostname, Number(u.port || 5432)))) {
          throw new Error(`PostgreSQL not reachable at ${PG_URL} (set E2E_DATABASES=sqlite to skip it)`);
        }
      }
      stack = await startStack(kind, { extraToml: '\n[admin]\nsubjects = ["ops-admin"]\n' });
      alice = await connectInBrowser(stack, 'alice');
      bob = await connectInBrowser(stack, 'bob');
    });

    after(async () => {
      await alice?.context.close().catch(() => {});
      await bob?.context.close().catch(() => {});
      if (stack) await stopChild(stack.service.child);
    });

    test('an admin searches, revokes with confirmation, and finds the audit entry', withLogs(() => stack, async () => {
      const admin = await newPage();
      try {
        const { page, docs } = admin;
        await openSignedIn(stack, page, '/admin', 'ops-admin');
        assert.equal(docs.last?.status, 200, `overview status (${docs.last?.url})`);
        assert.match(await page.locator('h1').innerText(), /Administration/);
        await shot(page, 'admin-overview.png');

        await page.getByRole('link', { name: 'Connections', exact: true }).click();
        await page.waitForLoadState('load');
        const all = await page.locator('main').innerText();
        assert.match(all, /alice/);
        assert.match(all, /bob/);
        await page.getByLabel('Subject contains').fill('ali');
        await page.getByRole('button', { name: 'Search' }).click();
        await page.waitForLoadState('load');
        const found = await page.locator('table').innerText();
        assert.match(found, /alice/);
        assert.doesNotMatch(found, /bob/);
        await shot(page, 'admin-connections.png');

        await page.getByRole('link', { name: 'alice' }).click();
        await page.waitForLoadState('load');
        assert.match(await page.locator('main').innerText(), /connection\.created/);
        await shot(page, 'admin-connection.png');

        const before = stack.peers.upstreamStats.revocations;
        await page.getByRole('link', { name: /Revoke/ }).click();
        await page.waitForLoadState('load');
        assert.match(await page.locator('main').innerText(), /cannot be undone/);
        await page.getByLabel(/Reason/).fill('e2e check');
        await shot(page, 'admin-revoke.png');
        await page.getByRole('button', { name: 'Revoke the connection' }).click();
        await page.waitForLoadState('load');
        assert.equal(docs.last?.status, 200, `after revoke (${docs.last?.url})`);
        assert.match(await page.locator('main').innerText(), /was revoked/);
        assert.ok(stack.peers.upstreamStats.revocations > before, 'the provider saw the revocation');
        const tok = await stack.api('POST', '/v1/tokens', { subject: 'alice', provider: 'acme' });
        assert.equal(tok.json?.error, 'not_connected', tok.text);

        await page.getByRole('link', { name: 'Audit log' }).click();
        await page.waitForLoadState('load');
        await page.getByLabel('Event').fill('admin.');
        await page.getByRole('button', { name: 'Filter' }).click();
        await page.waitForLoadState('load');
        const audit = await page.locator('table').innerText();
        assert.match(audit, /admin\.connection_revoked\s+ops-admin\s+alice/);
        assert.match(audit, /e2e check/);
        await shot(page, 'admin-audit.png');

        await page.getByRole('link', { name: 'Elicitations' }).click();
        await page.waitForLoadState('load');
        assert.match(await page.locator('main').innerText(), /completed/);
        await shot(page, 'admin-elicitations.png');

        await page.getByRole('link', { name: /Providers/ }).click();
        await page.waitForLoadState('load');
        assert.match(await page.locator('main').innerText(), /reachable/);
        await shot(page, 'admin-providers.png');
      } finally {
        await admin.context.close();
      }
    }));

    test('a signed-in user who is not an admin gets a clear 403', withLogs(() => stack, async () => {
      const { page, docs } = bob;
      const res = await openSignedIn(stack, page, '/admin/connections', 'bob');
      assert.equal(res ? res.status() : docs.last?.status, 403);
      const text = await page.locator('body').innerText();
      assert.match(text, /Administrators only/);
      assert.doesNotMatch(text, /alice/);
      await shot(page, 'admin-refused.png');
    }));

    test('a user disconnects from /account and the provider sees the revocation', withLogs(() => stack, async () => {
      const { page, docs } = bob;
      await openSignedIn(stack, page, '/account', 'bob');
      assert.equal(docs.last?.status, 200);
      assert.match(await page.locator('main').innerText(), /Connected/);
      await shot(page, 'account.png');
      const before = stack.peers.upstreamStats.revocations;
      await page.getByRole('button', { name: /Disconnect/ }).click();
      await page.waitForLoadState('load');
      assert.match(await page.locator('main').innerText(), /was disconnected/);
      assert.ok(stack.peers.upstreamStats.revocations > before, 'the provider saw the revocation');
      const tok = await stack.api('POST', '/v1/tokens', { subject: 'bob', provider: 'acme' });
      assert.equal(tok.json?.error, 'not_connected', tok.text);
    }));
  });
}
