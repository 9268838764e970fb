// Browser check of gpu-culler's "why" on the Hub home page: headless Debian Chromium logs in and opens /hub/home,
// which must show the culler's box (#gpuhub-culler-stop) containing EXPECT_STOP above the Hub's own content (its
// start button). Run by e2e/cullere2e on each Hub line. Env:
//   HUB_URL, HUB_USER, HUB_PASSWORD   as login-spawn.mjs
//   EXPECT_STOP                       text the box must contain
//   GPUHUB_CHROMIUM, GPUHUB_BROWSER_MODULES, GPUHUB_ARTIFACTS   as lib.mjs
// The screenshot is home-stop-<user>.png.
import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { artifacts, env, hub, launch, login, loopbackOnly, stepper } from './lib.mjs';

const user = env('HUB_USER', 'alice');
const expectStop = env('EXPECT_STOP', '');
if (!hub.startsWith('http://127.') || !expectStop) {
  console.error('HUB_URL must be a loopback URL and EXPECT_STOP set');
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });

const browser = await launch();
const { steps, step } = stepper();
let ok = false;
let message = '';
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
await loopbackOnly(page);
try {
  await login(page, user);
  step(`logged in as ${user}`);
  await page.goto(`${hub}hub/home`);
  const box = page.locator('#gpuhub-culler-stop');
  await box.waitFor({ state: 'visible', timeout: 15_000 });
  message = (await box.innerText()).trim();
  if (!message.includes(expectStop)) throw new Error(`the culler's box says ${JSON.stringify(message)}, not ${JSON.stringify(expectStop)}`);
  // The Hub's own home page is still there below it.
  await page.locator('#start').first().waitFor({ state: 'visible', timeout: 5000 });
  await page.screenshot({ path: path.join(artifacts, `home-stop-${user}.png`) });
  step(`home page says: ${message}`);
  ok = true;
} catch (err) {
  await page.screenshot({ path: path.join(artifacts, 'home-stop-failure.png'), fullPage: true }).catch(() => {});
  console.error(`browser: FAILED at ${page.url()}: ${err.message}`);
} finally {
  await browser.close();
}
console.log(JSON.stringify({ ok, steps, message }));
process.exit(ok ? 0 : 1);
