// Pure formatting of usage numbers into the words the panel shows. No DOM, no
// JupyterLab imports, so every rule here is unit tested.

import type {
  Budget,
  BudgetWindow,
  ConcurrentLimit,
  GpuHolding,
  HistoryPoint,
  IdleCull,
  MeResponse,
  ServerUsage,
  UserNotice,
  UtilizationSource
} from './api';

const VENDOR_PREFIXES = /^(nvidia|tesla|geforce|quadro)[\s-]+/i;

/**
 * A short card name from an NVML product string:
 * "NVIDIA A100-SXM4-40GB" → "A100", "Tesla T4" → "T4",
 * "NVIDIA H100 80GB HBM3" → "H100", "NVIDIA GeForce RTX 4090" → "RTX 4090".
 */
export function shortProduct(product: string | undefined): string {
  let p = (product ?? '').trim();
  while (VENDOR_PREFIXES.test(p)) {
    p = p.replace(VENDOR_PREFIXES, '');
  }
  if (!p) {
    return 'GPU';
  }
  const model = /^([A-Z]{1,3}\d{1,4}[A-Za-z]{0,3})(?=$|[\s-])/.exec(p);
  if (model) {
    return model[1];
  }
  const branded = /^((?:RTX|GTX|Titan)\s?[A-Za-z]?\d{0,4}\w*)/i.exec(p);
  if (branded) {
    return branded[1];
  }
  return p.split(/[\s-]\d+GB/i)[0];
}

// Letters whose spoken name starts with a vowel sound: "an A100", "an H100", "an L4".
const AN_LETTERS = new Set('AEFHILMNORSX');
// Initialisms said as a word: "a MIG slice" (as gpu.WithArticle in the services says it).
const SPOKEN_AS_WORD = new Set(['MIG']);

/** "a" or "an" before a card name, following how the name is spoken. */
export function article(word: string): 'a' | 'an' {
  const first = word.charAt(0);
  if (!first) {
    return 'a';
  }
  const isAcronym =
    /^[A-Z]{1,4}(\d|$|\s)/.test(word) &&
    !SPOKEN_AS_WORD.has(word.split(/\s/)[0]);
  if (isAcronym) {
    return AN_LETTERS.has(first) ? 'an' : 'a';
  }
  return /^[aeiou]/i.test(first) ? 'an' : 'a';
}

/** "3/7" from numerator/denominator, or a decimal share. */
export function formatFraction(
  share: number,
  numerator?: number,
  denominator?: number
): string {
  if (numerator && denominator && denominator > 1) {
    return `${numerator}/${denominator}`;
  }
  return formatNumber(share, 2);
}

/** Number with at most `digits` decimals, trailing zeros removed. */
export function formatNumber(v: number, digits = 2): string {
  if (!Number.isFinite(v)) {
    return '–';
  }
  const fixed = v.toFixed(digits);
  return fixed.includes('.') ? fixed.replace(/\.?0+$/, '') : fixed;
}

/**
 * What one device grant is, in words. The API's `description` wins; this is the
 * fallback when it is missing, written from `kind`.
 */
export function describeHolding(g: GpuHolding): string {
  if (g.description && g.description.trim()) {
    return g.description.trim();
  }
  return fallbackDescription(g);
}

/** The description from `kind` alone (tested separately from the API text). */
export function fallbackDescription(g: GpuHolding): string {
  const card = shortProduct(g.product);
  const on = `${article(card)} ${card}`;
  switch (g.kind) {
    case 'mig': {
      const profile = g.profile || profileFromResource(g.resource) || 'slice';
      const frac = formatFraction(
        g.share,
        g.shareNumerator,
        g.shareDenominator
      );
      return `MIG ${profile} on ${on}, ${frac} of a GPU`;
    }
    case 'shared':
    case 'mps': {
      const what = g.kind === 'mps' ? 'MPS' : 'time-sliced';
      const parts = shareParts(g);
      if (parts) {
        return `${parts.n} of ${parts.d} ${what} shares of ${on}`;
      }
      return `${g.kind === 'mps' ? 'an' : 'a'} ${what} share of ${on}`;
    }
    case 'mig-shared': {
      const profile = g.profile || profileFromResource(g.resource) || 'slice';
      const frac = formatFraction(
        g.share,
        g.shareNumerator,
        g.shareDenominator
      );
      return `a time-sliced share of MIG ${profile} on ${on}, ${frac} of a GPU`;
    }
    case 'gpu':
    default:
      return card === 'GPU' ? 'a whole GPU' : `a whole ${card}`;
  }
}

function profileFromResource(resource: string | undefined): string {
  const m = /^nvidia\.com\/mig-(.+?)(\.shared)?$/.exec(resource ?? '');
  return m ? m[1] : '';
}

/** "1 of 4" of a replica share, from the API's fraction or the share itself. */
function shareParts(g: GpuHolding): { n: number; d: number } | null {
  const n = g.shareNumerator || 1;
  const d = g.shareDenominator || (g.share > 0 ? Math.round(1 / g.share) : 0);
  return d > 1 ? { n, d } : null;
}

/** What a server holds: its devices in words, or "no GPU". */
export function describeServer(s: ServerUsage): string {
  if (s.gpus.length === 0) {
    return 'no GPU';
  }
  return s.gpus.map(describeHolding).join('; ');
}

/** "default server" for the unnamed server, else its name. */
export function serverLabel(name: string): string {
  return name ? name : 'default server';
}

/** "49 %" or "–" when unknown. */
export function formatPercent(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) {
    return '–';
  }
  return `${Math.round(Math.min(Math.max(v, 0), 100))} %`;
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** Binary units, as nvidia-smi and NVML report memory: "1.5 GiB", "20 GiB". */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) {
    return '–';
  }
  let v = bytes;
  let i = 0;
  while (v >= 1024 && i < UNITS.length - 1) {
    v /= 1024;
    i++;
  }
  const digits = i === 0 || v >= 100 ? 0 : v >= 10 ? 1 : 2;
  return `${formatNumber(v, digits)} ${UNITS[i]}`;
}

/** "1.2 GiB of 20 GiB". */
export function formatMemory(used: number, total: number): string {
  if (total <= 0) {
    return used > 0 ? formatBytes(used) : '–';
  }
  return `${formatBytes(used)} of ${formatBytes(total)}`;
}

/** GPU-hours with sensible precision: "0", "< 0.01", "0.04", "1.5", "132"; "–" when unknown. */
export function formatGpuHours(h: number | null | undefined): string {
  if (h === undefined || h === null || !Number.isFinite(h)) {
    return '–';
  }
  if (h === 0) {
    return '0';
  }
  // A server that just started has spent a little: say so rather than round it to a misleading 0.
  if (Math.abs(h) < 0.005) {
    return h > 0 ? '< 0.01' : '> -0.01';
  }
  if (Math.abs(h) < 10) {
    return formatNumber(h, 2);
  }
  if (Math.abs(h) < 100) {
    return formatNumber(h, 1);
  }
  return formatNumber(h, 0);
}

/**
 * GPU-hours of a budget: as formatGpuHours from 1 up, two significant digits
 * below ("0.0045 of 0.004"), so a small demo budget never reads "< 0.01 of < 0.01"
 * (the same words gpu-quota's notice uses); "< 0.001" for less.
 */
export function formatBudgetHours(h: number | null | undefined): string {
  if (
    h === undefined ||
    h === null ||
    !Number.isFinite(h) ||
    h === 0 ||
    Math.abs(h) >= 1
  ) {
    return formatGpuHours(h);
  }
  if (Math.abs(h) < 0.001) {
    return h > 0 ? '< 0.001' : '> -0.001';
  }
  return String(Number(h.toPrecision(2)));
}

/** "45 s", "12 min", "1 h 05 min", "2 d 3 h". */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) {
    return '–';
  }
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m} min`;
  }
  const h = Math.floor(m / 60);
  if (h < 48) {
    return `${h} h ${String(m % 60).padStart(2, '0')} min`;
  }
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** Where utilization numbers come from, as the badge shows it. */
export type Provenance = 'measured' | 'simulated' | 'none';

export function provenanceOf(
  source: UtilizationSource,
  documentSimulated = false
): Provenance {
  if (source === 'simulated') {
    return 'simulated';
  }
  if (source === 'none') {
    return documentSimulated ? 'simulated' : 'none';
  }
  return documentSimulated ? 'simulated' : 'measured';
}

/** The label beside a utilization number. */
export function utilizationNote(g: GpuHolding): string {
  if (g.stale) {
    return 'no fresh reading';
  }
  switch (g.utilizationSource) {
    case 'none':
      return g.kind === 'mig'
        ? 'no utilization data (MIG)'
        : 'no utilization data';
    case 'simulated':
      return 'simulated';
    case 'dcgm':
      return 'measured (DCGM)';
    case 'nvml':
    default:
      return 'measured (NVML)';
  }
}

/** Whether any number in the document is simulated. */
export function isSimulated(me: MeResponse): boolean {
  return (
    me.simulated ||
    me.servers.some(s => s.gpus.some(g => g.utilizationSource === 'simulated'))
  );
}

/**
 * The document's badge: "simulated" when any number is simulated, "measured"
 * when some device has a real utilization source, else none (nothing measured).
 */
export function documentProvenance(
  me: MeResponse
): 'simulated' | 'measured' | null {
  if (isSimulated(me)) {
    return 'simulated';
  }
  const measured = me.servers.some(s =>
    s.gpus.some(
      g =>
        !g.stale &&
        (g.utilizationSource === 'nvml' || g.utilizationSource === 'dcgm')
    )
  );
  return measured ? 'measured' : null;
}

/** Age of the sample in seconds, or null when `sampledAt` is missing or bad. */
export function sampleAgeSeconds(me: MeResponse, now: Date): number | null {
  const t = Date.parse(me.sampledAt);
  if (Number.isNaN(t)) {
    return null;
  }
  return (now.getTime() - t) / 1000;
}

/**
 * Stale when the API says so (a node agent's snapshot is older than three
 * intervals) or when the document itself is older than three sampling
 * intervals (at least 30 s): the usage API stopped updating.
 */
export function isStale(me: MeResponse, now: Date): boolean {
  if (me.stale || me.servers.some(s => s.stale || s.gpus.some(g => g.stale))) {
    return true;
  }
  return documentIsOld(me, now);
}

/** Whether the user holds any GPU on any running server. */
export function holdsGpu(me: MeResponse): boolean {
  return me.servers.some(s => s.gpus.length > 0);
}

/** History points of the last `windowSeconds` with a known utilization. */
export function recentUtilization(
  history: HistoryPoint[],
  now: Date,
  windowSeconds = 3600
): { t: number; v: number }[] {
  const from = now.getTime() - windowSeconds * 1000;
  return history
    .map(h => ({ t: Date.parse(h.t), v: h.smUtilPercent }))
    .filter(
      (p): p is { t: number; v: number } =>
        !Number.isNaN(p.t) && p.t >= from && p.v !== null
    )
    .sort((a, b) => a.t - b.t);
}

/**
 * What a screen reader hears for the sparkline. While the readings are not
 * fresh the newest point is not "latest": it says so.
 */
export function sparklineSummary(
  points: { v: number }[],
  stale = false
): string {
  if (points.length === 0) {
    return stale
      ? 'SM utilization over the last hour: no fresh reading now, no earlier data'
      : 'SM utilization over the last hour: no data yet';
  }
  const vs = points.map(p => p.v);
  const latest = vs[vs.length - 1];
  const min = Math.min(...vs);
  const max = Math.max(...vs);
  const mean = vs.reduce((a, b) => a + b, 0) / vs.length;
  const head = stale
    ? `no fresh reading now; last known ${formatPercent(latest)}`
    : `latest ${formatPercent(latest)}`;
  return (
    `SM utilization over the last hour: ${head}, ` +
    `average ${formatPercent(mean)}, lowest ${formatPercent(min)}, highest ${formatPercent(max)}`
  );
}

/**
 * The SVG path of a sparkline in a `width`×`height` box, time on x over
 * the window, 0–100 % on y. Gaps longer than `gapMs` break the line.
 */
export function sparklinePath(
  points: { t: number; v: number }[],
  now: Date,
  width: number,
  height: number,
  windowSeconds = 3600,
  gapMs = 5 * 60 * 1000
): string {
  const end = now.getTime();
  const start = end - windowSeconds * 1000;
  const x = (t: number): number =>
    ((Math.min(Math.max(t, start), end) - start) / (end - start)) * width;
  const y = (v: number): number =>
    height - (Math.min(Math.max(v, 0), 100) / 100) * height;
  let d = '';
  let prev: number | null = null;
  for (const p of points) {
    const cmd = prev === null || p.t - prev > gapMs ? 'M' : 'L';
    d += `${d ? ' ' : ''}${cmd}${round(x(p.t))},${round(y(p.v))}`;
    prev = p.t;
  }
  return d;
}

function round(v: number): number {
  return Math.round(v * 10) / 10;
}

/**
 * GPU-equivalents as a fraction where it is one (gpu-quota sends decimals):
 * 0.1429 → "1/7", 0.4286 → "3/7", 0.25 → "1/4", 1.5 → "1 1/2", 2 → "2";
 * otherwise two decimals.
 */
export function formatGpuAmount(x: number): string {
  if (!Number.isFinite(x)) {
    return '–';
  }
  if (x <= 0) {
    return '0';
  }
  const whole = Math.floor(x + 6e-4);
  const rest = x - whole;
  if (rest < 6e-4) {
    return String(whole);
  }
  for (let d = 2; d <= 32; d++) {
    const n = Math.round(rest * d);
    if (n > 0 && n < d && Math.abs(rest - n / d) < 6e-4) {
      return whole > 0 ? `${whole} ${n}/${d}` : `${n}/${d}`;
    }
  }
  return formatNumber(x, 2);
}

/** A rolling window in words, as in "in the last 24 h": "hour", "24 h", "7 days". */
export function windowSpan(
  w: Pick<BudgetWindow, 'window' | 'windowSeconds'>
): string {
  let seconds = w.windowSeconds;
  if (seconds === null) {
    const m = /^(?:(\d+)d)?(?:(\d+)h)?$/.exec(w.window.trim());
    if (m && (m[1] || m[2])) {
      seconds = (Number(m[1] ?? 0) * 24 + Number(m[2] ?? 0)) * 3600;
    }
  }
  if (seconds === null || seconds <= 0) {
    return w.window || 'window';
  }
  if (seconds === 3600) {
    return 'hour';
  }
  if (seconds % 86400 === 0 && seconds > 86400) {
    return `${seconds / 86400} days`;
  }
  return `${formatNumber(seconds / 3600, 1)} h`;
}

/**
 * One budget window: "0.5 of 2 GPU-hours used in the last 24 h · 1.5 left";
 * "unknown of 2 GPU-hours used … · unknown left" while gpu-quota cannot read
 * the usage; "3 GPU-hours used in the last 30 days · no limit".
 */
export function describeBudgetWindow(w: BudgetWindow): string {
  const span = `in the last ${windowSpan(w)}`;
  const known = w.status !== 'unavailable' && w.usedGPUHours !== null;
  const used = known ? formatBudgetHours(w.usedGPUHours) : 'unknown';
  if (w.gpuHours === null) {
    return `${used} GPU-hours used ${span} · no limit`;
  }
  let left = 'unknown left';
  if (known) {
    const remaining = w.remainingGPUHours ?? w.gpuHours - (w.usedGPUHours ?? 0);
    left =
      remaining > 0 && w.status !== 'exhausted'
        ? `${formatBudgetHours(remaining)} left`
        : 'none left';
  }
  const unit = w.gpuHours === 1 ? 'GPU-hour' : 'GPU-hours';
  return `${used} of ${formatBudgetHours(w.gpuHours)} ${unit} used ${span} · ${left}`;
}

/** The concurrent limit: "concurrent: 1/7 of 3/7 GPU · 1 of 1 GPU server"; null when nothing is reported. */
export function describeConcurrent(c: ConcurrentLimit | null): string | null {
  if (!c) {
    return null;
  }
  const held = c.heldGPUs === null ? 'unknown' : formatGpuAmount(c.heldGPUs);
  let gpus: string;
  if (c.maxGPUs === null) {
    gpus = `${held} GPU${c.heldGPUs !== null && c.heldGPUs > 1 ? 's' : ''}, no limit`;
  } else {
    gpus = `${held} of ${formatGpuAmount(c.maxGPUs)} GPU${c.maxGPUs > 1 ? 's' : ''}`;
  }
  let servers = '';
  if (c.maxServers !== null) {
    const n = c.servers === null ? 'unknown' : String(c.servers);
    servers = ` · ${n} of ${c.maxServers} GPU server${c.maxServers === 1 ? '' : 's'}`;
  }
  return `concurrent: ${gpus}${servers}`;
}

/** A line of the Budget section. */
export interface BudgetLine {
  /** data-field of the line: budget, budget-<window>, budget-concurrent. */
  field: string;
  text: string;
  muted: boolean;
}

/**
 * The Budget section: one line per budget window and one for the concurrent
 * limit; "not configured" without a quota service; the reason when gpu-quota
 * cannot be asked.
 */
export function budgetLines(b: Budget | null): BudgetLine[] {
  if (!b) {
    return [{ field: 'budget', text: 'not configured', muted: true }];
  }
  if (b.status === 'unavailable') {
    const why = b.reason ?? 'the quota service cannot be reached';
    return [{ field: 'budget', text: `unknown: ${why}`, muted: true }];
  }
  if (b.exempt) {
    return [
      {
        field: 'budget',
        text: 'exempt: no GPU limits or budgets apply to you',
        muted: false
      }
    ];
  }
  const lines: BudgetLine[] = b.budgets.map(w => ({
    field: `budget-${w.window}`,
    text: describeBudgetWindow(w),
    muted: false
  }));
  const concurrent = describeConcurrent(b.concurrent);
  if (concurrent) {
    lines.push({ field: 'budget-concurrent', text: concurrent, muted: false });
  }
  if (lines.length === 0) {
    lines.push({
      field: 'budget',
      text: 'no GPU limits set for you',
      muted: true
    });
  }
  return lines;
}

/** The title of a notice banner, by its kind. */
export function noticeTitle(n: UserNotice): string {
  switch (n.kind) {
    case 'budget':
      return 'GPU budget used up';
    case 'limit':
      return 'Over your GPU limit';
    case 'idle':
      return n.reason === 'max_age'
        ? 'GPU server time limit'
        : 'Idle GPU server';
    case 'queue':
      return 'Waiting for a GPU';
  }
  return n.service ? `Notice from ${n.service}` : 'Notice';
}

/** A countdown: "45 s", "9 min 05 s", "1 h 05 min". */
export function formatCountdown(seconds: number): string {
  if (!Number.isFinite(seconds)) {
    return '–';
  }
  const s = Math.max(0, Math.ceil(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  }
  return formatDuration(s);
}

/** What is left before a notice's deadline: "9 min 05 s left", "due now"; null without a deadline. */
export function noticeCountdown(n: UserNotice, now: Date): string | null {
  if (!n.deadline) {
    return null;
  }
  const left = (Date.parse(n.deadline) - now.getTime()) / 1000;
  return left > 0 ? `${formatCountdown(left)} left` : 'due now';
}

/**
 * A time of day in the browser's zone, with the zone, 24-hour like the
 * services' messages: "15:10 UTC", "16:10 GMT+1"; '' for a time that does not
 * parse.
 */
export function clockText(iso: string): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) {
    return '';
  }
  return new Date(t).toLocaleTimeString(undefined, {
    hour: '2-digit',
    minute: '2-digit',
    hourCycle: 'h23',
    timeZoneName: 'short'
  });
}

/**
 * How many snoozes are left: "1 snooze left", "2 snoozes left", "no snoozes
 * left"; null when the notice says nothing about snoozes.
 */
export function snoozesLeftText(n: UserNotice): string | null {
  if (!n.maxSnoozes) {
    return null;
  }
  const left = Math.max(0, n.maxSnoozes - (n.snoozes ?? 0));
  if (left === 0) {
    return 'no snoozes left';
  }
  return `${left} ${left === 1 ? 'snooze' : 'snoozes'} left`;
}

/** The idle-cull line: "culled in 12 min if still idle" or "not configured". */
export function describeIdleCull(c: IdleCull | null, now: Date): string {
  if (!c) {
    return 'not configured';
  }
  if (c.cullAt) {
    const at = Date.parse(c.cullAt);
    if (!Number.isNaN(at)) {
      const left = (at - now.getTime()) / 1000;
      return left > 0
        ? `stops in ${formatDuration(left)} if still idle`
        : 'stopping now (idle)';
    }
  }
  if (c.timeoutSeconds !== undefined && c.idleSeconds !== undefined) {
    return `stops in ${formatDuration(c.timeoutSeconds - c.idleSeconds)} if still idle`;
  }
  if (c.timeoutSeconds !== undefined) {
    return `stops after ${formatDuration(c.timeoutSeconds)} of GPU idleness`;
  }
  return 'configured, no countdown reported';
}

/** The compact status bar text: "GPU 49 %", "GPU none", "GPU –". */
export function statusBarText(me: MeResponse | null): string {
  if (!me) {
    return 'GPU –';
  }
  if (!holdsGpu(me)) {
    return 'GPU none';
  }
  const units = me.servers.flatMap(s =>
    s.gpus.map(g => ({ g, stale: s.stale === true || g.stale === true }))
  );
  // A stale unit's number, should an API send one, is the last one: not now.
  const utils = units
    .filter(u => !u.stale)
    .map(u => u.g.smUtilPercent)
    .filter((v): v is number => v !== null);
  if (utils.length === 0) {
    if (units.some(u => u.stale)) {
      return 'GPU stale';
    }
    return `GPU ${formatNumber(me.share.allocatedGPUs, 2)}`;
  }
  const mean = utils.reduce((a, b) => a + b, 0) / utils.length;
  return `GPU ${formatPercent(mean)}`;
}

/**
 * The footnote under the GPU-hours table when used exceeds allocated in some
 * window: on a time-sliced or MPS GPU, allocated is the share held and used is
 * the physical GPU time the work kept busy (usage API, issue 9), so one user
 * alone on a 4-way T4 at 100 % uses four times what they hold.
 */
export function usedAboveAllocatedNote(
  hours: MeResponse['gpuHours']
): string | null {
  const above = Object.values(hours).some(
    w =>
      w !== undefined &&
      w.used !== null &&
      w.allocated !== null &&
      // Only when the table shows it: both rounded to its 0.01 precision.
      w.used - w.allocated >= 0.005
  );
  return above
    ? 'Used can exceed allocated on a shared GPU: allocated counts the share you hold, used counts the GPU time your work kept busy.'
    : null;
}

/**
 * The footnote under the GPU-hours table when some allocated time had no
 * utilization: "used" then counts only the known part.
 */
export function unknownUsageNote(hours: MeResponse['gpuHours']): string | null {
  const w = hours['7d'] ?? hours.today;
  const unknown = w?.usedUnknown ?? 0;
  // Below the shown precision (0.01 GPU-hours) the note would only add noise.
  if (!w || unknown < 0.005) {
    return null;
  }
  const span = hours['7d'] ? '7 days' : 'today';
  return `Used counts only time with known utilization; ${formatGpuHours(unknown)} allocated GPU-hours (${span}) had none.`;
}

/** "the usage database is unreachable" → "The usage database is unreachable." */
export function asSentence(text: string): string {
  const t = text.trim().replace(/[.\s]+$/, '');
  if (!t) {
    return '';
  }
  return `${t.charAt(0).toUpperCase()}${t.slice(1)}.`;
}

/** A reason to follow a colon: trimmed, without a final full stop. */
function clause(text: string): string {
  return text.trim().replace(/[.\s]+$/, '');
}

/**
 * Whether the document itself is old (the usage service stopped updating):
 * then no number in it is current, whatever its flags say.
 */
export function documentIsOld(me: MeResponse, now: Date): boolean {
  const age = sampleAgeSeconds(me, now);
  return age !== null && age > Math.max(3 * (me.intervalSeconds || 5), 30);
}

/** Whether a unit's reading is not fresh: the API says so, or the document is old. */
export function unitIsStale(
  g: GpuHolding,
  s: ServerUsage,
  docOld: boolean
): boolean {
  return docOld || s.stale === true || g.stale === true;
}

/** What the panel says about one unit's SM utilization. */
export type UtilizationView =
  | {
      state: 'value';
      percent: number;
      /** "49 %". */
      text: string;
      /** What a screen reader hears for the bar: "100 % of the T4". */
      valueText: string;
      /** Provenance: "simulated", "measured (NVML)". */
      note: string;
      /** For a share of a GPU, what the percentage is of, in a sentence. */
      meaning: string | null;
    }
  | { state: 'stale'; text: string }
  | { state: 'unknown'; text: string; reason: string };

/**
 * A unit's utilization: the number only when it is fresh and known; a stale
 * unit shows none (not the last one), and an unknown one says why.
 */
export function utilizationView(
  g: GpuHolding,
  stale: boolean
): UtilizationView {
  if (stale) {
    return { state: 'stale', text: 'no fresh reading' };
  }
  const v = g.smUtilPercent;
  if (v === null || !Number.isFinite(v)) {
    return {
      state: 'unknown',
      text: 'not known',
      reason: asSentence(
        g.utilizationUnknownReason ??
          (g.kind === 'mig' || g.kind === 'mig-shared'
            ? 'no utilization data for this MIG slice: NVML reports none for MIG'
            : 'no utilization data for this GPU')
      )
    };
  }
  const text = formatPercent(v);
  const scope = utilizationScope(g);
  return {
    state: 'value',
    percent: Math.min(Math.max(v, 0), 100),
    text,
    valueText: scope ? `${text} of ${scope}` : text,
    note: utilizationNote(g),
    meaning: utilizationMeaning(g, text)
  };
}

/**
 * What a shared unit's percentage is of. Per-process NVML utilization of a
 * time-sliced or MPS replica is a fraction of the physical GPU, not of the
 * share; a time-sliced MIG slice's is the slice's. Null where the unit held
 * is the thing measured (a whole GPU, a MIG slice).
 */
function utilizationScope(g: GpuHolding): string | null {
  switch (g.kind) {
    case 'shared':
    case 'mps':
      return `the ${shortProduct(g.product)}`;
    case 'mig-shared':
      return `the MIG ${g.profile || profileFromResource(g.resource) || 'slice'} slice`;
    default:
      return null;
  }
}

/**
 * The sentence that relates use to holding for a shared unit: "You keep
 * 100 % of the T4 busy while holding 1 of 4 shares." (used 1.0 GPU, held 0.25).
 */
export function utilizationMeaning(
  g: GpuHolding,
  percentText: string
): string | null {
  switch (g.kind) {
    case 'shared':
    case 'mps': {
      const parts = shareParts(g);
      const mps = g.kind === 'mps' ? 'MPS ' : '';
      const holding = parts
        ? `${parts.n} of ${parts.d} ${mps}shares`
        : `${g.kind === 'mps' ? 'an MPS' : 'a time-sliced'} share`;
      return `You keep ${percentText} of ${utilizationScope(g)} busy while holding ${holding}.`;
    }
    case 'mig-shared':
      return `${asSentence(`${utilizationScope(g)} you share is ${percentText} busy`)}`;
    default:
      return null;
  }
}

/** Whose numbers are not fresh, and why: the stale notice's content. */
export interface StaleNotice {
  /** One plain-words reason per node agent (or the service), deduplicated. */
  reasons: string[];
  /** How the notice ends: who has to report again. */
  until: string;
}

/**
 * The stale notice: null when every number shown is fresh. Reasons come from
 * the API (`staleReason` of the servers, units and document); an older API
 * without them gets one naming the node.
 */
export function staleNotice(me: MeResponse, now: Date): StaleNotice | null {
  const reasons: string[] = [];
  const add = (r: string): void => {
    const c = clause(r);
    if (c && !reasons.includes(c)) {
      reasons.push(c);
    }
  };
  let agents = false;
  for (const s of me.servers) {
    const units = s.gpus.filter(g => g.stale);
    if (!s.stale && units.length === 0) {
      continue;
    }
    agents = true;
    const fromUnits = units.map(g => g.staleReason).filter(r => r);
    add(
      s.staleReason ??
        fromUnits[0] ??
        (s.node
          ? `the GPU agent on node ${s.node} has stopped reporting`
          : `the GPU agent on the node of ${serverLabel(s.name)} has stopped reporting`)
    );
    for (const r of fromUnits.slice(1)) {
      add(r as string);
    }
  }
  if (me.stale && !agents) {
    agents = true;
    add(
      me.staleReason ??
        'a GPU agent on a node running your server has stopped reporting'
    );
  }
  const age = sampleAgeSeconds(me, now);
  const old = documentIsOld(me, now);
  if (old) {
    add(`the usage service’s last update is ${formatDuration(age ?? 0)} old`);
  }
  if (reasons.length === 0) {
    return null;
  }
  const until =
    agents && old
      ? 'Utilization is not shown until fresh readings arrive.'
      : agents
        ? 'Utilization is not shown until the node agent reports again.'
        : 'Utilization is not shown until the usage service updates again.';
  return { reasons, until };
}

/** The GPU-hours notice while the ledger is unavailable; null when they are ok. */
export function gpuHoursUnavailableText(me: MeResponse): string | null {
  if (me.gpuHoursStatus !== 'unavailable') {
    return null;
  }
  const why = me.gpuHoursReason ? `: ${clause(me.gpuHoursReason)}` : '';
  return `GPU-hours are unavailable right now${why}. Your live share above is current.`;
}

/** A unit's memory: no "0 B" for a unit nobody sampled. */
export function memoryText(g: GpuHolding, stale: boolean): string {
  if (stale) {
    return g.memoryTotalBytes > 0
      ? `not known (${formatBytes(g.memoryTotalBytes)} total)`
      : 'not known';
  }
  return formatMemory(g.memoryUsedBytes, g.memoryTotalBytes);
}
