// The usage API's right-size advice as the panel shows it (issue 38,
// services/usage-api/README.md "Right-size advice"): `GET api/v1/me/right-size`,
// next to `me` on the same service. The advice is the service's; the panel
// only puts its evidence into words.

import { FetchFn, isObject, requestJson, str } from './api';
import { formatBytes, formatDuration, formatNumber } from './format';

export type Verdict = 'keep' | 'smaller' | 'not-enough-data';

/** A kind of GPU unit as the advice compares them. */
export interface RightSizeKind {
  kind: string;
  class: string;
  /** In words: "MIG 1g.10gb on an H100, 1/7 of a GPU". */
  description: string;
  memoryBytes: number;
  computeGPUs: number;
  costPerHour: number;
}

export interface RightSizeCandidate extends RightSizeKind {
  /** Budget GPU-hours saved per hour held. */
  savedPerHour: number;
  /** Units of it a new server could get now; null when the service does not say. */
  freeNow: number | null;
}

export interface RightSizeEvidence {
  busySeconds: number;
  heldSeconds: number;
  samples: number;
  peakMemoryBytes: number;
  p95SMUtilPercent: number;
  minBusySeconds: number;
  minSamples: number;
}

/** The advice for one of the user's servers (and the class it ran on). */
export interface RightSize {
  server: string;
  verdict: Verdict;
  /** The service's one sentence with its numbers. */
  reason: string;
  caveats: string[];
  simulated: boolean;
  stale: boolean;
  held: RightSizeKind;
  /** Smaller kinds that fit, cheapest first. */
  candidates: RightSizeCandidate[];
  evidence: RightSizeEvidence;
}

export interface RightSizeResponse {
  user: string;
  period: string;
  servers: RightSize[];
}

/**
 * The advice URL from the `me` URL: `…/api/v1/me` → `…/api/v1/me/right-size`,
 * keeping a query the URL has (a `usageUrl` override).
 */
export function rightSizeUrl(meUrl: string | null): string | null {
  if (meUrl === null) {
    return null;
  }
  const q = meUrl.indexOf('?');
  const path = q < 0 ? meUrl : meUrl.slice(0, q);
  const query = q < 0 ? '' : meUrl.slice(q);
  return `${path.replace(/\/+$/, '')}/right-size${query}`;
}

/** GET the user's advice with the Hub token (the one request helper). */
export async function requestRightSize(
  url: string,
  token: string,
  fetchFn: FetchFn,
  signal?: AbortSignal
): Promise<RightSizeResponse> {
  return parseRightSize(
    await requestJson(url, token, fetchFn, { service: 'usage API', signal })
  );
}

function n(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : 0;
}

function freeNow(v: unknown): number | null {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : null;
}

function parseKind(v: unknown): RightSizeKind {
  const k = isObject(v) ? v : {};
  return {
    kind: str(k.kind),
    class: str(k.class),
    description: str(k.description),
    memoryBytes: n(k.memoryBytes),
    computeGPUs: n(k.computeGPUs),
    costPerHour: n(k.costPerHour)
  };
}

function parseAdvice(v: unknown): RightSize | null {
  if (!isObject(v)) {
    return null;
  }
  const verdict = str(v.verdict);
  if (
    verdict !== 'keep' &&
    verdict !== 'smaller' &&
    verdict !== 'not-enough-data'
  ) {
    // A verdict this panel does not know: leave it out rather than guess.
    return null;
  }
  const e = isObject(v.evidence) ? v.evidence : {};
  return {
    server: str(v.server),
    verdict,
    reason: str(v.reason),
    caveats: Array.isArray(v.caveats)
      ? v.caveats.filter((c): c is string => typeof c === 'string')
      : [],
    simulated: v.simulated === true,
    stale: v.stale === true,
    held: parseKind(v.held),
    candidates: Array.isArray(v.candidates)
      ? v.candidates.map(c => ({
          ...parseKind(c),
          savedPerHour: n(isObject(c) ? c.savedPerHour : 0),
          freeNow: freeNow(isObject(c) ? c.freeNow : undefined)
        }))
      : [],
    evidence: {
      busySeconds: n(e.busySeconds),
      heldSeconds: n(e.heldSeconds),
      samples: n(e.samples),
      peakMemoryBytes: n(e.peakMemoryBytes),
      p95SMUtilPercent: n(e.p95SMUtilPercent),
      minBusySeconds: n(e.minBusySeconds),
      minSamples: n(e.minSamples)
    }
  };
}

/** The body of me/right-size; servers with an unknown verdict are left out. */
export function parseRightSize(body: unknown): RightSizeResponse {
  const b = isObject(body) ? body : {};
  const servers = Array.isArray(b.servers) ? b.servers : [];
  return {
    user: str(b.user),
    period: str(b.period),
    servers: servers.map(parseAdvice).filter((a): a is RightSize => a !== null)
  };
}

/** "7d" → "7 days", "24h" → "24 hours"; otherwise as sent. */
export function periodText(period: string): string {
  const m = /^(\d+)([hd])$/.exec(period);
  if (!m) {
    return period;
  }
  return `${m[1]} ${m[2] === 'h' ? 'hours' : 'days'}`;
}

/**
 * The evidence in words: "This server used at most 3 GiB of GPU memory and
 * 8 % of the whole H100-80GB-HBM3 (p95 while busy) over 6 h busy of 40 h held."
 */
export function evidenceText(a: RightSize, subject = 'This server'): string {
  const e = a.evidence;
  const held = heldText(a.held.description || a.held.class || 'its GPU');
  return (
    `${subject} used at most ${formatBytes(e.peakMemoryBytes)} of GPU memory and ` +
    `${formatNumber(e.p95SMUtilPercent, 0)} % of ${held} (p95 while busy) ` +
    `over ${formatDuration(e.busySeconds)} busy of ${formatDuration(e.heldSeconds)} held.`
  );
}

/** What the advice is, in one line: the first candidate, keep, or what it still needs. */
export function adviceHeadline(a: RightSize): string {
  switch (a.verdict) {
    case 'smaller': {
      const c = a.candidates[0];
      if (!c) {
        return 'A smaller GPU would have done.';
      }
      const free =
        c.freeNow === null
          ? ''
          : `, ${c.freeNow === 0 ? 'none' : c.freeNow} free now`;
      return `${c.description} would have done${free}: it saves ${formatNumber(c.savedPerHour, 2)} GPU-hours per hour held.`;
    }
    case 'keep':
      return `${a.held.description || 'What it holds'} is the right size for this use.`;
    case 'not-enough-data':
      return `Not enough data yet (${needText(a)}).`;
  }
}

/**
 * How much more measuring the advice needs: "needs 40 min more busy time",
 * "needs 20 more busy samples".
 */
export function needText(a: RightSize): string {
  const e = a.evidence;
  const busy = e.minBusySeconds - e.busySeconds;
  if (busy > 0) {
    return `needs ${formatDuration(busy)} more busy time`;
  }
  const samples = e.minSamples - e.samples;
  if (samples > 0) {
    return `needs ${samples} more busy ${samples === 1 ? 'sample' : 'samples'}`;
  }
  return 'needs more busy time';
}

/** The other candidates after the first, cheapest first; '' when none. */
export function alsoFits(a: RightSize): string {
  const rest = a.candidates.slice(1).map(c => c.description);
  return rest.length ? `Also fits: ${rest.join('; ')}.` : '';
}

// "Whole H100" reads "the whole H100"; "MIG 3g.20gb …" keeps its capitals.
function heldText(s: string): string {
  return /^Whole\b/.test(s) ? `the whole${s.slice('Whole'.length)}` : s;
}
