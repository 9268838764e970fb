import type { FetchFn } from '../api';
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
    now: () => NOW
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
