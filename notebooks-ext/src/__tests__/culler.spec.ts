import { FetchFn, NetworkError, ParseError, ResponseError } from '../api';
import {
  cullerApiUrl,
  parseLastStop,
  requestCullerMe,
  requestSnooze,
  snoozeFailureText
} from '../culler';
import { aliceStoppedJson } from './fixtures';

const TOKEN = 'secret-token-abc123';
const BASE = '/services/gpu-culler/api/v1/';

function respond(status: number, body: unknown): jest.Mock {
  return jest.fn(async () => ({
    ok: status >= 200 && status < 300,
    status,
    statusText: status === 200 ? 'OK' : 'Error',
    json: async () => body,
    text: async () => (typeof body === 'string' ? body : JSON.stringify(body))
  }));
}

describe('cullerApiUrl', () => {
  const cases: Record<
    string,
    { prefix: string; host: string; name: string; want: string | null }
  > = {
    default: {
      prefix: '/hub/',
      host: '',
      name: 'gpu-culler',
      want: '/services/gpu-culler/api/v1/'
    },
    'base url and host': {
      prefix: '/jhub/hub/',
      host: 'https://hub.example.org/',
      name: 'gpu-culler',
      want: 'https://hub.example.org/jhub/services/gpu-culler/api/v1/'
    },
    'another name': {
      prefix: '/hub/',
      host: '',
      name: ' culler ',
      want: '/services/culler/api/v1/'
    },
    'blank name is the default': {
      prefix: '/hub/',
      host: '',
      name: '',
      want: '/services/gpu-culler/api/v1/'
    },
    'not under a hub': { prefix: '', host: '', name: 'gpu-culler', want: null }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    expect(
      cullerApiUrl({ hubPrefix: tc.prefix, hubHost: tc.host }, tc.name)
    ).toBe(tc.want);
  });
});

describe('requestCullerMe', () => {
  it('reads the last stop with the Hub token', async () => {
    const fetchFn = respond(200, aliceStoppedJson);
    const got = await requestCullerMe(BASE, TOKEN, fetchFn as FetchFn);
    expect(got).toEqual({
      user: 'alice',
      lastStop: {
        server: '',
        at: '2026-11-22T09:10:00Z',
        reason: 'idle',
        message: 'Stopped at 09:10 UTC: GPU idle for 1 h 7 min.'
      }
    });
    expect(fetchFn).toHaveBeenCalledWith(
      `${BASE}me`,
      expect.objectContaining({
        headers: { Accept: 'application/json', Authorization: `token ${TOKEN}` }
      })
    );
  });

  it('takes no stop as null', async () => {
    const fetchFn = respond(200, { user: 'alice', lastStop: null });
    expect(
      (await requestCullerMe(BASE, TOKEN, fetchFn as FetchFn)).lastStop
    ).toBeNull();
  });

  it('refuses a document without a user', async () => {
    await expect(
      requestCullerMe(BASE, TOKEN, respond(200, {}) as FetchFn)
    ).rejects.toBeInstanceOf(ParseError);
  });

  it('types a missing culler as a 404 ResponseError', async () => {
    const err = await requestCullerMe(
      BASE,
      TOKEN,
      respond(404, '<html>Not Found</html>') as FetchFn
    ).catch(e => e);
    expect(err).toBeInstanceOf(ResponseError);
    expect(err.status).toBe(404);
    expect(err.message).not.toContain(TOKEN);
  });
});

describe('parseLastStop', () => {
  it('drops a stop without a message', () => {
    expect(parseLastStop({ server: '', at: 'x', message: ' ' })).toBeNull();
    expect(parseLastStop('nope')).toBeNull();
  });
});

describe('requestSnooze', () => {
  it('POSTs the server as JSON with the Hub token and reads the new deadline', async () => {
    const fetchFn = respond(200, {
      server: 'train',
      deadline: '2026-11-22T10:40:00Z',
      snoozable: false,
      snoozes: 2,
      maxSnoozes: 2,
      message: 'Snoozed.'
    });
    const got = await requestSnooze(BASE, TOKEN, 'train', fetchFn as FetchFn);
    expect(got).toEqual({
      server: 'train',
      deadline: '2026-11-22T10:40:00Z',
      snoozable: false,
      snoozes: 2,
      maxSnoozes: 2,
      message: 'Snoozed.'
    });
    const [url, init] = fetchFn.mock.calls[0];
    expect(url).toBe(`${BASE}snooze`);
    expect(init).toEqual(
      expect.objectContaining({
        method: 'POST',
        body: '{"server":"train"}',
        headers: {
          Accept: 'application/json',
          Authorization: `token ${TOKEN}`,
          'Content-Type': 'application/json'
        }
      })
    );
  });

  it('sends "" for the default server', async () => {
    const fetchFn = respond(200, { deadline: '2026-11-22T10:40:00Z' });
    await requestSnooze(BASE, TOKEN, '', fetchFn as FetchFn);
    expect(fetchFn.mock.calls[0][1].body).toBe('{"server":""}');
  });

  it('keeps the culler’s words of a 409', async () => {
    const err = await requestSnooze(
      BASE,
      TOKEN,
      '',
      respond(409, {
        status: 409,
        message: 'You have used both snoozes of this stop.'
      }) as FetchFn
    ).catch(e => e);
    expect(err).toBeInstanceOf(ResponseError);
    expect(err.detail).toBe('You have used both snoozes of this stop.');
  });

  it('refuses an answer without a deadline', async () => {
    await expect(
      requestSnooze(BASE, TOKEN, '', respond(200, { server: '' }) as FetchFn)
    ).rejects.toBeInstanceOf(ParseError);
  });
});

describe('snoozeFailureText', () => {
  const cases: Record<string, { err: unknown; want: string }> = {
    '409: the culler’s words': {
      err: new ResponseError(
        409,
        'x',
        'Nothing to snooze: the server is busy again.'
      ),
      want: 'Nothing to snooze: the server is busy again.'
    },
    '409 without words': {
      err: new ResponseError(409, 'x'),
      want: 'The stop cannot be snoozed now. The server still stops at 10:10.'
    },
    '403: the scope to grant and what to do meanwhile': {
      err: new ResponseError(403, 'x', 'forbidden'),
      want:
        'gpu-culler refused this session’s token, so the stop cannot be snoozed from here. The server still stops at 10:10. ' +
        'Use the GPU (run a cell) to keep the server, or save your work; your hub administrator must grant access:services!service=gpu-culler.'
    },
    'network error': {
      err: new NetworkError('gpu-culler unreachable: Failed to fetch'),
      want:
        'gpu-culler could not be reached, so the stop was not snoozed. The server still stops at 10:10. ' +
        'Check your connection and try again, or use the GPU to keep the server.'
    },
    '500': {
      err: new ResponseError(500, 'x', 'the snooze could not be saved'),
      want:
        'gpu-culler could not snooze the stop (500: the snooze could not be saved). The server still stops at 10:10. ' +
        'Try again in a minute, or use the GPU to keep the server.'
    }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    expect(snoozeFailureText(tc.err, 'gpu-culler', '10:10')).toBe(tc.want);
  });

  it('leaves the deadline out when unknown', () => {
    expect(
      snoozeFailureText(new ResponseError(409, 'x'), 'gpu-culler', null)
    ).toBe('The stop cannot be snoozed now.');
  });
});
