import { FetchFn, NetworkError, ParseError, ResponseError } from '../api';
import { clockText } from '../format';
import {
  Place,
  estimateText,
  holdCountdown,
  leaveFailureText,
  parsePlace,
  positionText,
  quotaApiUrl,
  requestLeave,
  requestPlaces,
  serverUrl,
  startUrl,
  turnHeadline,
  turnStart
} from '../waitlist';
import {
  NOW,
  aroundToday,
  bobStartedPlaceJson,
  bobTurnPlaceJson,
  bobWaitingPlaceJson
} from './fixtures';

const TOKEN = 'secret-token-abc123';
const BASE = '/services/gpu-quota/api/v1/';

function respond(status: number, body: unknown): jest.Mock {
  return jest.fn(async () => ({
    ok: status >= 200 && status < 300,
    status,
    statusText: status === 200 ? 'OK' : 'Error',
    json: async () => {
      if (status === 204) {
        throw new SyntaxError('Unexpected end of JSON input');
      }
      return body;
    },
    text: async () => (typeof body === 'string' ? body : JSON.stringify(body))
  }));
}

function place(json: Record<string, unknown>): Place {
  const p = parsePlace(json);
  if (!p) {
    throw new Error('fixture place does not parse');
  }
  return p;
}

describe('quotaApiUrl', () => {
  const cases: Record<
    string,
    { prefix: string; host: string; name: string; want: string | null }
  > = {
    default: {
      prefix: '/hub/',
      host: '',
      name: 'gpu-quota',
      want: '/services/gpu-quota/api/v1/'
    },
    'base url and host': {
      prefix: '/jhub/hub/',
      host: 'https://hub.example.org/',
      name: 'gpu-quota',
      want: 'https://hub.example.org/jhub/services/gpu-quota/api/v1/'
    },
    'another name': {
      prefix: '/hub/',
      host: '',
      name: ' quota ',
      want: '/services/quota/api/v1/'
    },
    'blank name is the default': {
      prefix: '/hub/',
      host: '',
      name: '',
      want: '/services/gpu-quota/api/v1/'
    },
    'not under a hub': { prefix: '', host: '', name: 'gpu-quota', want: null }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    expect(
      quotaApiUrl({ hubPrefix: tc.prefix, hubHost: tc.host }, tc.name)
    ).toBe(tc.want);
  });
});

describe('requestPlaces', () => {
  it('reads the user’s places with the Hub token', async () => {
    const fetchFn = respond(200, {
      places: [bobTurnPlaceJson(), bobWaitingPlaceJson()]
    });
    const got = await requestPlaces(BASE, 'bob', TOKEN, fetchFn as FetchFn);
    expect(got.map(p => [p.server, p.position])).toEqual([
      ['train', 0],
      ['', 2]
    ]);
    expect(fetchFn).toHaveBeenCalledWith(
      `${BASE}users/bob/waitlist`,
      expect.objectContaining({
        headers: { Accept: 'application/json', Authorization: `token ${TOKEN}` }
      })
    );
  });

  it('escapes the user name in the path', async () => {
    const fetchFn = respond(200, { places: [] });
    await requestPlaces(BASE, 'a b/c', TOKEN, fetchFn as FetchFn);
    expect(fetchFn.mock.calls[0][0]).toBe(`${BASE}users/a%20b%2Fc/waitlist`);
  });

  it('leaves out places it cannot show', async () => {
    const fetchFn = respond(200, {
      places: [
        bobWaitingPlaceJson(),
        'nonsense',
        { server: 'x', message: 'no position' }
      ]
    });
    const got = await requestPlaces(BASE, 'bob', TOKEN, fetchFn as FetchFn);
    expect(got).toHaveLength(1);
  });

  const failures: Record<
    string,
    { status: number; body: unknown; want: unknown }
  > = {
    'waitlist off (404)': {
      status: 404,
      body: {
        status: 404,
        message: 'the waitlist is not enabled (gpu-quota --waitlist)'
      },
      want: ResponseError
    },
    'not loaded (503)': {
      status: 503,
      body: { status: 503, message: 'the waitlist is not loaded yet' },
      want: ResponseError
    },
    'no places': { status: 200, body: { user: 'bob' }, want: ParseError }
  };
  it.each(Object.entries(failures))('%s is a typed error', async (_, tc) => {
    const fetchFn = respond(tc.status, tc.body);
    const err = await requestPlaces(
      BASE,
      'bob',
      TOKEN,
      fetchFn as FetchFn
    ).catch(e => e);
    expect(err).toBeInstanceOf(tc.want);
    expect(String(err.message)).not.toContain(TOKEN);
  });
});

describe('parsePlace', () => {
  it('reads every field of the contract', () => {
    expect(parsePlace(bobTurnPlaceJson({ blocked: ' over budget ' }))).toEqual({
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
      blocked: 'over budget',
      message:
        'Your turn: a H100 is held for you until 10:10. Your server is being started for you.'
    });
  });

  const cases: Record<
    string,
    { json: Record<string, unknown>; want: Partial<Place> | null }
  > = {
    'a server started from the queue': {
      json: bobStartedPlaceJson(),
      want: {
        state: 'started',
        position: 0,
        startedAt: '2026-11-22T09:58:00Z',
        message:
          'Your server "gpu" was started for you at 09:58 UTC with a H100 from the waitlist.'
      }
    },
    'an older gpu-quota without state: position 0 is held': {
      json: bobTurnPlaceJson({ state: undefined }),
      want: { state: 'held' }
    },
    'an older gpu-quota without state: position n is waiting': {
      json: bobWaitingPlaceJson({ state: undefined }),
      want: { state: 'waiting' }
    },
    'a state this panel does not know follows the position': {
      json: bobWaitingPlaceJson({ state: 'expired' }),
      want: { state: 'waiting' }
    },
    'a startedAt that does not parse is left out': {
      json: bobStartedPlaceJson({ startedAt: 'just now' }),
      want: { state: 'started', startedAt: undefined }
    },
    'no estimate, no hold': {
      json: bobWaitingPlaceJson({ estimate: undefined }),
      want: { estimate: undefined, heldUntil: undefined }
    },
    'times that do not parse are left out': {
      json: bobWaitingPlaceJson({ estimate: 'soon', heldUntil: '' }),
      want: { estimate: undefined, heldUntil: undefined }
    },
    'description falls back to the class': {
      json: bobWaitingPlaceJson({ description: '' }),
      want: { description: 'gpu NVIDIA-H100-80GB-HBM3' }
    },
    'no message, but what is waited for': {
      json: bobWaitingPlaceJson({ message: undefined }),
      want: { message: '' }
    },
    'wrong types are not invented': {
      json: bobWaitingPlaceJson({
        waiting: 'many',
        autoStart: 'yes',
        fairShare: null
      }),
      want: { waiting: 0, autoStart: false, fairShare: null }
    },
    'a negative position is no place': {
      json: bobWaitingPlaceJson({ position: -1 }),
      want: null
    },
    'neither words nor what is waited for': {
      json: bobWaitingPlaceJson({ message: '', description: '', class: '' }),
      want: null
    }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    const got = parsePlace(tc.json);
    if (tc.want === null) {
      expect(got).toBeNull();
      return;
    }
    for (const [k, v] of Object.entries(tc.want)) {
      if (v === undefined) {
        expect(got).not.toHaveProperty(k);
      } else {
        expect(got).toHaveProperty(k, v);
      }
    }
  });
});

describe('requestLeave', () => {
  it('sends DELETE with the server and takes 204 as done', async () => {
    const fetchFn = respond(204, '');
    await expect(
      requestLeave(BASE, 'bob', 'train run', TOKEN, fetchFn as FetchFn)
    ).resolves.toBeUndefined();
    expect(fetchFn).toHaveBeenCalledWith(
      `${BASE}users/bob/waitlist?server=train%20run`,
      expect.objectContaining({
        method: 'DELETE',
        headers: { Accept: 'application/json', Authorization: `token ${TOKEN}` }
      })
    );
  });

  it('names the default server with an empty value', async () => {
    const fetchFn = respond(204, '');
    await requestLeave(BASE, 'bob', '', TOKEN, fetchFn as FetchFn);
    expect(fetchFn.mock.calls[0][0]).toBe(`${BASE}users/bob/waitlist?server=`);
  });

  it('rejects a 404 (not queued) as a ResponseError', async () => {
    const fetchFn = respond(404, { status: 404, message: 'not queued' });
    const err = await requestLeave(
      BASE,
      'bob',
      '',
      TOKEN,
      fetchFn as FetchFn
    ).catch(e => e);
    expect(err).toBeInstanceOf(ResponseError);
    expect(err.status).toBe(404);
  });
});

describe('leaveFailureText', () => {
  const cases: Record<string, { err: unknown; want: string[] }> = {
    refused: {
      err: new ResponseError(403, 'x', 'no'),
      want: [
        'gpu-quota refused this session’s token',
        'Hub home page',
        'access:services!service=gpu-quota'
      ]
    },
    'not ready': {
      err: new ResponseError(503, 'x', 'the waitlist is not loaded yet'),
      want: ['the waitlist is not loaded yet', 'You are still in line']
    },
    'other status': {
      err: new ResponseError(500, 'x', 'boom'),
      want: ['(500: boom)', 'You are still in line', 'try again']
    },
    network: {
      err: new NetworkError('gpu-quota unreachable: Failed to fetch'),
      want: ['could not be reached', 'still in line', 'connection']
    },
    unknown: {
      err: new Error('odd'),
      want: ['(odd)', 'still in line']
    }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    const got = leaveFailureText(tc.err, 'gpu-quota');
    for (const w of tc.want) {
      expect(got).toContain(w);
    }
  });
});

describe('the words for a place', () => {
  const waiting = place(bobWaitingPlaceJson());
  const turn = place(bobTurnPlaceJson());

  it('positionText', () => {
    expect(positionText(waiting)).toBe('2 of 3');
    expect(positionText({ ...waiting, waiting: 0 })).toBe('2');
  });

  it('turnHeadline says what is held, with an article, until a local time', () => {
    expect(turnHeadline(turn)).toBe(
      `Your turn: an H100 is held for you until ${clockText('2026-11-22T10:10:00Z')}`
    );
    expect(
      turnHeadline({
        ...turn,
        heldUntil: undefined,
        description: 'MIG 3g.20gb slice of an A100'
      })
    ).toBe('Your turn: a MIG 3g.20gb slice of an A100 is held for you');
  });

  it('holdCountdown counts down to the hold’s end', () => {
    expect(holdCountdown(turn, NOW)).toBe('9 min 50 s left');
    expect(holdCountdown(turn, new Date('2026-11-22T10:11:00Z'))).toBe(
      'the hold ends now'
    );
    expect(holdCountdown(waiting, NOW)).toBeNull();
  });

  it('estimateText: a local time, the weekday when not today, passed', () => {
    expect(estimateText(waiting, NOW)).toBe(
      aroundToday('2026-11-22T10:40:00Z')
    );
    const later = { ...waiting, estimate: '2026-11-24T09:00:00Z' };
    const day = new Date(later.estimate).toLocaleDateString(undefined, {
      weekday: 'short'
    });
    expect(estimateText(later, NOW)).toBe(
      `around ${day} ${clockText(later.estimate)}`
    );
    expect(
      estimateText({ ...waiting, estimate: '2026-11-22T09:00:00Z' }, NOW)
    ).toBe('any moment now');
    expect(estimateText({ ...waiting, estimate: undefined }, NOW)).toBeNull();
  });

  it('startUrl: the Hub home for the default server, the spawn page of a named one', () => {
    expect(startUrl('/', 'bob', '')).toBe('/hub/home');
    expect(startUrl('/jhub/', 'bob', 'train')).toBe(
      '/jhub/hub/spawn/bob/train'
    );
    expect(startUrl('/', 'a b', 'x/y')).toBe('/hub/spawn/a%20b/x%2Fy');
  });

  it('serverUrl: user/<name>/ for the default server, user/<name>/<server>/ for a named one', () => {
    expect(serverUrl('/', 'bob', '')).toBe('/user/bob/');
    expect(serverUrl('/jhub/', 'bob', 'gpu')).toBe('/jhub/user/bob/gpu/');
    expect(serverUrl('/', 'a b', 'x/y')).toBe('/user/a%20b/x%2Fy/');
  });

  it('turnStart', () => {
    expect(turnStart(turn)).toBe('being-started');
    expect(turnStart({ ...turn, startRequested: false })).toBe('starts-soon');
    expect(turnStart({ ...turn, autoStart: false })).toBe('start-it');
  });
});
