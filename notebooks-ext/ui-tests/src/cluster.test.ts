// Cluster UI test: the GPU panel on the local cluster (make demo), through the real Hub,
// KubeSpawner, gpu-agent (simulated backend) and usage API, in Debian's chromium.
//
//   GPUHUB_UI_HUB_URL          the Hub's public URL, e.g. http://127.0.0.1:8000/ (required)
//   GPUHUB_UI_ALICE_PASSWORD   alice's password (default $GPUHUB_DEMO_PASSWORD, else gpuhub-demo as make demo)
//   GPUHUB_UI_BOB_PASSWORD     bob's password (same default)
//   GPUHUB_UI_ALICE, _BOB      user names (default alice, bob)
//   GPUHUB_UI_ALICE_PROFILE    KubeSpawner profile slug for alice (default mig-a100-sxm4-40gb-3g-20gb, gpu-profiles'
//                              slug of MIG 3g.20gb, else the static list's a100-3g; empty = first GPU one)
//   GPUHUB_UI_BOB_PROFILE      same for bob (default t4-shared: a time-sliced T4 share)
//   GPUHUB_UI_SERVICE          usage service name (default gpu-usage)
//   GPUHUB_UI_SPAWN_TIMEOUT_S  seconds to wait for a server (default 300)
//   GPUHUB_UI_KEEP_SERVERS=1   leave the servers running afterwards
//   GPUHUB_UI_ARTIFACTS        where screenshots go (default ui-tests/artifacts)

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Browser, Page, Response } from 'playwright-core';

import {
  PanelReading,
  launchChromium,
  openNewNotebook,
  openPanel,
  readPanel,
  runCell,
  setTheme,
  snap,
  waitForLab,
  waitForPanel
} from './panel';

function env(name: string, fallback?: string): string {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === '') {
    throw new Error(
      `set ${name} (see the header of ui-tests/src/cluster.test.ts)`
    );
  }
  return v;
}

const hub = env('GPUHUB_UI_HUB_URL').replace(/\/*$/, '/');
const service = env('GPUHUB_UI_SERVICE', 'gpu-usage');
const spawnTimeout = Number(env('GPUHUB_UI_SPAWN_TIMEOUT_S', '300')) * 1000;
const demoPassword = process.env.GPUHUB_DEMO_PASSWORD || 'gpuhub-demo';
const users = {
  alice: {
    name: env('GPUHUB_UI_ALICE', 'alice'),
    password: env('GPUHUB_UI_ALICE_PASSWORD', demoPassword),
    profile:
      process.env.GPUHUB_UI_ALICE_PROFILE ?? 'mig-a100-sxm4-40gb-3g-20gb',
    // The static list's slug of the same GPU (e2e/hub/values.yaml): the form when gpu-profiles is not running.
    staticProfile: 'a100-3g'
  },
  bob: {
    name: env('GPUHUB_UI_BOB', 'bob'),
    password: env('GPUHUB_UI_BOB_PASSWORD', demoPassword),
    profile: process.env.GPUHUB_UI_BOB_PROFILE ?? 'shared-t4',
    staticProfile: 't4-shared'
  }
};

interface Gpu {
  description?: string;
  uuid?: string;
  smUtilPercent: number | null;
  stale?: boolean;
}
interface Me {
  user: string;
  servers: { name: string; pod?: string; stale?: boolean; gpus: Gpu[] }[];
  gpuHours: Record<
    string,
    { allocated: number; used: number } | null | undefined
  >;
  gpuHoursStatus?: 'ok' | 'unavailable';
}

let browser: Browser;
const pages: Page[] = [];
let aliceMe: Me;

before(async () => {
  browser = await launchChromium();
});

after(async () => {
  if (process.env.GPUHUB_UI_KEEP_SERVERS !== '1') {
    for (const page of pages) {
      await stopServer(page).catch(e => console.log(`stopping a server: ${e}`));
    }
  }
  await browser?.close();
});

/** Log in through the Hub's login form and start (or reach) the default server. */
async function startSession(user: {
  name: string;
  password: string;
  profile: string;
  staticProfile?: string;
}): Promise<Page> {
  const context = await browser.newContext({
    viewport: { width: 1366, height: 860 },
    colorScheme: 'light'
  });
  const page = await context.newPage();
  pages.push(page);
  await page.goto(`${hub}hub/login`);
  await page.fill('#username_input', user.name);
  await page.fill('#password_input', user.password);
  await Promise.all([page.waitForNavigation(), page.click('#login_submit')]);
  assert.ok(
    !page.url().includes('/hub/login'),
    `login as ${user.name} failed (still on ${page.url()})`
  );

  await page.goto(`${hub}hub/spawn`);
  const radios = page.locator('input[type="radio"][name="profile"]');
  if ((await radios.count()) > 0) {
    let slug = user.profile || (await firstGpuProfile(page));
    const radio = (s: string) =>
      page.locator(`input[type="radio"][name="profile"][value="${s}"]`);
    if ((await radio(slug).count()) === 0 && user.staticProfile) {
      slug = user.staticProfile;
    }
    await radio(slug).check();
    await page.click('#spawn_form button[type="submit"]');
  }
  await page.waitForURL(new RegExp(`/user/${user.name}/`), {
    timeout: spawnTimeout
  });
  await waitForLab(page, spawnTimeout);
  return page;
}

/** The first profile whose card mentions a GPU, MIG slice or time-sliced share. */
async function firstGpuProfile(page: Page): Promise<string> {
  const slug = await page.evaluate(() => {
    for (const label of Array.from(
      document.querySelectorAll('label.js-profile-label')
    )) {
      const input = label.querySelector(
        'input[name="profile"]'
      ) as HTMLInputElement | null;
      if (
        input &&
        /gpu|mig|a100|h100|t4|l4|shared/i.test(label.textContent ?? '')
      ) {
        return input.value;
      }
    }
    return '';
  });
  assert.ok(
    slug,
    'no GPU profile on the spawn form; set GPUHUB_UI_ALICE_PROFILE / GPUHUB_UI_BOB_PROFILE'
  );
  return slug;
}

async function stopServer(page: Page): Promise<void> {
  await page.goto(`${hub}hub/home`);
  const stop = page.locator('#stop');
  if (await stop.isVisible()) {
    await stop.click();
    await page
      .locator('#start')
      .waitFor({ state: 'visible', timeout: 120_000 });
  }
}

/** Refresh the panel and return the exact document its own request received. */
async function refreshAndCapture(
  page: Page
): Promise<{ me: Me; panel: PanelReading; status: number }> {
  const response: Promise<Response> = page.waitForResponse(
    r =>
      r.url().includes(`/services/${service}/api/v1/me`) &&
      r.request().method() === 'GET' &&
      // The Hub answers a missing service with a redirect first: wait for the final answer.
      (r.status() < 300 || r.status() >= 400),
    { timeout: 30_000 }
  );
  await page.locator('.jp-GpuPanel-refresh').click();
  const r = await response;
  if (r.status() !== 200) {
    const panel = await readPanel(page);
    throw new Error(
      `the usage API answered ${r.status()} to the panel (${r.url()}); is the ${service} service running and ` +
        `does the user hold access:services!service=${service}? The panel shows: ${panel.notices.join('; ')}`
    );
  }
  const me = (await r.json()) as Me;
  // Let React render the document it just received.
  await page.waitForTimeout(300);
  return { me, panel: await readPanel(page), status: r.status() };
}

/** Run a step; on failure keep a screenshot of the panel for the artifacts. */
async function step(
  page: () => Page | undefined,
  name: string,
  body: () => Promise<void>
): Promise<void> {
  try {
    await body();
  } catch (err) {
    const p = page();
    if (p) {
      await snap(p, `cluster-failure-${name}`).catch(() => undefined);
    }
    throw err;
  }
}

/** A panel number ("12.3") matches the API's (12.25) up to the panel's rounding. */
function approxHours(text: string, v: number | undefined): boolean {
  if (v === undefined) {
    return text === '–';
  }
  // The panel shows a few GPU-seconds as "< 0.01" rather than a misleading 0.
  if (text === '< 0.01') {
    return v > 0 && v < 0.01;
  }
  return Math.abs(Number(text) - v) <= Math.max(0.005, 0.051 * Math.abs(v));
}

function assertPanelShows(panel: PanelReading, me: Me, user: string): void {
  assert.equal(me.user, user, 'the usage API answered for the logged-in user');
  assert.equal(panel.user, user);
  const gpus = me.servers.flatMap(s => s.gpus);
  assert.ok(gpus.length > 0, `${user} holds no GPU; start a GPU profile`);
  assert.deepEqual(
    panel.descriptions,
    gpus.map(g => g.description ?? panel.descriptions[0])
  );
  // A stale unit shows no number, whatever the document carries (issue 9).
  const stale = new Set(
    me.servers.flatMap(s => s.gpus.filter(g => s.stale || g.stale))
  );
  assert.deepEqual(
    panel.utilization,
    gpus.map(g =>
      g.smUtilPercent === null || stale.has(g)
        ? null
        : Math.round(Math.min(Math.max(g.smUtilPercent, 0), 100))
    )
  );
  if (me.gpuHoursStatus === 'unavailable') {
    assert.ok(panel.notices.includes('GPU-hours unavailable'));
    assert.deepEqual(panel.hours, {});
    return;
  }
  for (const [key, w] of Object.entries(me.gpuHours)) {
    const shown = panel.hours[key];
    if (!w || !shown) {
      continue;
    }
    assert.ok(
      approxHours(shown.allocated, w.allocated),
      `${key} allocated: panel ${shown.allocated}, API ${w.allocated}`
    );
    assert.ok(
      approxHours(shown.used, w.used),
      `${key} used: panel ${shown.used}, API ${w.used}`
    );
  }
}

let alice: Page;

test('alice logs in, starts a GPU server and the panel shows the usage API numbers', async () => {
  alice = await startSession(users.alice);
  await step(
    () => alice,
    'alice',
    async () => {
      await openPanel(alice);
      await waitForPanel(
        alice,
        x => x.descriptions.length > 0 || x.notices.length > 0,
        60_000,
        'the panel'
      );
      const { me, panel, status } = await refreshAndCapture(alice);
      assert.equal(
        status,
        200,
        'the panel’s request with the page’s Hub token was accepted'
      );
      assertPanelShows(panel, me, users.alice.name);
      assert.ok(panel.badge === 'simulated' || panel.badge === 'measured');
      aliceMe = me;
    }
  );
});

test('a busy cell makes alice’s utilization rise', async () => {
  assert.ok(
    aliceMe,
    'not run: the panel did not show alice’s numbers (previous test)'
  );
  await step(
    () => alice,
    'busy',
    async () => {
      await openNewNotebook(alice);
      const idle = await waitForPanel(
        alice,
        x => x.utilization.length > 0 && x.utilization[0] !== null,
        120_000,
        'a utilization number (MIG without DCGM has none: use a profile with simulated or measured utilization)'
      );
      // The kernel's start-up counts as use: wait (a while) for it to settle, as the standalone test does.
      const settled = await waitForPanel(
        alice,
        x => (x.utilization[0] ?? 100) < 10,
        60_000,
        'an idle kernel'
      ).catch(() => idle);
      const start = settled.utilization[0] ?? 0;
      const target = Math.min(start + 10, 95);
      // The sparkline's highest before the cell: a higher one later was reached while the cell ran, even if no
      // poll of the meter caught it (on a loaded machine the busy cell's share comes and goes).
      const before = highest(settled.sparklineLabel);
      await runCell(
        alice,
        'import time\nt0 = time.time()\nwhile time.time() - t0 < 120:\n    pass\n'
      );
      const busy = await waitForPanel(
        alice,
        x =>
          (x.utilization[0] ?? 0) >= target ||
          (highest(x.sparklineLabel) > before &&
            highest(x.sparklineLabel) >= target),
        110_000,
        `utilization above ${start} %`
      );
      assert.ok(
        (busy.utilization[0] ?? 0) > start ||
          highest(busy.sparklineLabel) > before
      );
      const { me, panel } = await refreshAndCapture(alice);
      assertPanelShows(panel, me, users.alice.name);
      await snap(alice, 'cluster-alice-light');
      await setTheme(alice, 'JupyterLab Dark');
      await snap(alice, 'cluster-alice-dark');
      await setTheme(alice, 'JupyterLab Light');
    }
  );
});

test('bob sees only his own share', async () => {
  assert.ok(
    aliceMe,
    'not run: alice’s document is needed to compare (first test)'
  );
  const bob = await startSession(users.bob);
  await step(
    () => bob,
    'bob',
    async () => {
      await openPanel(bob);
      await waitForPanel(
        bob,
        x => x.descriptions.length > 0 || x.notices.length > 0,
        60_000,
        'the panel'
      );
      const { me, panel } = await refreshAndCapture(bob);
      assert.equal(me.user, users.bob.name);
      assert.equal(panel.user, users.bob.name);
      const alicePods = aliceMe.servers
        .map(s => s.pod)
        .filter((p): p is string => !!p);
      const aliceUUIDs = aliceMe.servers
        .flatMap(s => s.gpus.map(g => g.uuid))
        .filter((u): u is string => !!u);
      for (const s of me.servers) {
        assert.ok(
          !alicePods.includes(s.pod ?? ''),
          `bob's document lists alice's pod ${s.pod}`
        );
      }
      for (const u of aliceUUIDs) {
        assert.ok(
          !JSON.stringify(me).includes(u),
          `bob's document mentions alice's device ${u}`
        );
      }
      assert.ok(
        !panel.text.includes(users.alice.name),
        'bob’s panel mentions alice'
      );
      if (me.servers.some(s => s.gpus.length > 0)) {
        assertPanelShows(panel, me, users.bob.name);
      } else {
        assert.ok(panel.notices.includes('No GPU attached'));
      }
      await snap(bob, 'cluster-bob-light');
    }
  );
});

/** The highest utilization the panel's sparkline label names ("..., highest 62 %"), -1 without one. */
function highest(label: string | null): number {
  const m = /highest (\d+) %/.exec(label ?? '');
  return m ? Number(m[1]) : -1;
}
