import { parseMe } from '../api';
import type {
  Budget,
  BudgetWindow,
  ConcurrentLimit,
  GpuHolding,
  MeResponse,
  UserNotice
} from '../api';
import {
  clockText,
  article,
  asSentence,
  budgetLines,
  describeBudgetWindow,
  describeConcurrent,
  describeHolding,
  describeIdleCull,
  describeServer,
  fallbackDescription,
  formatBytes,
  formatCountdown,
  formatDuration,
  formatGpuAmount,
  formatGpuHours,
  formatMemory,
  formatPercent,
  gpuHoursUnavailableText,
  holdsGpu,
  isSimulated,
  isStale,
  memoryText,
  noticeCountdown,
  noticeTitle,
  provenanceOf,
  recentUtilization,
  shortProduct,
  sparklinePath,
  sparklineSummary,
  staleNotice,
  statusBarText,
  unknownUsageNote,
  usedAboveAllocatedNote,
  utilizationMeaning,
  utilizationNote,
  utilizationView
} from '../format';
import {
  NOW,
  aliceMe,
  bobAloneOnT4Json,
  ledgerDownAliceJson,
  staleAliceJson
} from './fixtures';

function gpu(over: Partial<GpuHolding>): GpuHolding {
  return {
    kind: 'gpu',
    share: 1,
    smUtilPercent: null,
    utilizationSource: 'none',
    memoryUsedBytes: 0,
    memoryTotalBytes: 0,
    ...over
  };
}

describe('shortProduct', () => {
  const cases: Record<string, string> = {
    'NVIDIA A100-SXM4-40GB': 'A100',
    'NVIDIA A100 80GB PCIe': 'A100',
    'Tesla T4': 'T4',
    'Tesla-T4': 'T4', // GFD label form, as the usage API reports it from node labels
    'NVIDIA-A100-SXM4-40GB': 'A100',
    'NVIDIA H100 80GB HBM3': 'H100',
    'NVIDIA L40S': 'L40S',
    'NVIDIA A10G': 'A10G',
    'Tesla V100-SXM2-16GB': 'V100',
    'NVIDIA GeForce RTX 4090': 'RTX 4090',
    'NVIDIA RTX A6000': 'RTX A6000',
    '': 'GPU'
  };
  it.each(Object.entries(cases))('%s → %s', (product, want) => {
    expect(shortProduct(product)).toEqual(want);
  });
});

describe('article', () => {
  const cases: Record<string, string> = {
    A100: 'an',
    H100: 'an',
    L4: 'an',
    T4: 'a',
    V100: 'a',
    'RTX 4090': 'an',
    GPU: 'a',
    'MPS share of an A100': 'an',
    'MIG 3g.20gb slice of an A100': 'a',
    accelerator: 'an'
  };
  it.each(Object.entries(cases))('%s', (word, want) => {
    expect(article(word)).toEqual(want);
  });
});

describe('fallbackDescription (no description from the API)', () => {
  const cases: Record<string, { g: GpuHolding; want: string }> = {
    'MIG slice of an A100': {
      g: gpu({
        kind: 'mig',
        product: 'NVIDIA A100-SXM4-40GB',
        profile: '3g.20gb',
        share: 3 / 7,
        shareNumerator: 3,
        shareDenominator: 7
      }),
      want: 'MIG 3g.20gb on an A100, 3/7 of a GPU'
    },
    'MIG profile from the resource name': {
      g: gpu({
        kind: 'mig',
        product: 'NVIDIA A100-SXM4-40GB',
        resource: 'nvidia.com/mig-1g.5gb',
        share: 1 / 7,
        shareNumerator: 1,
        shareDenominator: 7
      }),
      want: 'MIG 1g.5gb on an A100, 1/7 of a GPU'
    },
    'MIG without a fraction': {
      g: gpu({
        kind: 'mig',
        product: 'NVIDIA H100 80GB HBM3',
        profile: '2g.20gb',
        share: 0.25
      }),
      want: 'MIG 2g.20gb on an H100, 0.25 of a GPU'
    },
    'time-sliced T4': {
      g: gpu({
        kind: 'shared',
        product: 'Tesla T4',
        share: 0.25,
        shareNumerator: 1,
        shareDenominator: 4
      }),
      want: '1 of 4 time-sliced shares of a T4'
    },
    'time-sliced, denominator from the share': {
      g: gpu({ kind: 'shared', product: 'NVIDIA L4', share: 0.5 }),
      want: '1 of 2 time-sliced shares of an L4'
    },
    'time-sliced with unknown share': {
      g: gpu({ kind: 'shared', product: 'Tesla T4', share: 0 }),
      want: 'a time-sliced share of a T4'
    },
    'MPS share of a T4': {
      g: gpu({
        kind: 'mps',
        product: 'Tesla T4',
        share: 0.25,
        shareNumerator: 1,
        shareDenominator: 4
      }),
      want: '1 of 4 MPS shares of a T4'
    },
    'time-sliced MIG slice': {
      g: gpu({
        kind: 'mig-shared',
        product: 'NVIDIA A100-SXM4-40GB',
        resource: 'nvidia.com/mig-1g.5gb.shared',
        share: 1 / 14,
        shareNumerator: 1,
        shareDenominator: 14
      }),
      want: 'a time-sliced share of MIG 1g.5gb on an A100, 1/14 of a GPU'
    },
    'whole card': {
      g: gpu({ kind: 'gpu', product: 'NVIDIA H100 80GB HBM3' }),
      want: 'a whole H100'
    },
    'whole card, unknown product': {
      g: gpu({ kind: 'gpu' }),
      want: 'a whole GPU'
    }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    expect(fallbackDescription(tc.g)).toEqual(tc.want);
    expect(describeHolding(tc.g)).toEqual(tc.want);
  });

  it('prefers the API description', () => {
    expect(
      describeHolding(gpu({ kind: 'gpu', description: 'one of the big ones' }))
    ).toEqual('one of the big ones');
  });
});

describe('describeServer', () => {
  it('says no GPU for a CPU-only server', () => {
    expect(
      describeServer({
        name: 'cpu',
        ready: true,
        allocatedGPUs: 0,
        usedGPUs: 0,
        gpus: []
      })
    ).toEqual('no GPU');
  });
  it('joins several devices', () => {
    expect(
      describeServer({
        name: '',
        ready: true,
        allocatedGPUs: 2,
        usedGPUs: 0,
        gpus: [gpu({ product: 'Tesla T4' }), gpu({ product: 'Tesla T4' })]
      })
    ).toEqual('a whole T4; a whole T4');
  });
});

describe('numbers', () => {
  const bytes: Record<string, [number, string]> = {
    zero: [0, '0 B'],
    kib: [1536, '1.5 KiB'],
    gib: [1073741824, '1 GiB'],
    'mig memory': [21474836480, '20 GiB'],
    'a100 40gb': [42949672960, '40 GiB'],
    fractional: [1288490189, '1.2 GiB'],
    negative: [-1, '–']
  };
  it.each(Object.entries(bytes))('formatBytes %s', (_, [v, want]) => {
    expect(formatBytes(v)).toEqual(want);
  });

  const pct: Record<string, [number | null, string]> = {
    null: [null, '–'],
    round: [49.4, '49 %'],
    capped: [130, '100 %'],
    floor: [-3, '0 %']
  };
  it.each(Object.entries(pct))('formatPercent %s', (_, [v, want]) => {
    expect(formatPercent(v)).toEqual(want);
  });

  const hours: Record<string, [number | undefined, string]> = {
    missing: [undefined, '–'],
    zero: [0, '0'],
    'just started': [0.000357, '< 0.01'],
    'rounds up to 0.01': [0.0051, '0.01'],
    small: [0.04321, '0.04'],
    half: [0.5, '0.5'],
    tens: [12.25, '12.3'],
    hundreds: [132.4, '132']
  };
  it.each(Object.entries(hours))('formatGpuHours %s', (_, [v, want]) => {
    expect(formatGpuHours(v)).toEqual(want);
  });

  const durations: Record<string, [number, string]> = {
    seconds: [45, '45 s'],
    minutes: [720, '12 min'],
    hours: [3900, '1 h 05 min'],
    days: [3 * 86400 + 7200, '3 d 2 h'],
    negative: [-5, '0 s']
  };
  it.each(Object.entries(durations))('formatDuration %s', (_, [v, want]) => {
    expect(formatDuration(v)).toEqual(want);
  });

  it('formatMemory', () => {
    expect(formatMemory(1073741824, 21474836480)).toEqual('1 GiB of 20 GiB');
    expect(formatMemory(0, 0)).toEqual('–');
  });
});

describe('provenance', () => {
  it('utilizationNote', () => {
    expect(
      utilizationNote(gpu({ kind: 'mig', utilizationSource: 'none' }))
    ).toEqual('no utilization data (MIG)');
    expect(
      utilizationNote(gpu({ kind: 'gpu', utilizationSource: 'none' }))
    ).toEqual('no utilization data');
    expect(utilizationNote(gpu({ utilizationSource: 'simulated' }))).toEqual(
      'simulated'
    );
    expect(utilizationNote(gpu({ utilizationSource: 'nvml' }))).toEqual(
      'measured (NVML)'
    );
    expect(utilizationNote(gpu({ utilizationSource: 'dcgm' }))).toEqual(
      'measured (DCGM)'
    );
  });

  it('provenanceOf', () => {
    expect(provenanceOf('nvml')).toEqual('measured');
    expect(provenanceOf('nvml', true)).toEqual('simulated');
    expect(provenanceOf('simulated')).toEqual('simulated');
    expect(provenanceOf('none')).toEqual('none');
  });

  it('isSimulated from the document flag or any device', () => {
    expect(isSimulated(aliceMe())).toBe(true);
    const measured = aliceMe({ simulated: false });
    measured.servers[0].gpus[0].utilizationSource = 'nvml';
    expect(isSimulated(measured)).toBe(false);
    measured.servers[0].gpus[0].utilizationSource = 'simulated';
    expect(isSimulated(measured)).toBe(true);
  });
});

describe('staleness', () => {
  const cases: Record<
    string,
    { sampledAt: string; interval: number; want: boolean }
  > = {
    fresh: { sampledAt: '2026-11-22T10:00:05Z', interval: 5, want: false },
    'under the 30 s floor': {
      sampledAt: '2026-11-22T09:59:45Z',
      interval: 5,
      want: false
    },
    'older than 30 s': {
      sampledAt: '2026-11-22T09:59:30Z',
      interval: 5,
      want: true
    },
    'slow interval allows 3 intervals': {
      sampledAt: '2026-11-22T09:59:00Z',
      interval: 30,
      want: false
    },
    'unknown time is not stale': { sampledAt: '', interval: 5, want: false }
  };
  it("trusts the API's stale flags", () => {
    expect(isStale(aliceMe({ stale: true }), NOW)).toBe(true);
    const me = aliceMe();
    me.servers[0].stale = true;
    expect(isStale(me, NOW)).toBe(true);
  });
  it.each(Object.entries(cases))('%s', (_, tc) => {
    expect(
      isStale(
        aliceMe({ sampledAt: tc.sampledAt, intervalSeconds: tc.interval }),
        NOW
      )
    ).toBe(tc.want);
  });
});

describe('budget and idle cull', () => {
  it('null is not configured, never a number', () => {
    expect(budgetLines(null)).toEqual([
      { field: 'budget', text: 'not configured', muted: true }
    ]);
    expect(describeIdleCull(null, NOW)).toEqual('not configured');
  });
  const win = (over: Partial<BudgetWindow>): BudgetWindow => ({
    window: '24h',
    windowSeconds: 86400,
    gpuHours: 2,
    usedGPUHours: 0.5,
    remainingGPUHours: 1.5,
    status: 'ok',
    ...over
  });
  const windows: Record<string, [BudgetWindow, string]> = {
    'used and left': [
      win({}),
      '0.5 of 2 GPU-hours used in the last 24 h · 1.5 left'
    ],
    spent: [
      win({ usedGPUHours: 2.25, remainingGPUHours: 0 }),
      '2.25 of 2 GPU-hours used in the last 24 h · none left'
    ],
    'remaining computed': [
      win({
        window: '7d',
        windowSeconds: 604800,
        gpuHours: 6,
        usedGPUHours: 1,
        remainingGPUHours: null
      }),
      '1 of 6 GPU-hours used in the last 7 days · 5 left'
    ],
    'usage unreadable': [
      win({
        usedGPUHours: null,
        remainingGPUHours: null,
        status: 'unavailable'
      }),
      'unknown of 2 GPU-hours used in the last 24 h · unknown left'
    ],
    unlimited: [
      win({
        window: '30d',
        windowSeconds: null,
        gpuHours: null,
        usedGPUHours: 3
      }),
      '3 GPU-hours used in the last 30 days · no limit'
    ],
    'one hour, one GPU-hour': [
      win({
        window: '1h',
        windowSeconds: 3600,
        gpuHours: 1,
        usedGPUHours: 0.25,
        remainingGPUHours: 0.75
      }),
      '0.25 of 1 GPU-hour used in the last hour · 0.75 left'
    ],
    'a window in days and hours': [
      win({ window: '1d12h', windowSeconds: null }),
      '0.5 of 2 GPU-hours used in the last 36 h · 1.5 left'
    ],
    'a tiny budget keeps its digits (the e2e panel read "< 0.01 of < 0.01")': [
      win({ gpuHours: 0.004, usedGPUHours: 0.00452, remainingGPUHours: 0 }),
      '0.0045 of 0.004 GPU-hours used in the last 24 h · none left'
    ],
    'a tiny remainder': [
      win({ gpuHours: 0.1, usedGPUHours: 0.0985, remainingGPUHours: 0.0015 }),
      '0.099 of 0.1 GPU-hours used in the last 24 h · 0.0015 left'
    ],
    'exhausted, as gpu-quota says it': [
      win({
        gpuHours: 2,
        usedGPUHours: 2,
        remainingGPUHours: 0,
        status: 'exhausted'
      }),
      '2 of 2 GPU-hours used in the last 24 h · none left'
    ],
    'less than a thousandth': [
      win({ gpuHours: 0.1, usedGPUHours: 0.0004, remainingGPUHours: 0.0996 }),
      '< 0.001 of 0.1 GPU-hours used in the last 24 h · 0.1 left'
    ]
  };
  it.each(Object.entries(windows))('budget window: %s', (_, [w, want]) => {
    expect(describeBudgetWindow(w)).toEqual(want);
  });
  const concurrent: Record<string, [ConcurrentLimit, string]> = {
    'MIG slices': [
      { maxGPUs: 0.4286, heldGPUs: 0.1429, maxServers: 1, servers: 1 },
      'concurrent: 1/7 of 3/7 GPU · 1 of 1 GPU server'
    ],
    'whole GPUs': [
      { maxGPUs: 2, heldGPUs: 1, maxServers: 3, servers: 1 },
      'concurrent: 1 of 2 GPUs · 1 of 3 GPU servers'
    ],
    'no limit': [
      { maxGPUs: null, heldGPUs: 1.5, maxServers: null, servers: 2 },
      'concurrent: 1 1/2 GPUs, no limit'
    ],
    'held unknown': [
      { maxGPUs: 0.25, heldGPUs: null, maxServers: null, servers: null },
      'concurrent: unknown of 1/4 GPU'
    ]
  };
  it.each(Object.entries(concurrent))('concurrent: %s', (_, [c, want]) => {
    expect(describeConcurrent(c)).toEqual(want);
  });
  it('budget lines: windows then the concurrent limit; exempt; unavailable', () => {
    const b: Budget = {
      status: 'ok',
      exempt: false,
      concurrent: {
        maxGPUs: 0.4286,
        heldGPUs: 0.1429,
        maxServers: 1,
        servers: 1
      },
      budgets: [win({})]
    };
    expect(budgetLines(b)).toEqual([
      {
        field: 'budget-24h',
        text: '0.5 of 2 GPU-hours used in the last 24 h · 1.5 left',
        muted: false
      },
      {
        field: 'budget-concurrent',
        text: 'concurrent: 1/7 of 3/7 GPU · 1 of 1 GPU server',
        muted: false
      }
    ]);
    expect(budgetLines({ ...b, exempt: true })[0].text).toEqual(
      'exempt: no GPU limits or budgets apply to you'
    );
    expect(
      budgetLines({ ...b, concurrent: null, budgets: [] })[0].text
    ).toEqual('no GPU limits set for you');
    expect(
      budgetLines({
        status: 'unavailable',
        reason: 'the quota service cannot be reached',
        exempt: false,
        concurrent: null,
        budgets: []
      })
    ).toEqual([
      {
        field: 'budget',
        text: 'unknown: the quota service cannot be reached',
        muted: true
      }
    ]);
  });
  it.each([
    [0.1429, '1/7'],
    [0.4286, '3/7'],
    [0.25, '1/4'],
    [1, '1'],
    [1.5, '1 1/2'],
    [2, '2'],
    [0, '0'],
    [0.123456, '0.12']
  ])('GPU amount %p is %p', (x, want) => {
    expect(formatGpuAmount(x)).toEqual(want);
  });
  it('notices: titles by kind, countdowns to the deadline', () => {
    const n: UserNotice = {
      service: 'gpu-quota',
      kind: 'budget',
      reason: 'budget_exhausted',
      message: 'm',
      deadline: '2026-11-22T10:09:15Z',
      snoozable: false,
      server: ''
    };
    expect(noticeTitle(n)).toEqual('GPU budget used up');
    expect(noticeTitle({ ...n, kind: 'limit' })).toEqual('Over your GPU limit');
    expect(noticeTitle({ ...n, kind: 'new', service: 'gpu-x' })).toEqual(
      'Notice from gpu-x'
    );
    expect(noticeCountdown(n, NOW)).toEqual('9 min 05 s left');
    expect(noticeCountdown(n, new Date('2026-11-22T10:09:00.5Z'))).toEqual(
      '15 s left'
    );
    expect(noticeCountdown(n, new Date('2026-11-22T10:09:15Z'))).toEqual(
      'due now'
    );
    expect(noticeCountdown({ ...n, deadline: undefined }, NOW)).toBeNull();
    expect(formatCountdown(2 * 3600 + 5 * 60)).toEqual('2 h 05 min');
  });
  const culls: Record<string, [object, string]> = {
    countdown: [
      { cullAt: '2026-11-22T10:12:10Z' },
      'stops in 12 min if still idle'
    ],
    past: [{ cullAt: '2026-11-22T09:00:00Z' }, 'stopping now (idle)'],
    'from idle and timeout': [
      { idleSeconds: 600, timeoutSeconds: 3600 },
      'stops in 50 min if still idle'
    ],
    'timeout only': [
      { timeoutSeconds: 3600 },
      'stops after 1 h 00 min of GPU idleness'
    ]
  };
  it.each(Object.entries(culls))('idle cull %s', (_, [c, want]) => {
    expect(describeIdleCull(c, NOW)).toEqual(want);
  });
});

describe('sparkline', () => {
  it('keeps the last hour with known values, in time order', () => {
    const me = aliceMe();
    me.history.unshift({
      t: '2026-11-22T08:00:00Z',
      allocatedGPUs: 0,
      usedGPUs: 0,
      smUtilPercent: 5,
      memoryUsedBytes: 0
    });
    me.history.push({
      t: '2026-11-22T09:50:00Z',
      allocatedGPUs: 0,
      usedGPUs: 0,
      smUtilPercent: null,
      memoryUsedBytes: 0
    });
    expect(recentUtilization(me.history, NOW).map(p => p.v)).toEqual([
      10, 70, 49
    ]);
  });

  it('draws time on x and 0–100 % on y, breaking long gaps', () => {
    const t0 = NOW.getTime() - 3600 * 1000;
    const points = [
      { t: t0, v: 0 },
      { t: t0 + 60_000, v: 100 },
      { t: t0 + 1800_000, v: 50 },
      { t: NOW.getTime(), v: 50 }
    ];
    expect(sparklinePath(points, NOW, 120, 40)).toEqual(
      'M0,40 L2,0 M60,20 M120,20'
    );
  });

  it('summarises for screen readers', () => {
    expect(sparklineSummary([{ v: 10 }, { v: 70 }, { v: 49 }])).toEqual(
      'SM utilization over the last hour: latest 49 %, average 43 %, lowest 10 %, highest 70 %'
    );
    expect(sparklineSummary([])).toEqual(
      'SM utilization over the last hour: no data yet'
    );
  });
});

describe('unknownUsageNote', () => {
  it('explains used hours that exclude unknown utilization', () => {
    expect(unknownUsageNote({ today: { allocated: 1, used: 0.5 } })).toBeNull();
    expect(
      unknownUsageNote({
        '7d': { allocated: 0.01, used: 0, usedUnknown: 0.004 }
      })
    ).toBeNull();
    expect(
      unknownUsageNote({
        today: { allocated: 1, used: 0.5 },
        '7d': { allocated: 9, used: 2, usedUnknown: 4.25 }
      })
    ).toEqual(
      'Used counts only time with known utilization; 4.25 allocated GPU-hours (7 days) had none.'
    );
  });
});

describe('statusBarText', () => {
  it('shows utilization, none, or unknown', () => {
    expect(statusBarText(aliceMe())).toEqual('GPU 49 %');
    expect(statusBarText(aliceMe({ servers: [] }))).toEqual('GPU none');
    expect(statusBarText(null)).toEqual('GPU –');
    const mig = aliceMe();
    mig.servers[0].gpus[0].smUtilPercent = null;
    expect(statusBarText(mig)).toEqual('GPU 0.43');
    expect(holdsGpu(mig)).toBe(true);
  });
});

describe('utilizationView (issue 9)', () => {
  const t4 = {
    product: 'Tesla T4',
    share: 0.25,
    shareNumerator: 1,
    shareDenominator: 4
  };
  const cases: Record<
    string,
    { g: GpuHolding; stale?: boolean; want: ReturnType<typeof utilizationView> }
  > = {
    'a whole GPU': {
      g: gpu({ smUtilPercent: 49, utilizationSource: 'nvml' }),
      want: {
        state: 'value',
        percent: 49,
        text: '49 %',
        valueText: '49 %',
        note: 'measured (NVML)',
        meaning: null
      }
    },
    'alone on a 4-way T4 at 100 %: of the T4, above the share': {
      g: gpu({
        kind: 'shared',
        ...t4,
        smUtilPercent: 100,
        utilizationSource: 'nvml'
      }),
      want: {
        state: 'value',
        percent: 100,
        text: '100 %',
        valueText: '100 % of the T4',
        note: 'measured (NVML)',
        meaning: 'You keep 100 % of the T4 busy while holding 1 of 4 shares.'
      }
    },
    'an MPS share at 25 %': {
      g: gpu({
        kind: 'mps',
        ...t4,
        smUtilPercent: 25,
        utilizationSource: 'nvml'
      }),
      want: {
        state: 'value',
        percent: 25,
        text: '25 %',
        valueText: '25 % of the T4',
        note: 'measured (NVML)',
        meaning: 'You keep 25 % of the T4 busy while holding 1 of 4 MPS shares.'
      }
    },
    'a time-sliced MIG slice': {
      g: gpu({
        kind: 'mig-shared',
        product: 'NVIDIA A100-SXM4-40GB',
        profile: '1g.5gb',
        share: 1 / 14,
        smUtilPercent: 60,
        utilizationSource: 'dcgm'
      }),
      want: {
        state: 'value',
        percent: 60,
        text: '60 %',
        valueText: '60 % of the MIG 1g.5gb slice',
        note: 'measured (DCGM)',
        meaning: 'The MIG 1g.5gb slice you share is 60 % busy.'
      }
    },
    'stale: no number even when one was sent': {
      g: gpu({ smUtilPercent: 97, utilizationSource: 'nvml', stale: true }),
      stale: true,
      want: { state: 'stale', text: 'no fresh reading' }
    },
    'unknown with the API’s reason': {
      g: gpu({
        kind: 'mig',
        utilizationUnknownReason: 'no GPU agent runs on node gpu-t4-3.'
      }),
      want: {
        state: 'unknown',
        text: 'not known',
        reason: 'No GPU agent runs on node gpu-t4-3.'
      }
    },
    'unknown from an older API': {
      g: gpu({ kind: 'gpu' }),
      want: {
        state: 'unknown',
        text: 'not known',
        reason: 'No utilization data for this GPU.'
      }
    }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    expect(utilizationView(tc.g, tc.stale ?? false)).toEqual(tc.want);
  });

  it('has no sentence for what is measured as held', () => {
    expect(utilizationMeaning(gpu({ kind: 'mig' }), '49 %')).toBeNull();
    expect(
      utilizationMeaning(gpu({ kind: 'shared', product: 'NVIDIA L4' }), '10 %')
    ).toBe('You keep 10 % of the L4 busy while holding a time-sliced share.');
  });
});

describe('staleNotice (issue 9)', () => {
  it('is null when everything is fresh', () => {
    expect(staleNotice(aliceMe(), NOW)).toBeNull();
  });

  it('uses the API’s reason, once', () => {
    expect(staleNotice(parseMe(staleAliceJson()), NOW)).toEqual({
      reasons: [
        'the GPU agent on node gpu-a100-0 has not sampled since 09:59:23 UTC (47 s)'
      ],
      until: 'Utilization is not shown until the node agent reports again.'
    });
  });

  it('names each node whose agent is stale, and the service when it is old', () => {
    const me: MeResponse = aliceMe({ sampledAt: '2026-11-22T09:58:10Z' });
    const second = {
      ...me.servers[0],
      name: 'big',
      node: 'gpu-h100-1',
      stale: true,
      staleReason: 'the GPU agent on node gpu-h100-1 answers no sample.'
    };
    me.servers = [{ ...me.servers[0], stale: true }, second];
    expect(staleNotice(me, NOW)).toEqual({
      reasons: [
        'the GPU agent on node gpu-a100-0 has stopped reporting',
        'the GPU agent on node gpu-h100-1 answers no sample',
        'the usage service’s last update is 2 min old'
      ],
      until: 'Utilization is not shown until fresh readings arrive.'
    });
  });

  it('trusts a document-level stale flag alone', () => {
    expect(
      staleNotice(aliceMe({ stale: true, staleReason: 'why not' }), NOW)
    ).toEqual({
      reasons: ['why not'],
      until: 'Utilization is not shown until the node agent reports again.'
    });
  });
});

describe('GPU-hours unavailable and used above allocated (issue 9)', () => {
  it('says why, in the API’s words', () => {
    expect(gpuHoursUnavailableText(parseMe(ledgerDownAliceJson()))).toBe(
      'GPU-hours are unavailable right now: the usage database is unreachable; retrying. Your live share above is current.'
    );
    expect(
      gpuHoursUnavailableText(
        aliceMe({ gpuHoursStatus: 'unavailable', gpuHoursReason: 'db down.' })
      )
    ).toBe(
      'GPU-hours are unavailable right now: db down. Your live share above is current.'
    );
    expect(
      gpuHoursUnavailableText(aliceMe({ gpuHoursStatus: 'unavailable' }))
    ).toBe(
      'GPU-hours are unavailable right now. Your live share above is current.'
    );
    expect(gpuHoursUnavailableText(aliceMe())).toBeNull();
  });

  it('explains used above allocated only when the table shows it', () => {
    expect(usedAboveAllocatedNote(aliceMe().gpuHours)).toBeNull();
    expect(
      usedAboveAllocatedNote(parseMe(bobAloneOnT4Json()).gpuHours)
    ).toContain('Used can exceed allocated on a shared GPU');
    expect(
      usedAboveAllocatedNote({ today: { allocated: 0.5, used: 0.504 } })
    ).toBeNull();
    expect(
      usedAboveAllocatedNote({ today: { allocated: null, used: 3 } })
    ).toBeNull();
  });

  it('shows an unknown figure as a dash, never as 0', () => {
    expect(formatGpuHours(null)).toBe('–');
  });
});

describe('stale wording helpers (issue 9)', () => {
  it('memoryText has no 0 B for an unsampled unit', () => {
    const g = gpu({ memoryUsedBytes: 0, memoryTotalBytes: 21474836480 });
    expect(memoryText(g, true)).toBe('not known (20 GiB total)');
    expect(memoryText(gpu({}), true)).toBe('not known');
    expect(memoryText(g, false)).toBe('0 B of 20 GiB');
  });

  it('statusBarText says stale instead of the last number', () => {
    expect(statusBarText(parseMe(staleAliceJson()))).toBe('GPU stale');
    const json = staleAliceJson();
    const unit = (json.servers as { gpus: Record<string, unknown>[] }[])[0]
      .gpus[0];
    unit.smUtilPercent = 97;
    expect(statusBarText(parseMe(json))).toBe('GPU stale');
  });

  it('the sparkline does not call an old point latest', () => {
    expect(sparklineSummary([{ v: 97 }], true)).toBe(
      'SM utilization over the last hour: no fresh reading now; last known 97 %, average 97 %, lowest 97 %, highest 97 %'
    );
  });

  it('asSentence', () => {
    expect(asSentence('the node has no DCGM exporter')).toBe(
      'The node has no DCGM exporter.'
    );
    expect(asSentence(' done. ')).toBe('Done.');
    expect(asSentence('')).toBe('');
  });
});

describe('clockText', () => {
  it('writes a 24-hour time of day with its zone', () => {
    const got = clockText('2026-11-22T10:40:00Z');
    expect(got).toMatch(/^\d\d:40 \S+/);
    expect(clockText('soon')).toBe('');
  });
});
