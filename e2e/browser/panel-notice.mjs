// Browser check of a gpuhub notice in the GPU panel: headless Debian Chromium logs in, opens the user's running
// JupyterLab, opens the GPU panel from the right sidebar and waits for a notice whose message contains
// EXPECT_NOTICE, with its countdown. Run by e2e/quotae2e (TestBudgetExhaustedNoticeThenStop). Env:
//   HUB_URL, HUB_USER, HUB_PASSWORD, HUB_SERVER   as login-spawn.mjs (the server must be running)
//   EXPECT_NOTICE            text the notice's message must contain
//   WITHIN_MS                how long to wait for it once the panel is open (default 30000)
//   GPUHUB_CHROMIUM, GPUHUB_BROWSER_MODULES, GPUHUB_ARTIFACTS   as lib.mjs
// The screenshot is panel-notice-<user>.png.
import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { artifacts, env, hub, launch, login, loopbackOnly, openPanel, panelShot, stepper } from './lib.mjs';

const user = env('HUB_USER', 'alice');
const server = env('HUB_SERVER', '');
const expectNotice = env('EXPECT_NOTICE', '');
const within = Number(env('WITHIN_MS', '30000'));
if (!hub.startsWith('http://127.') || !expectNotice) {
  console.error('HUB_URL must be a loopback URL and EXPECT_NOTICE set');
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });

const browser = await launch();
const { steps, step } = stepper();
let ok = false;
let notice = '';
let countdown = '';
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
await loopbackOnly(page);
try {
  await login(page, user);
  step(`logged in as ${user}`);
  const panel = await openPanel(page, user, server, step);
  const msg = panel.locator('[data-field="notice-message"]').filter({ hasText: expectNotice });
  await msg.first().waitFor({ state: 'visible', timeout: within });
  notice = (await msg.first().innerText()).trim();
  countdown = (await panel.locator('[data-field="notice-countdown"]').first().innerText().catch(() => '')).trim();
  // The budget line comes from gpu-quota through the usage API's short cache: give it a moment to catch up with
  // the notice (not required: the notice is what this checks).
  await panel.locator('[data-field="budget"]').filter({ hasText: 'none left' }).first()
    .waitFor({ state: 'visible', timeout: 25_000 }).catch(() => {});
  await panelShot(page, panel, path.join(artifacts, `panel-notice-${user}.png`), path.join(artifacts, `panel-notice-${user}-page.png`));
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
