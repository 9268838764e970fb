import type { HistoryPoint, MeResponse } from '../api';
import {
  MergeOutcome,
  mergeIncremental,
  normalizeHistory,
  referenceMs,
  sinceUrl
} from '../history';
import { aliceMe } from './fixtures';

/** One history point at 10:MM:SS on the fixtures' day (or a full time). */
function pt(t: string, sm = 50): HistoryPoint {
  const full = t.length <= 8 ? `2026-11-22T${t}Z` : t;
  return {
    t: full,
    allocatedGPUs: 0.43,
    usedGPUs: (0.43 * sm) / 100,
    smUtilPercent: sm,
    memoryUsedBytes: 0
  };
}

/** The times (and SM values) of a history, for short expectations. */
function times(h: HistoryPoint[]): string[] {
  return h.map(p => `${p.t.slice(11, 19)}=${p.smUtilPercent}`);
}

const HELD = [pt('09:59:50', 10), pt('09:59:55', 20), pt('10:00:00', 30)];

function doc(
  history: HistoryPoint[],
  overrides: Partial<MeResponse> = {}
): MeResponse {
  return aliceMe({ sampledAt: '2026-11-22T10:00:10Z', history, ...overrides });
}

describe('mergeIncremental', () => {
  const cases: Record<
    string,
    {
      held?: HistoryPoint[];
      doc: MeResponse;
      want:
        | { kind: 'merged'; times: string[] }
        | { kind: 'refetch'; reason: string };
    }
  > = {
    'appends new points': {
      doc: doc([pt('10:00:05', 40), pt('10:00:10', 50)]),
      want: {
        kind: 'merged',
        times: [
          '09:59:50=10',
          '09:59:55=20',
          '10:00:00=30',
          '10:00:05=40',
          '10:00:10=50'
        ]
      }
    },
    'no new point yet': {
      doc: doc([], { sampledAt: '2026-11-22T10:00:04Z' }),
      want: {
        kind: 'merged',
        times: ['09:59:50=10', '09:59:55=20', '10:00:00=30']
      }
    },
    'de-duplicates by timestamp, the newest answer wins': {
      doc: doc([pt('10:00:00', 33), pt('10:00:05', 40), pt('10:00:05', 41)]),
      want: {
        kind: 'merged',
        times: ['09:59:50=10', '09:59:55=20', '10:00:00=33', '10:00:05=41']
      }
    },
    'a service that ignores since (whole hour again) adds no duplicates': {
      doc: doc([...HELD, pt('10:00:05', 40)]),
      want: {
        kind: 'merged',
        times: ['09:59:50=10', '09:59:55=20', '10:00:00=30', '10:00:05=40']
      }
    },
    'the same instant in another offset is one point': {
      doc: doc([pt('2026-11-22T11:00:00+01:00', 31), pt('10:00:05', 40)]),
      want: {
        kind: 'merged',
        times: ['09:59:50=10', '09:59:55=20', '11:00:00=31', '10:00:05=40']
      }
    },
    'out of order answers are sorted': {
      doc: doc([pt('10:00:10', 50), pt('10:00:05', 40)]),
      want: {
        kind: 'merged',
        times: [
          '09:59:50=10',
          '09:59:55=20',
          '10:00:00=30',
          '10:00:05=40',
          '10:00:10=50'
        ]
      }
    },
    'drops points older than one hour (server clock)': {
      held: [
        pt('08:59:00', 1),
        pt('09:00:10', 2),
        pt('09:00:15', 3),
        pt('10:00:05', 4)
      ],
      doc: doc([pt('10:00:10', 5)]),
      // 09:00:10 is exactly one hour before the newest point: out, as on the service.
      want: {
        kind: 'merged',
        times: ['09:00:15=3', '10:00:05=4', '10:00:10=5']
      }
    },
    'trims on sampledAt while no GPU is held (no new points)': {
      held: [pt('09:10:00', 1), pt('09:50:00', 2)],
      doc: doc([], {
        sampledAt: '2026-11-22T10:20:00Z',
        share: {
          allocatedGPUs: 0,
          usedGPUs: 0,
          memoryUsedBytes: 0,
          memoryTotalBytes: 0
        }
      }),
      want: { kind: 'merged', times: ['09:50:00=2'] }
    },
    'restart: GPUs held but no point for a long time': {
      doc: doc([], { sampledAt: '2026-11-22T10:01:00Z' }),
      want: { kind: 'refetch', reason: 'history lost' }
    },
    'restart: the first new point comes after a gap': {
      doc: doc([pt('10:02:00', 60)], { sampledAt: '2026-11-22T10:02:00Z' }),
      want: { kind: 'refetch', reason: 'gap in history' }
    },
    'backwards: the service is behind the held points': {
      doc: doc([], { sampledAt: '2026-11-22T09:50:00Z' }),
      want: { kind: 'refetch', reason: 'history went backwards' }
    },
    'backwards: every point is older than since': {
      doc: doc([pt('09:40:00'), pt('09:45:00')]),
      want: { kind: 'refetch', reason: 'history went backwards' }
    },
    'another user': {
      doc: doc([pt('10:00:05')], { user: 'bob' }),
      want: { kind: 'refetch', reason: 'user changed' }
    },
    'nothing held': {
      held: [],
      doc: doc([pt('10:00:05')]),
      want: { kind: 'refetch', reason: 'no history held' }
    }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    const got = mergeIncremental(tc.held ?? HELD, 'alice', tc.doc);
    const simple = (o: MergeOutcome) =>
      o.kind === 'merged' ? { kind: o.kind, times: times(o.history) } : o;
    expect(simple(got)).toEqual(tc.want);
  });
});

describe('normalizeHistory', () => {
  const ref = Date.parse('2026-11-22T10:00:10Z');
  const cases: Record<
    string,
    { in: HistoryPoint[]; ref?: number; want: string[] }
  > = {
    'sorted oldest first': {
      in: [pt('10:00:05', 2), pt('10:00:00', 1)],
      want: ['10:00:00=1', '10:00:05=2']
    },
    'one point per timestamp, the last wins': {
      in: [pt('10:00:00', 1), pt('10:00:00', 2)],
      want: ['10:00:00=2']
    },
    'points without a time are dropped': {
      in: [
        { ...pt('10:00:00', 1), t: '' },
        { ...pt('10:00:00', 1), t: 'soon' },
        pt('10:00:05', 2)
      ],
      want: ['10:00:05=2']
    },
    'the window ends one hour before the reference': {
      in: [pt('09:00:10', 1), pt('09:00:11', 2)],
      want: ['09:00:11=2']
    },
    'no reference: nothing is trimmed': {
      in: [pt('01:00:00', 1)],
      ref: NaN,
      want: ['01:00:00=1']
    }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    expect(times(normalizeHistory(tc.in, tc.ref ?? ref))).toEqual(tc.want);
  });
});

describe('referenceMs', () => {
  it('is the later of sampledAt and the newest point', () => {
    expect(referenceMs('2026-11-22T10:00:00Z', [pt('10:00:03')])).toBe(
      Date.parse('2026-11-22T10:00:03Z')
    );
    expect(referenceMs('2026-11-22T10:00:09Z', [pt('10:00:03')])).toBe(
      Date.parse('2026-11-22T10:00:09Z')
    );
    expect(referenceMs('', [pt('10:00:03')])).toBe(
      Date.parse('2026-11-22T10:00:03Z')
    );
    expect(referenceMs('', [])).toBeNaN();
  });
});

describe('sinceUrl', () => {
  const cases: Record<string, { url: string; t: string; want: string }> = {
    plain: {
      url: '/services/gpu-usage/api/v1/me',
      t: '2026-11-22T10:00:00.123Z',
      want: '/services/gpu-usage/api/v1/me?since=2026-11-22T10%3A00%3A00.123Z'
    },
    'an override with a query': {
      url: 'https://hub.example/me?x=1',
      t: '2026-11-22T10:00:00Z',
      want: 'https://hub.example/me?x=1&since=2026-11-22T10%3A00%3A00Z'
    },
    'a + offset is not read as a space': {
      url: '/me',
      t: '2026-11-22T11:00:00+01:00',
      want: '/me?since=2026-11-22T11%3A00%3A00%2B01%3A00'
    }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    expect(sinceUrl(tc.url, tc.t)).toBe(tc.want);
  });
});
