import type { FetchFn, HistoryPoint, MeResponse } from '../api';
import { UsageModel, UsageState, classify } from '../model';
import { NetworkError, ResponseError, ParseError } from '../api';
import { NOW, aliceMe } from './fixtures';

function okFetch(): jest.Mock {
  return jest.fn(async () => ({
    ok: true,
    status: 200,
    statusText: 'OK',
    json: async () => aliceMe(),
    text: async () => ''
  }));
}

function statusFetch(status: number): jest.Mock {
  return jest.fn(async () => ({
    ok: false,
    status,
    statusText: 'nope',
    json: async () => ({}),
    text: async () => 'nope'
  }));
}

function downFetch(): jest.Mock {
  return jest.fn(async () => {
    throw new TypeError('Failed to fetch');
  });
}

function setHidden(hidden: boolean): void {
  Object.defineProperty(document, 'visibilityState', {
    configurable: true,
    get: () => (hidden ? 'hidden' : 'visible')
  });
  document.dispatchEvent(new Event('visibilitychange'));
}

function model(
  fetchFn: jest.Mock,
  url: string | null = '/services/gpu-usage/api/v1/me'
): UsageModel {
  return new UsageModel({
    url,
    token: 't0ken',
    refreshSeconds: 1,
    maxBackoffSeconds: 300,
    fetch: fetchFn as unknown as FetchFn,
    now: () => NOW,
    timeZone: ''
  });
}

afterEach(() => {
  jest.useRealTimers();
  setHidden(false);
});

describe('UsageModel states', () => {
  it('is not-hub and sends nothing without a Hub', async () => {
    const fetchFn = okFetch();
    const m = model(fetchFn, null);
    await m.start();
    await m.fetchOnce();
    await m.refresh();
    expect(m.state).toEqual({ status: 'not-hub' });
    expect(m.poll).toBeNull();
    expect(fetchFn).not.toHaveBeenCalled();
    m.dispose();
  });

  const cases: Record<
    string,
    { fetchFn: () => jest.Mock; want: Partial<UsageState> }
  > = {
    ok: {
      fetchFn: okFetch,
      want: { status: 'ok', data: aliceMe(), fetchedAt: NOW }
    },
    'service down': {
      fetchFn: downFetch,
      want: { status: 'unreachable', failures: 1, since: NOW }
    },
    'proxy 503': {
      fetchFn: () => statusFetch(503),
      want: { status: 'unreachable' }
    },
    'no such service (404)': {
      fetchFn: () => statusFetch(404),
      want: { status: 'unreachable' }
    },
    'token refused': {
      fetchFn: () => statusFetch(403),
      want: { status: 'unauthorized' }
    },
    'bad request': {
      fetchFn: () => statusFetch(400),
      want: { status: 'error' }
    }
  };
  it.each(Object.entries(cases))('%s', async (_, tc) => {
    const m = model(tc.fetchFn());
    const seen: UsageState[] = [];
    m.stateChanged.connect((_s, st) => seen.push(st));
    expect(m.state).toEqual({ status: 'loading' });
    const failed = await m.fetchOnce().then(
      () => false,
      () => true
    );
    expect(failed).toBe(tc.want.status !== 'ok');
    expect(m.state).toMatchObject(tc.want);
    expect(seen).toHaveLength(1);
    m.dispose();
  });

  it('counts consecutive failures and keeps the first failure time', async () => {
    let now = NOW;
    const fetchFn = downFetch();
    const m = new UsageModel({
      url: '/me',
      token: '',
      refreshSeconds: 1,
      fetch: fetchFn as unknown as FetchFn,
      now: () => now
    });
    await m.fetchOnce().catch(() => undefined);
    now = new Date(NOW.getTime() + 60_000);
    await m.fetchOnce().catch(() => undefined);
    expect(m.state).toMatchObject({
      status: 'unreachable',
      failures: 2,
      since: NOW
    });
    m.dispose();
  });

  it('recovers after a failure', async () => {
    const fetchFn = downFetch();
    const m = model(fetchFn);
    await m.fetchOnce().catch(() => undefined);
    fetchFn.mockImplementation(okFetch());
    await m.fetchOnce();
    expect(m.state.status).toBe('ok');
    m.dispose();
  });

  it('classifies typed errors', () => {
    expect(classify(new NetworkError('x'))).toBe('unreachable');
    expect(classify(new ResponseError(502, 'x'))).toBe('unreachable');
    expect(classify(new ResponseError(401, 'x'))).toBe('unauthorized');
    expect(classify(new ParseError('x'))).toBe('error');
    expect(classify(new Error('x'))).toBe('error');
  });
});

describe('UsageModel polling', () => {
  async function callsIn(
    fetchFn: jest.Mock,
    seconds: number,
    hidden = false
  ): Promise<number> {
    jest.useFakeTimers();
    setHidden(hidden);
    const m = model(fetchFn);
    await m.start();
    await jest.advanceTimersByTimeAsync(seconds * 1000);
    const n = fetchFn.mock.calls.length;
    m.dispose();
    return n;
  }

  it('polls at the refresh interval while all is well', async () => {
    const n = await callsIn(okFetch(), 60);
    expect(n).toBeGreaterThanOrEqual(55);
    expect(n).toBeLessThanOrEqual(62);
  });

  it('backs off while the service is unreachable', async () => {
    // Lumino draws each wait between the interval and growth x the last one:
    // pin the draw to the middle so the count is deterministic.
    const random = jest.spyOn(Math, 'random').mockReturnValue(0.5);
    try {
      const failing = await callsIn(downFetch(), 60);
      expect(failing).toBeGreaterThanOrEqual(3);
      expect(failing).toBeLessThanOrEqual(10);
    } finally {
      random.mockRestore();
    }
  });

  it('stands by while the tab is hidden', async () => {
    // One lingering tick is allowed, then nothing until the tab is visible.
    const n = await callsIn(okFetch(), 60, true);
    expect(n).toBeLessThanOrEqual(2);
  });

  it('resumes when the tab becomes visible again', async () => {
    jest.useFakeTimers();
    setHidden(true);
    const fetchFn = okFetch();
    const m = model(fetchFn);
    await m.start();
    await jest.advanceTimersByTimeAsync(30_000);
    const hiddenCalls = fetchFn.mock.calls.length;
    setHidden(false);
    await jest.advanceTimersByTimeAsync(30_000);
    expect(fetchFn.mock.calls.length - hiddenCalls).toBeGreaterThanOrEqual(25);
    m.dispose();
  });

  it('follows a new refresh interval', async () => {
    jest.useFakeTimers();
    const fetchFn = okFetch();
    const m = model(fetchFn);
    await m.start();
    m.setRefreshSeconds(10);
    await jest.advanceTimersByTimeAsync(2_000);
    const before = fetchFn.mock.calls.length;
    await jest.advanceTimersByTimeAsync(60_000);
    const n = fetchFn.mock.calls.length - before;
    expect(n).toBeGreaterThanOrEqual(5);
    expect(n).toBeLessThanOrEqual(7);
    m.dispose();
  });

  it('stops polling when disposed', async () => {
    jest.useFakeTimers();
    const fetchFn = okFetch();
    const m = model(fetchFn);
    await m.start();
    await jest.advanceTimersByTimeAsync(3_000);
    m.dispose();
    const n = fetchFn.mock.calls.length;
    await jest.advanceTimersByTimeAsync(30_000);
    expect(fetchFn.mock.calls.length).toBe(n);
    expect(m.isDisposed).toBe(true);
  });
});

describe('UsageModel incremental polling (?since=)', () => {
  const URL = '/services/gpu-usage/api/v1/me';

  function point(t: string, sm: number): HistoryPoint {
    return {
      t: `2026-11-22T${t}Z`,
      allocatedGPUs: 0.43,
      usedGPUs: (0.43 * sm) / 100,
      smUtilPercent: sm,
      memoryUsedBytes: 0
    };
  }

  /** Answers the queued bodies in turn (an Error: the request fails) and records each URL. */
  function scripted(answers: (MeResponse | Error)[]): {
    fetchFn: jest.Mock;
    urls: string[];
  } {
    const urls: string[] = [];
    const fetchFn = jest.fn(async (url: string) => {
      urls.push(url);
      const next = answers.shift();
      if (next === undefined) {
        throw new Error('test: no answer left');
      }
      if (next instanceof Error) {
        throw next;
      }
      return {
        ok: true,
        status: 200,
        statusText: 'OK',
        json: async () => next,
        text: async () => ''
      };
    });
    return { fetchFn, urls };
  }

  function clocked(
    fetchFn: jest.Mock,
    timeZone = ''
  ): {
    m: UsageModel;
    advance: (ms: number) => void;
  } {
    let now = NOW.getTime();
    const m = new UsageModel({
      url: URL,
      token: 't0ken',
      refreshSeconds: 10,
      fetch: fetchFn as unknown as FetchFn,
      now: () => new Date(now),
      timeZone
    });
    return { m, advance: ms => (now += ms) };
  }

  function history(m: UsageModel): string[] {
    const s = m.state;
    return s.status === 'ok'
      ? s.data.history.map(p => `${p.t.slice(11, 19)}=${p.smUtilPercent}`)
      : [];
  }

  const since = (t: string) =>
    `${URL}?since=${encodeURIComponent(`2026-11-22T${t}Z`)}`;

  it('asks for the full document first, then only what is newer, and merges it', async () => {
    const { fetchFn, urls } = scripted([
      aliceMe(),
      aliceMe({
        sampledAt: '2026-11-22T10:00:10Z',
        share: { ...aliceMe().share, usedGPUs: 0.4 },
        history: [point('10:00:05', 60), point('10:00:10', 80)]
      }),
      aliceMe({
        sampledAt: '2026-11-22T10:00:20Z',
        stale: true,
        history: [point('10:00:15', 90), point('10:00:20', 95)]
      })
    ]);
    const { m, advance } = clocked(fetchFn);
    await m.fetchOnce();
    advance(10_000);
    await m.fetchOnce();
    expect(history(m)).toEqual([
      '09:10:00=10',
      '09:30:00=70',
      '10:00:00=49',
      '10:00:05=60',
      '10:00:10=80'
    ]);
    // Everything but the history comes from each answer as it is.
    expect(m.state).toMatchObject({
      status: 'ok',
      data: { share: { usedGPUs: 0.4 }, stale: false }
    });
    advance(10_000);
    await m.fetchOnce();
    expect(urls).toEqual([URL, since('10:00:00'), since('10:00:10')]);
    expect(history(m)).toHaveLength(7);
    expect(m.state).toMatchObject({ status: 'ok', data: { stale: true } });
    m.dispose();
  });

  it('requests the full document again after an error', async () => {
    const { fetchFn, urls } = scripted([
      aliceMe(),
      new TypeError('Failed to fetch'),
      aliceMe({ history: [point('10:00:05', 5)] })
    ]);
    const { m, advance } = clocked(fetchFn);
    await m.fetchOnce();
    advance(10_000);
    await expect(m.fetchOnce()).rejects.toThrow();
    expect(m.state.status).toBe('unreachable');
    advance(10_000);
    await m.fetchOnce();
    expect(urls).toEqual([URL, since('10:00:00'), URL]);
    // The full answer replaces what was held.
    expect(history(m)).toEqual(['10:00:05=5']);
    m.dispose();
  });

  it('falls back to a full request at once when the service restarted', async () => {
    const { fetchFn, urls } = scripted([
      aliceMe(),
      // A restarted service has nothing before its first tick: a gap after since.
      aliceMe({
        sampledAt: '2026-11-22T10:05:00Z',
        history: [point('10:05:00', 7)]
      }),
      aliceMe({
        sampledAt: '2026-11-22T10:05:00Z',
        history: [point('10:04:55', 6), point('10:05:00', 7)]
      })
    ]);
    const { m, advance } = clocked(fetchFn);
    await m.fetchOnce();
    advance(300_000);
    await m.fetchOnce();
    expect(urls).toEqual([URL, since('10:00:00'), URL]);
    expect(history(m)).toEqual(['10:04:55=6', '10:05:00=7']);
    m.dispose();
  });

  it('falls back to a full request when the history went backwards', async () => {
    const { fetchFn, urls } = scripted([
      aliceMe(),
      aliceMe({ sampledAt: '2026-11-22T09:00:00Z', history: [] }),
      aliceMe({ sampledAt: '2026-11-22T09:00:00Z', history: [] })
    ]);
    const { m } = clocked(fetchFn);
    await m.fetchOnce();
    await m.fetchOnce();
    expect(urls).toEqual([URL, since('10:00:00'), URL]);
    expect(history(m)).toEqual([]);
    m.dispose();
  });

  it('requests the full document when another user answers', async () => {
    const bob = aliceMe({ user: 'bob', history: [point('10:00:05', 1)] });
    const { fetchFn, urls } = scripted([aliceMe(), bob, bob]);
    const { m } = clocked(fetchFn);
    await m.fetchOnce();
    await m.fetchOnce();
    expect(urls).toEqual([URL, since('10:00:00'), URL]);
    expect(m.state).toMatchObject({ status: 'ok', data: { user: 'bob' } });
    expect(history(m)).toEqual(['10:00:05=1']);
    m.dispose();
  });

  it('requests the full document after more than the history window without an answer', async () => {
    const { fetchFn, urls } = scripted([aliceMe(), aliceMe()]);
    const { m, advance } = clocked(fetchFn);
    await m.fetchOnce();
    advance(3600_000 + 1);
    await m.fetchOnce();
    expect(urls).toEqual([URL, URL]);
    m.dispose();
  });

  it('keeps asking for the full document while no history is held', async () => {
    const { fetchFn, urls } = scripted([
      aliceMe({ history: [] }),
      aliceMe({ history: [] })
    ]);
    const { m } = clocked(fetchFn);
    await m.fetchOnce();
    await m.fetchOnce();
    expect(urls).toEqual([URL, URL]);
    m.dispose();
  });

  it('carries since on the scheduled polls after the first', async () => {
    jest.useFakeTimers();
    const fetchFn = okFetch();
    const m = model(fetchFn);
    await m.start();
    await jest.advanceTimersByTimeAsync(5_000);
    const urls = fetchFn.mock.calls.map(c => c[0] as string);
    expect(urls.length).toBeGreaterThanOrEqual(3);
    expect(urls[0]).toBe(URL);
    for (const u of urls.slice(1)) {
      expect(u).toBe(since('10:00:00'));
    }
    m.dispose();
  });
});

describe('UsageModel time zone (?tz=)', () => {
  const URL = '/services/gpu-usage/api/v1/me';

  function answering(
    respond: (url: string) => { status: number; body: unknown }
  ): { fetchFn: jest.Mock; urls: string[] } {
    const urls: string[] = [];
    const fetchFn = jest.fn(async (url: string) => {
      urls.push(url);
      const { status, body } = respond(url);
      return {
        ok: status === 200,
        status,
        statusText: status === 200 ? 'OK' : 'Bad Request',
        json: async () => body,
        text: async () => JSON.stringify(body)
      };
    });
    return { fetchFn, urls };
  }

  function zoned(fetchFn: jest.Mock, timeZone?: string): UsageModel {
    return new UsageModel({
      url: URL,
      token: 't0ken',
      refreshSeconds: 10,
      fetch: fetchFn as unknown as FetchFn,
      now: () => NOW,
      ...(timeZone === undefined ? {} : { timeZone })
    });
  }

  it('sends the browser’s zone on full and incremental requests', async () => {
    const { fetchFn, urls } = answering(() => ({
      status: 200,
      body: aliceMe()
    }));
    const m = zoned(fetchFn, 'Europe/Berlin');
    await m.fetchOnce();
    await m.fetchOnce();
    expect(urls).toEqual([
      `${URL}?tz=Europe%2FBerlin`,
      `${URL}?since=${encodeURIComponent('2026-11-22T10:00:00Z')}&tz=Europe%2FBerlin`
    ]);
    m.dispose();
  });

  it('takes the zone from Intl by default', async () => {
    const spy = jest.spyOn(Intl, 'DateTimeFormat').mockImplementation(
      () =>
        ({
          resolvedOptions: () => ({ timeZone: 'Asia/Kolkata' })
        }) as unknown as Intl.DateTimeFormat
    );
    try {
      const { fetchFn, urls } = answering(() => ({
        status: 200,
        body: aliceMe()
      }));
      const m = zoned(fetchFn);
      await m.fetchOnce();
      expect(urls).toEqual([`${URL}?tz=Asia%2FKolkata`]);
      m.dispose();
    } finally {
      spy.mockRestore();
    }
  });

  it('sends no tz when the browser has no zone', async () => {
    const { fetchFn, urls } = answering(() => ({
      status: 200,
      body: aliceMe()
    }));
    const m = zoned(fetchFn, '');
    await m.fetchOnce();
    expect(urls).toEqual([URL]);
    m.dispose();
  });

  it('drops a zone the service refuses (400) and keeps working in its default', async () => {
    const { fetchFn, urls } = answering(url =>
      url.includes('tz=')
        ? {
            status: 400,
            body: { status: 400, message: 'tz: unknown time zone Mars/Olympus' }
          }
        : { status: 200, body: aliceMe() }
    );
    const m = zoned(fetchFn, 'Mars/Olympus');
    await m.fetchOnce();
    expect(m.state.status).toBe('ok');
    await m.fetchOnce();
    expect(urls).toEqual([
      `${URL}?tz=Mars%2FOlympus`,
      URL,
      `${URL}?since=${encodeURIComponent('2026-11-22T10:00:00Z')}`
    ]);
    m.dispose();
  });

  it('still reports a 400 that the zone did not cause', async () => {
    const { fetchFn, urls } = answering(() => ({
      status: 400,
      body: { status: 400, message: 'since must be an RFC 3339 time' }
    }));
    const m = zoned(fetchFn, 'Europe/Berlin');
    await expect(m.fetchOnce()).rejects.toThrow('since must be');
    expect(m.state.status).toBe('error');
    expect(urls).toEqual([`${URL}?tz=Europe%2FBerlin`, URL]);
    m.dispose();
  });
});
