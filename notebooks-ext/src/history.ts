// The panel's client-side copy of the last hour of history. After one full
// document the model asks the usage API only for points newer than the newest
// one it holds (`?since=`, exclusive, services/usage-api/openapi.yaml) and
// merges them here: ~1 KB per poll instead of ~80 KB, which is what keeps
// 10,000 open panels cheap (benchmark B1).

import { meUrl } from './api';
import type { HistoryPoint, MeResponse } from './api';

/** The usage API keeps one hour of history; so does the panel. */
export const HISTORY_WINDOW_MS = 3600 * 1000;

/**
 * How far the first new point may lie after the newest held one before the
 * panel distrusts its copy (a restarted service, lost samples) and refetches.
 * At least this many sampling intervals, and never under {@link MIN_GAP_MS}.
 */
export const GAP_INTERVALS = 3;
export const MIN_GAP_MS = 30 * 1000;

/** Milliseconds of an RFC 3339 time, or NaN. */
export function timeMs(t: string): number {
  return t ? Date.parse(t) : NaN;
}

/**
 * The reference "now" of a document, on the server's clock: its sampledAt or
 * its newest point, whichever is later. Trimming on the server's clock keeps
 * a skewed browser clock from emptying or bloating the history.
 */
export function referenceMs(sampledAt: string, points: HistoryPoint[]): number {
  let ref = timeMs(sampledAt);
  for (const p of points) {
    const t = timeMs(p.t);
    if (Number.isFinite(t) && !(t <= ref)) {
      ref = t;
    }
  }
  return ref;
}

/**
 * Sorted oldest first, one point per timestamp (the last given wins), points
 * without a valid time dropped, and only those within `windowMs` before
 * `refMs` kept (all of them when refMs is not a time).
 */
export function normalizeHistory(
  points: HistoryPoint[],
  refMs: number,
  windowMs = HISTORY_WINDOW_MS
): HistoryPoint[] {
  const byTime = new Map<number, HistoryPoint>();
  for (const p of points) {
    const t = timeMs(p.t);
    if (!Number.isFinite(t)) {
      continue;
    }
    if (Number.isFinite(refMs) && t <= refMs - windowMs) {
      continue;
    }
    byTime.set(t, p);
  }
  return [...byTime.entries()].sort((a, b) => a[0] - b[0]).map(e => e[1]);
}

/** The newest point of a normalized history, or null. */
export function newestPoint(points: HistoryPoint[]): HistoryPoint | null {
  return points.length > 0 ? points[points.length - 1] : null;
}

export type MergeOutcome =
  | { kind: 'merged'; history: HistoryPoint[] }
  | { kind: 'refetch'; reason: string };

/**
 * Merge an answer to `?since=<since.t>` into the held history (normalized,
 * newest point `since`). Says `refetch` when the answer cannot continue the
 * held copy: another user, the service's clock behind the held points, or
 * samples missing (a restarted service keeps no history, so the first point
 * it has after `since` comes after a gap, or none comes while GPUs are held).
 */
export function mergeIncremental(
  held: HistoryPoint[],
  heldUser: string,
  doc: MeResponse,
  windowMs = HISTORY_WINDOW_MS
): MergeOutcome {
  const since = newestPoint(held);
  if (!since) {
    return { kind: 'refetch', reason: 'no history held' };
  }
  if (doc.user !== heldUser) {
    return { kind: 'refetch', reason: 'user changed' };
  }
  const sinceMs = timeMs(since.t);
  const sampledMs = timeMs(doc.sampledAt);
  const intervalMs = Math.max(1, doc.intervalSeconds) * 1000;
  // sampledAt may trail the newest point a little (a sample stamped before
  // the answer was built); more than an interval behind is another history.
  if (Number.isFinite(sampledMs) && sampledMs < sinceMs - intervalMs) {
    return { kind: 'refetch', reason: 'history went backwards' };
  }
  const fresh = normalizeHistory(doc.history, NaN);
  const newest = newestPoint(fresh);
  if (newest && timeMs(newest.t) < sinceMs) {
    return { kind: 'refetch', reason: 'history went backwards' };
  }
  const maxGap = Math.max(GAP_INTERVALS * intervalMs, MIN_GAP_MS);
  const firstNew = fresh.find(p => timeMs(p.t) > sinceMs);
  if (firstNew && timeMs(firstNew.t) - sinceMs > maxGap) {
    return { kind: 'refetch', reason: 'gap in history' };
  }
  if (
    !firstNew &&
    doc.share.allocatedGPUs > 0 &&
    Number.isFinite(sampledMs) &&
    sampledMs - sinceMs > maxGap
  ) {
    return { kind: 'refetch', reason: 'history lost' };
  }
  const merged = [...held, ...fresh];
  return {
    kind: 'merged',
    history: normalizeHistory(
      merged,
      referenceMs(doc.sampledAt, merged),
      windowMs
    )
  };
}

/**
 * The `me` URL asking only for points after `t`, exactly as the service
 * wrote it (millisecond precision, compared exclusively by the service).
 */
export function sinceUrl(url: string, t: string): string {
  return meUrl(url, { since: t });
}
