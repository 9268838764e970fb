import {
  FetchFn,
  NetworkError,
  ParseError,
  ResponseError,
  browserTimeZone,
  hubBaseUrl,
  meUrl,
  parseMe,
  requestMe,
  usageUrl
} from '../api';
import { aliceIdleJson, aliceMe, bobOverBudgetJson } from './fixtures';

const TOKEN = 'secret-token-abc123';

function respond(status: number, body: unknown, raw = false): FetchFn {
  return jest.fn(async () => ({
    ok: status >= 200 && status < 300,
    status,
    statusText: status === 200 ? 'OK' : 'Error',
    json: async () => {
      if (raw) {
        throw new SyntaxError('Unexpected token < in JSON');
      }
      return body;
    },
    text: async () => (typeof body === 'string' ? body : JSON.stringify(body))
  }));
}

describe('hubBaseUrl', () => {
  const cases: Record<string, [string, string]> = {
    'default hub prefix': ['/hub/', '/'],
    'base url': ['/jhub/hub/', '/jhub/'],
    'nested base url': ['/a/b/hub/', '/a/b/'],
    'missing trailing slash': ['/jhub/hub', '/jhub/'],
    'not under a hub': ['', ''],
    'unusual prefix kept as is': ['/custom/', '/custom/']
  };
  it.each(Object.entries(cases))('%s', (_, [prefix, want]) => {
    expect(hubBaseUrl(prefix)).toEqual(want);
  });
});

describe('usageUrl', () => {
  const cases: Record<
    string,
    {
      prefix: string;
      host: string;
      service: string;
      override?: string;
      want: string | null;
    }
  > = {
    'same origin': {
      prefix: '/hub/',
      host: '',
      service: 'gpu-usage',
      want: '/services/gpu-usage/api/v1/me'
    },
    'hub on another host (subdomains)': {
      prefix: '/jhub/hub/',
      host: 'https://hub.example.org/',
      service: 'gpu-usage',
      want: 'https://hub.example.org/jhub/services/gpu-usage/api/v1/me'
    },
    'renamed service': {
      prefix: '/hub/',
      host: '',
      service: 'usage',
      want: '/services/usage/api/v1/me'
    },
    'empty service name falls back': {
      prefix: '/hub/',
      host: '',
      service: ' ',
      want: '/services/gpu-usage/api/v1/me'
    },
    'override wins': {
      prefix: '/hub/',
      host: '',
      service: 'gpu-usage',
      override: ' http://127.0.0.1:9/me ',
      want: 'http://127.0.0.1:9/me'
    },
    'not under JupyterHub: no URL even with override': {
      prefix: '',
      host: '',
      service: 'gpu-usage',
      override: 'http://127.0.0.1:9/me',
      want: null
    }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    expect(
      usageUrl(
        { hubPrefix: tc.prefix, hubHost: tc.host },
        tc.service,
        tc.override
      )
    ).toEqual(tc.want);
  });
});

describe('requestMe', () => {
  it('sends the Hub token and parses the document', async () => {
    const fetchFn = respond(200, aliceMe());
    const got = await requestMe(
      '/services/gpu-usage/api/v1/me',
      TOKEN,
      fetchFn
    );
    expect(got).toEqual(aliceMe());
    expect(fetchFn).toHaveBeenCalledWith(
      '/services/gpu-usage/api/v1/me',
      expect.objectContaining({
        headers: { Accept: 'application/json', Authorization: `token ${TOKEN}` }
      })
    );
  });

  it('sends no Authorization header without a token', async () => {
    const fetchFn = respond(200, aliceMe());
    await requestMe('/me', '', fetchFn);
    const init = (fetchFn as jest.Mock).mock.calls[0][1];
    expect(init.headers).toEqual({ Accept: 'application/json' });
  });

  const failures: Record<
    string,
    { fetchFn: FetchFn; type: unknown; status?: number }
  > = {
    'connection refused': {
      fetchFn: jest.fn(async () => {
        throw new TypeError('Failed to fetch');
      }),
      type: NetworkError
    },
    'token refused': {
      fetchFn: respond(403, 'forbidden'),
      type: ResponseError,
      status: 403
    },
    'service down behind the proxy': {
      fetchFn: respond(503, 'Service Unavailable'),
      type: ResponseError,
      status: 503
    },
    'html instead of json': {
      fetchFn: respond(200, '<html>', true),
      type: ParseError
    },
    'json without a user': {
      fetchFn: respond(200, { servers: [] }),
      type: ParseError
    }
  };
  it.each(Object.entries(failures))('%s is a typed error', async (_, tc) => {
    const err = await requestMe('/me', TOKEN, tc.fetchFn).catch(e => e);
    expect(err).toBeInstanceOf(tc.type);
    if (tc.status !== undefined) {
      expect((err as ResponseError).status).toBe(tc.status);
    }
    expect(String(err.message)).not.toContain(TOKEN);
  });

  it("uses the message of the service's JSON error", async () => {
    const fetchFn = respond(403, {
      status: 403,
      message: 'bob may not read alice'
    });
    const err = await requestMe('/me', TOKEN, fetchFn).catch(e => e);
    expect(err.message).toBe(
      'usage API answered 403 Error: bob may not read alice'
    );
  });

  it('leaves an HTML error page out of the message', async () => {
    const fetchFn = respond(
      404,
      '<!DOCTYPE HTML><html><title>JupyterHub</title></html>'
    );
    const err = await requestMe('/me', TOKEN, fetchFn).catch(e => e);
    expect(err.message).toBe('usage API answered 404 Error');
  });

  it('marks 401 and 403 as unauthorized', () => {
    expect(new ResponseError(401, 'x').unauthorized).toBe(true);
    expect(new ResponseError(403, 'x').unauthorized).toBe(true);
    expect(new ResponseError(502, 'x').unauthorized).toBe(false);
  });
});

describe('parseMe', () => {
  it('fills neutral defaults for missing optional parts', () => {
    const got = parseMe({ user: 'bob' });
    expect(got).toEqual({
      user: 'bob',
      sampledAt: '',
      intervalSeconds: 5,
      simulated: false,
      stale: false,
      share: {
        allocatedGPUs: 0,
        usedGPUs: null,
        memoryUsedBytes: 0,
        memoryTotalBytes: 0
      },
      servers: [],
      history: [],
      gpuHours: { today: undefined, '7d': undefined, '30d': undefined },
      gpuHoursStatus: 'ok',
      notices: [],
      budget: null,
      idleCull: null
    });
  });

  it('reads gpu-quota’s budget and notices (issue 10)', () => {
    const got = parseMe(bobOverBudgetJson());
    expect(got.budget).toEqual({
      status: 'ok',
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
      ]
    });
    expect(got.notices).toEqual([
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
    ]);
  });

  it('reads gpu-culler’s notice with its snooze counts (issue 12)', () => {
    expect(parseMe(aliceIdleJson()).notices).toEqual([
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
        snoozes: 1,
        maxSnoozes: 2
      }
    ]);
    const odd = parseMe(aliceIdleJson({ snoozes: -1, maxSnoozes: 'two' }));
    expect(odd.notices[0].snoozes).toBeUndefined();
    expect(odd.notices[0].maxSnoozes).toBeUndefined();
  });

  it('reads an unavailable budget and drops notices without a message', () => {
    const got = parseMe({
      user: 'bob',
      budget: {
        status: 'unavailable',
        reason: 'the quota service cannot be reached'
      },
      notices: [
        { service: 'x', kind: 'limit', message: '  ' },
        'not a notice',
        {
          service: 'gpu-culler',
          kind: 'idle',
          message: 'idle',
          deadline: 'soon'
        }
      ]
    });
    expect(got.budget).toEqual({
      status: 'unavailable',
      reason: 'the quota service cannot be reached',
      exempt: false,
      concurrent: null,
      budgets: []
    });
    expect(got.notices).toEqual([
      {
        service: 'gpu-culler',
        kind: 'idle',
        reason: '',
        message: 'idle',
        deadline: undefined,
        snoozable: false,
        createdAt: undefined,
        server: ''
      }
    ]);
  });

  it('reads the OpenAPI extras: stale flags, null used GPUs, usedUnknown', () => {
    const got = parseMe({
      user: 'dave',
      sampledAt: null,
      stale: true,
      share: { allocatedGPUs: 1, usedGPUs: null },
      servers: [
        {
          name: '',
          usedGPUs: null,
          stale: true,
          simulated: true,
          gpus: [
            {
              kind: 'mig',
              smUtilPercent: null,
              utilizationSource: 'none',
              stale: true
            }
          ]
        }
      ],
      gpuHours: { today: { allocated: 1, used: 0.2, usedUnknown: 0.5 } }
    });
    expect(got.stale).toBe(true);
    expect(got.sampledAt).toBe('');
    expect(got.share.usedGPUs).toBeNull();
    expect(got.servers[0]).toMatchObject({
      usedGPUs: null,
      stale: true,
      simulated: true
    });
    expect(got.servers[0].gpus[0].stale).toBe(true);
    expect(got.gpuHours.today).toEqual({
      allocated: 1,
      used: 0.2,
      usedUnknown: 0.5
    });
  });

  it('keeps null utilization and unknown sources as none', () => {
    const got = parseMe({
      user: 'carol',
      servers: [
        {
          name: 'gpu',
          gpus: [
            { kind: 'weird', smUtilPercent: null, utilizationSource: 'magic' }
          ]
        }
      ]
    });
    expect(got.servers[0].gpus[0]).toMatchObject({
      kind: 'gpu',
      smUtilPercent: null,
      utilizationSource: 'none'
    });
  });
});

describe('parseMe: issue 9 fields', () => {
  it('reads stale and unknown reasons at every level', () => {
    const got = parseMe({
      user: 'alice',
      stale: true,
      staleReason:
        'the GPU agent on node a has not sampled since 10:00:00 UTC (47 s)',
      servers: [
        {
          name: '',
          stale: true,
          staleReason: 'server reason',
          gpus: [
            {
              kind: 'mig',
              stale: true,
              staleReason: 'unit reason',
              smUtilPercent: null,
              utilizationSource: 'none',
              utilizationUnknownReason: 'unknown reason'
            }
          ]
        }
      ]
    });
    expect(got.staleReason).toBe(
      'the GPU agent on node a has not sampled since 10:00:00 UTC (47 s)'
    );
    expect(got.servers[0].staleReason).toBe('server reason');
    expect(got.servers[0].gpus[0]).toMatchObject({
      staleReason: 'unit reason',
      utilizationUnknownReason: 'unknown reason'
    });
  });

  it('ignores reasons that are not strings or are blank', () => {
    const got = parseMe({
      user: 'alice',
      staleReason: 42,
      gpuHoursReason: '  ',
      servers: [
        {
          name: '',
          staleReason: null,
          gpus: [{ utilizationUnknownReason: {} }]
        }
      ]
    });
    expect(got.staleReason).toBeUndefined();
    expect(got.gpuHoursReason).toBeUndefined();
    expect(got.servers[0].staleReason).toBeUndefined();
    expect(got.servers[0].gpus[0].utilizationUnknownReason).toBeUndefined();
  });

  const statuses: Record<
    string,
    { body: Record<string, unknown>; want: 'ok' | 'unavailable' }
  > = {
    'missing (older API)': {
      body: { gpuHours: { today: { allocated: 1, used: 0 } } },
      want: 'ok'
    },
    ok: { body: { gpuHoursStatus: 'ok' }, want: 'ok' },
    unavailable: {
      body: {
        gpuHoursStatus: 'unavailable',
        gpuHours: { today: null, '7d': null, '30d': null }
      },
      want: 'unavailable'
    },
    'an unknown status with no numbers': {
      body: { gpuHoursStatus: 'degraded', gpuHours: { today: null } },
      want: 'unavailable'
    },
    'an unknown status with numbers': {
      body: {
        gpuHoursStatus: 'partial',
        gpuHours: { today: { allocated: 1, used: 0.5 } }
      },
      want: 'ok'
    }
  };
  it.each(Object.entries(statuses))('gpuHoursStatus %s', (_, tc) => {
    expect(parseMe({ user: 'a', ...tc.body }).gpuHoursStatus).toBe(tc.want);
  });

  it('keeps the reason and null windows of unavailable GPU-hours', () => {
    const got = parseMe({
      user: 'a',
      gpuHoursStatus: 'unavailable',
      gpuHoursReason: 'the usage database is unreachable',
      gpuHours: { today: null, '7d': null, '30d': null }
    });
    expect(got.gpuHoursReason).toBe('the usage database is unreachable');
    expect(got.gpuHours).toEqual({
      today: undefined,
      '7d': undefined,
      '30d': undefined
    });
  });

  it('never turns a missing or null GPU-hours figure into 0', () => {
    const got = parseMe({
      user: 'a',
      gpuHours: { today: { allocated: 1, used: null }, '7d': { used: 2 } }
    });
    expect(got.gpuHours.today).toEqual({ allocated: 1, used: null });
    expect(got.gpuHours['7d']).toEqual({ allocated: null, used: 2 });
  });

  it('knows the MPS and time-sliced MIG kinds', () => {
    const got = parseMe({
      user: 'a',
      servers: [{ name: '', gpus: [{ kind: 'mps' }, { kind: 'mig-shared' }] }]
    });
    expect(got.servers[0].gpus.map(g => g.kind)).toEqual(['mps', 'mig-shared']);
  });
});

describe('meUrl', () => {
  const cases: Record<
    string,
    { url: string; q: { since?: string; tz?: string }; want: string }
  > = {
    'nothing to add': { url: '/me', q: {}, want: '/me' },
    'time zone': {
      url: '/me',
      q: { tz: 'Europe/Berlin' },
      want: '/me?tz=Europe%2FBerlin'
    },
    'empty time zone is left out': { url: '/me', q: { tz: '' }, want: '/me' },
    'since and time zone': {
      url: '/me',
      q: {
        since: '2026-11-22T10:00:00.123Z',
        tz: 'America/Argentina/Buenos_Aires'
      },
      want: '/me?since=2026-11-22T10%3A00%3A00.123Z&tz=America%2FArgentina%2FBuenos_Aires'
    },
    'override URL with a query': {
      url: 'http://127.0.0.1:9/me?x=1',
      q: { tz: 'UTC' },
      want: 'http://127.0.0.1:9/me?x=1&tz=UTC'
    }
  };
  it.each(Object.entries(cases))('%s', (_, tc) => {
    expect(meUrl(tc.url, tc.q)).toBe(tc.want);
  });
});

describe('browserTimeZone', () => {
  afterEach(() => jest.restoreAllMocks());

  function zone(tz: unknown): void {
    jest.spyOn(Intl, 'DateTimeFormat').mockImplementation(
      () =>
        ({
          resolvedOptions: () => ({ timeZone: tz })
        }) as unknown as Intl.DateTimeFormat
    );
  }

  it('is the browser’s IANA zone', () => {
    zone('Europe/Berlin');
    expect(browserTimeZone()).toBe('Europe/Berlin');
  });

  it('is empty when the browser has none', () => {
    zone(undefined);
    expect(browserTimeZone()).toBe('');
    zone('');
    expect(browserTimeZone()).toBe('');
  });

  it('is empty when Intl throws', () => {
    jest.spyOn(Intl, 'DateTimeFormat').mockImplementation(() => {
      throw new RangeError('no Intl');
    });
    expect(browserTimeZone()).toBe('');
  });
});
