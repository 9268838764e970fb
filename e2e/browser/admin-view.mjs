// The usage API's admin view (issue 14) in headless Debian Chromium: logs in to the Hub as HUB_USER, opens the
// Hub's Services menu and follows SERVICE (the Hub's OAuth flow; its "Authorize access" page is accepted when the
// Hub shows it), then opens each of PAGES (paths under the service prefix, "|"-separated; "" is the home) and
// prints for each one line
//   page: {"path", "status", "url", "h1", "text", "tables": [{"caption", "headers", "rows"}]}
// then, with CSV set (a path under the prefix), "csv: <JSON string of the body>", and at the end
//   cookie: {"name", "value"}   the session cookie, for the caller's forged/expired cookie checks.
// With A11Y=1, each page is then checked with axe-core (WCAG 2 A and AA rules) in light and dark, one line each:
//   a11y: {"path", "scheme", "violations": [{"id", "impact", "help", "nodes"}]}
// and whether it fits a 1280 px and a 1024 px wide window: "fit: {"path", "width", "scrollWidth"}"
// (in a second browser context with the same session that bypasses the pages' CSP, which forbids the injected
// script; the pages themselves run none).
// Env: HUB_URL, HUB_USER, HUB_PASSWORD, SERVICE (default gpu-usage), PAGES, CSV, DARK (1: also a dark screenshot), A11Y,
//      SHOTS (the screenshots' name before -<n>.png; default admin-view-<user>)
//      GPUHUB_CHROMIUM, GPUHUB_BROWSER_MODULES, GPUHUB_ARTIFACTS   as lib.mjs
// Screenshots: admin-view-<user>-<n>.png (and -dark.png).
import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { artifacts, env, hub, launch, login, loopbackOnly, requireModule, stepper } from './lib.mjs';

const user = env('HUB_USER', 'admin');
const service = env('SERVICE', 'gpu-usage');
const pages = env('PAGES', '').split('|');
const csv = env('CSV', '');
const dark = env('DARK', '') === '1';
const a11y = env('A11Y', '') === '1';
const shots = env('SHOTS', `admin-view-${user}`);
if (!hub.startsWith('http://127.')) {
  console.error('HUB_URL must be a loopback URL');
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });
const prefix = `${hub}services/${service}/`;

const browser = await launch();
const { step } = stepper();
let ok = false;
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
await loopbackOnly(page);
try {
  await login(page, user);
  step(`logged in as ${user}`);

  // The way an admin gets there: the Hub's navbar, Services, the service's entry.
  await page.goto(`${hub}hub/home`);
  await page.click('a.dropdown-toggle:has-text("Services")');
  await Promise.all([page.waitForLoadState('load'), page.click(`a.dropdown-item:has-text("${service}")`)]);
  if (page.url().includes('/hub/api/oauth2/authorize')) {
    step('the Hub asks to authorize the service; accepting');
    await Promise.all([page.waitForLoadState('load'), page.click('button:has-text("Authorize")')]);
  }
  await page.waitForURL((u) => u.href.startsWith(prefix), { timeout: 30_000 });
  step(`reached ${page.url()} from the Services menu`);

  let n = 0;
  for (const p of pages) {
    const resp = await page.goto(prefix + p);
    const info = await page.evaluate(() => ({
      h1: document.querySelector('h1')?.innerText ?? '',
      text: document.querySelector('main')?.innerText ?? document.body.innerText,
      tables: [...document.querySelectorAll('table')].map((t) => ({
        caption: t.caption?.innerText ?? '',
        headers: [...t.querySelectorAll('thead th')].map((th) => th.innerText.trim()),
        rows: [...t.querySelectorAll('tbody tr')].map((tr) => [...tr.children].map((td) => td.innerText.trim())),
      })),
    }));
    console.log(`page: ${JSON.stringify({ path: p, status: resp.status(), url: page.url(), ...info })}`);
    await page.screenshot({ path: path.join(artifacts, `${shots}-${n}.png`), fullPage: true });
    if (dark && n === 0) {
      await page.emulateMedia({ colorScheme: 'dark' });
      await page.screenshot({ path: path.join(artifacts, `${shots}-${n}-dark.png`), fullPage: true });
      await page.emulateMedia({ colorScheme: 'light' });
    }
    n++;
  }
  if (csv) {
    const r = await context.request.get(prefix + csv);
    console.log(`csv: ${JSON.stringify(await r.text())}`);
  }
  const session = (await context.cookies(prefix)).find((c) => c.name.endsWith('-session'));
  if (session) console.log(`cookie: ${JSON.stringify({ name: session.name, value: session.value })}`);
  if (a11y) {
    const axe = requireModule.resolve('axe-core/axe.min.js');
    const checker = await browser.newContext({ viewport: { width: 1280, height: 900 }, bypassCSP: true, storageState: await context.storageState() });
    const p2 = await checker.newPage();
    await loopbackOnly(p2);
    for (const p of pages) {
      for (const scheme of ['light', 'dark']) {
        await p2.emulateMedia({ colorScheme: scheme });
        await p2.goto(prefix + p);
        await p2.addScriptTag({ path: axe });
        const violations = await p2.evaluate(async () => {
          const r = await window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } });
          return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5) }));
        });
        console.log(`a11y: ${JSON.stringify({ path: p, scheme, violations })}`);
      }
      // Usable on a laptop and at 1280 px: nothing wider than the window (no sideways scrolling).
      for (const width of [1280, 1024]) {
        await p2.setViewportSize({ width, height: 768 });
        await p2.goto(prefix + p);
        const scrollWidth = await p2.evaluate(() => document.documentElement.scrollWidth);
        console.log(`fit: ${JSON.stringify({ path: p, width, scrollWidth })}`);
      }
      await p2.setViewportSize({ width: 1280, height: 900 });
    }
    await checker.close();
  }
  ok = true;
} catch (e) {
  console.error(`browser: ${e}`);
  await page.screenshot({ path: path.join(artifacts, `admin-view-${user}-error.png`), fullPage: true }).catch(() => {});
} finally {
  await browser.close();
}
process.exit(ok ? 0 : 1);
