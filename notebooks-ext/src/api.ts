// The usage API's `GET /services/gpu-usage/api/v1/me` contract (docs/architecture.md,
// services/usage-api/openapi.yaml) and the one request helper that reads it.

/** Where a utilization number comes from. */
export type UtilizationSource = 'nvml' | 'dcgm' | 'simulated' | 'none';

/**
 * How a device is held (the usage API's GPU vocabulary): a whole card, a MIG
 * slice, a time-sliced replica, an MPS replica, or a time-sliced MIG slice.
 */
export type GpuKind = 'gpu' | 'mig' | 'shared' | 'mps' | 'mig-shared';

export interface GpuHolding {
  kind: GpuKind;
  resource?: string;
  product?: string;
  profile?: string;
  share: number;
  shareNumerator?: number;
  shareDenominator?: number;
  description?: string;
  uuid?: string;
  smUtilPercent: number | null;
  utilizationSource: UtilizationSource;
  memoryUsedBytes: number;
  memoryTotalBytes: number;
  /** The node agent's last snapshot is older than 3 intervals: utilization is unknown. */
  stale?: boolean;
  /** Why the unit is stale, in the service's plain words. */
  staleReason?: string;
  /** Why `smUtilPercent` is null (stale agent, MIG without DCGM, no agent on the node). */
  utilizationUnknownReason?: string;
}

export interface ServerUsage {
  name: string;
  pod?: string;
  node?: string;
  ready: boolean;
  allocatedGPUs: number;
  /** null when the utilization of any allocated unit is unknown. */
  usedGPUs: number | null;
  stale?: boolean;
  staleReason?: string;
  simulated?: boolean;
  gpus: GpuHolding[];
}

export interface HistoryPoint {
  t: string;
  allocatedGPUs: number;
  usedGPUs: number | null;
  smUtilPercent: number | null;
  memoryUsedBytes: number;
}

export interface GpuHoursWindow {
  /** null when the service sent no figure: shown as unknown, never as 0. */
  allocated: number | null;
  /**
   * Used GPU-hours over the part whose utilization was known: the physical
   * GPU time the work kept busy, so on a time-sliced GPU it can exceed
   * `allocated` (the share held).
   */
  used: number | null;
  /** Allocated GPU-hours whose utilization was unknown (MIG without DCGM, a stale agent). */
  usedUnknown?: number;
}

/** One GPU-hour budget over a rolling window, as gpu-quota reports it. */
export interface BudgetWindow {
  /** The window as the policy writes it: "24h", "7d". */
  window: string;
  windowSeconds: number | null;
  /** The budget in (weighted) GPU-hours; null = unlimited. */
  gpuHours: number | null;
  /** null when gpu-quota cannot read the usage right now: shown as unknown. */
  usedGPUHours: number | null;
  remainingGPUHours: number | null;
  /** `exhausted` once the budget is used up (gpu-quota refuses GPU servers). */
  status: 'ok' | 'exhausted' | 'unavailable';
}

/** The concurrent limit: GPU-equivalents and GPU servers held now, and the most allowed (null = no limit). */
export interface ConcurrentLimit {
  maxGPUs: number | null;
  heldGPUs: number | null;
  maxServers: number | null;
  servers: number | null;
}

/**
 * The user's quota from gpu-quota (the usage API passes it through in `me`),
 * or `status: 'unavailable'` with a reason when gpu-quota cannot be asked.
 * Read defensively: anything missing is unknown, never invented.
 */
export interface Budget {
  status: 'ok' | 'unavailable';
  /** Why it is unavailable, in the service's words. */
  reason?: string;
  exempt: boolean;
  concurrent: ConcurrentLimit | null;
  budgets: BudgetWindow[];
}

/**
 * A pending notice of an acting service on one of the user's pods (gpu-quota
 * over a budget or limit, the culler): shown at the top of the panel with a
 * countdown to its deadline.
 */
export interface UserNotice {
  service: string;
  /** budget | limit | idle | queue (others are shown generically). */
  kind: string;
  reason: string;
  message: string;
  /** When the announced action happens (ISO 8601); absent when none is scheduled. */
  deadline?: string;
  snoozable: boolean;
  createdAt?: string;
  /** The server whose pod carries it; "" for the default server. */
  server: string;
  /** The action falls on this server at the deadline (gpu-culler, gpu-quota). */
  stops?: boolean;
  /** gpu-culler: how many times the user snoozed it, of `maxSnoozes`. */
  snoozes?: number;
  maxSnoozes?: number;
}

/** Idle-cull countdown, filled by gpu-culler once it exists. */
export interface IdleCull {
  server?: string;
  cullAt?: string;
  idleSeconds?: number;
  timeoutSeconds?: number;
  reason?: string;
}

export interface MeResponse {
  user: string;
  sampledAt: string;
  intervalSeconds: number;
  simulated: boolean;
  /** True when any server's agent data is stale. */
  stale?: boolean;
  staleReason?: string;
  share: {
    allocatedGPUs: number;
    usedGPUs: number | null;
    memoryUsedBytes: number;
    memoryTotalBytes: number;
  };
  servers: ServerUsage[];
  history: HistoryPoint[];
  gpuHours: {
    today?: GpuHoursWindow;
    '7d'?: GpuHoursWindow;
    '30d'?: GpuHoursWindow;
  };
  /**
   * `unavailable` while the ledger cannot be read (the windows are then
   * null); an API without the field is `ok`.
   */
  gpuHoursStatus: GpuHoursStatus;
  gpuHoursReason?: string;
  /** Pending notices, one per service; [] when none (or from an API before them). */
  notices: UserNotice[];
  /** null when no quota service is configured. */
  budget: Budget | null;
  idleCull: IdleCull | null;
}

export type GpuHoursStatus = 'ok' | 'unavailable';

/** Base class of every failure of {@link requestMe}. */
export class UsageApiError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageApiError';
  }
}

/** The request never got an HTTP answer (DNS, connection refused, CORS, abort). */
export class NetworkError extends UsageApiError {
  constructor(message: string) {
    super(message);
    this.name = 'NetworkError';
  }
}

/** The service answered with a non-2xx status. */
export class ResponseError extends UsageApiError {
  readonly status: number;
  /** The service's own `message` (its words for the user), '' when it sent none. */
  readonly detail: string;
  constructor(status: number, message: string, detail = '') {
    super(message);
    this.name = 'ResponseError';
    this.status = status;
    this.detail = detail;
  }

  /** The token was refused or lacks `access:services!service=gpu-usage`. */
  get unauthorized(): boolean {
    return this.status === 401 || this.status === 403;
  }
}

/** The body was not the JSON the contract promises. */
export class ParseError extends UsageApiError {
  constructor(message: string) {
    super(message);
    this.name = 'ParseError';
  }
}

export type FetchFn = (
  input: string,
  init?: {
    method?: 'GET' | 'POST' | 'DELETE';
    body?: string;
    headers?: Record<string, string>;
    signal?: AbortSignal;
    credentials?: 'omit' | 'same-origin' | 'include';
    cache?: 'no-store';
  }
) => Promise<{
  ok: boolean;
  status: number;
  statusText: string;
  json(): Promise<unknown>;
  text(): Promise<string>;
}>;

/** The page config values the panel reads (set by jupyterhub-singleuser). */
export interface HubPageConfig {
  hubPrefix: string;
  hubHost: string;
  hubUser: string;
  hubServerName: string;
  token: string;
}

/**
 * The JupyterHub base URL from `hubPrefix` (`<base>/hub/`), with a trailing
 * slash: `/hub/` → `/`, `/jhub/hub/` → `/jhub/`. Empty when not under a Hub.
 */
export function hubBaseUrl(hubPrefix: string): string {
  if (!hubPrefix) {
    return '';
  }
  let p = hubPrefix.endsWith('/') ? hubPrefix : hubPrefix + '/';
  if (!p.startsWith('/')) {
    p = '/' + p;
  }
  if (p.endsWith('/hub/')) {
    return p.slice(0, -'hub/'.length);
  }
  // A prefix that does not end in hub/ is not what the Hub sets; use it as is.
  return p;
}

/**
 * The usage API's `me` URL, or null when not running under JupyterHub.
 * `override` (a setting) wins; otherwise
 * `${hubHost}${base}services/${serviceName}/api/v1/me`.
 */
export function usageUrl(
  config: Pick<HubPageConfig, 'hubPrefix' | 'hubHost'>,
  serviceName: string,
  override = ''
): string | null {
  if (!config.hubPrefix) {
    return null;
  }
  if (override.trim()) {
    return override.trim();
  }
  const name = encodeURIComponent(serviceName.trim() || 'gpu-usage');
  const host = config.hubHost.replace(/\/+$/, '');
  return `${host}${hubBaseUrl(config.hubPrefix)}services/${name}/api/v1/me`;
}

/**
 * The `me` URL with its query: `since` (incremental history) and `tz` (what
 * "today" means for the GPU-hours), each only when non-empty. Keeps a query
 * the URL already has (a `usageUrl` override).
 */
export function meUrl(
  url: string,
  query: { since?: string; tz?: string }
): string {
  const params: string[] = [];
  if (query.since) {
    params.push(`since=${encodeURIComponent(query.since)}`);
  }
  if (query.tz) {
    params.push(`tz=${encodeURIComponent(query.tz)}`);
  }
  if (params.length === 0) {
    return url;
  }
  return `${url}${url.includes('?') ? '&' : '?'}${params.join('&')}`;
}

/**
 * The browser's IANA time zone ("Europe/Berlin"), or '' when it has none or
 * Intl is missing: then the service's default (UTC) decides what "today" is.
 */
export function browserTimeZone(): string {
  try {
    const tz: unknown = Intl.DateTimeFormat().resolvedOptions().timeZone;
    return typeof tz === 'string' ? tz.trim() : '';
  } catch {
    return '';
  }
}

/**
 * GET the `me` document with the Hub token. Every failure is a typed
 * {@link UsageApiError}; the token never appears in an error message.
 */
export async function requestMe(
  url: string,
  token: string,
  fetchFn: FetchFn,
  signal?: AbortSignal
): Promise<MeResponse> {
  return parseMe(
    await requestJson(url, token, fetchFn, { service: 'usage API', signal })
  );
}

/**
 * The one request helper: a JSON request to a Hub service with the Hub token
 * (`Authorization: token …`), answered with the parsed JSON body. Failures are
 * typed: {@link NetworkError} (no answer), {@link ResponseError} (non-2xx,
 * with the service's message as `detail`), {@link ParseError} (not JSON).
 * A 204 (No Content) answers null.
 * `service` names the service in messages ("usage API", "gpu-culler"); the
 * token never appears in one.
 */
export async function requestJson(
  url: string,
  token: string,
  fetchFn: FetchFn,
  options: {
    service: string;
    method?: 'GET' | 'POST' | 'DELETE';
    body?: unknown;
    signal?: AbortSignal;
  }
): Promise<unknown> {
  const { service } = options;
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (token) {
    headers.Authorization = `token ${token}`;
  }
  const init: Parameters<FetchFn>[1] = {
    headers,
    signal: options.signal,
    credentials: 'same-origin',
    cache: 'no-store'
  };
  if (options.method && options.method !== 'GET') {
    init.method = options.method;
  }
  if (options.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(options.body);
  }
  let response: Awaited<ReturnType<FetchFn>>;
  try {
    response = await fetchFn(url, init);
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new NetworkError(`${service} unreachable: ${reason}`);
  }
  if (!response.ok) {
    let detail = '';
    try {
      detail = errorDetail(await response.text());
    } catch {
      // The status is what matters.
    }
    throw new ResponseError(
      response.status,
      `${service} answered ${response.status} ${response.statusText}${detail ? `: ${detail}` : ''}`,
      detail
    );
  }
  if (response.status === 204) {
    return null;
  }
  try {
    return await response.json();
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new ParseError(`${service} sent invalid JSON: ${reason}`);
  }
}

/** The service's `{"status", "message"}` error message, or the start of a non-JSON body. */
function errorDetail(body: string): string {
  try {
    const parsed: unknown = JSON.parse(body);
    if (isObject(parsed) && typeof parsed.message === 'string') {
      return parsed.message.slice(0, 300);
    }
  } catch {
    // Not JSON: a proxy's or the Hub's page.
  }
  const text = body.replace(/\s+/g, ' ').trim();
  return text.startsWith('<') ? '' : text.slice(0, 200);
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function num(v: unknown, fallback = 0): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : fallback;
}

function numOrNull(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

export function str(v: unknown, fallback = ''): string {
  return typeof v === 'string' ? v : fallback;
}

/** A plain-words reason: a non-blank string, else undefined. */
function reason(v: unknown): string | undefined {
  return typeof v === 'string' && v.trim() ? v.trim() : undefined;
}

const SOURCES: UtilizationSource[] = ['nvml', 'dcgm', 'simulated', 'none'];
const KINDS: GpuKind[] = ['gpu', 'mig', 'shared', 'mps', 'mig-shared'];

function parseGpu(v: unknown): GpuHolding {
  const g = isObject(v) ? v : {};
  const source = str(g.utilizationSource, 'none') as UtilizationSource;
  const kind = str(g.kind, 'gpu') as GpuKind;
  return {
    kind: KINDS.includes(kind) ? kind : 'gpu',
    resource: typeof g.resource === 'string' ? g.resource : undefined,
    product: typeof g.product === 'string' ? g.product : undefined,
    profile: typeof g.profile === 'string' ? g.profile : undefined,
    share: num(g.share),
    shareNumerator: numOrNull(g.shareNumerator) ?? undefined,
    shareDenominator: numOrNull(g.shareDenominator) ?? undefined,
    description: typeof g.description === 'string' ? g.description : undefined,
    uuid: typeof g.uuid === 'string' ? g.uuid : undefined,
    smUtilPercent: numOrNull(g.smUtilPercent),
    utilizationSource: SOURCES.includes(source) ? source : 'none',
    memoryUsedBytes: num(g.memoryUsedBytes),
    memoryTotalBytes: num(g.memoryTotalBytes),
    stale: g.stale === true,
    staleReason: reason(g.staleReason),
    utilizationUnknownReason: reason(g.utilizationUnknownReason)
  };
}

function parseWindow(v: unknown): GpuHoursWindow | undefined {
  if (!isObject(v)) {
    return undefined;
  }
  const w: GpuHoursWindow = {
    allocated: numOrNull(v.allocated),
    used: numOrNull(v.used)
  };
  if (typeof v.usedUnknown === 'number' && Number.isFinite(v.usedUnknown)) {
    w.usedUnknown = v.usedUnknown;
  }
  return w;
}

/**
 * Check the shape of a `me` document. Missing optional parts get neutral
 * defaults; a body that is not an object with a user is a {@link ParseError}.
 */
export function parseMe(body: unknown): MeResponse {
  if (!isObject(body) || typeof body.user !== 'string') {
    throw new ParseError('usage API sent a document without a user');
  }
  const share = isObject(body.share) ? body.share : {};
  const hours = isObject(body.gpuHours) ? body.gpuHours : {};
  const gpuHours = {
    today: parseWindow(hours.today),
    '7d': parseWindow(hours['7d']),
    '30d': parseWindow(hours['30d'])
  };
  return {
    user: body.user,
    sampledAt: str(body.sampledAt),
    intervalSeconds: num(body.intervalSeconds, 5),
    simulated: body.simulated === true,
    stale: body.stale === true,
    staleReason: reason(body.staleReason),
    share: {
      allocatedGPUs: num(share.allocatedGPUs),
      usedGPUs: numOrNull(share.usedGPUs),
      memoryUsedBytes: num(share.memoryUsedBytes),
      memoryTotalBytes: num(share.memoryTotalBytes)
    },
    servers: (Array.isArray(body.servers) ? body.servers : []).map(s => {
      const o = isObject(s) ? s : {};
      return {
        name: str(o.name),
        pod: typeof o.pod === 'string' ? o.pod : undefined,
        node: typeof o.node === 'string' ? o.node : undefined,
        ready: o.ready !== false,
        allocatedGPUs: num(o.allocatedGPUs),
        usedGPUs: numOrNull(o.usedGPUs),
        stale: o.stale === true,
        staleReason: reason(o.staleReason),
        simulated: o.simulated === true,
        gpus: (Array.isArray(o.gpus) ? o.gpus : []).map(parseGpu)
      };
    }),
    history: (Array.isArray(body.history) ? body.history : [])
      .filter(isObject)
      .map(h => ({
        t: str(h.t),
        allocatedGPUs: num(h.allocatedGPUs),
        usedGPUs: numOrNull(h.usedGPUs),
        smUtilPercent: numOrNull(h.smUtilPercent),
        memoryUsedBytes: num(h.memoryUsedBytes)
      })),
    gpuHours,
    gpuHoursStatus: hoursStatus(body.gpuHoursStatus, gpuHours),
    gpuHoursReason: reason(body.gpuHoursReason),
    notices: (Array.isArray(body.notices) ? body.notices : [])
      .filter(isObject)
      .map(parseNotice)
      .filter(n => n.message !== ''),
    budget: isObject(body.budget) ? parseBudget(body.budget) : null,
    idleCull: isObject(body.idleCull) ? (body.idleCull as IdleCull) : null
  };
}

function parseNotice(n: Record<string, unknown>): UserNotice {
  const deadline = str(n.deadline);
  return {
    service: str(n.service),
    kind: str(n.kind),
    reason: str(n.reason),
    message: str(n.message).trim(),
    deadline:
      deadline && !Number.isNaN(Date.parse(deadline)) ? deadline : undefined,
    snoozable: n.snoozable === true,
    createdAt: typeof n.createdAt === 'string' ? n.createdAt : undefined,
    server: str(n.server),
    stops: n.stops === true ? true : undefined,
    snoozes: count(n.snoozes),
    maxSnoozes: count(n.maxSnoozes)
  };
}

/** A non-negative whole count, else undefined (absent or nonsense). */
export function count(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined;
}

/** gpu-quota's quota object, or its unavailable stand-in. */
export function parseBudget(b: Record<string, unknown>): Budget {
  if (b.status === 'unavailable') {
    return {
      status: 'unavailable',
      reason: reason(b.reason),
      exempt: false,
      concurrent: null,
      budgets: []
    };
  }
  const c = isObject(b.concurrent) ? b.concurrent : null;
  return {
    status: 'ok',
    exempt: b.exempt === true,
    concurrent: c && {
      maxGPUs: numOrNull(c.maxGPUs),
      heldGPUs: numOrNull(c.heldGPUs),
      maxServers: numOrNull(c.maxServers),
      servers: numOrNull(c.servers)
    },
    budgets: (Array.isArray(b.budgets) ? b.budgets : [])
      .filter(isObject)
      .map(w => ({
        window: str(w.window),
        windowSeconds: numOrNull(w.windowSeconds),
        gpuHours: numOrNull(w.gpuHours),
        usedGPUHours: numOrNull(w.usedGPUHours),
        remainingGPUHours: numOrNull(w.remainingGPUHours),
        status:
          w.status === 'unavailable'
            ? ('unavailable' as const)
            : w.status === 'exhausted'
              ? ('exhausted' as const)
              : ('ok' as const)
      }))
  };
}

/**
 * `ok` when the field is missing (an API from before it existed) or `ok`;
 * `unavailable` when it says so. A status this panel does not know is taken
 * as unavailable unless the document carries some GPU-hours figure.
 */
function hoursStatus(
  v: unknown,
  hours: MeResponse['gpuHours']
): GpuHoursStatus {
  if (v === undefined || v === null || v === 'ok') {
    return 'ok';
  }
  if (v === 'unavailable') {
    return 'unavailable';
  }
  return Object.values(hours).some(w => w !== undefined) ? 'ok' : 'unavailable';
}
