// gpu-quota's waitlist as the panel uses it (services/gpu-quota/README.md,
// "When no GPU is free"): `GET api/v1/users/{name}/waitlist` (the user's
// places) and `DELETE api/v1/users/{name}/waitlist?server=` (leave). Requests
// go through the one helper in api.ts.

import {
  FetchFn,
  HubPageConfig,
  NetworkError,
  ParseError,
  ResponseError,
  count,
  hubBaseUrl,
  isObject,
  requestJson,
  str
} from './api';
import { article, clockText, formatCountdown } from './format';

const SERVICE = 'gpu-quota';

/**
 * Where a place stands: waiting in line, held (the user's turn) or started
 * (its server started from the queue; gpu-quota lists it for 15 minutes after).
 */
export type PlaceState = 'waiting' | 'held' | 'started';

/** One of the user's servers in a queue for a GPU class. */
export interface Place {
  user: string;
  /** The queued server; "" is the default server. */
  server: string;
  class: string;
  kind: string;
  /** What is waited for, in words: "H100", "MIG 3g.20gb slice of an A100". */
  description: string;
  state: PlaceState;
  /** 0: held (the user's turn) or started; n ≥ 1: n-th in line. */
  position: number;
  /** How many wait in this queue (held entries not counted). */
  waiting: number;
  joinedAt: string;
  /** Until when the unit is held (ISO 8601); only while position is 0. */
  heldUntil?: string;
  /** When its server started from the queue (ISO 8601); only once started. */
  startedAt?: string;
  /** When a unit may free for it (ISO 8601); absent when nothing tells. */
  estimate?: string;
  /** The server starts by itself when its turn comes. */
  autoStart: boolean;
  /** gpu-quota has asked the Hub to start it. */
  startRequested: boolean;
  fairShare: number | null;
  /** Why the user cannot be served now (over quota); they keep their place. */
  blocked?: string;
  /** gpu-quota's words, ready to show. */
  message: string;
}

/**
 * gpu-quota's API base (`…/services/<name>/api/v1/`), or null when not
 * running under JupyterHub.
 */
export function quotaApiUrl(
  config: Pick<HubPageConfig, 'hubPrefix' | 'hubHost'>,
  serviceName: string
): string | null {
  if (!config.hubPrefix) {
    return null;
  }
  const name = encodeURIComponent(serviceName.trim() || SERVICE);
  const host = config.hubHost.replace(/\/+$/, '');
  return `${host}${hubBaseUrl(config.hubPrefix)}services/${name}/api/v1/`;
}

/** `…/users/<name>/waitlist`. */
export function waitlistUrl(base: string, user: string): string {
  return `${base}users/${encodeURIComponent(user)}/waitlist`;
}

/** GET the user's places, in the order gpu-quota lists them. */
export async function requestPlaces(
  base: string,
  user: string,
  token: string,
  fetchFn: FetchFn,
  signal?: AbortSignal
): Promise<Place[]> {
  const body = await requestJson(waitlistUrl(base, user), token, fetchFn, {
    service: SERVICE,
    signal
  });
  if (!isObject(body) || !Array.isArray(body.places)) {
    throw new ParseError(`${SERVICE} sent a waitlist answer without places`);
  }
  return body.places.map(parsePlace).filter((p): p is Place => p !== null);
}

/**
 * A place the panel can show, else null: it needs a position and words
 * (its message, or at least what is waited for).
 */
export function parsePlace(v: unknown): Place | null {
  if (!isObject(v)) {
    return null;
  }
  const position = count(v.position);
  const message = str(v.message).trim();
  const description = str(v.description).trim() || str(v.class).trim();
  if (position === undefined || (!message && !description)) {
    return null;
  }
  const p: Place = {
    user: str(v.user),
    server: str(v.server),
    class: str(v.class),
    kind: str(v.kind),
    description,
    state: placeState(v.state, position),
    position,
    waiting: count(v.waiting) ?? 0,
    joinedAt: str(v.joinedAt),
    autoStart: v.autoStart === true,
    startRequested: v.startRequested === true,
    fairShare:
      typeof v.fairShare === 'number' && Number.isFinite(v.fairShare)
        ? v.fairShare
        : null,
    message
  };
  const heldUntil = time(v.heldUntil);
  if (heldUntil) {
    p.heldUntil = heldUntil;
  }
  const startedAt = time(v.startedAt);
  if (startedAt) {
    p.startedAt = startedAt;
  }
  const estimate = time(v.estimate);
  if (estimate) {
    p.estimate = estimate;
  }
  const blocked = str(v.blocked).trim();
  if (blocked) {
    p.blocked = blocked;
  }
  return p;
}

/**
 * gpu-quota's state of a place; one older gpu-quota does not send (or one
 * this panel does not know) follows from the position, as it used to: 0 is held.
 */
function placeState(v: unknown, position: number): PlaceState {
  if (v === 'waiting' || v === 'held' || v === 'started') {
    return v;
  }
  return position === 0 ? 'held' : 'waiting';
}

/** DELETE the server's place: resolves once it is out of the queue. */
export async function requestLeave(
  base: string,
  user: string,
  server: string,
  token: string,
  fetchFn: FetchFn
): Promise<void> {
  await requestJson(
    `${waitlistUrl(base, user)}?server=${encodeURIComponent(server)}`,
    token,
    fetchFn,
    { service: SERVICE, method: 'DELETE' }
  );
}

/** What to tell the user when leaving failed, in words that say what to do. */
export function leaveFailureText(err: unknown, serviceName: string): string {
  if (err instanceof ResponseError) {
    switch (err.status) {
      case 401:
      case 403:
        return (
          `${serviceName} refused this session’s token, so you cannot leave the waitlist from here. ` +
          'Leave it from the Hub home page, or ask your hub administrator to grant ' +
          `access:services!service=${serviceName}.`
        );
      case 503:
        return (
          `${serviceName} is not ready (${err.detail || 'the waitlist is loading'}). ` +
          'You are still in line; try again in a minute.'
        );
    }
    return (
      `${serviceName} could not take you off the waitlist (${err.status}${err.detail ? `: ${err.detail}` : ''}). ` +
      'You are still in line; try again in a minute.'
    );
  }
  if (err instanceof NetworkError) {
    return (
      `${serviceName} could not be reached, so you are still in line. ` +
      'Check your connection and try again.'
    );
  }
  const reason = err instanceof Error ? err.message : String(err);
  return `Leaving the waitlist failed (${reason}). You are still in line; try again.`;
}

/** An ISO 8601 time that parses, else undefined. */
function time(v: unknown): string | undefined {
  const s = str(v);
  return s && !Number.isNaN(Date.parse(s)) ? s : undefined;
}

/** The place in line: "2 of 3" ("2" when the count is missing or behind). */
export function positionText(p: Place): string {
  return p.waiting >= p.position
    ? `${p.position} of ${p.waiting}`
    : `${p.position}`;
}

/** What is waited for with its article: "an H100", "a MIG 3g.20gb slice of an A100". */
export function waitedFor(p: Place): string {
  const d = p.description || 'GPU';
  return `${article(d)} ${d}`;
}

/**
 * The turn's headline: "Your turn: an H100 is held for you until 15:20 CET"
 * (the hold's end in the browser's zone).
 */
export function turnHeadline(p: Place): string {
  const until = p.heldUntil ? clockText(p.heldUntil) : '';
  return `Your turn: ${waitedFor(p)} is held for you${until ? ` until ${until}` : ''}`;
}

/** What is left of the hold: "9 min 05 s left", "the hold ends now"; null without one. */
export function holdCountdown(p: Place, now: Date): string | null {
  if (!p.heldUntil) {
    return null;
  }
  const left = (Date.parse(p.heldUntil) - now.getTime()) / 1000;
  return left > 0 ? `${formatCountdown(left)} left` : 'the hold ends now';
}

/**
 * The estimate in the browser's zone: "around 15:10 CET", with the weekday
 * when it is not today ("around Tue 09:00 CET"); "any moment now" once it has
 * passed; null without one.
 */
export function estimateText(p: Place, now: Date): string | null {
  if (!p.estimate) {
    return null;
  }
  const t = new Date(p.estimate);
  if (t.getTime() <= now.getTime()) {
    return 'any moment now';
  }
  const day =
    t.toDateString() === now.toDateString()
      ? ''
      : `${t.toLocaleDateString(undefined, { weekday: 'short' })} `;
  return `around ${day}${clockText(p.estimate)}`;
}

/**
 * Where the user starts the queued server themselves: the Hub home for the
 * default server, the spawn page of a named one.
 */
export function startUrl(
  hubBase: string,
  user: string,
  server: string
): string {
  if (!server) {
    return `${hubBase}hub/home`;
  }
  return `${hubBase}hub/spawn/${encodeURIComponent(user)}/${encodeURIComponent(server)}`;
}

/**
 * The server's own URL, where a started server opens: `user/<name>/` for the
 * default server, `user/<name>/<server>/` for a named one.
 */
export function serverUrl(
  hubBase: string,
  user: string,
  server: string
): string {
  const home = `${hubBase}user/${encodeURIComponent(user)}/`;
  return server ? `${home}${encodeURIComponent(server)}/` : home;
}

/** How the server gets started on the user's turn. */
export type TurnStart = 'being-started' | 'starts-soon' | 'start-it';

/**
 * being-started: gpu-quota asked the Hub to start it; starts-soon: it will
 * (auto-start, not asked yet); start-it: the user must, within the hold.
 */
export function turnStart(p: Place): TurnStart {
  if (!p.autoStart) {
    return 'start-it';
  }
  return p.startRequested ? 'being-started' : 'starts-soon';
}
