// Browser check of a gpuhub notice in the GPU panel: headless Debian Chromium logs in, opens the user's running
// JupyterLab, opens the GPU panel from the right sidebar and waits for a notice whose message contains
// EXPECT_NOTICE, with its countdown. Run by e2e/quotae2e (TestBudgetExhaustedNoticeThenStop). Env:
//   HUB_URL, HUB_USER, HUB_PASSWORD, HUB_SERVER   as login-spawn.mjs (the server must be running)
//   EXPECT_NOTICE            text the notice's message must contain
//   GPUHUB_CHROMIUM, GPUHUB_BROWSER_MODULES, GPUHUB_ARTIFACTS   as login-spawn.mjs
// The screenshot is panel-notice-<user>.png.
import { createRequire } from 'node:module';
import { mkdirSync } from 'node:fs';
import path from 'node:path';

const env = (k, d) => process.env[k] || d;
const modules = env('GPUHUB_BROWSER_MODULES', path.resolve('node_modules'));
const { chromium } = createRequire(path.join(modules, 'noop.js'))('playwright-core');

const hub = env('HUB_URL', '');
const user = env('HUB_USER', 'alice');
const password = env('HUB_PASSWORD', '');
const server = env('HUB_SERVER', '');
const expectNotice = env('EXPECT_NOTICE', '');
const artifacts = env('GPUHUB_ARTIFACTS', path.resolve('e2e/artifacts'));
if (!hub.startsWith('http://127.') || !expectNotice) {
  console.error('HUB_URL must be a loopback URL and EXPECT_NOTICE set');
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });

const browser = await chromium.launch({
  executablePath: env('GPUHUB_CHROMIUM', '/usr/bin/chromium'),
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
});
const steps = [];
const step = (s) => { steps.push(s); console.log(`browser: ${s}`); };
let ok = false;
let notice = '';
let countdown = '';
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
await page.route('**/*', (route) => {
  const u = new URL(route.request().url());
  if (u.protocol === 'data:' || u.protocol === 'blob:' || u.hostname.startsWith('127.')) return route.continue();
  return route.abort();
});
try {
  await page.goto(`${hub}hub/login`);
  await page.fill('input[name="username"]', user);
  await page.fill('input[name="password"]', password);
  await Promise.all([page.waitForLoadState('load'), page.click('#login_submit, input[type="submit"], button[type="submit"]')]);
  step(`logged in as ${user}`);
  const lab = server ? `${hub}user/${user}/${server}/lab` : `${hub}user/${user}/lab`;
  await page.goto(lab);
  await page.waitForSelector('#jp-main-dock-panel', { timeout: 90_000 });
  await page.waitForSelector('#jupyterlab-splash', { state: 'detached', timeout: 90_000 });
  step('JupyterLab loaded');
  const tab = page.locator('.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]');
  await tab.waitFor({ state: 'visible', timeout: 30_000 });
  if ((await tab.getAttribute('aria-selected')) !== 'true') await tab.click();
  const panel = page.locator('#gpuhub-gpu-panel');
  await panel.waitFor({ state: 'visible' });
  step('GPU panel open');
  const msg = panel.locator('[data-field="notice-message"]').filter({ hasText: expectNotice });
  await msg.first().waitFor({ state: 'visible', timeout: 30_000 });
  notice = (await msg.first().innerText()).trim();
  countdown = (await panel.locator('[data-field="notice-countdown"]').first().innerText().catch(() => '')).trim();
  // The budget line comes from gpu-quota through the usage API's short cache: give it a moment to catch up with
  // the notice (not required: the notice is what this checks).
  await panel.locator('[data-field="budget"]').filter({ hasText: 'none left' }).first()
    .waitFor({ state: 'visible', timeout: 25_000 }).catch(() => {});
  // JupyterLab's "get notified about official Jupyter news?" toast would cover the panel's lower part.
  await page.getByRole('button', { name: 'No', exact: true }).first().click({ timeout: 2000 }).catch(() => {});
  // The panel down to what the toast corner leaves free (the toast sits in the page's bottom 120 px).
  const box = await panel.boundingBox();
  const vp = page.viewportSize();
  await page.screenshot({
    path: path.join(artifacts, `panel-notice-${user}.png`),
    clip: { x: box.x, y: box.y, width: box.width, height: Math.min(box.height, vp.height - 120 - box.y) },
  });
  await page.screenshot({ path: path.join(artifacts, `panel-notice-${user}-page.png`) });
  step(`notice shown: ${notice} (${countdown})`);
  ok = true;
} catch (err) {
  await page.screenshot({ path: path.join(artifacts, 'panel-notice-failure.png'), fullPage: true }).catch(() => {});
  console.error(`browser: FAILED at ${page.url()}: ${err.message}`);
} finally {
  await browser.close();
}
console.log(JSON.stringify({ ok, steps, notice, countdown }));
process.exit(ok ? 0 : 1);
