// One home for how the panel's models poll a service: every `interval`, and
// after failures less and less often, never sooner than `interval`.
import { IPoll, Poll } from '@lumino/polling';

/**
 * A poll whose delay after a failure is never shorter than its interval.
 *
 * Lumino draws the delay after a failure between the interval and the last
 * delay times the growth; after a tick that ran at once (start, refresh) the
 * last delay is 0, so the draw could land anywhere below the interval and an
 * absent service would be asked again sooner than every interval.
 */
export class BackoffPoll<
  T = unknown,
  U = unknown,
  V extends string = 'standby'
> extends Poll<T, U, V> {
  override schedule(
    next: Partial<
      IPoll.State<T, U, V> & { cancel: (last: IPoll.State<T, U, V>) => boolean }
    > = {}
  ): Promise<void> {
    if (
      next.phase === 'rejected' &&
      next.interval !== undefined &&
      next.interval < this.frequency.interval
    ) {
      next = { ...next, interval: this.frequency.interval };
    }
    return super.schedule(next);
  }
}

/** Poll every `seconds` (at least 1), backing off to at most `maxBackoffMs`. */
export function pollFrequency(
  seconds: number,
  maxBackoffMs: number
): IPoll.Frequency {
  const interval = Math.max(1, seconds) * 1000;
  return { interval, backoff: true, max: Math.max(interval, maxBackoffMs) };
}
