// The panel's side of gpu-culler: reads the user's last stop (at load, then
// every minute while the tab is visible), remembers which stop the user
// dismissed, and sends snoozes. A culler that is not installed (404), refuses
// the token (403) or cannot be reached is silently left out: the panel shows
// nothing from it.

import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { FetchFn, UserNotice } from './api';
import {
  LastStop,
  SnoozeResult,
  requestCullerMe,
  requestSnooze,
  snoozeFailureText
} from './culler';
import { clockText } from './format';
import { BackoffPoll, pollFrequency } from './poll';

/** Where a snooze of one server stands. */
export type SnoozeState =
  | { status: 'pending' }
  | { status: 'done'; result: SnoozeResult }
  | { status: 'failed'; message: string };

export interface CullerState {
  /** The last stop by the culler, unless the user dismissed it; null when none. */
  lastStop: LastStop | null;
  /** Snoozes sent from this page, by server name ("" = default server). */
  snoozes: Record<string, SnoozeState>;
  /** The culler answered me: it watches this user's servers. */
  installed: boolean;
}

/** Anything with localStorage's get/set (tests pass a map). */
export interface KeyValueStore {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

export interface CullerModelOptions {
  /** The culler's API base (`…/services/gpu-culler/api/v1/`); null: not under JupyterHub. */
  url: string | null;
  /** The page's Hub token; never logged. */
  token: string;
  /** The culler's Hub service name, for messages ("gpu-culler"). */
  serviceName: string;
  fetch?: FetchFn;
  /** Seconds between reads of the last stop (default 60). */
  refreshSeconds?: number;
  /** Where the dismissed stop is remembered (default window.localStorage). */
  storage?: KeyValueStore | null;
  /** Called after a snooze succeeded (the panel polls `me` at once). */
  onSnoozed?: () => void;
}

const POLL_NAME = '@gpuhub/jupyterlab-gpu-panel:culler';
const DISMISSED_KEY = '@gpuhub/jupyterlab-gpu-panel:dismissed-stop';

export class CullerModel implements IDisposable {
  constructor(options: CullerModelOptions) {
    this._url = options.url;
    this._token = options.token;
    this.serviceName = options.serviceName;
    this._fetch = options.fetch ?? ((input, init) => window.fetch(input, init));
    this._storage =
      options.storage === undefined ? defaultStorage() : options.storage;
    this._onSnoozed = options.onSnoozed;
    this._poll = this._url
      ? new BackoffPoll({
          auto: false,
          factory: () => this.fetchOnce(),
          // An absent culler is asked less and less often, at most every 10 min.
          frequency: pollFrequency(options.refreshSeconds ?? 60, 600_000),
          name: POLL_NAME,
          standby: 'when-hidden'
        })
      : null;
  }

  /** The culler's Hub service name. */
  readonly serviceName: string;

  /** Emitted whenever {@link state} changes. */
  get changed(): ISignal<this, CullerState> {
    return this._changed;
  }

  get state(): CullerState {
    return this._state;
  }

  /** The underlying poll (null when not under JupyterHub); for tests. */
  get poll(): Poll | null {
    return this._poll;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  async start(): Promise<void> {
    if (this._poll) {
      await this._poll.start();
    }
  }

  /**
   * Read the last stop once. Failures keep what is shown and reject (so the
   * poll backs off); nothing is reported to the user.
   */
  async fetchOnce(): Promise<void> {
    if (!this._url || this._disposed) {
      return;
    }
    const me = await requestCullerMe(this._url, this._token, this._fetch);
    if (this._disposed) {
      return;
    }
    const stop = me.lastStop;
    const shown = stop && stopKey(stop) !== this._dismissed() ? stop : null;
    if (!sameStop(shown, this._state.lastStop) || !this._state.installed) {
      this._set({ ...this._state, lastStop: shown, installed: true });
    }
  }

  /** Hide the last stop for good (remembered in the browser). */
  dismissStop(): void {
    const stop = this._state.lastStop;
    if (!stop) {
      return;
    }
    try {
      this._storage?.setItem(DISMISSED_KEY, stopKey(stop));
    } catch {
      // Private mode or a full storage: hidden until the page reloads.
    }
    this._memoryDismissed = stopKey(stop);
    this._set({ ...this._state, lastStop: null });
  }

  /**
   * Snooze the stop announced on `server`. `deadline` is the notice's current
   * deadline (ISO 8601), named in the message when the snooze fails.
   */
  async snooze(server: string, deadline?: string): Promise<void> {
    if (!this._url || this._state.snoozes[server]?.status === 'pending') {
      return;
    }
    this._setSnooze(server, { status: 'pending' });
    try {
      const result = await requestSnooze(
        this._url,
        this._token,
        server,
        this._fetch
      );
      if (this._disposed) {
        return;
      }
      this._setSnooze(server, { status: 'done', result });
      this._onSnoozed?.();
    } catch (err) {
      if (this._disposed) {
        return;
      }
      const at = deadline ? clockText(deadline) : null;
      this._setSnooze(server, {
        status: 'failed',
        message: snoozeFailureText(err, this.serviceName, at)
      });
    }
  }

  /**
   * Forget the snoozes of servers without a notice of the culler any more
   * (the user got busy, or the server stopped): a later notice is a new one.
   * A snooze that `me` already counts stays, for its confirmation line.
   */
  syncNotices(notices: UserNotice[]): void {
    let changed = false;
    const next: Record<string, SnoozeState> = {};
    for (const [server, s] of Object.entries(this._state.snoozes)) {
      const n = notices.some(
        x => isCullerNotice(x, this.serviceName) && x.server === server
      );
      if (s.status !== 'pending' && !n) {
        changed = true;
        continue;
      }
      next[server] = s;
    }
    if (changed) {
      this._set({ ...this._state, snoozes: next });
    }
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._poll?.dispose();
    Signal.clearData(this);
  }

  private _dismissed(): string | null {
    try {
      return this._storage?.getItem(DISMISSED_KEY) ?? this._memoryDismissed;
    } catch {
      return this._memoryDismissed;
    }
  }

  private _setSnooze(server: string, s: SnoozeState): void {
    this._set({
      ...this._state,
      snoozes: { ...this._state.snoozes, [server]: s }
    });
  }

  private _set(state: CullerState): void {
    this._state = state;
    this._changed.emit(state);
  }

  private _url: string | null;
  private _token: string;
  private _fetch: FetchFn;
  private _storage: KeyValueStore | null;
  private _memoryDismissed: string | null = null;
  private _onSnoozed: (() => void) | undefined;
  private _poll: Poll | null;
  private _state: CullerState = {
    lastStop: null,
    snoozes: {},
    installed: false
  };
  private _disposed = false;
  private _changed = new Signal<this, CullerState>(this);
}

/** A notice of the culler about an idle (or too old) server. */
export function isCullerNotice(n: UserNotice, serviceName: string): boolean {
  return (
    (n.service === 'gpu-culler' || n.service === serviceName) &&
    n.kind === 'idle'
  );
}

/**
 * The notice as the panel shows it: after a snooze succeeded, its deadline,
 * count and message until `me` reports them itself.
 */
export function withSnooze(n: UserNotice, s?: SnoozeState): UserNotice {
  if (s?.status !== 'done' || (n.snoozes ?? 0) >= s.result.snoozes) {
    return n;
  }
  const r = s.result;
  return {
    ...n,
    deadline: r.deadline,
    snoozable: r.snoozable,
    snoozes: r.snoozes,
    maxSnoozes: r.maxSnoozes || n.maxSnoozes,
    message: r.message || n.message
  };
}

function stopKey(s: LastStop): string {
  return `${s.at}|${s.server}`;
}

function sameStop(a: LastStop | null, b: LastStop | null): boolean {
  return (
    a === b ||
    (a !== null &&
      b !== null &&
      stopKey(a) === stopKey(b) &&
      a.message === b.message)
  );
}

function defaultStorage(): KeyValueStore | null {
  try {
    return typeof window !== 'undefined' ? window.localStorage : null;
  } catch {
    return null;
  }
}
