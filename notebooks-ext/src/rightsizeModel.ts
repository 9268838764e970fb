// The panel's side of the right-size advice: reads me/right-size at load and
// every few minutes while the tab is visible (the advice moves with whole
// minutes of recorded use, so the panel's refresh interval would only add
// load). A usage API without the route (404, an older one) is not asked
// again; other failures keep the last advice, marked, and back off.

import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { FetchFn, ResponseError } from './api';
import { BackoffPoll, pollFrequency } from './poll';
import { RightSizeResponse, requestRightSize } from './rightsize';

export interface RightSizeState {
  /**
   * loading: not answered yet; ok: current; unavailable: the last read failed
   * (data is the last known, or null); off: no advice route, nothing shown.
   */
  status: 'loading' | 'ok' | 'unavailable' | 'off';
  data: RightSizeResponse | null;
}

export interface RightSizeModelOptions {
  /** The me/right-size URL; null: not under JupyterHub. */
  url: string | null;
  /** The page's Hub token; never logged. */
  token: string;
  /** Seconds between reads (default 300). */
  refreshSeconds?: number;
  fetch?: FetchFn;
}

const POLL_NAME = '@gpuhub/jupyterlab-gpu-panel:right-size';

export class RightSizeModel implements IDisposable {
  constructor(options: RightSizeModelOptions) {
    this._url = options.url;
    this._token = options.token;
    this._fetch = options.fetch ?? ((input, init) => window.fetch(input, init));
    this._state = { status: this._url ? 'loading' : 'off', data: null };
    this._poll = this._url
      ? new BackoffPoll({
          auto: false,
          factory: () => this.fetchOnce(),
          // A failing service is asked less and less often, at most every 30 min.
          frequency: pollFrequency(options.refreshSeconds ?? 300, 1_800_000),
          name: POLL_NAME,
          standby: 'when-hidden'
        })
      : null;
  }

  /** Emitted whenever {@link state} changes. */
  get changed(): ISignal<this, RightSizeState> {
    return this._changed;
  }

  get state(): RightSizeState {
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
    if (this._poll && !this._poll.isDisposed) {
      await this._poll.start();
    }
  }

  /**
   * Read the advice once. A 404 turns it off for this page; other failures
   * keep what is shown, mark it unavailable and reject (the poll backs off).
   */
  async fetchOnce(): Promise<void> {
    if (!this._url || this._disposed || this._state.status === 'off') {
      return;
    }
    let data: RightSizeResponse;
    try {
      data = await requestRightSize(this._url, this._token, this._fetch);
    } catch (err) {
      if (this._disposed) {
        return;
      }
      if (err instanceof ResponseError && err.status === 404) {
        this._set({ status: 'off', data: null });
        this._poll?.dispose();
        return;
      }
      if (this._state.status !== 'unavailable') {
        this._set({ ...this._state, status: 'unavailable' });
      }
      throw err;
    }
    if (this._disposed) {
      return;
    }
    const next: RightSizeState = { status: 'ok', data };
    if (JSON.stringify(next) !== JSON.stringify(this._state)) {
      this._set(next);
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

  private _set(state: RightSizeState): void {
    this._state = state;
    this._changed.emit(state);
  }

  private _url: string | null;
  private _token: string;
  private _fetch: FetchFn;
  private _poll: Poll | null;
  private _state: RightSizeState;
  private _disposed = false;
  private _changed = new Signal<this, RightSizeState>(this);
}
