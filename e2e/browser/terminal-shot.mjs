// Renders a command's captured output as a terminal screenshot for the README (headless Debian Chromium, no
// network): TEXT_FILE holds what the command printed, COMMAND the command line shown above it, OUT the PNG path.
// Env: TEXT_FILE, COMMAND, OUT, GPUHUB_CHROMIUM, GPUHUB_BROWSER_MODULES
import { readFileSync } from 'node:fs';

import { env, launch } from './lib.mjs';

const text = readFileSync(env('TEXT_FILE', ''), 'utf8');
const out = env('OUT', '');
if (!out) {
  console.error('OUT must name the PNG to write');
  process.exit(2);
}
const escape = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const html = `<!doctype html><html><head><meta charset="utf-8"><style>
body{margin:0;background:#1e1e1e;color:#d4d4d4;font:14px/1.45 "DejaVu Sans Mono",monospace}
pre{margin:0;padding:16px 20px;white-space:pre}.cmd{color:#9cdcfe}</style></head>
<body><pre><span class="cmd">$ ${escape(env('COMMAND', ''))}</span>\n${escape(text)}</pre></body></html>`;
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 900, height: 200 } });
  await page.route('**/*', (route) => (route.request().url().startsWith('data:') ? route.continue() : route.abort()));
  await page.setContent(html);
  const size = await page.evaluate(() => ({ w: document.querySelector('pre').scrollWidth, h: document.body.scrollHeight }));
  await page.setViewportSize({ width: Math.max(600, size.w), height: size.h });
  await page.screenshot({ path: out });
  console.log(`wrote ${out}`);
} finally {
  await browser.close();
}
