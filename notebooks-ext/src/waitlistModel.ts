// The panel's side of gpu-quota's waitlist: reads the user's places at the
// panel's cadence while the tab is visible, and leaves a queue on request. A
// gpu-quota that answers 404 (no waitlist, or no gpu-quota at all) is not
// asked again and nothing is shown; other failures keep what is shown and back
// off, silently, like the culler's side.

import { IDisposable } from '@lumino/disposable';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { FetchFn, ResponseError } from './api';
import {
  Place,
  leaveFailureText,
  requestLeave,
  requestPlaces
} from './waitlist';
import { BackoffPoll, pollFrequency } from './poll';

/** Where leaving one server's queue stands. */
export type LeaveState =
  { status: 'pending' } | { status: 'failed'; message: string };

export interface WaitlistState {
  /**
   * loading: not answered yet; ok: places are current; unavailable: the last
   * read failed (places are the last known); off: no waitlist, nothing shown.
   */
  status: 'loading' | 'ok' | 'unavailable' | 'off';
  /** The user's places, as gpu-quota lists them. */
  places: Place[];
  /** Leaves sent from this page, by server name ("" = default server). */
  leaving: Record<string, LeaveState>;
  /** Places the user left from this page (confirmed until they queue again). */
  left: Place[];
}

export interface WaitlistModelOptions {
  /** gpu-quota's API base (`…/services/gpu-quota/api/v1/`); null: not under JupyterHub. */
  url: string | null;
  /** The Hub user whose places are read (the token's owner). */
  user: string;
  /** The page's Hub token; never logged. */
  token: string;
  /** gpu-quota's Hub service name, for messages. */
  serviceName: string;
  /** Seconds between reads while the tab is visible (the panel's refresh interval). */
  refreshSeconds: number;
  /** Longest wait between reads after repeated failures (default 300). */
  maxBackoffSeconds?: number;
  fetch?: FetchFn;
  now?: () => Date;
}

const POLL_NAME = '@gpuhub/jupyterlab-gpu-panel:waitlist';

export class WaitlistModel implements IDisposable {
  constructor(options: WaitlistModelOptions) {
    this._url = options.url && options.user ? options.url : null;
    this._user = options.user;
    this._token = options.token;
    this.serviceName = options.serviceName;
    this._fetch = options.fetch ?? ((input, init) => window.fetch(input, init));
    this._now = options.now ?? (() => new Date());
    this._maxBackoffMs = (options.maxBackoffSeconds ?? 300) * 1000;
    this._state = {
      status: this._url ? 'loading' : 'off',
      places: [],
      leaving: {},
      left: []
    };
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

  /** gpu-quota's Hub service name. */
  readonly serviceName: string;

  /** The Hub user whose places these are (for links to their servers). */
  get user(): string {
    return this._user;
  }

  /** Emitted whenever {@link state} changes. */
  get changed(): ISignal<this, WaitlistState> {
    return this._changed;
  }

  get state(): WaitlistState {
    return this._state;
  }

  /** The underlying poll (null when not under JupyterHub); for tests. */
  get poll(): Poll | null {
    return this._poll;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** The clock the view counts holds down with. */
  now(): Date {
    return this._now();
  }

  async start(): Promise<void> {
    if (this._poll && !this._poll.isDisposed) {
      await this._poll.start();
    }
  }

  /** Read now, outside the schedule. */
  async refresh(): Promise<void> {
    if (this._poll && !this._poll.isDisposed) {
      await this._poll.refresh();
    }
  }

  /** Change the reading interval (settings change). */
  setRefreshSeconds(seconds: number): void {
    if (this._poll && !this._poll.isDisposed) {
      this._poll.frequency = this._frequency(seconds);
    }
  }

  /**
   * Read the places once. A 404 turns the waitlist off for this page (the
   * poll ends); other failures keep what is shown and reject, so the poll
   * backs off.
   */
  async fetchOnce(): Promise<void> {
    if (!this._url || this._disposed || this._state.status === 'off') {
      return;
    }
    const gen = this._gen;
    let places: Place[];
    try {
      places = await requestPlaces(
        this._url,
        this._user,
        this._token,
        this._fetch
      );
    } catch (err) {
      if (this._disposed || gen !== this._gen) {
        return;
      }
      if (err instanceof ResponseError && err.status === 404) {
        this._turnOff();
        return;
      }
      if (this._state.status !== 'unavailable') {
        this._set({ ...this._state, status: 'unavailable' });
      }
      throw err;
    }
    // A leave finished while this read was under way: its answer may still list the place.
    if (this._disposed || gen !== this._gen) {
      return;
    }
    const queued = new Set(places.map(p => p.server));
    const leaving: Record<string, LeaveState> = {};
    for (const [server, s] of Object.entries(this._state.leaving)) {
      // A failure is shown while the place is; a pending leave always.
      if (s.status === 'pending' || queued.has(server)) {
        leaving[server] = s;
      }
    }
    const next: WaitlistState = {
      status: 'ok',
      places,
      leaving,
      // Queued again: the old "you left" line no longer holds.
      left: this._state.left.filter(p => !queued.has(p.server))
    };
    if (JSON.stringify(next) !== JSON.stringify(this._state)) {
      this._set(next);
    }
  }

  /**
   * Leave the queue `server` waits in. The place goes at once on success (or
   * when gpu-quota no longer has it: it started, or the user left elsewhere);
   * a failure is shown next to it in words that say what to do.
   */
  async leave(server: string): Promise<void> {
    if (!this._url || this._state.leaving[server]?.status === 'pending') {
      return;
    }
    this._setLeaving(server, { status: 'pending' });
    try {
      await requestLeave(
        this._url,
        this._user,
        server,
        this._token,
        this._fetch
      );
    } catch (err) {
      if (this._disposed) {
        return;
      }
      if (!(err instanceof ResponseError && err.status === 404)) {
        this._setLeaving(server, {
          status: 'failed',
          message: leaveFailureText(err, this.serviceName)
        });
        return;
      }
      // 404: not queued (any more), which is what the user asked for.
    }
    if (this._disposed) {
      return;
    }
    this._gen++;
    const gone = this._state.places.filter(p => p.server === server);
    const leaving = { ...this._state.leaving };
    delete leaving[server];
    this._set({
      ...this._state,
      places: this._state.places.filter(p => p.server !== server),
      leaving,
      left: [...this._state.left.filter(p => p.server !== server), ...gone]
    });
    // Others' positions moved: read them now rather than at the next tick.
    this.refresh().catch(() => undefined);
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._poll?.dispose();
    Signal.clearData(this);
  }

  private _turnOff(): void {
    this._gen++;
    this._set({ status: 'off', places: [], leaving: {}, left: [] });
    // Nothing to ask until the page loads again (or the settings change).
    this._poll?.dispose();
  }

  private _frequency(seconds: number): IPoll.Frequency {
    return pollFrequency(seconds, this._maxBackoffMs);
  }

  private _setLeaving(server: string, s: LeaveState): void {
    this._set({
      ...this._state,
      leaving: { ...this._state.leaving, [server]: s }
    });
  }

  private _set(state: WaitlistState): void {
    this._state = state;
    this._changed.emit(state);
  }

  private _url: string | null;
  private _user: string;
  private _token: string;
  private _fetch: FetchFn;
  private _now: () => Date;
  private _maxBackoffMs: number;
  private _poll: Poll | null;
  private _state: WaitlistState;
  /** Moves on every leave (and on turning off): reads begun before it are stale. */
  private _gen = 0;
  private _disposed = false;
  private _changed = new Signal<this, WaitlistState>(this);
}
