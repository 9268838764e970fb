import { FetchFn, parseMe } from '../api';
import {
  CullerModel,
  KeyValueStore,
  isCullerNotice,
  withSnooze
} from '../cullerModel';
import { clockText } from '../format';
import { aliceIdleJson, aliceStoppedJson } from './fixtures';

const BASE = '/services/gpu-culler/api/v1/';

type Answer = { status: number; body: unknown } | 'down';

/** A culler that answers each path from a table, counting the calls. */
function culler(answers: Record<string, Answer>): jest.Mock {
  return jest.fn(async (url: string) => {
    const a = answers[url.slice(BASE.length)] ?? {
      status: 404,
      body: 'Not Found'
    };
    if (a === 'down') {
      throw new TypeError('Failed to fetch');
    }
    return {
      ok: a.status >= 200 && a.status < 300,
      status: a.status,
      statusText: 'x',
      json: async () => a.body,
      text: async () => JSON.stringify(a.body)
    };
  });
}

function memoryStore(): KeyValueStore & { data: Map<string, string> } {
  const data = new Map<string, string>();
  return {
    data,
    getItem: k => data.get(k) ?? null,
    setItem: (k, v) => void data.set(k, v)
  };
}

function model(
  fetchFn: jest.Mock,
  options: { storage?: KeyValueStore; onSnoozed?: () => void } = {}
): CullerModel {
  return new CullerModel({
    url: BASE,
    token: 't0ken',
    serviceName: 'gpu-culler',
    fetch: fetchFn as unknown as FetchFn,
    storage: options.storage ?? memoryStore(),
    onSnoozed: options.onSnoozed
  });
}

const snoozed = {
  server: '',
  deadline: '2026-11-22T10:40:00Z',
  snoozable: false,
  snoozes: 2,
  maxSnoozes: 2,
  message:
    'Snoozed. Your GPU has been idle for 52 min; this server stops at 10:40 UTC unless you use it.'
};

afterEach(() => jest.useRealTimers());

describe('CullerModel: the last stop', () => {
  it('shows the last stop until it is dismissed, across page loads', async () => {
    const storage = memoryStore();
    const fetchFn = culler({ me: { status: 200, body: aliceStoppedJson } });
    const m = model(fetchFn, { storage });
    const changes: unknown[] = [];
    m.changed.connect((_, s) => changes.push(s.lastStop));
    expect(m.state.installed).toBe(false);
    await m.fetchOnce();
    expect(m.state.installed).toBe(true);
    expect(m.state.lastStop?.message).toBe(
      'Stopped at 09:10 UTC: GPU idle for 1 h 7 min.'
    );
    await m.fetchOnce(); // the same stop again: no change
    expect(changes).toHaveLength(1);
    m.dismissStop();
    expect(m.state.lastStop).toBeNull();
    m.dispose();

    const again = model(fetchFn, { storage });
    await again.fetchOnce();
    expect(again.state.lastStop).toBeNull();
    again.dispose();
  });

  it('shows a newer stop after one was dismissed', async () => {
    const storage = memoryStore();
    const m = model(culler({ me: { status: 200, body: aliceStoppedJson } }), {
      storage
    });
    await m.fetchOnce();
    m.dismissStop();
    const later = {
      ...aliceStoppedJson,
      lastStop: {
        ...aliceStoppedJson.lastStop,
        at: '2026-11-22T12:00:00Z',
        message: 'Stopped at 12:00 UTC: GPU idle for 60 min.'
      }
    };
    const m2 = model(culler({ me: { status: 200, body: later } }), { storage });
    await m2.fetchOnce();
    expect(m2.state.lastStop?.message).toBe(
      'Stopped at 12:00 UTC: GPU idle for 60 min.'
    );
  });

  it('dismisses for the page when the browser keeps no storage', async () => {
    const broken: KeyValueStore = {
      getItem: () => {
        throw new Error('denied');
      },
      setItem: () => {
        throw new Error('denied');
      }
    };
    const m = model(culler({ me: { status: 200, body: aliceStoppedJson } }), {
      storage: broken
    });
    await m.fetchOnce();
    m.dismissStop();
    await m.fetchOnce();
    expect(m.state.lastStop).toBeNull();
  });

  const absent: Record<string, Answer> = {
    'not installed (404)': { status: 404, body: 'Not Found' },
    'refused (403)': { status: 403, body: { message: 'no access' } },
    unreachable: 'down'
  };
  it.each(Object.entries(absent))(
    'shows nothing and stays quiet when the culler is %s',
    async (_, answer) => {
      const warn = jest.spyOn(console, 'warn').mockImplementation(() => {});
      const error = jest.spyOn(console, 'error').mockImplementation(() => {});
      try {
        jest.useFakeTimers();
        const fetchFn = culler({ me: answer });
        const m = model(fetchFn);
        await m.start();
        await jest.advanceTimersByTimeAsync(5 * 60_000);
        expect(m.state.lastStop).toBeNull();
        expect(m.state.installed).toBe(false);
        expect(warn).not.toHaveBeenCalled();
        expect(error).not.toHaveBeenCalled();
        // Asked at load, then less often than every minute.
        expect(fetchFn.mock.calls.length).toBeGreaterThanOrEqual(1);
        expect(fetchFn.mock.calls.length).toBeLessThanOrEqual(6);
        m.dispose();
      } finally {
        warn.mockRestore();
        error.mockRestore();
      }
    }
  );

  it('asks at load and then every 60 s, not at every poll of me', async () => {
    jest.useFakeTimers();
    const fetchFn = culler({ me: { status: 200, body: aliceStoppedJson } });
    const m = model(fetchFn);
    await m.start();
    await jest.advanceTimersByTimeAsync(1000);
    expect(fetchFn).toHaveBeenCalledTimes(1);
    await jest.advanceTimersByTimeAsync(5 * 60_000);
    expect(fetchFn.mock.calls.length).toBeGreaterThanOrEqual(5);
    expect(fetchFn.mock.calls.length).toBeLessThanOrEqual(7);
    m.dispose();
    const n = fetchFn.mock.calls.length;
    await jest.advanceTimersByTimeAsync(5 * 60_000);
    expect(fetchFn.mock.calls.length).toBe(n);
  });

  it('sends nothing when not under JupyterHub', async () => {
    const fetchFn = culler({});
    const m = new CullerModel({
      url: null,
      token: '',
      serviceName: 'gpu-culler',
      fetch: fetchFn as unknown as FetchFn
    });
    await m.start();
    await m.fetchOnce();
    await m.snooze('');
    expect(fetchFn).not.toHaveBeenCalled();
    expect(m.poll).toBeNull();
  });
});

describe('CullerModel: snooze', () => {
  it('shows the new deadline at once and polls me', async () => {
    const onSnoozed = jest.fn();
    const m = model(culler({ snooze: { status: 200, body: snoozed } }), {
      onSnoozed
    });
    const states: string[] = [];
    m.changed.connect((_, s) => states.push(s.snoozes['']?.status ?? ''));
    await m.snooze('', '2026-11-22T10:10:00Z');
    expect(states).toEqual(['pending', 'done']);
    expect(m.state.snoozes['']).toEqual({ status: 'done', result: snoozed });
    expect(onSnoozed).toHaveBeenCalledTimes(1);
  });

  it('sends one snooze at a time per server', async () => {
    const fetchFn = culler({ snooze: { status: 200, body: snoozed } });
    const m = model(fetchFn);
    await Promise.all([m.snooze(''), m.snooze('')]);
    expect(fetchFn).toHaveBeenCalledTimes(1);
  });

  it('says what the culler said on 409', async () => {
    const m = model(
      culler({
        snooze: {
          status: 409,
          body: {
            status: 409,
            message: 'You have used both snoozes of this stop.'
          }
        }
      })
    );
    await m.snooze('', '2026-11-22T10:10:00Z');
    expect(m.state.snoozes['']).toEqual({
      status: 'failed',
      message: 'You have used both snoozes of this stop.'
    });
  });

  it('says what to do when the culler cannot be reached', async () => {
    const onSnoozed = jest.fn();
    const m = model(culler({ snooze: 'down' }), { onSnoozed });
    await m.snooze('', '2026-11-22T10:10:00Z');
    const s = m.state.snoozes[''];
    expect(s?.status).toBe('failed');
    expect(s?.status === 'failed' && s.message).toBe(
      `gpu-culler could not be reached, so the stop was not snoozed. The server still stops at ${clockText('2026-11-22T10:10:00Z')}. ` +
        'Check your connection and try again, or use the GPU to keep the server.'
    );
    expect(onSnoozed).not.toHaveBeenCalled();
  });

  it('forgets a snooze once the notice is gone, not while me shows it', async () => {
    const m = model(culler({ snooze: { status: 200, body: snoozed } }));
    await m.snooze('');
    m.syncNotices(parseMe(aliceIdleJson()).notices); // me still says 1 snooze
    expect(m.state.snoozes['']?.status).toBe('done');
    m.syncNotices(parseMe(aliceIdleJson({ snoozes: 2 })).notices); // me caught up
    expect(m.state.snoozes['']?.status).toBe('done');
    m.syncNotices(parseMe(aliceIdleJson({ service: 'gpu-quota' })).notices);
    expect(m.state.snoozes['']).toBeUndefined(); // the user got busy: the notice is gone
  });
});

describe('withSnooze', () => {
  const n = parseMe(aliceIdleJson()).notices[0];

  it('takes the snooze’s deadline, count and words until me has them', () => {
    expect(withSnooze(n, { status: 'done', result: snoozed })).toEqual({
      ...n,
      deadline: '2026-11-22T10:40:00Z',
      snoozable: false,
      snoozes: 2,
      maxSnoozes: 2,
      message: snoozed.message
    });
  });

  it('keeps me’s notice once it counts the snooze, and without one', () => {
    const caughtUp = { ...n, snoozes: 2, deadline: '2026-11-22T10:41:00Z' };
    expect(withSnooze(caughtUp, { status: 'done', result: snoozed })).toBe(
      caughtUp
    );
    expect(withSnooze(n)).toBe(n);
    expect(withSnooze(n, { status: 'pending' })).toBe(n);
  });

  it('knows the culler’s notices', () => {
    expect(isCullerNotice(n, 'gpu-culler')).toBe(true);
    expect(isCullerNotice({ ...n, service: 'culler' }, 'culler')).toBe(true);
    expect(isCullerNotice({ ...n, kind: 'budget' }, 'gpu-culler')).toBe(false);
    expect(isCullerNotice({ ...n, service: 'gpu-quota' }, 'gpu-culler')).toBe(
      false
    );
  });
});
