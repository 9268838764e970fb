// What the browser scripts of the e2e suites share: playwright-core from GPUHUB_BROWSER_MODULES (make
// browser-deps), headless Debian Chromium (never a downloaded browser), pages that may talk to loopback only, the
// Hub's login form and the GPU panel in JupyterLab. Common env:
//   HUB_URL                  public Hub URL with trailing slash (http://127.0.0.1:<port>/)
//   HUB_PASSWORD             the users' password
//   GPUHUB_CHROMIUM          chromium executable (default /usr/bin/chromium)
//   GPUHUB_BROWSER_MODULES   node_modules holding playwright-core
//   GPUHUB_ARTIFACTS         where screenshots go (default e2e/artifacts)
import { createRequire } from 'node:module';
import path from 'node:path';

// env is a setting from the environment; empty counts as unset.
export const env = (k, d) => process.env[k] || d;

export const modules = env('GPUHUB_BROWSER_MODULES', path.resolve('node_modules'));
// requireModule loads (or resolves) a package of GPUHUB_BROWSER_MODULES.
export const requireModule = createRequire(path.join(modules, 'noop.js'));
const { chromium } = requireModule('playwright-core');

export const hub = env('HUB_URL', '');
export const password = env('HUB_PASSWORD', '');
export const artifacts = env('GPUHUB_ARTIFACTS', path.resolve('e2e/artifacts'));

export const launch = () => chromium.launch({
  executablePath: env('GPUHUB_CHROMIUM', '/usr/bin/chromium'),
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
});

// stepper returns the list of steps and a function that adds one and prints it as "browser: <step>".
export const stepper = () => {
  const steps = [];
  return { steps, step: (s) => { steps.push(s); console.log(`browser: ${s}`); } };
};

// loopbackOnly is belt and braces: the page (or context) may only reach loopback, data: and blob: URLs. With log,
// each blocked request is said on stderr.
export const loopbackOnly = (page, { log = false } = {}) => page.route('**/*', (route) => {
  const u = new URL(route.request().url());
  if (u.protocol === 'data:' || u.protocol === 'blob:' || u.hostname.startsWith('127.')) return route.continue();
  if (log) console.error(`browser: blocked non-loopback request ${u.href}`);
  return route.abort();
});

// login logs user in through the Hub's login form and throws when the Hub keeps the login page.
export async function login(page, user) {
  await page.goto(`${hub}hub/login`);
  await page.fill('input[name="username"]', user);
  await page.fill('input[name="password"]', password);
  await Promise.all([page.waitForLoadState('load'), page.click('#login_submit, input[type="submit"], button[type="submit"]')]);
  if (page.url().includes('/hub/login')) throw new Error(`login as ${user} failed (still on ${page.url()})`);
}

// openPanel opens user's running JupyterLab on server ('' the default server) and the GPU panel from the right
// sidebar, and returns the panel.
export async function openPanel(page, user, server, step) {
  await page.goto(server ? `${hub}user/${user}/${server}/lab` : `${hub}user/${user}/lab`);
  await page.waitForSelector('#jp-main-dock-panel', { timeout: 90_000 });
  await page.waitForSelector('#jupyterlab-splash', { state: 'detached', timeout: 90_000 });
  step('JupyterLab loaded');
  const tab = page.locator('.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]');
  await tab.waitFor({ state: 'visible', timeout: 30_000 });
  if ((await tab.getAttribute('aria-selected')) !== 'true') await tab.click();
  const panel = page.locator('#gpuhub-gpu-panel');
  await panel.waitFor({ state: 'visible' });
  step('GPU panel open');
  return panel;
}

// panelShot declines JupyterLab's "get notified about official Jupyter news?" toast where it shows, then writes a
// screenshot of the panel to file, down to what the toast's corner (the page's bottom 120 px) leaves free, and one
// of the whole page to pageFile.
export async function panelShot(page, panel, file, pageFile) {
  await page.getByRole('button', { name: 'No', exact: true }).first().click({ timeout: 2000 }).catch(() => {});
  const box = await panel.boundingBox();
  const vp = page.viewportSize();
  await page.screenshot({
    path: file,
    clip: { x: box.x, y: box.y, width: box.width, height: Math.max(1, Math.min(box.height, vp.height - 120 - box.y)) },
  });
  await page.screenshot({ path: pageFile });
}
