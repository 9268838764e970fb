// The panel's model: polls the usage API's `me` endpoint with backoff, stands
// by while the browser tab is hidden, and exposes one discriminated state.
// After one full document it polls incrementally (`?since=`, src/history.ts).

import { IDisposable } from '@lumino/disposable';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  FetchFn,
  HistoryPoint,
  MeResponse,
  NetworkError,
  ResponseError,
  UsageApiError,
  browserTimeZone,
  meUrl,
  requestMe
} from './api';
import {
  HISTORY_WINDOW_MS,
  mergeIncremental,
  newestPoint,
  normalizeHistory,
  referenceMs
} from './history';
import { BackoffPoll, pollFrequency } from './poll';

/** Everything the view needs to render one of the panel's states. */
export type UsageState =
  | { status: 'not-hub' }
  | { status: 'loading' }
  | { status: 'ok'; data: MeResponse; fetchedAt: Date }
  | {
      status: 'unreachable' | 'unauthorized' | 'error';
      message: string;
      since: Date;
      /** Consecutive failures; the poll backs off while this grows. */
      failures: number;
    };

export interface UsageModelOptions {
  /** The `me` URL; null when not running under JupyterHub (no requests). */
  url: string | null;
  /** The page's Hub token (PageConfig.getToken()); never logged. */
  token: string;
  /** Seconds between polls while all is well. */
  refreshSeconds: number;
  /** Longest wait between polls after repeated failures. */
  maxBackoffSeconds?: number;
  fetch?: FetchFn;
  now?: () => Date;
  /**
   * IANA zone sent as `tz` so "today" in the GPU-hours is the user's day;
   * default the browser's ({@link browserTimeZone}); '' sends none.
   */
  timeZone?: string;
}

const POLL_NAME = '@gpuhub/jupyterlab-gpu-panel:usage';

export class UsageModel implements IDisposable {
  constructor(options: UsageModelOptions) {
    this._url = options.url;
    this._token = options.token;
    this._fetch = options.fetch ?? ((input, init) => window.fetch(input, init));
    this._now = options.now ?? (() => new Date());
    this._tz = (options.timeZone ?? browserTimeZone()).trim();
    this._maxBackoffMs = (options.maxBackoffSeconds ?? 300) * 1000;
    this._state = this._url ? { status: 'loading' } : { status: 'not-hub' };
    this._poll = this._url
      ? new BackoffPoll({
          auto: false,
          factory: () => this.fetchOnce(),
          frequency: this._frequency(options.refreshSeconds),
          name: POLL_NAME,
          standby: 'when-hidden'
        })
      : null;
  }

  /** Emitted whenever {@link state} changes. */
  get stateChanged(): ISignal<this, UsageState> {
    return this._stateChanged;
  }

  get state(): UsageState {
    return this._state;
  }

  /** The `me` URL, or null when not under JupyterHub. */
  get url(): string | null {
    return this._url;
  }

  /** The underlying poll (null when not under JupyterHub); for tests. */
  get poll(): Poll | null {
    return this._poll;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** The clock the view uses for ages and countdowns. */
  now(): Date {
    return this._now();
  }

  /** Start polling (no-op when not under JupyterHub). */
  async start(): Promise<void> {
    if (this._poll) {
      await this._poll.start();
    }
  }

  /** Poll now, outside the schedule (the panel's Refresh button). */
  async refresh(): Promise<void> {
    if (this._poll) {
      await this._poll.refresh();
    }
  }

  /** Change the polling interval (settings change). */
  setRefreshSeconds(seconds: number): void {
    if (this._poll) {
      this._poll.frequency = this._frequency(seconds);
    }
  }

  /**
   * One request. Updates the state and rethrows failures so the poll backs
   * off; the poll is the only caller that relies on the rejection.
   */
  async fetchOnce(): Promise<void> {
    if (!this._url || this._disposed) {
      return;
    }
    this._abort?.abort();
    const abort = new AbortController();
    this._abort = abort;
    try {
      const data = await this._request(this._url, abort.signal);
      if (this._disposed) {
        return;
      }
      this._failures = 0;
      this._setState({ status: 'ok', data, fetchedAt: this._now() });
    } catch (err) {
      if (this._disposed || abort.signal.aborted) {
        return;
      }
      this._failures++;
      // The held history may have missed points: start again from a full document.
      this._held = null;
      const since =
        this._state.status === 'unreachable' ||
        this._state.status === 'unauthorized' ||
        this._state.status === 'error'
          ? this._state.since
          : this._now();
      this._setState({
        status: classify(err),
        message: err instanceof Error ? err.message : String(err),
        since,
        failures: this._failures
      });
      throw err;
    }
  }

  /**
   * A full document when nothing usable is held (first poll, after an error,
   * after more than the history window without an answer), otherwise only the
   * points after the newest held one, merged into the held copy. An answer
   * that cannot continue the copy (restart, gap, another user) is followed at
   * once by a full request.
   */
  private async _request(
    url: string,
    signal: AbortSignal
  ): Promise<MeResponse> {
    const held = this._held;
    const nowMs = this._now().getTime();
    const newest = held ? newestPoint(held.points) : null;
    if (held && newest && nowMs - held.receivedMs <= HISTORY_WINDOW_MS) {
      const doc = await this._get(url, newest.t, signal);
      const merged = mergeIncremental(held.points, held.user, doc);
      if (merged.kind === 'merged') {
        this._held = {
          user: doc.user,
          points: merged.history,
          receivedMs: nowMs
        };
        return { ...doc, history: merged.history };
      }
    }
    const doc = await this._get(url, '', signal);
    const history = normalizeHistory(
      doc.history,
      referenceMs(doc.sampledAt, doc.history)
    );
    this._held = { user: doc.user, points: history, receivedMs: nowMs };
    return { ...doc, history };
  }

  /**
   * One `me` request with the time zone. A service that refuses the zone
   * (400: its tzdata lacks a zone the browser knows) is asked again without
   * it, and the zone is dropped for good: "today" is then the service's
   * default day, which beats no panel at all.
   */
  private async _get(
    url: string,
    since: string,
    signal: AbortSignal
  ): Promise<MeResponse> {
    const tz = this._tz;
    try {
      return await requestMe(
        meUrl(url, { since, tz }),
        this._token,
        this._fetch,
        signal
      );
    } catch (err) {
      if (!tz || !(err instanceof ResponseError) || err.status !== 400) {
        throw err;
      }
      const doc = await requestMe(
        meUrl(url, { since }),
        this._token,
        this._fetch,
        signal
      );
      this._tz = '';
      return doc;
    }
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._abort?.abort();
    this._poll?.dispose();
    Signal.clearData(this);
  }

  private _frequency(seconds: number): IPoll.Frequency {
    return pollFrequency(seconds, this._maxBackoffMs);
  }

  private _setState(state: UsageState): void {
    this._state = state;
    this._stateChanged.emit(state);
  }

  private _url: string | null;
  private _token: string;
  private _fetch: FetchFn;
  private _now: () => Date;
  /** The zone sent as `tz`; '' once the service refused it. */
  private _tz: string;
  private _maxBackoffMs: number;
  private _poll: Poll | null;
  private _state: UsageState;
  private _failures = 0;
  /** The history held for incremental polls; null: the next poll is full. */
  private _held: {
    user: string;
    points: HistoryPoint[];
    receivedMs: number;
  } | null = null;
  private _abort: AbortController | null = null;
  private _disposed = false;
  private _stateChanged = new Signal<this, UsageState>(this);
}

/** Map a request failure to the state the panel explains. */
export function classify(
  err: unknown
): 'unreachable' | 'unauthorized' | 'error' {
  if (err instanceof NetworkError) {
    return 'unreachable';
  }
  if (err instanceof ResponseError) {
    if (err.unauthorized) {
      return 'unauthorized';
    }
    // The proxy answers 404/502/503 while the service is absent or down.
    if (err.status === 404 || err.status >= 500) {
      return 'unreachable';
    }
    return 'error';
  }
  if (err instanceof UsageApiError) {
    return 'error';
  }
  return 'error';
}
