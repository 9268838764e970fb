// Browser helpers shared by the standalone and the cluster UI tests.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { Browser, Page, chromium } from 'playwright-core';

export const PANEL = '#gpuhub-gpu-panel';
const TAB = `.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="gpuhub-gpu-panel"]`;

/** Debian's chromium through playwright-core; never a downloaded browser. */
export async function launchChromium(): Promise<Browser> {
  const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
  if (!fs.existsSync(executablePath)) {
    throw new Error(
      `${executablePath} not found: apt-get install -y chromium (or set CHROMIUM)`
    );
  }
  return chromium.launch({
    executablePath,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-dev-shm-usage'
    ]
  });
}

export function artifactsDir(): string {
  const dir =
    process.env.GPUHUB_UI_ARTIFACTS ??
    path.resolve(__dirname, '..', 'artifacts');
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

/** Wait until JupyterLab has finished starting (splash gone, main area there). */
export async function waitForLab(page: Page, timeout = 120_000): Promise<void> {
  await page.waitForSelector('#jp-main-dock-panel', { timeout });
  await page.waitForSelector('#jupyterlab-splash', {
    state: 'detached',
    timeout
  });
}

/** Open the GPU panel the way a user does: click its tab in the right sidebar. */
export async function openPanel(page: Page): Promise<void> {
  const tab = page.locator(TAB);
  await tab.waitFor({ state: 'visible', timeout: 30_000 });
  if ((await tab.getAttribute('aria-selected')) !== 'true') {
    await tab.click();
  }
  await page.locator(PANEL).waitFor({ state: 'visible' });
}

export interface PanelReading {
  user: string;
  badge: string | null;
  descriptions: string[];
  utilization: (number | null)[];
  utilizationText: string[];
  memoryText: string[];
  hours: Record<string, { allocated: string; used: string }>;
  budget: string;
  idleCull: string;
  notices: string[];
  sparklineLabel: string | null;
  text: string;
}

/** Everything the panel shows, read from the DOM. */
export async function readPanel(page: Page): Promise<PanelReading> {
  return page.locator(PANEL).evaluate((root: Element) => {
    const all = (sel: string): Element[] =>
      Array.from(root.querySelectorAll(sel));
    const txt = (sel: string): string =>
      root.querySelector(sel)?.textContent?.trim() ?? '';
    const hours: Record<string, { allocated: string; used: string }> = {};
    for (const row of all('tr[data-window]')) {
      hours[row.getAttribute('data-window')!] = {
        allocated:
          row.querySelector('[data-field="allocated"]')?.textContent ?? '',
        used: row.querySelector('[data-field="used"]')?.textContent ?? ''
      };
    }
    const footer = txt('.jp-GpuPanel-footer');
    return {
      user: footer.split('·')[0]?.trim() ?? '',
      badge:
        root
          .querySelector('[data-provenance]')
          ?.getAttribute('data-provenance') ?? null,
      descriptions: all('[data-field="description"]').map(
        e => e.textContent ?? ''
      ),
      utilization: all('[data-field="util"] .jp-GpuPanel-meterValue').map(e => {
        const v = e.getAttribute('data-value');
        return v ? Number(v) : null;
      }),
      utilizationText: all('[data-field="util"] .jp-GpuPanel-meterValue').map(
        e => e.textContent ?? ''
      ),
      memoryText: all('[data-field="memory"] .jp-GpuPanel-meterValue').map(
        e => e.textContent ?? ''
      ),
      hours,
      budget: txt('[data-field="budget"]'),
      idleCull: txt('[data-field="idle-cull"]'),
      notices: all('[data-notice]').map(
        e => e.getAttribute('data-notice') ?? ''
      ),
      sparklineLabel:
        root.querySelector('svg[role="img"]')?.getAttribute('aria-label') ??
        null,
      text: root.textContent ?? ''
    };
  });
}

/** Poll the panel until `ok` holds (the panel refreshes on its own schedule). */
export async function waitForPanel(
  page: Page,
  ok: (r: PanelReading) => boolean,
  timeoutMs: number,
  what: string
): Promise<PanelReading> {
  const deadline = Date.now() + timeoutMs;
  let last: PanelReading | null = null;
  while (Date.now() < deadline) {
    last = await readPanel(page);
    if (ok(last)) {
      return last;
    }
    await page.waitForTimeout(500);
  }
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what}; panel showed: ${JSON.stringify(last)}`
  );
}

/** Screenshot of the panel and of the whole window. */
export async function snap(page: Page, name: string): Promise<string> {
  const dir = artifactsDir();
  const file = path.join(dir, `${name}.png`);
  await page.locator(PANEL).screenshot({ path: file });
  await page.screenshot({ path: path.join(dir, `${name}-window.png`) });
  return file;
}

/** Switch theme through the Settings → Theme menu, as a user would. */
export async function setTheme(
  page: Page,
  theme: 'JupyterLab Light' | 'JupyterLab Dark'
): Promise<void> {
  await page
    .locator('.lm-MenuBar-itemLabel', { hasText: /^Settings$/ })
    .click();
  await page.locator('.lm-Menu-itemLabel', { hasText: /^Theme$/ }).hover();
  await page
    .locator('.lm-Menu-itemLabel', { hasText: new RegExp(`${theme}$`) })
    .click();
  await page.waitForFunction(
    t => document.body.dataset.jpThemeName === t,
    theme,
    { timeout: 30_000 }
  );
  await page.waitForTimeout(500);
}

/** Open a new Python notebook from the launcher and wait for its kernel to be idle. */
export async function openNewNotebook(page: Page): Promise<void> {
  // Only a visible card: a Launcher in a background tab has hidden cards too.
  const card = page
    .locator('.jp-LauncherCard[data-category="Notebook"]:visible')
    .first();
  // JupyterLab opens its Launcher once the layout is restored, which can take a while on a busy
  // machine; open one only when none appears (checking once raced the restore and left two).
  try {
    await card.waitFor({ state: 'visible', timeout: 15_000 });
  } catch {
    await page.keyboard.press('Control+Shift+L');
  }
  await card.click();
  await page
    .locator('.jp-NotebookPanel .jp-Cell .cm-content')
    .first()
    .waitFor({ state: 'visible', timeout: 60_000 });
  await page.waitForSelector(
    '.jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status="idle"]',
    {
      timeout: 120_000
    }
  );
}

/** Type `code` into the active notebook's first cell and run it. */
export async function runCell(page: Page, code: string): Promise<void> {
  const cell = page.locator('.jp-NotebookPanel .jp-Cell').first();
  await cell.locator('.cm-content').click();
  await page.keyboard.insertText(code);
  await page.keyboard.press('Shift+Enter');
  // A run issued while a new notebook's kernel is still connecting can be dropped (the prompt stays
  // "[ ]"): run the cell again in place until it is queued or running.
  const started = cell.locator('.jp-InputPrompt', { hasText: /\[(\*|\d+)\]/ });
  for (let attempt = 0; attempt < 4; attempt++) {
    try {
      await started.waitFor({ state: 'visible', timeout: 15_000 });
      return;
    } catch {
      await cell.locator('.cm-content').click();
      await page.keyboard.press('Control+Enter');
    }
  }
  throw new Error('the cell did not start running');
}
