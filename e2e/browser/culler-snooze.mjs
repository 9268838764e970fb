// Browser check of gpu-culler's snooze from the GPU panel (issue 12, "the user snoozes from the panel in
// Chromium → the stop moves by the snooze period"): headless Debian Chromium logs in, opens the user's running
// JupyterLab, opens the GPU panel from the right sidebar, waits for the culler's idle notice with its Snooze
// button, clicks it, waits until the panel shows the new deadline, takes a screenshot and prints one JSON line.
//
// Usage:  node e2e/browser/culler-snooze.mjs [SCREENSHOT]
//   SCREENSHOT (argument, or env SCREENSHOT)  where the PNG of the panel goes after the snooze; default
//                            $GPUHUB_ARTIFACTS/culler-snooze-<user>.png (a full-page <name>-page.png is written
//                            next to it; on failure <name>-failure.png)
// Env:
//   HUB_URL, HUB_USER, HUB_PASSWORD, HUB_SERVER   as login-spawn.mjs (the server must be running; HUB_URL is a
//                            loopback URL ending in /)
//   EXPECT_NOTICE            optional: text the culler notice's message must contain
//   NOTICE_TIMEOUT_S         how long to wait for the culler's notice with a Snooze button (default 180)
//   CULLER_SERVICE           the notice's service (default gpu-culler)
//   GPUHUB_CHROMIUM, GPUHUB_BROWSER_MODULES, GPUHUB_ARTIFACTS   as lib.mjs
//
// Output (last stdout line, also on failure): {"ok", "steps", "server", "deadlineBefore", "deadlineAfter",
// "movedSeconds", "snoozesLeftBefore", "snoozesLeftAfter", "messageBefore", "messageAfter", "result",
// "error", "screenshot"}: deadlines are the notice's RFC 3339 deadline (the banner's data-deadline) before the
// click and once the panel shows the snooze; result is the panel's "Snoozed: this server now stops at …" line;
// error is the panel's words when the culler refused the snooze (409, 403, unreachable). Exit 0 when the
// deadline moved later, 1 otherwise, 2 on bad arguments.
import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { artifacts, env, hub, launch, login, loopbackOnly, openPanel, panelShot, stepper } from './lib.mjs';

const user = env('HUB_USER', 'alice');
const server = env('HUB_SERVER', '');
const expectNotice = env('EXPECT_NOTICE', '');
const service = env('CULLER_SERVICE', 'gpu-culler');
const noticeTimeout = Number(env('NOTICE_TIMEOUT_S', '180')) * 1000;
const shot = path.resolve(process.argv[2] || env('SCREENSHOT', path.join(artifacts, `culler-snooze-${user}.png`)));
if (!hub.startsWith('http://127.') || !hub.endsWith('/') || !(noticeTimeout > 0)) {
  console.error('HUB_URL must be a loopback URL ending in / and NOTICE_TIMEOUT_S a positive number');
  process.exit(2);
}
mkdirSync(path.dirname(shot), { recursive: true });
const sibling = (suffix) => shot.replace(/\.png$/i, '') + suffix;

const browser = await launch();
const { steps, step } = stepper();
const out = {
  ok: false, steps, server, deadlineBefore: '', deadlineAfter: '', movedSeconds: null, snoozesLeftBefore: '',
  snoozesLeftAfter: '', messageBefore: '', messageAfter: '', result: '', error: '', screenshot: '',
};
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
await loopbackOnly(page);
const text = async (loc) => ((await loc.first().innerText({ timeout: 1000 }).catch(() => '')) || '').trim();
try {
  await login(page, user);
  step(`logged in as ${user}`);
  const panel = await openPanel(page, user, server, step);

  // The culler's notice on this server, snoozable (the panel polls the usage API's me every 10 s).
  let banner = panel.locator(`[data-service="${service}"][data-server="${server}"]`);
  if (expectNotice) banner = banner.filter({ hasText: expectNotice });
  const button = banner.locator('[data-action="snooze"]:not([disabled])');
  await button.first().waitFor({ state: 'visible', timeout: noticeTimeout });
  out.deadlineBefore = (await banner.first().getAttribute('data-deadline')) || '';
  out.messageBefore = await text(banner.locator('[data-field="notice-message"]'));
  out.snoozesLeftBefore = await text(banner.locator('[data-field="snoozes-left"]'));
  const countdown = await text(banner.locator('[data-field="notice-countdown"]'));
  step(`notice: ${out.messageBefore} (${countdown}; stops ${out.deadlineBefore}; ${out.snoozesLeftBefore || 'no count'})`);

  await button.first().click();
  step('clicked Snooze');
  // The panel shows the culler's answer at once: the new deadline, or why it refused.
  const done = banner.locator('[data-field="snooze-result"], [data-field="snooze-error"]');
  await done.first().waitFor({ state: 'visible', timeout: 30_000 });
  out.error = await text(banner.locator('[data-field="snooze-error"]'));
  if (out.error) throw new Error(`the snooze failed: ${out.error}`);
  out.result = await text(banner.locator('[data-field="snooze-result"]'));
  await page.waitForFunction(
    ([sel, before]) => {
      const d = document.querySelector(sel)?.getAttribute('data-deadline') || '';
      return d !== '' && d !== before;
    },
    [`#gpuhub-gpu-panel [data-service="${service}"][data-server="${server}"]`, out.deadlineBefore],
    { timeout: 30_000 },
  );
  out.deadlineAfter = (await banner.first().getAttribute('data-deadline')) || '';
  out.messageAfter = await text(banner.locator('[data-field="notice-message"]'));
  out.snoozesLeftAfter = await text(banner.locator('[data-field="snoozes-left"]'));
  out.movedSeconds = (Date.parse(out.deadlineAfter) - Date.parse(out.deadlineBefore)) / 1000;
  step(`snoozed: ${out.result} (stops ${out.deadlineAfter}, moved ${out.movedSeconds} s; ${out.snoozesLeftAfter || 'no count'})`);
  if (!(out.movedSeconds > 0)) throw new Error(`the deadline did not move later: ${out.deadlineBefore} -> ${out.deadlineAfter}`);

  await panelShot(page, panel, shot, sibling('-page.png'));
  out.screenshot = shot;
  out.ok = true;
} catch (err) {
  await page.screenshot({ path: sibling('-failure.png'), fullPage: true }).catch(() => {});
  console.error(`browser: FAILED at ${page.url()}: ${err.message}`);
  if (!out.error) out.error = err.message;
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
process.exit(out.ok ? 0 : 1);
