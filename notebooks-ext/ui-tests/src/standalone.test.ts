// Standalone UI test: a real JupyterLab (from the venv, with the wheel installed)
// that believes it runs under JupyterHub, a fixture playing the usage API, and
// Debian's chromium. Screenshots (light and dark) go to the artifacts folder.
//
//   GPUHUB_UI_VENV       venv with jupyterlab and the wheel installed (required)
//   GPUHUB_UI_ARTIFACTS  where screenshots go (default ui-tests/artifacts)
//   CHROMIUM             browser binary (default /usr/bin/chromium)

import assert from 'node:assert/strict';
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';

import {
  ALICE_TOKEN,
  ME_PATH,
  UsageFixture,
  h100Place,
  standardUsers
} from './fixture';
import {
  launchChromium,
  openPanel,
  openNewNotebook,
  runCell,
  setTheme,
  snap,
  waitForLab,
  waitForPanel
} from './panel';

const venv = process.env.GPUHUB_UI_VENV ?? '';
const fixture = new UsageFixture(standardUsers());
let lab: ChildProcess | null = null;
let labLog = '';
let labUrl = '';
let browser: Browser | null = null;
let page: Page;
let tmp = '';
let fixtureUrl = '';
/** The browser's zone: the panel sends it as `tz` (issue 9). */
const BROWSER_ZONE = 'Europe/Berlin';

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

async function waitHttp(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const r = await fetch(url);
      if (r.ok) {
        return;
      }
    } catch {
      // not up yet
    }
    if (Date.now() > deadline || lab?.exitCode !== null) {
      throw new Error(
        `jupyter lab did not come up at ${url}:\n${labLog.slice(-4000)}`
      );
    }
    await new Promise(r => setTimeout(r, 500));
  }
}

before(async () => {
  assert.ok(
    venv,
    'set GPUHUB_UI_VENV to a venv with jupyterlab and the gpuhub wheel (make ui-test does)'
  );
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'gpuhub-ui-'));
  fixtureUrl = await fixture.start();
  const port = await freePort();
  labUrl = `http://127.0.0.1:${port}`;

  // Make JupyterLab believe it runs under JupyterHub: the Hub settings LabApp reads, and a
  // page config hook that puts the visitor's token in the page as jupyterhub-singleuser does.
  fs.writeFileSync(
    path.join(tmp, 'jupyter_server_config.py'),
    [
      'def _hub_page_config(handler, page_config):',
      '    if handler.get_argument("nohub", ""):',
      '        # A plain JupyterLab: no Hub keys at all.',
      '        for key in ("hubPrefix", "hubHost", "hubUser", "hubServerName", "hubServerUser"):',
      '            page_config.pop(key, None)',
      '        return page_config',
      '    page_config["hubUser"] = "alice"',
      '    page_config["hubServerUser"] = "alice"',
      '    page_config["hubServerName"] = ""',
      `    page_config["token"] = ${JSON.stringify(ALICE_TOKEN)}`,
      '    return page_config',
      '',
      'c.ServerApp.tornado_settings = {',
      `    "hub_prefix": "/hub/", "hub_host": ${JSON.stringify(fixtureUrl)}, "user": "alice",`,
      '    "page_config_hook": _hub_page_config,',
      '}',
      ''
    ].join('\n')
  );
  // A short refresh interval through the settings system (the schema's own key).
  const settingsDir = path.join(tmp, 'settings');
  fs.mkdirSync(path.join(settingsDir, '@gpuhub', 'jupyterlab-gpu-panel'), {
    recursive: true
  });
  fs.writeFileSync(
    path.join(
      settingsDir,
      '@gpuhub',
      'jupyterlab-gpu-panel',
      'plugin.jupyterlab-settings'
    ),
    JSON.stringify({ refreshInterval: 2 })
  );
  // No "get JupyterLab news?" toast over the screenshots (and no request to the internet).
  fs.mkdirSync(path.join(settingsDir, '@jupyterlab', 'apputils-extension'), {
    recursive: true
  });
  fs.writeFileSync(
    path.join(
      settingsDir,
      '@jupyterlab',
      'apputils-extension',
      'notification.jupyterlab-settings'
    ),
    JSON.stringify({ fetchNews: 'false', checkForUpdates: false })
  );
  fs.mkdirSync(path.join(tmp, 'work'));

  lab = spawn(
    path.join(venv, 'bin', 'jupyter'),
    [
      'lab',
      '--no-browser',
      '--ServerApp.ip=127.0.0.1',
      `--ServerApp.port=${port}`,
      '--ServerApp.port_retries=0',
      `--IdentityProvider.token=${ALICE_TOKEN}`,
      `--ServerApp.root_dir=${path.join(tmp, 'work')}`,
      `--config=${path.join(tmp, 'jupyter_server_config.py')}`,
      ...(process.getuid?.() === 0 ? ['--allow-root'] : [])
    ],
    {
      env: {
        ...process.env,
        // The kernels inherit this; the fixture turns their CPU time into "SM utilization".
        GPUHUB_SIM_POD_UID: 'fixture-pod-alice',
        JUPYTERLAB_SETTINGS_DIR: settingsDir,
        JUPYTERLAB_WORKSPACES_DIR: path.join(tmp, 'workspaces'),
        JUPYTER_RUNTIME_DIR: path.join(tmp, 'runtime')
      },
      stdio: ['ignore', 'pipe', 'pipe']
    }
  );
  lab.stdout?.on('data', d => (labLog += d));
  lab.stderr?.on('data', d => (labLog += d));
  await waitHttp(`${labUrl}/api/status?token=${ALICE_TOKEN}`, 90_000);

  browser = await launchChromium();
  const context = await browser.newContext({
    viewport: { width: 1366, height: 860 },
    colorScheme: 'light',
    timezoneId: BROWSER_ZONE
  });
  page = await context.newPage();
  page.on('pageerror', e => console.log(`page error: ${e.message}`));
  await page.goto(`${labUrl}/lab?token=${ALICE_TOKEN}`);
  await waitForLab(page);
});

after(async () => {
  await browser?.close();
  if (lab && lab.exitCode === null) {
    lab.kill('SIGTERM');
    await new Promise(r => lab!.once('exit', r));
  }
  await fixture.stop();
  if (tmp) {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('the wheel installs an enabled prebuilt extension', () => {
  // `labextension list` writes its report to stderr.
  const out = execFileSync(
    'sh',
    ['-c', `"${path.join(venv, 'bin', 'jupyter')}" labextension list 2>&1`],
    {
      encoding: 'utf8'
    }
  );
  assert.match(
    // eslint-disable-next-line no-control-regex -- strip the ANSI colours of the report
    out.replace(/\x1b\[[0-9;]*m/g, ''),
    /@gpuhub\/jupyterlab-gpu-panel v[\d.]+ enabled OK \(python, gpuhub-jupyterlab-gpu-panel\)/
  );
});

test('the panel shows the usage API numbers for alice', async () => {
  await openPanel(page);
  const r = await waitForPanel(
    page,
    x => x.descriptions.length > 0,
    30_000,
    'alice’s share'
  );
  const me = fixture.current('alice') as {
    servers: { gpus: { description: string }[] }[];
    gpuHours: Record<string, { allocated: number; used: number }>;
  };
  assert.deepEqual(r.descriptions, [me.servers[0].gpus[0].description]);
  assert.equal(r.user, 'alice');
  assert.equal(r.badge, 'simulated');
  assert.deepEqual(r.hours, {
    today: { allocated: '2.57', used: '0.84' },
    '7d': { allocated: '14.6', used: '5.12' },
    '30d': { allocated: '48.2', used: '17.9' }
  });
  assert.deepEqual(r.memoryText, ['3.1 GiB of 20 GiB']);
  assert.equal(r.budget, 'not configured');
  assert.equal(r.idleCull, 'not configured');
  assert.match(
    r.sparklineLabel ?? '',
    /^SM utilization over the last hour: latest \d+ %/
  );
  assert.ok(
    fixture.requests.alice > 0,
    'the panel called the usage API with alice’s token'
  );
  const status = await page.locator('.jp-GpuStatus').textContent();
  assert.match(status ?? '', /^GPU \d+ %sim$/);
});

test('a busy cell makes utilization rise', async () => {
  await openNewNotebook(page);
  // The fixture measures the kernel's CPU time, as the simulated gpu-agent backend does.
  const idle = await waitForPanel(
    page,
    x => (x.utilization[0] ?? 100) < 10,
    60_000,
    'an idle kernel'
  );
  const start = idle.utilization[0] ?? 0;
  await runCell(
    page,
    'import time\nt0 = time.time()\nwhile time.time() - t0 < 60:\n    pass\n'
  );
  // The machine running the tests may be busy: ask for a clear rise, not a full core.
  const busy = await waitForPanel(
    page,
    x => (x.utilization[0] ?? 0) >= start + 10,
    45_000,
    'a rise'
  );
  assert.ok(
    (busy.utilization[0] ?? 0) > start,
    `utilization rose from ${start} to ${busy.utilization[0]}`
  );
  await page.waitForTimeout(4000);
  await page
    .locator('.jp-GpuPanel-section[data-section="history"]')
    .scrollIntoViewIfNeeded();
  await snap(page, 'gpu-panel-light');
  await setTheme(page, 'JupyterLab Dark');
  await snap(page, 'gpu-panel-dark');
  await setTheme(page, 'JupyterLab Light');
});

test('the refresh button is keyboard reachable and labelled', async () => {
  const button = page.locator(`.jp-GpuPanel-refresh`);
  assert.equal(
    await button.getAttribute('aria-label'),
    'Refresh GPU usage now'
  );
  const n = fixture.requests.alice;
  await button.focus();
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => true);
  const deadline = Date.now() + 5000;
  while (fixture.requests.alice === n && Date.now() < deadline) {
    await page.waitForTimeout(100);
  }
  assert.ok(
    fixture.requests.alice > n,
    'Enter on the focused button refreshed'
  );
  assert.equal(
    await page.locator('#gpuhub-gpu-panel').getAttribute('aria-label'),
    'GPU usage'
  );
});

test('an unreachable service is explained and JupyterLab keeps working', async () => {
  fixture.failWith = 503;
  try {
    await page.locator('.jp-GpuPanel-refresh').click();
    const r = await waitForPanel(
      page,
      x => x.notices.includes('GPU usage service unreachable'),
      30_000,
      'the unreachable notice'
    );
    assert.equal(
      r.descriptions.length,
      0,
      'no stale numbers are shown as current'
    );
    await setTheme(page, 'JupyterLab Dark');
    await snap(page, 'gpu-panel-unreachable-dark');
    await setTheme(page, 'JupyterLab Light');
    // JupyterLab still works: the file browser lists the notebook the test created.
    const files = page.locator(
      '.jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id="filebrowser"]'
    );
    if ((await files.getAttribute('aria-selected')) !== 'true') {
      await files.click();
    }
    await page
      .locator('.jp-DirListing-item[title*="Untitled"]')
      .first()
      .waitFor({ timeout: 15_000 });
    assert.match(
      (await page.locator('.jp-GpuStatus').textContent()) ?? '',
      /^GPU \?$/
    );
  } finally {
    fixture.failWith = null;
  }
  await page.locator('.jp-GpuPanel-refresh').click();
  await waitForPanel(
    page,
    x => x.descriptions.length === 1,
    30_000,
    'recovery after the service returns'
  );
});

test('a server without a GPU says so', async () => {
  fixture.noGpu = true;
  try {
    await page.locator('.jp-GpuPanel-refresh').click();
    const r = await waitForPanel(
      page,
      x => x.notices.includes('No GPU attached'),
      30_000,
      'the no-GPU notice'
    );
    assert.equal(r.descriptions.length, 0);
    assert.match(
      (await page.locator('.jp-GpuStatus').textContent()) ?? '',
      /^GPU none/
    );
    await snap(page, 'gpu-panel-no-gpu-light');
  } finally {
    fixture.noGpu = false;
  }
});

test('the panel sends the browser’s time zone, which the fixture validates', async () => {
  assert.equal(fixture.tz.alice, BROWSER_ZONE);
  assert.equal(fixture.badTz, 0, 'the fixture refused no zone the panel sent');
  const bad = await fetch(`${fixtureUrl}${ME_PATH}?tz=Mars%2FOlympus`, {
    headers: { Authorization: `token ${ALICE_TOKEN}` }
  });
  assert.equal(bad.status, 400);
  assert.match(
    ((await bad.json()) as { message: string }).message,
    /IANA time zone/
  );
});

test('a stale node agent: no number, the reason in plain words', async () => {
  fixture.staleAgentSeconds = 47;
  try {
    await page.locator('.jp-GpuPanel-refresh').click();
    const r = await waitForPanel(
      page,
      x => x.notices.includes('No fresh GPU reading'),
      30_000,
      'the stale notice'
    );
    assert.match(
      r.text,
      /No fresh GPU readingThe GPU agent on node gpu-a100-0 has not sampled since \d\d:\d\d:\d\d UTC \(47 s\)\. Utilization is not shown until the node agent reports again\./
    );
    assert.deepEqual(r.utilization, [null], 'no utilization number');
    assert.deepEqual(r.utilizationText, ['no fresh reading']);
    assert.deepEqual(r.memoryText, ['not known (20 GiB total)']);
    assert.equal(r.badge, null, 'nothing is claimed as measured or simulated');
    assert.deepEqual(
      r.descriptions,
      ['MIG 3g.20gb on an A100, 3/7 of a GPU'],
      'the share itself is still shown'
    );
    assert.equal(
      await page
        .locator('#gpuhub-gpu-panel [data-field="util"] [role="meter"]')
        .count(),
      0,
      'no utilization bar'
    );
    assert.equal(
      (await page.locator('.jp-GpuStatus').textContent()) ?? '',
      'GPU stale'
    );
    await snap(page, 'gpu-panel-stale-light');
    await setTheme(page, 'JupyterLab Dark');
    await snap(page, 'gpu-panel-stale-dark');
    await setTheme(page, 'JupyterLab Light');
  } finally {
    fixture.staleAgentSeconds = null;
  }
  await page.locator('.jp-GpuPanel-refresh').click();
  const back = await waitForPanel(
    page,
    x => x.utilization.length === 1 && x.utilization[0] !== null,
    30_000,
    'numbers once the agent reports again'
  );
  assert.ok(!back.notices.includes('No fresh GPU reading'));
});

test('GPU-hours unavailable: said in plain words, the live share stays', async () => {
  fixture.ledgerDown = true;
  try {
    await page.locator('.jp-GpuPanel-refresh').click();
    const r = await waitForPanel(
      page,
      x => x.notices.includes('GPU-hours unavailable'),
      30_000,
      'the GPU-hours unavailable notice'
    );
    assert.match(
      r.text,
      /GPU-hours are unavailable right now: the usage database is unreachable; the usage service keeps retrying\. Your live share above is current\./
    );
    assert.deepEqual(r.hours, {}, 'no GPU-hours figures, not even 0');
    assert.equal(r.descriptions.length, 1);
    assert.equal(r.utilization.length, 1);
    assert.notEqual(r.utilization[0], null, 'the live share still answers');
    await snap(page, 'gpu-panel-hours-unavailable-light');
  } finally {
    fixture.ledgerDown = false;
  }
  await page.locator('.jp-GpuPanel-refresh').click();
  await waitForPanel(
    page,
    x => Object.keys(x.hours).length === 3,
    30_000,
    'GPU-hours once the ledger is back'
  );
});

test('the GPU waitlist: place in line, the turn, leaving, a server started from the queue, and silence once it is off', async () => {
  const panel = page.locator('#gpuhub-gpu-panel');
  const section = panel.locator('[data-section="waitlist"]');
  assert.equal(
    await section.count(),
    0,
    'no section while alice waits for nothing'
  );
  assert.ok(fixture.waitlistRequests > 0, 'the panel asked gpu-quota');

  fixture.waitlist = {
    alice: [
      h100Place('alice', 'train', {
        position: 2,
        waiting: 3,
        estimateMinutes: 40
      })
    ]
  };
  const position = section.locator('[data-field="waitlist-position"]');
  await position.waitFor({ timeout: 30_000 });
  assert.equal(await position.textContent(), '2 of 3');
  assert.equal(await position.getAttribute('role'), 'status');
  // The estimate in the browser's zone (Europe/Berlin), not the service's.
  assert.match(
    (await section.locator('[data-field="waitlist-estimate"]').textContent()) ??
      '',
    /^around (\w+ )?\d\d:\d\d (GMT\+[12]|CES?T)$/
  );
  assert.equal(
    await section.locator('article').getAttribute('aria-label'),
    'Waiting for an H100 (train)'
  );
  await snap(page, 'gpu-panel-waitlist-place-light');

  // alice's turn: the H100 is held and her server is being started for her.
  fixture.waitlist = {
    alice: [
      h100Place('alice', 'train', {
        position: 0,
        waiting: 2,
        heldMinutes: 10,
        autoStart: true,
        startRequested: true
      })
    ]
  };
  const turn = panel.locator('[data-notice="Your turn"]');
  await turn.waitFor({ timeout: 30_000 });
  assert.equal(await turn.getAttribute('role'), 'status');
  assert.match(
    (await turn.locator('[data-field="turn-headline"]').textContent()) ?? '',
    /^Your turn: an H100 is held for you until \d\d:\d\d (GMT\+[12]|CES?T)$/
  );
  assert.match(
    (await turn.locator('[data-field="turn-countdown"]').textContent()) ?? '',
    /^(10 min 00 s|9 min \d\d s) left$/
  );
  assert.equal(
    await turn.locator('[data-field="turn-start"]').textContent(),
    'Your server train is being started for you. Its page on the Hub home shows how far it got.'
  );
  await turn.scrollIntoViewIfNeeded();
  await snap(page, 'gpu-panel-waitlist-turn-light');
  await setTheme(page, 'JupyterLab Dark');
  await snap(page, 'gpu-panel-waitlist-turn-dark');
  await setTheme(page, 'JupyterLab Light');

  // Leaving asks first; from the keyboard, the safe answer has the focus.
  await turn.locator('[data-action="leave-waitlist"]').click();
  const stay = turn.locator('[data-action="cancel-leave"]');
  assert.ok(
    await stay.evaluate(e => e === document.activeElement),
    '"Stay in line" has the focus'
  );
  await turn.locator('[data-action="confirm-leave"]').click();
  const left = section.locator('[data-field="waitlist-left"]');
  await left.waitFor({ timeout: 15_000 });
  assert.equal(
    await left.textContent(),
    'You left the waitlist for an H100 (train).'
  );
  assert.deepEqual(fixture.leaves, ['alice/train']);
  assert.equal(await turn.count(), 0);

  // Her server "gpu" started from the queue: news with a link to it, not a turn, nothing to leave.
  fixture.waitlist = {
    alice: [
      h100Place('alice', 'gpu', {
        position: 0,
        waiting: 0,
        startedMinutesAgo: 2,
        autoStart: true,
        startRequested: true
      })
    ]
  };
  const started = section.locator('[data-field="waitlist-started"]');
  await started.waitFor({ timeout: 30_000 });
  assert.equal(await started.getAttribute('role'), 'status');
  assert.match(
    (await started.textContent()) ?? '',
    /^Your server "gpu" was started for you at \d\d:\d\d UTC with a H100 from the waitlist\.$/
  );
  const open = section.locator('[data-action="open-server"]');
  assert.equal(await open.textContent(), 'Open gpu');
  assert.equal(await open.getAttribute('href'), '/user/alice/gpu/');
  assert.equal(await turn.count(), 0, 'a started server is not a turn');
  assert.equal(
    await section.locator('[data-action="leave-waitlist"]').count(),
    0,
    'nothing to leave'
  );
  await started.scrollIntoViewIfNeeded();
  await snap(page, 'gpu-panel-waitlist-started-light');

  // The waitlist turned off: nothing is shown and gpu-quota is not asked again.
  fixture.waitlist = null;
  await section.waitFor({ state: 'detached', timeout: 30_000 });
  const n = fixture.waitlistRequests;
  await page.waitForTimeout(6000);
  assert.equal(fixture.waitlistRequests, n, 'no request after the 404');
});

test('outside JupyterHub the panel says so and sends no request', async () => {
  const other = await page.context().newPage();
  // Only this page's requests count: the first page keeps polling meanwhile.
  const sent: string[] = [];
  other.on('request', r => {
    if (r.url().includes('/api/v1/me')) {
      sent.push(r.url());
    }
  });
  try {
    await other.goto(`${labUrl}/lab?nohub=1`);
    await waitForLab(other);
    await openPanel(other);
    const r = await waitForPanel(
      other,
      x => x.notices.includes('Not running under JupyterHub'),
      30_000,
      'the not-under-JupyterHub notice'
    );
    assert.equal(r.descriptions.length, 0);
    assert.equal(
      await other.locator('.jp-GpuStatus').count(),
      0,
      'no status bar item outside a Hub'
    );
    await other.waitForTimeout(3000);
    assert.deepEqual(
      sent,
      [],
      'no request to the usage API outside JupyterHub'
    );
    await snap(other, 'gpu-panel-not-hub-light');
  } finally {
    await other.close();
  }
});
