// End-to-end for the pages a user passes through, as a newcomer would meet them: the whole
// connect flow in Simplified Chinese (Chromium's locale zh-CN) and the switch back to English;
// the done page surviving a reload; keyboard only, in dark mode; and axe-core on every user and
// admin page in both languages (no serious or critical violation). A second stack with
// [branding] gives the branded consent page. Screenshots (SQLite run, UPDATE_SCREENSHOTS=1) go to
// docs/screenshots/: consent-zh-CN, done-zh-CN, account-zh-CN, consent-en, done-en (dark),
// consent-branded.
//
//   cargo build && (cd tests/peers && npm ci) && node --test tests/e2e/pages.test.mjs
//
// Same environment variables as browser.test.mjs; this suite runs on the first of
// E2E_DATABASES only (the pages do not depend on the database; the Rust tests cover both).

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';

import {
  DATABASES, PG_URL, SCREENSHOTS, closeAll, createElicitation, elicitationStatus, launchBrowser,
  newPage, openConnectUrl, originOf, signIn, startStack, stopChild, tcpReachable, waitForOrigin,
  withLogs,
} from './lib.mjs';

// @axe-core/playwright is installed with the peers (tests/peers/package.json).
const require = createRequire(new URL('../peers/package.json', import.meta.url));
const { AxeBuilder } = require('@axe-core/playwright');

const kind = DATABASES[0] || 'sqlite';
const axeReport = [];

// Runs axe-core on the page as it is; fails on any serious or critical violation.
async function axe(page, label) {
  const result = await new AxeBuilder({ page })
    .withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice'])
    .analyze();
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  axeReport.push({ label, url: page.url(), passes: result.passes.length, violations: result.violations.map((v) => `${v.id} (${v.impact})`) });
  assert.deepEqual(
    bad.map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join(', ')}`),
    [],
    `axe-core on ${label} (${page.url()})`,
  );
  assert.ok(result.passes.length > 10, `axe-core ran on ${label}`);
}

const shot = async (page, name) => {
  if (kind === 'sqlite') await page.screenshot({ path: path.join(SCREENSHOTS, name), fullPage: true });
};

const bodyText = (page) => page.locator('body').innerText();

before(launchBrowser);
after(closeAll);

describe(`user pages in two languages, keyboard, dark mode and axe-core (${kind})`, () => {
  let stack;
  let alice;   // zh-CN browser
  const connectUrls = {};

  before(async () => {
    if (kind === 'postgres') {
      const u = new URL(PG_URL);
      if (!(await tcpReachable(u.hostname, Number(u.port || 5432)))) {
        throw new Error(`PostgreSQL not reachable at ${PG_URL}`);
      }
    }
    stack = await startStack(kind, { extraToml: '\n[admin]\nsubjects = ["ops-admin"]\n' });
  });

  after(async () => {
    await alice?.context.close().catch(() => {});
    if (stack) await stopChild(stack.service.child);
  });

  test('the whole flow in Simplified Chinese, a reload of the done page, then the switch to English', withLogs(() => stack, async () => {
    const elicitation = await createElicitation(stack, 'alice');
    connectUrls.alice = elicitation.url;
    alice = await newPage({ locale: 'zh-CN' });
    const { page, docs } = alice;

    await openConnectUrl(stack, page, elicitation.url, 'alice');
    const cont = page.getByRole('button', { name: '继续' });
    await cont.waitFor();
    assert.equal(docs.last?.status, 200);
    assert.equal(await page.locator('html').getAttribute('lang'), 'zh-CN');
    const consent = await bodyText(page);
    for (const must of ['连接您的 acme 账户', 'demo-mcp', '请求的权限', 'openid', 'offline_access', '我的连接', '拒绝']) {
      assert.ok(consent.toLowerCase().includes(must.toLowerCase()), `consent page shows ${must}:\n${consent}`);
    }
    assert.ok(!/Continue|Decline/.test(consent), `no English buttons:\n${consent}`);
    await axe(page, 'consent (zh-CN)');
    await shot(page, 'consent-zh-CN.png');

    await cont.click();
    await signIn(page, stack.peers.upstream, 'alice', 'the upstream login page');
    await page.getByRole('button', { name: 'Allow' }).click();
    await waitForOrigin(page, stack.base, 'mcp-connect after upstream consent');
    await page.waitForLoadState('load');
    assert.equal(new URL(page.url()).pathname, '/done', `lands on the clean done URL: ${page.url()}`);
    assert.equal(new URL(page.url()).search, '', 'the done URL carries nothing');
    const done = await bodyText(page);
    assert.match(done, /已连接/, done);
    assert.match(done, /确认您的身份/, `scope descriptions in Chinese:\n${done}`);
    await axe(page, 'done (zh-CN)');
    await shot(page, 'done-zh-CN.png');
    assert.equal((await elicitationStatus(stack, elicitation.id, 10)).status, 'completed');

    // A reload (or a restored tab) shows the same page, not "This link was already used".
    const again = await page.reload();
    assert.equal(again.status(), 200);
    // (Every response has its own request id.)
    const withoutRequestId = (t) => t.replace(/\n[^\n]*$/, '');
    assert.equal(withoutRequestId(await bodyText(page)), withoutRequestId(done));

    await page.getByRole('link', { name: '我的连接' }).click();
    await page.waitForURL((u) => u.pathname === '/account');
    const account = await bodyText(page);
    assert.match(account, /已连接的账户/, account);
    assert.match(account, /断开连接/, account);
    await axe(page, 'account (zh-CN)');
    await shot(page, 'account-zh-CN.png');

    // The switch back to English: a plain link, remembered.
    await page.getByRole('link', { name: 'English' }).click();
    await page.waitForURL((u) => u.pathname === '/account');
    assert.equal(await page.locator('html').getAttribute('lang'), 'en');
    assert.match(await bodyText(page), /Your connected accounts/);
    await axe(page, 'account (en)');
    await page.goto(`${stack.base}/`);
    assert.equal(await page.locator('html').getAttribute('lang'), 'en', 'the choice is remembered');
    await axe(page, 'home (en)');
    await page.goto(`${stack.base}/no-such-page`);
    await axe(page, 'not found (en)');
    await page.getByRole('link', { name: '简体中文' }).click();
    await page.waitForLoadState('load');
    assert.equal(await page.locator('html').getAttribute('lang'), 'zh-CN');
    await axe(page, 'home (zh-CN)');
    // An error page, in both languages.
    await page.goto(`${stack.base}/oauth/acme/callback?code=x&state=forged-state-value`);
    assert.match(await bodyText(page), /此链接无效/);
    await axe(page, 'refused callback (zh-CN)');
    await page.getByRole('link', { name: 'English' }).click();
    await page.waitForLoadState('load');
    await page.goto(`${stack.base}/oauth/acme/callback?code=x&state=forged-state-value`);
    assert.match(await bodyText(page), /This link is not valid/);
    await axe(page, 'refused callback (en)');
  }));

  test('keyboard only, in dark mode: skip link, visible focus, Continue by Enter; the refusal page', withLogs(() => stack, async () => {
    const elicitation = await createElicitation(stack, 'bob');
    const bob = await newPage({ colorScheme: 'dark' });
    try {
      const { page } = bob;
      await openConnectUrl(stack, page, elicitation.url, 'bob');
      await page.getByRole('button', { name: 'Continue' }).waitFor();
      // The decision comes first: at 1280×900 both buttons are on the first screen (the
      // explanation follows them), and nothing makes a 375 px phone screen scroll sideways.
      await page.setViewportSize({ width: 1280, height: 900 });
      for (const name of ['Continue', 'Decline']) {
        const box = await page.getByRole('button', { name }).boundingBox();
        assert.ok(box && box.y + box.height <= 900, `${name} above the fold at 1280×900: ${JSON.stringify(box)}`);
      }
      await page.setViewportSize({ width: 375, height: 812 });
      const wide = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(wide <= 375, `the consent page fits 375 px: ${wide}`);
      await page.setViewportSize({ width: 1000, height: 800 });
      await axe(page, 'consent (en, dark)');
      await shot(page, 'consent-en.png');

      await page.keyboard.press('Tab');
      const skip = await page.evaluate(() => {
        const el = document.activeElement;
        const r = el.getBoundingClientRect();
        return { cls: el.className, text: el.textContent, left: r.left, outline: getComputedStyle(el).outlineStyle };
      });
      assert.equal(skip.cls, 'skip', `the first Tab reaches the skip link: ${JSON.stringify(skip)}`);
      assert.ok(skip.left >= 0, `the focused skip link is on screen: ${JSON.stringify(skip)}`);
      assert.notEqual(skip.outline, 'none', 'focus is visible');
      await page.keyboard.press('Enter');
      assert.equal(await page.evaluate(() => document.activeElement.id), 'main', 'the skip link moves focus to the content');

      let focused = '';
      for (let i = 0; i < 20 && focused !== 'Continue'; i += 1) {
        await page.keyboard.press('Tab');
        focused = await page.evaluate(() => (document.activeElement.tagName === 'BUTTON' ? document.activeElement.textContent.trim() : ''));
      }
      assert.equal(focused, 'Continue', 'Tab reaches Continue');
      const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
      assert.notEqual(outline, 'none', 'the focused button shows its focus');
      await page.keyboard.press('Enter');
      await signIn(page, stack.peers.upstream, 'bob', 'the upstream login page');
      await page.getByRole('button', { name: 'Allow' }).click();
      await waitForOrigin(page, stack.base, 'mcp-connect after upstream consent');
      await page.waitForURL((u) => u.pathname === '/done');
      assert.match(await bodyText(page), /acme is connected/i);
      await axe(page, 'done (en, dark)');
      await shot(page, 'done-en.png');
      await page.goto(`${stack.base}/account`);
      await axe(page, 'account (en, dark)');
      // /account reads on a wide screen and on a phone: nothing scrolls sideways.
      for (const width of [1280, 375]) {
        await page.setViewportSize({ width, height: 900 });
        const wide = await page.evaluate(() => document.documentElement.scrollWidth);
        assert.ok(wide <= width, `/account fits ${width} px: ${wide}`);
        await shot(page, `account-en-${width}.png`);
      }
      await page.setViewportSize({ width: 1000, height: 800 });

      // Bob opening alice's link: the refusal page, in both languages.
      const other = await createElicitation(stack, 'alice');
      await page.goto(other.url);
      assert.equal(originOf(page.url()), stack.base);
      assert.match(await bodyText(page), /different account/);
      await axe(page, 'refusal (en, dark)');
      await page.getByRole('link', { name: '简体中文' }).click();
      await page.waitForLoadState('load');
      assert.match(await bodyText(page), /另一个账户/);
      await axe(page, 'refusal (zh-CN, dark)');
      // Back to English for the next tests' readers.
      await page.getByRole('link', { name: 'English' }).click();
    } finally {
      await bob.context.close();
    }
  }));

  test('every admin page passes axe-core, light and dark', withLogs(() => stack, async () => {
    for (const colorScheme of ['light', 'dark']) {
      const admin = await newPage({ colorScheme });
      try {
        const { page } = admin;
        await page.goto(`${stack.base}/admin`);
        if (originOf(page.url()) === stack.peers.identity) {
          await signIn(page, stack.peers.identity, 'ops-admin', 'the identity login page');
          await waitForOrigin(page, stack.base, 'mcp-connect after identity sign-in');
        }
        await page.waitForLoadState('load');
        await axe(page, `admin overview (${colorScheme})`);
        for (const p of ['/admin/connections', '/admin/connections?subject=alice', '/admin/elicitations', '/admin/audit', '/admin/providers']) {
          await page.goto(`${stack.base}${p}`);
          await axe(page, `${p} (${colorScheme})`);
        }
        await page.goto(`${stack.base}/admin/connections?subject=alice`);
        const detail = page.locator('main table a').first();
        await detail.click();
        await page.waitForLoadState('load');
        assert.match(new URL(page.url()).pathname, /^\/admin\/connections\/./);
        await axe(page, `admin connection (${colorScheme})`);
        await page.getByRole('link', { name: /Revoke/ }).click();
        await page.waitForLoadState('load');
        await axe(page, `admin revoke confirmation (${colorScheme})`);
      } finally {
        await admin.context.close();
      }
    }
    // A user who is not an admin gets the 403 page, in their language.
    const user = await newPage({ locale: 'zh-CN' });
    try {
      const { page } = user;
      await page.goto(`${stack.base}/admin`);
      await signIn(page, stack.peers.identity, 'carol', 'the identity login page');
      await waitForOrigin(page, stack.base, 'mcp-connect after identity sign-in');
      await page.waitForLoadState('load');
      assert.match(await bodyText(page), /仅限管理员/);
      await axe(page, 'admin refusal (zh-CN)');
    } finally {
      await user.context.close();
    }
  }));
});

describe(`a branded consent page (${kind})`, () => {
  let stack;
  let dir;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-connect-brand-'));
    const logo = path.join(dir, 'logo.svg');
    fs.writeFileSync(logo, '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64">'
      + '<rect width="64" height="64" rx="14" fill="#7b2d8e"/><path d="M18 34l10 10 18-22" stroke="#fff" stroke-width="7" fill="none"/></svg>');
    stack = await startStack(kind, {
      extraToml: `\n[branding]\nproduct_name = "Example Connect"\nlogo_path = ${JSON.stringify(logo)}\naccent_color = "#7b2d8e"\nsupport_url = "https://help.example.com/connect"\n`,
    });
  });

  after(async () => {
    if (stack) await stopChild(stack.service.child);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the brand is shown and the page stays honest about app, provider, scopes and disconnecting', withLogs(() => stack, async () => {
    const elicitation = await createElicitation(stack, 'alice');
    for (const locale of ['en-US', 'zh-CN']) {
      const ctx = await newPage({ locale });
      try {
        const { page } = ctx;
        await openConnectUrl(stack, page, elicitation.url, 'alice');
        await page.locator('form.actions button').first().waitFor();
        assert.match(await page.title(), /Example Connect$/);
        const logo = page.locator('header img.logo');
        assert.equal(await logo.getAttribute('src'), '/static/logo');
        assert.ok(await logo.evaluate((img) => img.complete && img.naturalWidth > 0), 'the logo loads under the CSP');
        const text = await bodyText(page);
        for (const must of ['Example Connect', 'demo-mcp', 'acme', 'openid', 'offline_access', 'api']) {
          assert.ok(text.toLowerCase().includes(must.toLowerCase()), `${locale}: shows ${must}:\n${text}`);
        }
        assert.equal(await page.locator('main a[href="/account"]').count(), 1, 'where to disconnect');
        assert.equal(await page.locator('footer a[href="https://help.example.com/connect"]').count(), 1, 'the support link');
        const accent = await page.locator('form.actions button').first().evaluate((b) => getComputedStyle(b).backgroundColor);
        assert.equal(accent, 'rgb(123, 45, 142)', 'the accent colour');
        await axe(page, `branded consent (${locale})`);
        await shot(page, locale === 'zh-CN' ? 'consent-branded-zh-CN.png' : 'consent-branded.png');
      } finally {
        await ctx.context.close();
      }
    }
  }));

  test('axe-core summary', () => {
    // For the log: what axe-core found below "serious" on each page.
    for (const r of axeReport) {
      if (r.violations.length) process.stdout.write(`# axe ${r.label}: ${r.violations.join(', ')}\n`);
    }
  });
});
