import { readFileSync } from 'fs';
import { join } from 'path';

import * as React from 'react';
import { act } from 'react';
import { createRoot, Root } from 'react-dom/client';

import { FetchFn } from '../api';
import { GpuPanel } from '../components';
import {
  adviceHeadline,
  alsoFits,
  evidenceText,
  needText,
  parseRightSize,
  rightSizeUrl
} from '../rightsize';
import { RightSizeModel, RightSizeState } from '../rightsizeModel';
import { NOW, aliceMe } from './fixtures';

(
  globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }
).IS_REACT_ACT_ENVIRONMENT = true;

// The Go engine's golden answers (services/internal/rightsize/testdata): the
// panel reads the wire shape the service writes, not a copy of it.
function golden(name: string): Record<string, unknown> {
  const p = join(
    __dirname,
    '../../../services/internal/rightsize/testdata',
    name
  );
  return JSON.parse(readFileSync(p, 'utf8')) as Record<string, unknown>;
}

function body(...servers: unknown[]): Record<string, unknown> {
  return {
    user: 'alice',
    period: '7d',
    from: '2026-11-23T00:00:00Z',
    asOf: '2026-11-30T12:00:00Z',
    servers
  };
}

describe('rightSizeUrl', () => {
  it.each([
    [
      '/services/gpu-usage/api/v1/me',
      '/services/gpu-usage/api/v1/me/right-size'
    ],
    ['https://h/x/api/v1/me/?a=1', 'https://h/x/api/v1/me/right-size?a=1'],
    [null, null]
  ])('%s → %s', (me, want) => {
    expect(rightSizeUrl(me)).toBe(want);
  });
});

describe('right-size advice in words', () => {
  it('says what would have done, and the evidence behind it', () => {
    const [a] = parseRightSize(body(golden('advice.json'))).servers;
    expect(a.verdict).toBe('smaller');
    expect(adviceHeadline(a)).toBe(
      'MIG 1g.10gb on an H100, 1/7 of a GPU would have done: it saves 0.86 GPU-hours per hour held.'
    );
    expect(evidenceText(a)).toBe(
      'This server used at most 4 GiB of GPU memory and 10 % of the whole H100-80GB-HBM3 (p95 while busy) over 6 h 00 min busy of 40 h 00 min held.'
    );
    expect(alsoFits(a)).toBe(
      'Also fits: 1 of 4 time-sliced shares of an H100; MIG 2g.20gb on an H100, 2/7 of a GPU; MIG 3g.40gb on an H100, 3/7 of a GPU.'
    );
  });

  it('says how many of it are free now, where the service says', () => {
    const advice = golden('advice.json');
    const candidates = advice.candidates as Record<string, unknown>[];
    const withFree = {
      ...advice,
      candidates: [{ ...candidates[0], freeNow: 6 }, ...candidates.slice(1)]
    };
    const [a] = parseRightSize(body(withFree)).servers;
    expect(a.candidates.map(c => c.freeNow)).toEqual([6, null, null, null]);
    expect(adviceHeadline(a)).toBe(
      'MIG 1g.10gb on an H100, 1/7 of a GPU would have done, 6 free now: it saves 0.86 GPU-hours per hour held.'
    );
    const none = {
      ...advice,
      candidates: [{ ...candidates[0], freeNow: 0 }]
    };
    expect(adviceHeadline(parseRightSize(body(none)).servers[0])).toBe(
      'MIG 1g.10gb on an H100, 1/7 of a GPU would have done, none free now: it saves 0.86 GPU-hours per hour held.'
    );
  });

  it('says how much more busy time is needed', () => {
    const [a] = parseRightSize(body(golden('not-enough-data.json'))).servers;
    expect(needText(a)).toBe('needs 40 min more busy time');
    expect(adviceHeadline(a)).toBe(
      'Not enough data yet (needs 40 min more busy time).'
    );
    const samples = parseRightSize(
      body({
        ...golden('not-enough-data.json'),
        evidence: {
          busySeconds: 7200,
          minBusySeconds: 3600,
          samples: 99,
          minSamples: 100
        }
      })
    ).servers[0];
    expect(needText(samples)).toBe('needs 1 more busy sample');
  });

  it('leaves out a verdict it does not know rather than guess', () => {
    const r = parseRightSize(
      body({ ...golden('advice.json'), verdict: 'bigger' }, 'junk')
    );
    expect(r.servers).toEqual([]);
  });
});

type Answer = { status: number; body: unknown } | 'down';

function usageApi(answer: () => Answer): jest.Mock {
  return jest.fn(async () => {
    const a = answer();
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

const URL = '/services/gpu-usage/api/v1/me/right-size';

function model(fetchFn: jest.Mock): RightSizeModel {
  return new RightSizeModel({
    url: URL,
    token: 't0ken',
    fetch: fetchFn as unknown as FetchFn
  });
}

describe('RightSizeModel', () => {
  it('holds the advice, keeps it marked when a read fails, and signals only changes', async () => {
    let answer: Answer = { status: 200, body: body(golden('advice.json')) };
    const fetchFn = usageApi(() => answer);
    const m = model(fetchFn);
    const seen: RightSizeState[] = [];
    m.changed.connect((_, s) => seen.push(s));
    expect(m.state.status).toBe('loading');
    await m.fetchOnce();
    await m.fetchOnce();
    expect(seen.map(s => s.status)).toEqual(['ok']);
    expect(fetchFn).toHaveBeenCalledWith(
      URL,
      expect.objectContaining({
        headers: expect.objectContaining({ Authorization: 'token t0ken' })
      })
    );
    answer = 'down';
    await expect(m.fetchOnce()).rejects.toThrow('usage API unreachable');
    expect(m.state.status).toBe('unavailable');
    expect(m.state.data?.servers).toHaveLength(1);
    m.dispose();
  });

  it('turns off for good on a usage API without the route (404)', async () => {
    const fetchFn = usageApi(() => ({
      status: 404,
      body: { message: 'not found' }
    }));
    const m = model(fetchFn);
    await m.fetchOnce();
    expect(m.state).toEqual({ status: 'off', data: null });
    expect(m.poll?.isDisposed).toBe(true);
    await m.fetchOnce();
    expect(fetchFn).toHaveBeenCalledTimes(1);
    m.dispose();
  });

  it('asks nothing when not under JupyterHub', async () => {
    const fetchFn = usageApi(() => 'down');
    const m = new RightSizeModel({
      url: null,
      token: '',
      fetch: fetchFn as unknown as FetchFn
    });
    await m.fetchOnce();
    expect(m.state.status).toBe('off');
    expect(fetchFn).not.toHaveBeenCalled();
  });
});

describe('the panel shows the advice', () => {
  let host: HTMLDivElement;
  let root: Root;
  beforeEach(() => {
    host = document.createElement('div');
    document.body.appendChild(host);
    root = createRoot(host);
  });
  afterEach(() => {
    act(() => root.unmount());
    host.remove();
  });

  function render(rightSize?: RightSizeState): HTMLDivElement {
    act(() =>
      root.render(
        <GpuPanel
          state={{ status: 'ok', data: aliceMe(), fetchedAt: NOW }}
          now={NOW}
          currentServer={{ user: 'alice', name: '' }}
          hubBase="/"
          onRefresh={jest.fn()}
          rightSize={rightSize}
        />
      )
    );
    return host;
  }

  function field(name: string): string[] {
    return Array.from(
      host.querySelectorAll(`[data-field="${name}"]`),
      e => e.textContent ?? ''
    );
  }

  it('this server first, with its evidence; another server named', () => {
    const train = {
      ...golden('not-enough-data.json'),
      server: 'train',
      simulated: true,
      caveats: ['Measured on simulated utilization, not a real GPU.']
    };
    render({
      status: 'ok',
      data: parseRightSize(body(train, golden('advice.json')))
    });
    const advice = host.querySelectorAll('[data-field="rightsize-advice"]');
    expect(Array.from(advice, e => e.getAttribute('data-server'))).toEqual([
      '',
      'train'
    ]);
    expect(advice[0].getAttribute('data-current')).toBe('true');
    expect(field('rightsize-headline')).toEqual([
      'MIG 1g.10gb on an H100, 1/7 of a GPU would have done: it saves 0.86 GPU-hours per hour held.',
      'Your server “train”: Not enough data yet (needs 40 min more busy time). simulated'
    ]);
    expect(field('rightsize-evidence')[0]).toMatch(
      /^This server used at most 4 GiB of GPU memory and 10 % of the whole H100/
    );
    expect(field('rightsize-evidence')[1]).toBe(
      'The GPU was busy for 20 min of the 40.0 h it was held; advice needs at least 1.0 h busy.'
    );
    expect(field('rightsize-caveat')).toEqual([
      'Measured on simulated utilization, not a real GPU.'
    ]);
    expect(field('rightsize-period')).toEqual([
      'Measured over the last 7 days by the gpu-usage service.'
    ]);
  });

  it('says when nothing was measured, or the advice could not be read', () => {
    render({ status: 'ok', data: parseRightSize(body()) });
    expect(field('rightsize-none')).toEqual([
      'No GPU use of yours was measured over the last 7 days.'
    ]);
    render({ status: 'unavailable', data: null });
    expect(field('rightsize-status')).toEqual([
      'Right-size advice could not be read just now.'
    ]);
  });

  it('shows no section when the usage API has no advice, or no model', () => {
    render({ status: 'off', data: null });
    expect(host.querySelector('[data-section="rightsize"]')).toBeNull();
    render(undefined);
    expect(host.querySelector('[data-section="rightsize"]')).toBeNull();
  });
});
