// Browser check of the right-size advice in the GPU panel (issue 38): headless Debian Chromium logs in, opens the
// user's running JupyterLab, opens the GPU panel from the right sidebar and waits for the "Right size" section's
// advice for this server (data-current="true") with the verdict EXPECT_VERDICT. Run by e2e/profilese2e
// (TestRightSizeAdvice). Env:
//   HUB_URL, HUB_USER, HUB_PASSWORD, HUB_SERVER   as login-spawn.mjs (the server must be running)
//   EXPECT_VERDICT           smaller, keep or not-enough-data (default smaller)
//   WITHIN_MS                how long to wait for it once the panel is open (default 30000)
//   GPUHUB_CHROMIUM, GPUHUB_BROWSER_MODULES, GPUHUB_ARTIFACTS   as lib.mjs
// The last line is one JSON object: {ok, steps, advice: [{server, verdict, current, headline, evidence,
// simulated, caveats}]}, every advice the section shows. The screenshot is panel-rightsize-<user>.png.
import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { artifacts, env, hub, launch, login, loopbackOnly, openPanel, panelShot, stepper } from './lib.mjs';

const user = env('HUB_USER', 'alice');
const server = env('HUB_SERVER', '');
const verdict = env('EXPECT_VERDICT', 'smaller');
const within = Number(env('WITHIN_MS', '30000'));
if (!hub.startsWith('http://127.')) {
  console.error('HUB_URL must be a loopback URL');
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });

const browser = await launch();
const { steps, step } = stepper();
const result = { ok: false, steps, advice: [] };
const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
await loopbackOnly(page);
try {
  await login(page, user);
  step(`logged in as ${user}`);
  const panel = await openPanel(page, user, server, step);
  const mine = panel.locator(`[data-field="rightsize-advice"][data-current="true"][data-verdict="${verdict}"]`);
  await mine.first().waitFor({ state: 'visible', timeout: within });
  await mine.first().scrollIntoViewIfNeeded();
  result.advice = await panel.locator('[data-field="rightsize-advice"]').evaluateAll((els) => els.map((el) => {
    const text = (f) => el.querySelector(`[data-field="${f}"]`)?.textContent.trim() ?? '';
    return {
      server: el.dataset.server ?? '',
      verdict: el.dataset.verdict ?? '',
      current: el.dataset.current === 'true',
      headline: text('rightsize-headline'),
      evidence: text('rightsize-evidence'),
      simulated: !!el.querySelector('[data-field="rightsize-simulated"]'),
      caveats: [...el.querySelectorAll('[data-field="rightsize-caveat"]')].map((c) => c.textContent.trim()),
    };
  }));
  await panelShot(page, panel, path.join(artifacts, `panel-rightsize-${user}.png`), path.join(artifacts, `panel-rightsize-${user}-page.png`));
  step(`advice shown: ${(await mine.first().locator('[data-field="rightsize-headline"]').innerText()).trim()}`);
  result.ok = true;
} catch (err) {
  await page.screenshot({ path: path.join(artifacts, 'panel-rightsize-failure.png'), fullPage: true }).catch(() => {});
  console.error(`browser: FAILED at ${page.url()}: ${err.message}`);
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
process.exit(result.ok ? 0 : 1);
