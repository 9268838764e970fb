// Browser test of the local GPU cluster: headless Debian Chromium (never a downloaded browser)
// logs in as a demo user, picks a GPU profile on KubeSpawner's spawn form and waits for
// JupyterLab. Run by e2e/e2etest (TestBrowserLoginSpawnJupyterLab); configuration via env:
//   HUB_URL                  public Hub URL with trailing slash (http://127.0.0.1:<port>/)
//   HUB_USER, HUB_PASSWORD   login
//   HUB_SERVER               named server to start (default "browser")
//   HUB_PROFILE              profile slug (default "t4-shared")
//   GPUHUB_CHROMIUM          chromium executable (default /usr/bin/chromium)
//   GPUHUB_BROWSER_MODULES   node_modules holding playwright-core (make browser-deps)
//   GPUHUB_ARTIFACTS         where screenshots go (default e2e/artifacts)
//   EXPECT_REFUSAL           when set, the spawn must be refused (gpu-quota) within REFUSAL_WITHIN_MS
//                            (default 5000) with a message containing this text, on the spawn form or
//                            the progress page; the screenshot is browser-refused-<user>.png
import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { artifacts, env, hub, launch, login, loopbackOnly, stepper } from './lib.mjs';

const user = env('HUB_USER', 'alice');
const server = env('HUB_SERVER', 'browser');
const profile = env('HUB_PROFILE', 't4-shared');
const expectRefusal = env('EXPECT_REFUSAL', '');
const refusalWithin = Number(env('REFUSAL_WITHIN_MS', '5000'));
if (!hub.startsWith('http://127.')) {
  console.error(`HUB_URL must be a loopback URL, got ${JSON.stringify(hub)}`);
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });

const browser = await launch();
const { steps, step } = stepper();
let ok = false;
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
// Belt and braces: the page may only talk to loopback.
await loopbackOnly(page, { log: true });
try {
  await login(page, user);
  step(`logged in as ${user}`);

  await page.goto(`${hub}hub/spawn/${user}/${server}`);
  const radio = page.locator(`input[name="profile"][value="${profile}"]`);
  await radio.waitFor({ state: 'attached', timeout: 30_000 });
  await radio.check({ force: true });
  await page.screenshot({ path: path.join(artifacts, 'browser-spawn-form.png'), fullPage: true });
  step(`spawn form shown, profile ${profile} selected`);
  const submitted = Date.now();
  await page.locator('form#spawn_form input[type="submit"], form#spawn_form button[type="submit"], #spawn_form [type="submit"]').first().click();

  if (expectRefusal) {
    // A refusal within the Hub's 1 s re-renders the form with the message (.alert / #spawn-error); a later one
    // shows on the progress page as "Spawn failed: <message>". With z2jh's slow_spawn_timeout 0 the form redirects
    // at once: the spawn-pending page of the failed spawn ("Spawn failed") has the message in a paragraph.
    const shown = page.locator('.alert-danger, .spawn-error-msg, #progress-message, .progress-log, .alert, .text-center > p').filter({ hasText: expectRefusal });
    await shown.first().waitFor({ state: 'visible', timeout: refusalWithin });
    const took = Date.now() - submitted;
    const text = (await shown.first().innerText()).trim();
    await page.screenshot({ path: path.join(artifacts, `browser-refused-${user}.png`), fullPage: true });
    step(`refused after ${took} ms: ${text}`);
    console.log(JSON.stringify({ ok: true, steps, refusal: text, tookMs: took }));
    await browser.close();
    process.exit(0);
  }

  const lab = new RegExp(`/user/${user}/${server}/lab`);
  await page.waitForURL(lab, { timeout: 240_000 });
  step(`redirected to ${new URL(page.url()).pathname}`);
  await page.locator('#jp-main-dock-panel, .jp-LabShell').first().waitFor({ state: 'visible', timeout: 180_000 });
  await page.locator('.jp-Launcher, .jp-LauncherCard').first().waitFor({ state: 'visible', timeout: 60_000 }).catch(() => {});
  await page.screenshot({ path: path.join(artifacts, 'browser-jupyterlab.png') });
  step('JupyterLab loaded');
  ok = true;
} catch (err) {
  await page.screenshot({ path: path.join(artifacts, 'browser-failure.png'), fullPage: true }).catch(() => {});
  console.error(`browser: FAILED at ${page.url()}: ${err.message}`);
} finally {
  await browser.close();
}
console.log(JSON.stringify({ ok, steps }));
process.exit(ok ? 0 : 1);
