import { clockText } from '../format';
import type { MeResponse } from '../api';

export const NOW = new Date('2026-11-22T10:00:10Z');

/**
 * The waitlist's estimate of a time 40 min after NOW in words: the weekday
 * only in the few zones where midnight falls in between (Pacific/Chatham).
 */
export function aroundToday(iso: string): string {
  const t = new Date(iso);
  const day =
    t.toDateString() === NOW.toDateString()
      ? ''
      : `${t.toLocaleDateString(undefined, { weekday: 'short' })} `;
  return `around ${day}${clockText(iso)}`;
}

/** alice on a MIG 3g.20gb slice of an A100, simulated backend (the contract's example). */
export function aliceMe(overrides: Partial<MeResponse> = {}): MeResponse {
  return {
    user: 'alice',
    sampledAt: '2026-11-22T10:00:05Z',
    intervalSeconds: 5,
    simulated: true,
    stale: false,
    share: {
      allocatedGPUs: 0.428571,
      usedGPUs: 0.21,
      memoryUsedBytes: 1073741824,
      memoryTotalBytes: 21474836480
    },
    servers: [
      {
        name: '',
        pod: 'jupyter-alice',
        node: 'gpu-a100-0',
        ready: true,
        allocatedGPUs: 0.428571,
        usedGPUs: 0.21,
        stale: false,
        simulated: true,
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
            uuid: 'MIG-1',
            smUtilPercent: 49,
            utilizationSource: 'simulated',
            memoryUsedBytes: 1073741824,
            memoryTotalBytes: 21474836480,
            stale: false
          }
        ]
      }
    ],
    history: [
      {
        t: '2026-11-22T09:10:00Z',
        allocatedGPUs: 0.43,
        usedGPUs: 0.1,
        smUtilPercent: 10,
        memoryUsedBytes: 0
      },
      {
        t: '2026-11-22T09:30:00Z',
        allocatedGPUs: 0.43,
        usedGPUs: 0.3,
        smUtilPercent: 70,
        memoryUsedBytes: 0
      },
      {
        t: '2026-11-22T10:00:00Z',
        allocatedGPUs: 0.43,
        usedGPUs: 0.2,
        smUtilPercent: 49,
        memoryUsedBytes: 0
      }
    ],
    gpuHours: {
      today: { allocated: 0.5, used: 0.1 },
      '7d': { allocated: 12.25, used: 3.5 },
      '30d': { allocated: 40, used: 9 }
    },
    gpuHoursStatus: 'ok',
    notices: [],
    budget: null,
    idleCull: null,
    ...overrides
  };
}

/**
 * bob, a student on a MIG 1g.5gb slice, has used his daily budget: the usage
 * API's `me` with gpu-quota's quota object (contract 2) and gpu-quota's notice
 * from his pod (contract 6). Raw JSON, read through parseMe as the panel does.
 */
export function bobOverBudgetJson(): Record<string, unknown> {
  const me = JSON.parse(JSON.stringify(aliceMe())) as Record<string, unknown>;
  return {
    ...me,
    user: 'bob',
    notices: [
      {
        service: 'gpu-quota',
        kind: 'budget',
        reason: 'budget_exhausted',
        message:
          'You are over your 24-hour GPU budget (2 of 2 GPU-hours used): your default GPU server stops at 10:10 UTC unless you stop it first.',
        deadline: '2026-11-22T10:10:00Z',
        snoozable: false,
        createdAt: '2026-11-22T10:00:00Z',
        server: ''
      }
    ],
    budget: {
      user: 'bob',
      exempt: false,
      concurrent: {
        maxGPUs: 0.4286,
        heldGPUs: 0.1429,
        maxServers: 1,
        servers: 1
      },
      budgets: [
        {
          window: '24h',
          windowSeconds: 86400,
          gpuHours: 2,
          usedGPUHours: 2,
          remainingGPUHours: 0,
          status: 'ok'
        },
        {
          window: '7d',
          windowSeconds: 604800,
          gpuHours: 6,
          usedGPUHours: null,
          remainingGPUHours: null,
          status: 'unavailable'
        }
      ],
      notice: null
    }
  };
}

/**
 * alice's document as the issue-9 usage API writes it while the GPU agent on
 * her node has stopped sampling: stale flags with their reasons, utilization
 * null, and memory not measured (0 in the JSON, which is not a measurement).
 * Raw JSON on purpose: the tests read it through parseMe as the panel does.
 */
export function staleAliceJson(): Record<string, unknown> {
  const reason =
    'the GPU agent on node gpu-a100-0 has not sampled since 09:59:23 UTC (47 s)';
  const me = JSON.parse(JSON.stringify(aliceMe())) as Record<string, unknown>;
  const server = (me.servers as Record<string, unknown>[])[0];
  const unit = (server.gpus as Record<string, unknown>[])[0];
  Object.assign(unit, {
    stale: true,
    staleReason: reason,
    smUtilPercent: null,
    utilizationSource: 'none',
    utilizationUnknownReason: reason,
    memoryUsedBytes: 0
  });
  Object.assign(server, { stale: true, staleReason: reason, usedGPUs: null });
  Object.assign(me, {
    stale: true,
    staleReason: reason,
    simulated: false,
    share: { ...(me.share as object), usedGPUs: null, memoryUsedBytes: 0 },
    gpuHoursStatus: 'ok'
  });
  server.simulated = false;
  return me;
}

/** alice while the ledger (database) is unreachable: live share, GPU-hours null. */
export function ledgerDownAliceJson(): Record<string, unknown> {
  const me = JSON.parse(JSON.stringify(aliceMe())) as Record<string, unknown>;
  return {
    ...me,
    gpuHoursStatus: 'unavailable',
    gpuHoursReason: 'the usage database is unreachable; retrying',
    gpuHours: { today: null, '7d': null, '30d': null }
  };
}

/**
 * bob alone on a 4-way time-sliced T4, keeping it 100 % busy: he holds 0.25
 * GPU and uses 1.0 (issue 9 contract 2), so used exceeds allocated.
 */
export function bobAloneOnT4Json(): Record<string, unknown> {
  return {
    user: 'bob',
    sampledAt: '2026-11-22T10:00:05Z',
    intervalSeconds: 5,
    simulated: false,
    stale: false,
    share: {
      allocatedGPUs: 0.25,
      usedGPUs: 1,
      memoryUsedBytes: 536870912,
      memoryTotalBytes: 16106127360
    },
    servers: [
      {
        name: '',
        pod: 'jupyter-bob',
        node: 'gpu-t4-0',
        ready: true,
        allocatedGPUs: 0.25,
        usedGPUs: 1,
        stale: false,
        simulated: false,
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
            smUtilPercent: 100,
            utilizationSource: 'nvml',
            memoryUsedBytes: 536870912,
            memoryTotalBytes: 16106127360,
            stale: false
          }
        ]
      }
    ],
    history: [],
    gpuHoursStatus: 'ok',
    gpuHours: {
      today: { allocated: 0.5, used: 2, usedUnknown: 0 },
      '7d': { allocated: 0.5, used: 2, usedUnknown: 0 },
      '30d': { allocated: 0.5, used: 2, usedUnknown: 0 }
    },
    budget: null,
    idleCull: null
  };
}

/**
 * alice's GPU has been idle: the usage API's `me` with gpu-culler's notice on
 * her default server (contract C2), snoozed once of two. Raw JSON.
 */
export function aliceIdleJson(
  notice: Record<string, unknown> = {}
): Record<string, unknown> {
  const me = JSON.parse(JSON.stringify(aliceMe())) as Record<string, unknown>;
  return {
    ...me,
    notices: [
      {
        service: 'gpu-culler',
        kind: 'idle',
        reason: 'idle',
        message:
          'Your GPU has been idle for 52 min; this server stops at 10:10 UTC unless you use it or snooze.',
        deadline: '2026-11-22T10:10:00Z',
        snoozable: true,
        createdAt: '2026-11-22T09:58:00Z',
        server: '',
        stops: true,
        stopsSince: '2026-11-22T09:58:00Z',
        snoozes: 1,
        maxSnoozes: 2,
        ...notice
      }
    ]
  };
}

/** gpu-culler's `me` for alice after it stopped her server (contract C3). */
export const aliceStoppedJson = {
  user: 'alice',
  lastStop: {
    server: '',
    at: '2026-11-22T09:10:00Z',
    reason: 'idle',
    message: 'Stopped at 09:10 UTC: GPU idle for 1 h 7 min.'
  },
  notices: []
};

/**
 * gpu-quota's places for bob (services/gpu-quota, "When no GPU is free"):
 * his default server 2nd of 3 waiting for an H100 (estimate 10:40 UTC, no
 * auto-start), and his named server "train" whose turn it is (an H100 held
 * until 10:10 UTC, started for him), and his named server "gpu" that started
 * from the queue at 09:58 UTC. Raw JSON as the service sends it.
 */
export function bobWaitingPlaceJson(
  overrides: Record<string, unknown> = {}
): Record<string, unknown> {
  return {
    user: 'bob',
    server: '',
    class: 'gpu NVIDIA-H100-80GB-HBM3',
    kind: 'gpu',
    description: 'H100',
    state: 'waiting',
    position: 2,
    waiting: 3,
    joinedAt: '2026-11-22T09:30:00Z',
    estimate: '2026-11-22T10:40:00Z',
    autoStart: false,
    startRequested: false,
    fairShare: 0.552,
    message:
      'You are number 2 of 3 waiting for a H100. Estimated: around 10:40. When your turn comes, one is held for you for a while.',
    ...overrides
  };
}

export function bobTurnPlaceJson(
  overrides: Record<string, unknown> = {}
): Record<string, unknown> {
  return {
    user: 'bob',
    server: 'train',
    class: 'gpu NVIDIA-H100-80GB-HBM3',
    kind: 'gpu',
    description: 'H100',
    state: 'held',
    position: 0,
    waiting: 2,
    joinedAt: '2026-11-22T09:20:00Z',
    heldUntil: '2026-11-22T10:10:00Z',
    autoStart: true,
    startRequested: true,
    fairShare: 0.552,
    message:
      'Your turn: a H100 is held for you until 10:10. Your server is being started for you.',
    ...overrides
  };
}

export function bobStartedPlaceJson(
  overrides: Record<string, unknown> = {}
): Record<string, unknown> {
  return {
    user: 'bob',
    server: 'gpu',
    class: 'gpu NVIDIA-H100-80GB-HBM3',
    kind: 'gpu',
    description: 'H100',
    state: 'started',
    position: 0,
    waiting: 0,
    joinedAt: '2026-11-22T09:10:00Z',
    heldUntil: '2026-11-22T10:05:00Z',
    startedAt: '2026-11-22T09:58:00Z',
    autoStart: true,
    startRequested: true,
    fairShare: 1,
    message:
      'Your server "gpu" was started for you at 09:58 UTC with a H100 from the waitlist.',
    ...overrides
  };
}
