// Test fixture (UI tests only): plays the usage API's `GET /services/gpu-usage/api/v1/me`
// for the standalone UI test, and gpu-quota's waitlist (`GET` / `DELETE
// /services/gpu-quota/api/v1/users/{name}/waitlist`, issue 13). It answers per Hub token, like the real service, and
// derives a simulated SM utilization from the CPU time of the kernels it watches, the
// way the gpu-agent's simulated backend does (docs/architecture.md), so a busy cell
// makes the number rise.

import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';

export const ME_PATH = '/services/gpu-usage/api/v1/me';
const WAITLIST_PATH =
  /^\/services\/gpu-quota\/api\/v1\/users\/([^/]+)\/waitlist$/;

type Json = Record<string, unknown>;

export interface FixtureUser {
  name: string;
  /** Value of GPUHUB_SIM_POD_UID in the environment of this user's kernels. */
  podUID: string;
  /** Builds the `me` document from the live utilization (null = no kernel seen yet). */
  me: (util: number | null, history: Json[], now: Date) => Json;
}

export class UsageFixture {
  constructor(private readonly users: Record<string, FixtureUser>) {}

  /** When set, every `me` request answers this status (service down behind the proxy). */
  failWith: number | null = null;
  /** When true, every user's servers hold no GPU (a CPU-only server). */
  noGpu = false;
  /**
   * When set, the GPU agent on every node "stopped sampling" this many
   * seconds ago: the document is marked stale with the usage API's reasons
   * and no utilization or memory reading (issue 9, contract 4).
   */
  staleAgentSeconds: number | null = null;
  /** When true, the ledger is "unreachable": GPU-hours null and unavailable (contract 5). */
  ledgerDown = false;
  /** The last `tz` each user's panel sent (absent: none sent). */
  readonly tz: Record<string, string> = {};
  /** Requests refused for a bad `tz`. */
  badTz = 0;
  /** Requests seen, by user name. */
  readonly requests: Record<string, number> = {};
  /** Of those, the incremental ones (`?since=`), by user name. */
  readonly sinceRequests: Record<string, number> = {};
  /** Every request for the `me` document, answered or not. */
  total = 0;
  /**
   * gpu-quota's places by user name, as the service lists them (a user
   * missing waits for nothing); null: the waitlist is off, and gpu-quota
   * answers 404 as the service does.
   */
  waitlist: Record<string, Json[]> | null = {};
  /** Waitlist requests seen (GET and DELETE). */
  waitlistRequests = 0;
  /** Servers taken off the waitlist by DELETE, as "user/server". */
  readonly leaves: string[] = [];

  async start(host = '127.0.0.1'): Promise<string> {
    this._server = http.createServer((req, res) => this._handle(req, res));
    await new Promise<void>(resolve => this._server!.listen(0, host, resolve));
    const { port } = this._server.address() as AddressInfo;
    this._timer = setInterval(() => this._sample(), 1000);
    return `http://${host}:${port}`;
  }

  async stop(): Promise<void> {
    if (this._timer) {
      clearInterval(this._timer);
    }
    await new Promise<void>(
      resolve => this._server?.close(() => resolve()) ?? resolve()
    );
  }

  /** The document the fixture would answer for a user now (for assertions). */
  current(user: string): Json {
    const u = Object.values(this.users).find(x => x.name === user);
    if (!u) {
      throw new Error(`fixture: no user ${user}`);
    }
    const me = u.me(
      this._util.get(u.podUID) ?? null,
      this._history.get(u.podUID) ?? [],
      new Date()
    );
    if (this.noGpu) {
      me.servers = (me.servers as Json[]).map(s => ({
        ...s,
        allocatedGPUs: 0,
        usedGPUs: 0,
        gpus: []
      }));
      me.share = {
        allocatedGPUs: 0,
        usedGPUs: 0,
        memoryUsedBytes: 0,
        memoryTotalBytes: 0
      };
    }
    if (this.staleAgentSeconds !== null) {
      markStale(me, this.staleAgentSeconds, new Date());
    }
    if (this.ledgerDown) {
      me.gpuHoursStatus = 'unavailable';
      me.gpuHoursReason =
        'the usage database is unreachable; the usage service keeps retrying';
      me.gpuHours = { today: null, '7d': null, '30d': null };
    } else {
      me.gpuHoursStatus = 'ok';
    }
    return me;
  }

  private _handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    // JupyterLab runs on another port in the standalone test: allow the cross-origin call.
    res.setHeader('Access-Control-Allow-Origin', '*');
    res.setHeader('Access-Control-Allow-Headers', 'Authorization, Accept');
    res.setHeader('Access-Control-Allow-Methods', 'GET, DELETE, OPTIONS');
    if (req.method === 'OPTIONS') {
      res.writeHead(204).end();
      return;
    }
    const url = new URL(req.url ?? '/', 'http://fixture');
    const queued = WAITLIST_PATH.exec(url.pathname);
    if (queued) {
      this._waitlist(req, res, decodeURIComponent(queued[1]), url);
      return;
    }
    if (req.method !== 'GET' || url.pathname !== ME_PATH) {
      res
        .writeHead(404, { 'Content-Type': 'application/json' })
        .end('{"error":"not found"}');
      return;
    }
    this.total++;
    if (this.failWith !== null) {
      res
        .writeHead(this.failWith, { 'Content-Type': 'text/plain' })
        .end('fixture says no');
      return;
    }
    const m = /^token (.+)$/.exec(req.headers.authorization ?? '');
    const user = m ? this.users[m[1]] : undefined;
    if (!user) {
      res
        .writeHead(403, { 'Content-Type': 'application/json' })
        .end('{"error":"forbidden"}');
      return;
    }
    // since=<RFC 3339>: only history points strictly after it, as the service does.
    const since = url.searchParams.get('since');
    const sinceMs = since === null ? NaN : Date.parse(since);
    if (since !== null && !Number.isFinite(sinceMs)) {
      res
        .writeHead(400, { 'Content-Type': 'application/json' })
        .end('{"status":400,"message":"since must be an RFC 3339 time"}');
      return;
    }
    // tz=<IANA zone>: what "today" means, validated like the service (400 on a bad zone).
    const tz = url.searchParams.get('tz');
    if (tz !== null) {
      if (!isIanaZone(tz)) {
        this.badTz++;
        res.writeHead(400, { 'Content-Type': 'application/json' }).end(
          JSON.stringify({
            status: 400,
            message: `tz must be an IANA time zone such as Europe/Berlin, not ${JSON.stringify(tz)}`
          })
        );
        return;
      }
      this.tz[user.name] = tz;
    }
    this.requests[user.name] = (this.requests[user.name] ?? 0) + 1;
    if (since !== null) {
      this.sinceRequests[user.name] = (this.sinceRequests[user.name] ?? 0) + 1;
    }
    const me = this.current(user.name);
    if (since !== null && Array.isArray(me.history)) {
      me.history = (me.history as Json[]).filter(
        h => Date.parse(String(h.t)) > sinceMs
      );
    }
    res.writeHead(200, {
      'Content-Type': 'application/json',
      'Cache-Control': 'no-store'
    });
    res.end(JSON.stringify(me));
  }

  /** gpu-quota's waitlist for one user: their places, or leaving one queue. */
  private _waitlist(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    name: string,
    url: URL
  ): void {
    this.waitlistRequests++;
    const json = (status: number, body: unknown): void => {
      res
        .writeHead(status, {
          'Content-Type': 'application/json',
          'Cache-Control': 'no-store'
        })
        .end(JSON.stringify(body));
    };
    if (this.waitlist === null) {
      json(404, {
        status: 404,
        message: 'the waitlist is not enabled (gpu-quota --waitlist)'
      });
      return;
    }
    const m = /^token (.+)$/.exec(req.headers.authorization ?? '');
    const user = m ? this.users[m[1]] : undefined;
    if (!user || user.name !== name) {
      json(403, {
        status: 403,
        message: 'you may read your own places in the waitlist only'
      });
      return;
    }
    const places = this.waitlist[name] ?? [];
    if (req.method === 'GET') {
      json(200, { places });
      return;
    }
    if (req.method === 'DELETE') {
      const server = url.searchParams.get('server') ?? '';
      const i = places.findIndex(p => p.server === server);
      if (i < 0) {
        json(404, { status: 404, message: 'this server is not queued' });
        return;
      }
      places.splice(i, 1);
      this.waitlist[name] = places;
      this.leaves.push(`${name}/${server}`);
      res.writeHead(204).end();
      return;
    }
    json(405, { status: 405, message: 'method not allowed' });
  }

  /** One sampling round: CPU seconds of each user's kernels since the last round. */
  private _sample(): void {
    const now = Date.now();
    const ticks = cpuTicksByPod(
      new Set(Object.values(this.users).map(u => u.podUID))
    );
    for (const [uid, t] of ticks) {
      const last = this._last.get(uid);
      this._last.set(uid, { t: now, ticks: t });
      if (!last || now <= last.t) {
        continue;
      }
      const pct = Math.min(
        100,
        (((t - last.ticks) / CLK_TCK) * 1000 * 100) / (now - last.t)
      );
      this._util.set(uid, Math.round(Math.max(0, pct)));
      const hist = this._history.get(uid) ?? [];
      hist.push({
        t: new Date(now).toISOString(),
        smUtilPercent: Math.round(pct)
      });
      this._history.set(uid, hist.slice(-600));
    }
  }

  private _server: http.Server | null = null;
  private _timer: NodeJS.Timeout | null = null;
  private _last = new Map<string, { t: number; ticks: number }>();
  private _util = new Map<string, number>();
  private _history = new Map<string, Json[]>();
}

const CLK_TCK = 100;

/** An IANA zone name ("Europe/Berlin", "UTC"): no offsets, no empty string. */
export function isIanaZone(tz: string): boolean {
  if (!/^[A-Za-z][A-Za-z0-9_+-]*(\/[A-Za-z0-9_+-]+)*$/.test(tz)) {
    return false;
  }
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

/**
 * What the usage API answers while the GPU agents have not sampled for
 * `seconds`: stale flags with reasons at every level, utilization null with a
 * reason, memory not measured.
 */
function markStale(me: Json, seconds: number, now: Date): void {
  const since = new Date(now.getTime() - seconds * 1000)
    .toISOString()
    .slice(11, 19);
  let any = false;
  for (const s of me.servers as Json[]) {
    const gpus = s.gpus as Json[];
    if (gpus.length === 0) {
      continue;
    }
    any = true;
    const reason = `the GPU agent on node ${String(s.node)} has not sampled since ${since} UTC (${seconds} s)`;
    // The service sets simulated from a fresh snapshot only.
    Object.assign(s, {
      stale: true,
      staleReason: reason,
      usedGPUs: null,
      simulated: false
    });
    for (const g of gpus) {
      Object.assign(g, {
        stale: true,
        staleReason: reason,
        smUtilPercent: null,
        utilizationSource: 'none',
        utilizationUnknownReason: reason,
        memoryUsedBytes: 0
      });
    }
    if (!me.staleReason) {
      me.staleReason = reason;
    }
  }
  if (any) {
    me.stale = true;
    me.simulated = (me.servers as Json[]).some(s => s.simulated === true);
    me.share = { ...(me.share as Json), usedGPUs: null, memoryUsedBytes: 0 };
  }
}

/** utime+stime (in clock ticks) of IPython kernels whose environment carries a watched pod UID. */
function cpuTicksByPod(uids: Set<string>): Map<string, number> {
  const out = new Map<string, number>();
  let pids: string[] = [];
  try {
    pids = fs.readdirSync('/proc').filter(p => /^\d+$/.test(p));
  } catch {
    return out;
  }
  for (const pid of pids) {
    try {
      const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (!cmdline.includes('ipykernel')) {
        continue;
      }
      const env = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      const uid = env
        .find(e => e.startsWith('GPUHUB_SIM_POD_UID='))
        ?.slice('GPUHUB_SIM_POD_UID='.length);
      if (!uid || !uids.has(uid)) {
        continue;
      }
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ticks = Number(fields[11]) + Number(fields[12]);
      out.set(uid, (out.get(uid) ?? 0) + ticks);
    } catch {
      // The process went away or is not ours to read.
    }
  }
  return out;
}

/** A smooth past hour of utilization so the sparkline has something to show. */
function pastHour(now: Date, base: number): Json[] {
  // On whole minutes: a point keeps its time from one answer to the next, as on
  // the service, so an incremental (since) poll never sees the same one moved.
  now = new Date(Math.floor(now.getTime() / 60_000) * 60_000);
  const out: Json[] = [];
  for (let i = 60; i >= 2; i--) {
    const v = Math.max(
      0,
      Math.min(100, base + 25 * Math.sin(i / 6) + 10 * Math.cos(i / 2.3))
    );
    out.push({
      t: new Date(now.getTime() - i * 60_000).toISOString(),
      allocatedGPUs: 0.428571,
      usedGPUs: (0.428571 * v) / 100,
      smUtilPercent: Math.round(v),
      memoryUsedBytes: 2147483648
    });
  }
  return out;
}

export const ALICE_TOKEN = 'alice-fixture-token-0001';
export const BOB_TOKEN = 'bob-fixture-token-0002';

/** alice: MIG 3g.20gb on an A100 (the contract's example); bob: 1 of 4 time-sliced shares of a T4. */
export function standardUsers(): Record<string, FixtureUser> {
  return {
    [ALICE_TOKEN]: {
      name: 'alice',
      podUID: 'fixture-pod-alice',
      me: (util, history, now) => {
        const sm = util ?? 12;
        return {
          user: 'alice',
          sampledAt: new Date(now.getTime() - 2000).toISOString(),
          intervalSeconds: 5,
          simulated: true,
          stale: false,
          groups: [],
          share: {
            allocatedGPUs: 0.428571,
            usedGPUs: (0.428571 * sm) / 100,
            memoryUsedBytes: 3328599654,
            memoryTotalBytes: 21474836480
          },
          servers: [
            {
              name: '',
              pod: 'jupyter-alice',
              node: 'gpu-a100-0',
              ready: true,
              stale: false,
              simulated: true,
              namespace: 'jhub',
              allocatedGPUs: 0.428571,
              usedGPUs: (0.428571 * sm) / 100,
              gpus: [
                {
                  kind: 'mig',
                  resource: 'nvidia.com/mig-3g.20gb',
                  product: 'NVIDIA A100-SXM4-40GB',
                  profile: '3g.20gb',
                  share: 0.428571,
                  shareNumerator: 3,
                  shareDenominator: 7,
                  description: 'MIG 3g.20gb on an A100, 3/7 of a GPU',
                  uuid: 'MIG-5f3c2a8e-0b7d-5e1a-9c3b-alice0000001',
                  smUtilPercent: sm,
                  utilizationSource: 'simulated',
                  stale: false,
                  class: 'mig A100-SXM4-40GB 3g.20gb',
                  memoryUsedBytes: 3328599654,
                  memoryTotalBytes: 21474836480
                }
              ]
            }
          ],
          history: [
            ...pastHour(now, 35),
            ...history.map(h => ({
              allocatedGPUs: 0.428571,
              usedGPUs: 0,
              memoryUsedBytes: 3328599654,
              ...h
            }))
          ],
          gpuHours: {
            today: { allocated: 2.57, used: 0.84, usedUnknown: 0 },
            '7d': { allocated: 14.6, used: 5.12, usedUnknown: 0 },
            '30d': { allocated: 48.2, used: 17.9, usedUnknown: 0 }
          },
          budget: null,
          idleCull: null
        };
      }
    },
    [BOB_TOKEN]: {
      name: 'bob',
      podUID: 'fixture-pod-bob',
      me: (util, _history, now) => ({
        user: 'bob',
        sampledAt: new Date(now.getTime() - 1000).toISOString(),
        intervalSeconds: 5,
        simulated: true,
        stale: false,
        groups: ['students'],
        share: {
          allocatedGPUs: 0.25,
          usedGPUs: 0.05,
          memoryUsedBytes: 0,
          memoryTotalBytes: 16106127360
        },
        servers: [
          {
            name: '',
            pod: 'jupyter-bob',
            node: 'gpu-t4-0',
            ready: true,
            stale: false,
            simulated: true,
            namespace: 'jhub',
            allocatedGPUs: 0.25,
            usedGPUs: 0.05,
            gpus: [
              {
                kind: 'shared',
                resource: 'nvidia.com/gpu.shared',
                product: 'Tesla T4',
                share: 0.25,
                shareNumerator: 1,
                shareDenominator: 4,
                description: '1 of 4 time-sliced shares of a T4',
                uuid: 'GPU-bob-t4',
                smUtilPercent: util ?? 20,
                utilizationSource: 'simulated',
                stale: false,
                class: 'shared Tesla-T4',
                memoryUsedBytes: 536870912,
                memoryTotalBytes: 16106127360
              }
            ]
          }
        ],
        history: [],
        gpuHours: {
          today: { allocated: 0.5, used: 0.1 },
          '7d': { allocated: 3, used: 0.4 }
        },
        budget: null,
        idleCull: null
      })
    }
  };
}

/**
 * A place in gpu-quota's waitlist as the service lists it: `position` 0 is the
 * user's turn (an H100 held for `heldMinutes`), or, with `startedMinutesAgo`,
 * a server that started from the queue that long ago; n ≥ 1 the n-th of
 * `waiting`.
 */
export function h100Place(
  user: string,
  server: string,
  options: {
    position: number;
    waiting: number;
    now?: Date;
    estimateMinutes?: number;
    heldMinutes?: number;
    startedMinutesAgo?: number;
    autoStart?: boolean;
    startRequested?: boolean;
  }
): Json {
  const now = options.now ?? new Date();
  const at = (min: number): string =>
    new Date(now.getTime() + min * 60_000).toISOString();
  const hhmm = (min: number): string => at(min).slice(11, 16);
  const p: Json = {
    user,
    server,
    class: 'gpu NVIDIA-H100-80GB-HBM3',
    kind: 'gpu',
    description: 'H100',
    position: options.position,
    waiting: options.waiting,
    joinedAt: at(-20),
    autoStart: options.autoStart ?? false,
    startRequested: options.startRequested ?? false,
    fairShare: 0.55
  };
  if (options.startedMinutesAgo !== undefined) {
    p.state = 'started';
    p.startedAt = at(-options.startedMinutesAgo);
    const srv = server ? `Your server "${server}"` : 'Your server';
    p.message = `${srv} was started for you at ${hhmm(-options.startedMinutesAgo)} UTC with a H100 from the waitlist.`;
  } else if (options.position === 0) {
    p.state = 'held';
    p.heldUntil = at(options.heldMinutes ?? 10);
    p.message = `Your turn: a H100 is held for you until ${hhmm(options.heldMinutes ?? 10)}.`;
  } else {
    p.state = 'waiting';
    p.message = `You are number ${options.position} of ${options.waiting} waiting for a H100.`;
    if (options.estimateMinutes !== undefined) {
      p.estimate = at(options.estimateMinutes);
      p.message += ` Estimated: around ${hhmm(options.estimateMinutes)}.`;
    }
    p.message += ' When your turn comes, one is held for you for a while.';
  }
  return p;
}
