// gpu-culler's HTTP API as the panel uses it (services/gpu-culler, contract C3):
// `GET api/v1/me` (the user's last stop by the culler) and `POST api/v1/snooze`.
// Requests go through the one helper in api.ts.

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

const SERVICE = 'gpu-culler';

/** The user's last server stopped by the culler. */
export interface LastStop {
  server: string;
  /** When it stopped (ISO 8601). */
  at: string;
  /** idle | max_age | … */
  reason: string;
  /** The culler's words: "Stopped at 15:10 UTC: GPU idle for 1 h 7 min." */
  message: string;
}

export interface CullerMe {
  user: string;
  lastStop: LastStop | null;
}

/** A snooze's 200: the moved deadline and what is left. */
export interface SnoozeResult {
  server: string;
  /** The new deadline (ISO 8601). */
  deadline: string;
  snoozable: boolean;
  snoozes: number;
  maxSnoozes: number;
  message: string;
}

/**
 * The culler's API base (`…/services/<name>/api/v1/`), or null when not
 * running under JupyterHub.
 */
export function cullerApiUrl(
  config: Pick<HubPageConfig, 'hubPrefix' | 'hubHost'>,
  serviceName: string
): string | null {
  if (!config.hubPrefix) {
    return null;
  }
  const name = encodeURIComponent(serviceName.trim() || 'gpu-culler');
  const host = config.hubHost.replace(/\/+$/, '');
  return `${host}${hubBaseUrl(config.hubPrefix)}services/${name}/api/v1/`;
}

/** GET me: the user's last stop. */
export async function requestCullerMe(
  base: string,
  token: string,
  fetchFn: FetchFn,
  signal?: AbortSignal
): Promise<CullerMe> {
  const body = await requestJson(`${base}me`, token, fetchFn, {
    service: SERVICE,
    signal
  });
  if (!isObject(body) || typeof body.user !== 'string') {
    throw new ParseError(`${SERVICE} sent a document without a user`);
  }
  return { user: body.user, lastStop: parseLastStop(body.lastStop) };
}

/** A last stop with a message, else null (nothing the panel can say). */
export function parseLastStop(v: unknown): LastStop | null {
  if (!isObject(v)) {
    return null;
  }
  const message = str(v.message).trim();
  if (!message) {
    return null;
  }
  return {
    server: str(v.server),
    at: str(v.at),
    reason: str(v.reason),
    message
  };
}

/** POST snooze for one of the user's servers ("" is the default server). */
export async function requestSnooze(
  base: string,
  token: string,
  server: string,
  fetchFn: FetchFn
): Promise<SnoozeResult> {
  const body = await requestJson(`${base}snooze`, token, fetchFn, {
    service: SERVICE,
    method: 'POST',
    body: { server }
  });
  if (!isObject(body) || Number.isNaN(Date.parse(str(body.deadline)))) {
    throw new ParseError(`${SERVICE} sent a snooze answer without a deadline`);
  }
  return {
    server: str(body.server, server),
    deadline: str(body.deadline),
    snoozable: body.snoozable === true,
    snoozes: count(body.snoozes) ?? 0,
    maxSnoozes: count(body.maxSnoozes) ?? 0,
    message: str(body.message).trim()
  };
}

/**
 * What to tell the user when a snooze failed, in words that say what to do.
 * `deadline` is the stop still announced ("15:10"), when known.
 */
export function snoozeFailureText(
  err: unknown,
  serviceName: string,
  deadline: string | null
): string {
  const stops = deadline ? ` The server still stops at ${deadline}.` : '';
  if (err instanceof ResponseError) {
    switch (err.status) {
      case 409:
        // The culler's own words: nothing to snooze, none left, a pass in between.
        return err.detail || `The stop cannot be snoozed now.${stops}`;
      case 401:
      case 403:
        return (
          `${serviceName} refused this session’s token, so the stop cannot be snoozed from here.${stops} ` +
          `Use the GPU (run a cell) to keep the server, or save your work; your hub administrator must grant ` +
          `access:services!service=${serviceName}.`
        );
      case 404:
        return (
          err.detail ||
          `${serviceName} does not know this server (it may have stopped already). Reload the page.`
        );
    }
    return (
      `${serviceName} could not snooze the stop (${err.status}${err.detail ? `: ${err.detail}` : ''}).${stops} ` +
      'Try again in a minute, or use the GPU to keep the server.'
    );
  }
  if (err instanceof NetworkError) {
    return (
      `${serviceName} could not be reached, so the stop was not snoozed.${stops} ` +
      'Check your connection and try again, or use the GPU to keep the server.'
    );
  }
  const reason = err instanceof Error ? err.message : String(err);
  return `The snooze failed (${reason}).${stops} Try again.`;
}
