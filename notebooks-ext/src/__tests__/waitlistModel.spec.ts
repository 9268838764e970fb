import { FetchFn } from '../api';
import { WaitlistModel, WaitlistState } from '../waitlistModel';
import { bobTurnPlaceJson, bobWaitingPlaceJson } from './fixtures';

const BASE = '/services/gpu-quota/api/v1/';
const PLACES = `${BASE}users/bob/waitlist`;

type Answer = { status: number; body: unknown } | 'down';

/**
 * gpu-quota answering GET places from `places()` (changeable between calls)
 * and DELETE from `leave`, recording every request.
 */
function quota(
  places: () => Answer,
  leave: Answer = { status: 204, body: '' }
): jest.Mock {
  return jest.fn(async (url: string, init?: { method?: string }) => {
    let a: Answer;
    if (init?.method === 'DELETE' && url.startsWith(`${PLACES}?server=`)) {
      a = leave;
    } else if (!init?.method && url === PLACES) {
      a = places();
    } else {
      a = { status: 404, body: 'Not Found' };
    }
    if (a === 'down') {
      throw new TypeError('Failed to fetch');
    }
    const { status, body } = a;
    return {
      ok: status >= 200 && status < 300,
      status,
      statusText: 'x',
      json: async () => body,
      text: async () => JSON.stringify(body)
    };
  });
}

function ok(...places: Record<string, unknown>[]): Answer {
  return { status: 200, body: { places } };
}

function model(fetchFn: jest.Mock, refreshSeconds = 10): WaitlistModel {
  return new WaitlistModel({
    url: BASE,
    user: 'bob',
    token: 't0ken',
    serviceName: 'gpu-quota',
    refreshSeconds,
    fetch: fetchFn as unknown as FetchFn
  });
}

afterEach(() => jest.useRealTimers());

describe('WaitlistModel: reading places', () => {
  it('holds the places gpu-quota lists, and signals only changes', async () => {
    let answer = ok(bobWaitingPlaceJson());
    const m = model(quota(() => answer));
    const seen: WaitlistState[] = [];
    m.changed.connect((_, s) => seen.push(s));
    expect(m.state.status).toBe('loading');
    await m.fetchOnce();
    expect(m.state.status).toBe('ok');
    expect(m.state.places.map(p => p.position)).toEqual([2]);
    await m.fetchOnce();
    expect(seen).toHaveLength(1);
    answer = ok(bobWaitingPlaceJson({ position: 1, waiting: 2 }));
    await m.fetchOnce();
    expect(seen).toHaveLength(2);
    expect(m.state.places[0].position).toBe(1);
    m.dispose();
  });

  it('stops asking and shows nothing once the waitlist is off (404)', async () => {
    jest.useFakeTimers();
    const fetchFn = quota(() => ({
      status: 404,
      body: {
        status: 404,
        message: 'the waitlist is not enabled (gpu-quota --waitlist)'
      }
    }));
    const m = model(fetchFn, 2);
    await m.start();
    await jest.advanceTimersByTimeAsync(60_000);
    expect(fetchFn).toHaveBeenCalledTimes(1);
    expect(m.state).toEqual({
      status: 'off',
      places: [],
      leaving: {},
      left: []
    });
    await m.refresh();
    await m.fetchOnce();
    expect(fetchFn).toHaveBeenCalledTimes(1);
    m.dispose();
  });

  it('turns off when a place was shown and the waitlist goes away', async () => {
    let answer = ok(bobWaitingPlaceJson());
    const m = model(quota(() => answer));
    await m.fetchOnce();
    answer = { status: 404, body: 'Not Found' };
    await m.fetchOnce();
    expect(m.state.status).toBe('off');
    expect(m.state.places).toEqual([]);
  });

  const failures: Record<string, Answer> = {
    'not loaded (503)': {
      status: 503,
      body: { status: 503, message: 'the waitlist is not loaded yet' }
    },
    'refused (403)': { status: 403, body: { message: 'no access' } },
    unreachable: 'down'
  };
  it.each(Object.entries(failures))(
    'keeps the last places and backs off when gpu-quota is %s',
    async (_, failure) => {
      jest.useFakeTimers();
      let answer: Answer = ok(bobWaitingPlaceJson());
      const fetchFn = quota(() => answer);
      const m = model(fetchFn, 2);
      await m.start();
      await jest.advanceTimersByTimeAsync(100);
      expect(m.state.places).toHaveLength(1);
      answer = failure;
      const before = fetchFn.mock.calls.length;
      await jest.advanceTimersByTimeAsync(60_000);
      expect(m.state.status).toBe('unavailable');
      expect(m.state.places).toHaveLength(1);
      // Every 2 s would be 30 reads; backing off (random steps up to 3x) far fewer.
      expect(fetchFn.mock.calls.length - before).toBeLessThanOrEqual(15);
      answer = ok();
      await m.refresh();
      await jest.advanceTimersByTimeAsync(100);
      expect(m.state.status).toBe('ok');
      expect(m.state.places).toEqual([]);
      m.dispose();
    }
  );

  it('reads at the panel’s cadence and stops when disposed', async () => {
    jest.useFakeTimers();
    const fetchFn = quota(() => ok(bobWaitingPlaceJson()));
    const m = model(fetchFn, 10);
    await m.start();
    await jest.advanceTimersByTimeAsync(60_500);
    expect(fetchFn.mock.calls.length).toBeGreaterThanOrEqual(6);
    expect(fetchFn.mock.calls.length).toBeLessThanOrEqual(8);
    m.setRefreshSeconds(30);
    const n = fetchFn.mock.calls.length;
    await jest.advanceTimersByTimeAsync(60_000);
    expect(fetchFn.mock.calls.length - n).toBeLessThanOrEqual(3);
    m.dispose();
    const after = fetchFn.mock.calls.length;
    await jest.advanceTimersByTimeAsync(60_000);
    expect(fetchFn.mock.calls.length).toBe(after);
  });

  it('sends nothing when not under JupyterHub or without a user', async () => {
    const fetchFn = quota(() => ok());
    for (const [url, user] of [
      [null, 'bob'],
      [BASE, '']
    ] as const) {
      const m = new WaitlistModel({
        url,
        user,
        token: '',
        serviceName: 'gpu-quota',
        refreshSeconds: 10,
        fetch: fetchFn as unknown as FetchFn
      });
      await m.start();
      await m.fetchOnce();
      await m.leave('');
      expect(m.state.status).toBe('off');
      expect(m.poll).toBeNull();
    }
    expect(fetchFn).not.toHaveBeenCalled();
  });
});

describe('WaitlistModel: leaving', () => {
  it('takes the place away at once, confirms it, and reads again', async () => {
    let answer = ok(bobWaitingPlaceJson(), bobTurnPlaceJson());
    const fetchFn = quota(() => answer);
    const m = model(fetchFn);
    await m.fetchOnce();
    const pending = m.leave('');
    expect(m.state.leaving['']).toEqual({ status: 'pending' });
    answer = ok(bobTurnPlaceJson());
    await pending;
    expect(m.state.places.map(p => p.server)).toEqual(['train']);
    expect(m.state.left.map(p => p.server)).toEqual(['']);
    expect(m.state.leaving).toEqual({});
    expect(fetchFn).toHaveBeenCalledWith(
      `${PLACES}?server=`,
      expect.objectContaining({ method: 'DELETE' })
    );
    // Joining again (from the spawn form) drops the "you left" line.
    answer = ok(bobWaitingPlaceJson({ position: 3 }), bobTurnPlaceJson());
    await m.fetchOnce();
    expect(m.state.left).toEqual([]);
    m.dispose();
  });

  it('takes a 404 (not queued any more) as left', async () => {
    const fetchFn = quota(() => ok(bobWaitingPlaceJson()), {
      status: 404,
      body: { status: 404, message: 'not queued' }
    });
    const m = model(fetchFn);
    await m.fetchOnce();
    await m.leave('');
    expect(m.state.places).toEqual([]);
    expect(m.state.status).toBe('ok');
    expect(m.state.left).toHaveLength(1);
  });

  it('shows a failure in words and keeps the place', async () => {
    const fetchFn = quota(() => ok(bobWaitingPlaceJson()), 'down');
    const m = model(fetchFn);
    await m.fetchOnce();
    await m.leave('');
    expect(m.state.places).toHaveLength(1);
    const s = m.state.leaving[''];
    expect(s?.status).toBe('failed');
    expect(s?.status === 'failed' && s.message).toContain(
      'gpu-quota could not be reached, so you are still in line'
    );
    // Still queued: the failure stays next to the place.
    await m.fetchOnce();
    expect(m.state.leaving['']?.status).toBe('failed');
  });

  it('ignores a read that began before the leave finished', async () => {
    const fetchFn = quota(() => ok(bobWaitingPlaceJson()));
    const m = model(fetchFn);
    await m.fetchOnce();
    // A read under way while the user leaves: it still lists the place.
    let release: () => void = () => undefined;
    const gate = new Promise<void>(r => (release = r));
    const answer = quota(() => ok(bobWaitingPlaceJson()));
    fetchFn.mockImplementationOnce(async (...args: unknown[]) => {
      await gate;
      return answer(...args);
    });
    const read = m.fetchOnce();
    await m.leave('');
    release();
    await read;
    expect(m.state.places).toEqual([]);
    expect(m.state.left).toHaveLength(1);
  });

  it('sends one leave at a time per server', async () => {
    const fetchFn = quota(() => ok(bobWaitingPlaceJson()));
    const m = model(fetchFn);
    await m.fetchOnce();
    await Promise.all([m.leave(''), m.leave('')]);
    const deletes = fetchFn.mock.calls.filter(
      c => (c[1] as { method?: string } | undefined)?.method === 'DELETE'
    );
    expect(deletes).toHaveLength(1);
  });
});
