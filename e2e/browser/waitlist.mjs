// Browser steps of the GPU waitlist (issue 13): headless Debian Chromium logs in as HUB_USER and
//   MODE=join   opens the spawn form of HUB_SERVER, picks PROFILE (a GPU choice with none free), ticks "Join the
//               waitlist" (and, with AUTO_START=1, "Start my server automatically when my turn comes"), submits,
//               and waits for EXPECT in the answer (the refusal that says the place in line);
//   MODE=panel  opens the user's running JupyterLab (HUB_SERVER, "" the default server), opens the GPU panel and
//               waits up to WITHIN_MS (default 180000) for EXPECT in its GPU waitlist section.
// It prints "result: <the text found>". Run by e2e/waitliste2e. Env:
//   HUB_URL, HUB_USER, HUB_PASSWORD, HUB_SERVER, MODE, PROFILE, AUTO_START, EXPECT, WITHIN_MS
//   GPUHUB_CHROMIUM, GPUHUB_BROWSER_MODULES, GPUHUB_ARTIFACTS   as lib.mjs
// Screenshots: waitlist-form-<user>.png, waitlist-joined-<user>.png, waitlist-panel-<user>.png.
import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { artifacts, env, hub, launch, login, loopbackOnly, openPanel, stepper } from './lib.mjs';

const user = env('HUB_USER', 'bob');
const server = env('HUB_SERVER', '');
const mode = env('MODE', '');
const profile = env('PROFILE', '');
const autoStart = env('AUTO_START', '') === '1';
const expect = env('EXPECT', '');
const within = Number(env('WITHIN_MS', '180000'));
if (!hub.startsWith('http://127.') || !expect || !['join', 'panel'].includes(mode) || (mode === 'join' && !profile)) {
  console.error('HUB_URL must be a loopback URL, EXPECT set, MODE join (with PROFILE) or panel');
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });

const browser = await launch();
const { step } = stepper();
let ok = false;
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
await loopbackOnly(page);
try {
  await login(page, user);
  step(`logged in as ${user}`);

  if (mode === 'join') {
    await page.goto(server ? `${hub}hub/spawn/${user}/${server}` : `${hub}hub/spawn`);
    const join = page.locator(`input[name="gpuhub-waitlist"][value="${profile}"]`);
    await join.waitFor({ state: 'attached', timeout: 30_000 });
    const radio = page.locator(`input[name="profile"][value="${profile}"]`);
    if (await radio.isEnabled()) await radio.check();
    await join.check();
    if (autoStart) await page.locator(`input[name="gpuhub-autostart"][value="${profile}"]`).check();
    step(`picked ${profile}, join${autoStart ? ' with auto-start' : ''}`);
    await page.screenshot({ path: path.join(artifacts, `waitlist-form-${user}.png`), fullPage: true });
    await page.locator('#spawn_form [type="submit"], form [type="submit"]').first().click();
    // The form again, the progress page, or (z2jh's slow_spawn_timeout 0) spawn-pending's "Spawn failed" page.
    const shown = page.locator('.alert, #progress-message, #progress-log, .progress-log, .text-center > p').filter({ hasText: expect });
    await shown.first().waitFor({ state: 'visible', timeout: 60_000 });
    const text = (await shown.first().innerText()).trim().replace(/\s+/g, ' ');
    await page.screenshot({ path: path.join(artifacts, `waitlist-joined-${user}.png`), fullPage: true });
    console.log(`result: ${text}`);
  } else {
    const panel = await openPanel(page, user, server, step);
    // The single-user env ships JupyterLab settings overrides (images/jupyterlab-overrides.json): no news toast.
    await page.waitForTimeout(3000);
    if (await page.getByText('official Jupyter news').count() > 0) throw new Error('JupyterLab asks about Jupyter news: the settings overrides are not installed');
    const section = panel.locator('[data-section="waitlist"]').filter({ hasText: expect });
    await section.first().waitFor({ state: 'visible', timeout: within });
    const text = (await section.first().innerText()).trim().replace(/\s+/g, ' ');
    const box = await section.first().boundingBox();
    await page.screenshot({ path: path.join(artifacts, `waitlist-panel-${user}.png`),
      clip: { x: box.x, y: box.y, width: box.width, height: Math.min(box.height, 600) } });
    await page.screenshot({ path: path.join(artifacts, `waitlist-panel-${user}-page.png`) });
    console.log(`result: ${text}`);
  }
  ok = true;
} catch (err) {
  console.error(`browser: FAILED at ${page.url()}: ${err.message}`);
  await page.screenshot({ path: path.join(artifacts, `waitlist-failed-${user}-${mode}.png`), fullPage: true }).catch(() => {});
} finally {
  await browser.close();
}
process.exit(ok ? 0 : 1);
