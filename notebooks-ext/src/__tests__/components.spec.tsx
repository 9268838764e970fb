import * as React from 'react';
import { act } from 'react';
import { createRoot, Root } from 'react-dom/client';

import { parseMe } from '../api';
import { CullerProps, GpuPanel, GpuStatus, WaitlistProps } from '../components';
import type { CullerState } from '../cullerModel';
import { clockText } from '../format';
import type { UsageState } from '../model';
import { Place, parsePlace } from '../waitlist';
import type { WaitlistState } from '../waitlistModel';
import {
  NOW,
  aroundToday,
  aliceIdleJson,
  aliceMe,
  bobAloneOnT4Json,
  bobOverBudgetJson,
  bobStartedPlaceJson,
  bobTurnPlaceJson,
  bobWaitingPlaceJson,
  ledgerDownAliceJson,
  staleAliceJson
} from './fixtures';

// React 18 wants this flag to accept act() outside a test renderer.
(
  globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }
).IS_REACT_ACT_ENVIRONMENT = true;

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

function renderPanel(
  state: UsageState,
  onRefresh = jest.fn(),
  clock?: () => Date,
  culler?: CullerProps
): HTMLDivElement {
  act(() =>
    root.render(
      <GpuPanel
        state={state}
        now={NOW}
        currentServer={{ user: 'alice', name: '' }}
        hubBase="/"
        onRefresh={onRefresh}
        clock={clock}
        culler={culler}
      />
    )
  );
  return host;
}

function text(sel: string): string {
  return host.querySelector(sel)?.textContent ?? '';
}

describe('GpuPanel', () => {
  it('shows the not-under-JupyterHub state without a refresh button', () => {
    renderPanel({ status: 'not-hub' });
    expect(text('[data-notice]')).toContain('Not running under JupyterHub');
    expect(host.querySelector('button')).toBeNull();
  });

  it('explains an unreachable service and says JupyterLab keeps working', () => {
    renderPanel({
      status: 'unreachable',
      message: 'usage API answered 503',
      since: NOW,
      failures: 3
    });
    expect(text('[role="status"]')).toContain('GPU usage service unreachable');
    expect(text('[role="status"]')).toContain(
      'JupyterLab and your kernels keep working'
    );
    expect(text('[role="status"]')).toContain('failed 3 times');
  });

  it('explains a refused token with the scope to grant', () => {
    renderPanel({
      status: 'unauthorized',
      message: 'usage API answered 403',
      since: NOW,
      failures: 1
    });
    expect(text('[role="status"]')).toContain(
      'access:services!service=gpu-usage'
    );
  });

  it('shows the share, live numbers, provenance and hours', () => {
    renderPanel({ status: 'ok', data: aliceMe(), fetchedAt: NOW });
    expect(text('[data-field="description"]')).toBe(
      'MIG 3g.20gb on an A100, 3/7 of a GPU'
    );
    expect(text('[data-field="util"] .jp-GpuPanel-meterValue')).toBe('49 %');
    expect(text('[data-field="util"] .jp-GpuPanel-note')).toBe('simulated');
    expect(text('[data-field="memory"] .jp-GpuPanel-meterValue')).toBe(
      '1 GiB of 20 GiB'
    );
    expect(
      host.querySelector('[data-provenance]')?.getAttribute('data-provenance')
    ).toBe('simulated');
    expect(text('[data-window="today"] [data-field="allocated"]')).toBe('0.5');
    expect(text('[data-window="7d"] [data-field="used"]')).toBe('3.5');
    expect(text('[data-field="budget"]')).toBe('not configured');
    expect(text('[data-field="idle-cull"]')).toBe('not configured');
    expect(text('.jp-GpuPanel-server')).toContain('this server');
  });

  it('is labelled for screen readers', () => {
    renderPanel({ status: 'ok', data: aliceMe(), fetchedAt: NOW });
    const svg = host.querySelector('svg[role="img"]');
    expect(svg?.getAttribute('aria-label')).toBe(
      'SM utilization over the last hour: latest 49 %, average 43 %, lowest 10 %, highest 70 %'
    );
    const meter = host.querySelector('[role="meter"]');
    expect(meter?.getAttribute('aria-valuenow')).toBe('49');
    expect(meter?.getAttribute('aria-label')).toBe('SM utilization');
    for (const section of Array.from(host.querySelectorAll('section'))) {
      const id = section.getAttribute('aria-labelledby');
      expect(id && host.querySelector(`#${id}`)).toBeTruthy();
    }
    const button = host.querySelector('button');
    expect(button?.getAttribute('aria-label')).toBe('Refresh GPU usage now');
  });

  it('calls refresh from the keyboard-reachable button', () => {
    const onRefresh = jest.fn();
    renderPanel({ status: 'ok', data: aliceMe(), fetchedAt: NOW }, onRefresh);
    act(() => host.querySelector('button')!.click());
    expect(onRefresh).toHaveBeenCalledTimes(1);
  });

  it('says no utilization data for MIG without DCGM and claims no measurement', () => {
    const me = aliceMe({ simulated: false });
    me.servers[0].simulated = false;
    me.servers[0].gpus[0].smUtilPercent = null;
    me.servers[0].gpus[0].utilizationSource = 'none';
    renderPanel({ status: 'ok', data: me, fetchedAt: NOW });
    expect(text('[data-field="util"] .jp-GpuPanel-meterValue')).toBe(
      'not known'
    );
    expect(text('[data-field="util"] .jp-GpuPanel-note')).toBe(
      'No utilization data for this MIG slice: NVML reports none for MIG.'
    );
    expect(host.querySelector('[data-field="util"] [role="meter"]')).toBeNull();
    expect(host.querySelector('[data-provenance]')).toBeNull();
  });

  it('marks NVML numbers as measured', () => {
    const me = aliceMe({ simulated: false });
    me.servers[0].gpus[0].utilizationSource = 'nvml';
    renderPanel({ status: 'ok', data: me, fetchedAt: NOW });
    expect(
      host.querySelector('[data-provenance]')?.getAttribute('data-provenance')
    ).toBe('measured');
    expect(text('[data-field="util"] .jp-GpuPanel-note')).toBe(
      'measured (NVML)'
    );
  });

  it('shows the no-GPU state with a link to the hub', () => {
    const me = aliceMe({
      servers: [
        { name: '', ready: true, allocatedGPUs: 0, usedGPUs: 0, gpus: [] }
      ]
    });
    renderPanel({ status: 'ok', data: me, fetchedAt: NOW });
    expect(text('[data-notice="No GPU attached"]')).toContain('hold no GPU');
    expect(host.querySelector('a')?.getAttribute('href')).toBe('/hub/home');
  });

  it('warns when the numbers are stale', () => {
    const me = aliceMe({ sampledAt: '2026-11-22T09:55:00Z' });
    renderPanel({ status: 'ok', data: me, fetchedAt: NOW });
    expect(text('[data-notice="No fresh GPU reading"]')).toBe(
      'No fresh GPU reading' +
        'The usage service’s last update is 5 min old. ' +
        'Utilization is not shown until the usage service updates again.'
    );
    // The document's last number is not shown as current.
    expect(text('[data-field="util"] .jp-GpuPanel-meterValue')).toBe(
      'no fresh reading'
    );
  });

  it('shows the idle countdown once the culler reports it', () => {
    const me = aliceMe({ idleCull: { cullAt: '2026-11-22T10:12:10Z' } });
    renderPanel({ status: 'ok', data: me, fetchedAt: NOW });
    expect(text('[data-field="idle-cull"]')).toBe(
      'stops in 12 min if still idle'
    );
  });
});

// Issue 9: what the panel shows when the numbers cannot be trusted. Each
// document is raw JSON as the usage API writes it, read through parseMe.
describe('GpuPanel: stale, unknown and unavailable (issue 9)', () => {
  function renderJson(json: unknown): HTMLDivElement {
    return renderPanel({ status: 'ok', data: parseMe(json), fetchedAt: NOW });
  }
  const STALE_REASON =
    'the GPU agent on node gpu-a100-0 has not sampled since 09:59:23 UTC (47 s)';

  it('says there is no fresh reading, in the API’s words, and shows no number', () => {
    renderJson(staleAliceJson());
    const notice = host.querySelector('[data-notice="No fresh GPU reading"]');
    expect(notice?.getAttribute('role')).toBe('status');
    expect(notice?.textContent).toContain(
      `The ${STALE_REASON.slice('the '.length)}. Utilization is not shown until the node agent reports again.`
    );
    const util = host.querySelector('[data-field="util"]')!;
    expect(util.querySelector('[role="meter"]')).toBeNull();
    expect(util.textContent).not.toMatch(/\d+ %/);
    expect(
      util.querySelector('.jp-GpuPanel-meterValue')?.getAttribute('data-value')
    ).toBe('');
    expect(util.getAttribute('data-state')).toBe('stale');
    // The 0 bytes of an unsampled unit are not a measurement.
    const memory = host.querySelector('[data-field="memory"]')!;
    expect(memory.textContent).not.toContain('0 B');
    expect(memory.querySelector('[role="meter"]')).toBeNull();
    // The share itself is still known and shown.
    expect(text('[data-field="description"]')).toBe(
      'MIG 3g.20gb on an A100, 3/7 of a GPU'
    );
  });

  it('hides a number the API sent for a unit it marks stale', () => {
    const me = staleAliceJson();
    const unit = (
      (me.servers as { gpus: Record<string, unknown>[] }[])[0].gpus as Record<
        string,
        unknown
      >[]
    )[0];
    unit.smUtilPercent = 97;
    unit.utilizationSource = 'nvml';
    unit.memoryUsedBytes = 1073741824;
    renderJson(me);
    expect(
      host.querySelector('[data-field="util"]')?.textContent
    ).not.toContain('97');
    expect(host.querySelector('[data-provenance]')).toBeNull();
  });

  it('names the node when an older API sends no stale reason', () => {
    const me = staleAliceJson();
    delete me.staleReason;
    const server = (me.servers as Record<string, unknown>[])[0];
    delete server.staleReason;
    delete (server.gpus as Record<string, unknown>[])[0].staleReason;
    renderJson(me);
    expect(text('[data-notice="No fresh GPU reading"]')).toContain(
      'The GPU agent on node gpu-a100-0 has stopped reporting.'
    );
  });

  it('says why utilization is unknown when the API gives a reason', () => {
    const me = JSON.parse(JSON.stringify(aliceMe({ simulated: false })));
    const unit = me.servers[0].gpus[0];
    unit.smUtilPercent = null;
    unit.utilizationSource = 'none';
    unit.utilizationUnknownReason =
      'this MIG slice reports no utilization: the node has no DCGM exporter';
    me.servers[0].simulated = false;
    renderJson(me);
    const util = host.querySelector('[data-field="util"]')!;
    expect(util.getAttribute('data-state')).toBe('unknown');
    expect(util.textContent).toContain(
      'This MIG slice reports no utilization: the node has no DCGM exporter.'
    );
    expect(util.textContent).not.toMatch(/\d+ %/);
    expect(
      host.querySelector('[data-notice="No fresh GPU reading"]')
    ).toBeNull();
  });

  it('says GPU-hours are unavailable and shows no numbers for them', () => {
    renderJson(ledgerDownAliceJson());
    const notice = host.querySelector('[data-notice="GPU-hours unavailable"]');
    expect(notice?.getAttribute('role')).toBe('status');
    expect(notice?.textContent).toContain(
      'GPU-hours are unavailable right now: the usage database is unreachable; retrying. Your live share above is current.'
    );
    expect(host.querySelector('[data-window]')).toBeNull();
    const hours = host.querySelector('[data-section="hours"]')!;
    expect(hours.textContent).not.toMatch(/\d/);
    // The live share still answers.
    expect(text('[data-field="util"] .jp-GpuPanel-meterValue')).toBe('49 %');
  });

  it('treats a missing gpuHoursStatus (older API) as ok', () => {
    const me = JSON.parse(JSON.stringify(aliceMe()));
    delete me.gpuHoursStatus;
    renderJson(me);
    expect(
      host.querySelector('[data-notice="GPU-hours unavailable"]')
    ).toBeNull();
    expect(text('[data-window="7d"] [data-field="used"]')).toBe('3.5');
  });

  it('does not call an MPS share without a description a whole GPU', () => {
    const me = bobAloneOnT4Json();
    const unit = (me.servers as { gpus: Record<string, unknown>[] }[])[0]
      .gpus[0];
    unit.kind = 'mps';
    delete unit.description;
    renderJson(me);
    expect(text('[data-field="description"]')).toBe(
      '1 of 4 MPS shares of a T4'
    );
  });

  it('words time-sliced use against the physical GPU, above what is held', () => {
    renderJson(bobAloneOnT4Json());
    expect(text('[data-field="util"] .jp-GpuPanel-meterValue')).toBe('100 %');
    expect(text('[data-field="util-meaning"]')).toBe(
      'You keep 100 % of the T4 busy while holding 1 of 4 shares.'
    );
    expect(
      host
        .querySelector('[data-field="util"] [role="meter"]')
        ?.getAttribute('aria-valuetext')
    ).toBe('100 % of the T4');
    expect(text('[data-window="today"] [data-field="allocated"]')).toBe('0.5');
    expect(text('[data-window="today"] [data-field="used"]')).toBe('2');
    expect(text('.jp-GpuPanel-footnote')).toContain(
      'Used can exceed allocated on a shared GPU'
    );
  });
});

describe('GpuStatus', () => {
  function renderStatus(state: UsageState, onClick = jest.fn()): void {
    act(() => root.render(<GpuStatus state={state} onClick={onClick} />));
  }

  it('is a labelled button that opens the panel', () => {
    const onClick = jest.fn();
    renderStatus({ status: 'ok', data: aliceMe(), fetchedAt: NOW }, onClick);
    const button = host.querySelector('button')!;
    expect(button.textContent).toBe('GPU 49 %sim');
    expect(button.getAttribute('aria-label')).toContain('(simulated)');
    act(() => button.click());
    expect(onClick).toHaveBeenCalled();
  });

  it('renders nothing outside JupyterHub', () => {
    renderStatus({ status: 'not-hub' });
    expect(host.innerHTML).toBe('');
  });

  it('says stale instead of a number when no unit has a fresh reading', () => {
    renderStatus({
      status: 'ok',
      data: parseMe(staleAliceJson()),
      fetchedAt: NOW
    });
    const button = host.querySelector('button')!;
    expect(button.textContent).toBe('GPU stale');
    expect(button.getAttribute('aria-label')).toContain('No fresh GPU reading');
  });

  it('shows a question mark when the service is unreachable', () => {
    renderStatus({
      status: 'unreachable',
      message: 'x',
      since: NOW,
      failures: 1
    });
    expect(host.textContent).toBe('GPU ?');
  });
});

// Issue 10: gpu-quota's budget in the Budget section, its notice at the top
// with a countdown that ticks between polls.
describe('GpuPanel: budget and notices (issue 10)', () => {
  afterEach(() => jest.useRealTimers());

  it('shows used and left per window and the concurrent limit', () => {
    renderPanel({
      status: 'ok',
      data: parseMe(bobOverBudgetJson()),
      fetchedAt: NOW
    });
    expect(text('[data-field="budget-24h"]')).toBe(
      '2 of 2 GPU-hours used in the last 24 h · none left'
    );
    expect(text('[data-field="budget-7d"]')).toBe(
      'unknown of 6 GPU-hours used in the last 7 days · unknown left'
    );
    expect(text('[data-field="budget-concurrent"]')).toBe(
      'concurrent: 1/7 of 3/7 GPU · 1 of 1 GPU server'
    );
    expect(host.querySelector('[data-field="budget"]')).toBeNull();
  });

  it('says why the budget is unknown when gpu-quota cannot be asked', () => {
    const json = {
      ...bobOverBudgetJson(),
      budget: {
        status: 'unavailable',
        reason: 'the quota service did not answer within 2s'
      }
    };
    renderPanel({ status: 'ok', data: parseMe(json), fetchedAt: NOW });
    expect(text('[data-field="budget"]')).toBe(
      'unknown: the quota service did not answer within 2s'
    );
  });

  it('shows a pending notice first, with a live countdown to its deadline', () => {
    jest.useFakeTimers();
    let clock = NOW.getTime();
    renderPanel(
      { status: 'ok', data: parseMe(bobOverBudgetJson()), fetchedAt: NOW },
      jest.fn(),
      () => new Date(clock)
    );
    const first = host.querySelector('.jp-GpuPanel-body')?.firstElementChild;
    expect(first?.getAttribute('data-notice')).toBe('GPU budget used up');
    expect(first?.getAttribute('data-service')).toBe('gpu-quota');
    expect(text('[data-field="notice-message"]')).toBe(
      'You are over your 24-hour GPU budget (2 of 2 GPU-hours used): your default GPU server stops at 10:10 UTC unless you stop it first.'
    );
    expect(text('[data-field="notice-countdown"]')).toBe('9 min 50 s left');
    act(() => {
      clock += 3000;
      jest.advanceTimersByTime(3000);
    });
    expect(text('[data-field="notice-countdown"]')).toBe('9 min 47 s left');
    act(() => {
      clock += 600_000;
      jest.advanceTimersByTime(1000);
    });
    expect(text('[data-field="notice-countdown"]')).toBe('due now');
  });

  it('shows no banner without notices', () => {
    renderPanel({ status: 'ok', data: aliceMe(), fetchedAt: NOW });
    expect(host.querySelector('[data-service]')).toBeNull();
  });
});

// Issue 12: gpu-culler's notice with its Snooze button, and why the last
// server was stopped.
describe('GpuPanel: the culler (issue 12)', () => {
  afterEach(() => jest.useRealTimers());

  function cullerProps(state: Partial<CullerState> = {}): CullerProps {
    return {
      state: { lastStop: null, snoozes: {}, installed: true, ...state },
      serviceName: 'gpu-culler',
      onSnooze: jest.fn(),
      onDismissStop: jest.fn()
    };
  }

  const idle = (notice: Record<string, unknown> = {}): UsageState => ({
    status: 'ok',
    data: parseMe(aliceIdleJson(notice)),
    fetchedAt: NOW
  });

  it('shows the idle countdown in words, live, with Snooze and the snoozes left', () => {
    jest.useFakeTimers();
    let clock = NOW.getTime();
    const culler = cullerProps();
    renderPanel(idle(), jest.fn(), () => new Date(clock), culler);
    const banner = host.querySelector('[data-service="gpu-culler"]');
    expect(banner?.getAttribute('data-notice')).toBe('Idle GPU server');
    expect(banner?.getAttribute('data-deadline')).toBe('2026-11-22T10:10:00Z');
    expect(text('[data-field="notice-message"]')).toBe(
      'Your GPU has been idle for 52 min; this server stops at 10:10 UTC unless you use it or snooze.'
    );
    expect(text('[data-field="notice-countdown"]')).toBe('9 min 50 s left');
    act(() => {
      clock += 5000;
      jest.advanceTimersByTime(5000);
    });
    expect(text('[data-field="notice-countdown"]')).toBe('9 min 45 s left');
    expect(text('[data-field="snoozes-left"]')).toBe('1 snooze left');
    const button = host.querySelector<HTMLButtonElement>(
      '[data-action="snooze"]'
    );
    expect(button?.textContent).toBe('Snooze');
    act(() => button?.click());
    expect(culler.onSnooze).toHaveBeenCalledWith('', '2026-11-22T10:10:00Z');
  });

  it('says in the Idle cull section when the culler stops the server, or that it watches', () => {
    renderPanel(idle(), jest.fn(), undefined, cullerProps());
    expect(text('[data-field="idle-cull"]')).toBe(
      `default server stops at ${clockText('2026-11-22T10:10:00Z')} unless its GPU is used`
    );
    renderPanel(
      { status: 'ok', data: aliceMe(), fetchedAt: NOW },
      jest.fn(),
      undefined,
      cullerProps()
    );
    expect(text('[data-field="idle-cull"]')).toBe(
      'on: gpu-culler stops GPU servers that sit idle, after a warning here'
    );
    renderPanel(
      { status: 'ok', data: aliceMe(), fetchedAt: NOW },
      jest.fn(),
      undefined,
      cullerProps({ installed: false })
    );
    expect(text('[data-field="idle-cull"]')).toBe('not configured');
  });

  it('has no Snooze button when the stop cannot be snoozed', () => {
    renderPanel(
      idle({ snoozable: false, snoozes: 2 }),
      jest.fn(),
      undefined,
      cullerProps()
    );
    expect(host.querySelector('[data-action="snooze"]')).toBeNull();
    expect(text('[data-field="snoozes-left"]')).toBe('no snoozes left');
  });

  it('says when a server reaches its time limit', () => {
    renderPanel(
      idle({ reason: 'max_age', snoozable: false, maxSnoozes: 0 }),
      jest.fn(),
      undefined,
      cullerProps()
    );
    expect(
      host
        .querySelector('[data-service="gpu-culler"]')
        ?.getAttribute('data-notice')
    ).toBe('GPU server time limit');
    expect(host.querySelector('[data-field="snoozes-left"]')).toBeNull();
  });

  it('disables the button while the snooze is on its way', () => {
    renderPanel(
      idle(),
      jest.fn(),
      undefined,
      cullerProps({ snoozes: { '': { status: 'pending' } } })
    );
    const button = host.querySelector<HTMLButtonElement>(
      '[data-action="snooze"]'
    );
    expect(button?.disabled).toBe(true);
    expect(button?.textContent).toBe('Snoozing…');
  });

  it('shows the new deadline at once after a snooze', () => {
    jest.useFakeTimers();
    const result = {
      server: '',
      deadline: '2026-11-22T10:40:00Z',
      snoozable: false,
      snoozes: 2,
      maxSnoozes: 2,
      message:
        'Snoozed. Your GPU has been idle for 52 min; this server stops at 10:40 UTC unless you use it.'
    };
    renderPanel(
      idle(),
      jest.fn(),
      () => NOW,
      cullerProps({ snoozes: { '': { status: 'done', result } } })
    );
    expect(
      host
        .querySelector('[data-service="gpu-culler"]')
        ?.getAttribute('data-deadline')
    ).toBe('2026-11-22T10:40:00Z');
    expect(text('[data-field="notice-message"]')).toBe(result.message);
    expect(text('[data-field="notice-countdown"]')).toBe('39 min 50 s left');
    expect(text('[data-field="snooze-result"]')).toBe(
      `Snoozed: this server now stops at ${clockText('2026-11-22T10:40:00Z')}.`
    );
    expect(text('[data-field="snoozes-left"]')).toBe('no snoozes left');
    expect(host.querySelector('[data-action="snooze"]')).toBeNull();

    // me caught up: its notice is shown, with the confirmation while the deadline is the snooze's.
    const caughtUp = (deadline: string): UsageState =>
      idle({ snoozes: 2, snoozable: false, deadline });
    const props = cullerProps({ snoozes: { '': { status: 'done', result } } });
    renderPanel(
      caughtUp('2026-11-22T10:40:00.000Z'),
      jest.fn(),
      () => NOW,
      props
    );
    expect(host.querySelector('[data-field="snooze-result"]')).not.toBeNull();
    renderPanel(caughtUp('2026-11-22T10:45:00Z'), jest.fn(), () => NOW, props);
    expect(host.querySelector('[data-field="snooze-result"]')).toBeNull();
  });

  it('shows why a snooze failed, and lets the user try again', () => {
    const culler = cullerProps({
      snoozes: {
        '': {
          status: 'failed',
          message:
            'gpu-culler could not be reached, so the stop was not snoozed.'
        }
      }
    });
    renderPanel(idle(), jest.fn(), undefined, culler);
    expect(text('[data-field="snooze-error"]')).toBe(
      'gpu-culler could not be reached, so the stop was not snoozed.'
    );
    expect(
      host.querySelector('[data-field="snooze-error"]')?.getAttribute('role')
    ).toBe('alert');
    act(() =>
      host.querySelector<HTMLButtonElement>('[data-action="snooze"]')?.click()
    );
    expect(culler.onSnooze).toHaveBeenCalledTimes(1);
  });

  it('has no Snooze button without the culler model (a notice of gpu-quota neither)', () => {
    renderPanel(idle());
    expect(host.querySelector('[data-action="snooze"]')).toBeNull();
    renderPanel(
      { status: 'ok', data: parseMe(bobOverBudgetJson()), fetchedAt: NOW },
      jest.fn(),
      undefined,
      cullerProps()
    );
    expect(host.querySelector('[data-action="snooze"]')).toBeNull();
  });

  it('says why the last server was stopped, until dismissed', () => {
    const culler = cullerProps({
      lastStop: {
        server: '',
        at: '2026-11-22T09:10:00Z',
        reason: 'idle',
        message: 'Stopped at 09:10 UTC: GPU idle for 1 h 7 min.'
      }
    });
    renderPanel(
      { status: 'ok', data: aliceMe(), fetchedAt: NOW },
      jest.fn(),
      undefined,
      culler
    );
    const notice = host.querySelector('[data-field="last-stop"]');
    expect(notice?.textContent).toContain('Your server was stopped');
    expect(text('[data-field="last-stop-message"]')).toBe(
      'Stopped at 09:10 UTC: GPU idle for 1 h 7 min.'
    );
    act(() =>
      host
        .querySelector<HTMLButtonElement>('[data-action="dismiss-stop"]')
        ?.click()
    );
    expect(culler.onDismissStop).toHaveBeenCalledTimes(1);
  });

  it('says why even while the usage service is unreachable', () => {
    renderPanel(
      { status: 'unreachable', message: 'x', since: NOW, failures: 1 },
      jest.fn(),
      undefined,
      cullerProps({
        lastStop: {
          server: 'train',
          at: '2026-11-22T09:10:00Z',
          reason: 'idle',
          message: 'Stopped at 09:10 UTC: GPU idle for 60 min.'
        }
      })
    );
    expect(text('[data-field="last-stop"] strong')).toBe(
      'Server train was stopped'
    );
  });
});

// Issue 13: the user's places in gpu-quota's waitlist.
describe('GpuPanel: the GPU waitlist (issue 13)', () => {
  afterEach(() => jest.useRealTimers());

  const usage: UsageState = { status: 'ok', data: aliceMe(), fetchedAt: NOW };

  function place(json: Record<string, unknown>): Place {
    const p = parsePlace(json);
    if (!p) {
      throw new Error('fixture place does not parse');
    }
    return p;
  }

  function waitlistProps(state: Partial<WaitlistState> = {}): WaitlistProps {
    return {
      state: { status: 'ok', places: [], leaving: {}, left: [], ...state },
      user: 'bob',
      onLeave: jest.fn()
    };
  }

  function render(
    waitlist: WaitlistProps,
    options: { state?: UsageState; clock?: () => Date; hubBase?: string } = {}
  ): void {
    act(() =>
      root.render(
        <GpuPanel
          state={options.state ?? usage}
          now={NOW}
          currentServer={{ user: 'bob', name: '' }}
          hubBase={options.hubBase ?? '/'}
          onRefresh={jest.fn()}
          clock={options.clock}
          waitlist={waitlist}
        />
      )
    );
  }

  it('shows a place in line: its words, "2 of 3", the estimate as a local time', () => {
    render(waitlistProps({ places: [place(bobWaitingPlaceJson())] }));
    const section = host.querySelector('[data-section="waitlist"]');
    expect(section?.querySelector('h3')?.textContent).toBe('GPU waitlist');
    expect(section?.getAttribute('aria-labelledby')).toBe(
      section?.querySelector('h3')?.id
    );
    const article = host.querySelector('article[data-server=""]');
    expect(article?.getAttribute('aria-label')).toBe(
      'Waiting for an H100 (default server)'
    );
    expect(text('[data-field="waitlist-message"]')).toBe(
      'You are number 2 of 3 waiting for a H100. Estimated: around 10:40. When your turn comes, one is held for you for a while.'
    );
    const position = host.querySelector('[data-field="waitlist-position"]');
    expect(position?.textContent).toBe('2 of 3');
    expect(position?.getAttribute('role')).toBe('status');
    expect(text('[data-field="waitlist-estimate"]')).toBe(
      aroundToday('2026-11-22T10:40:00Z')
    );
    expect(text('[data-field="waitlist-server"]')).toBe('default server');
    expect(host.querySelector('[data-notice="Your turn"]')).toBeNull();
  });

  it('says when there is no estimate, and that a server starts by itself', () => {
    render(
      waitlistProps({
        places: [
          place(bobWaitingPlaceJson({ estimate: undefined, autoStart: true }))
        ]
      })
    );
    expect(text('[data-field="waitlist-estimate"]')).toBe('no estimate yet');
    expect(text('[data-field="waitlist-server"]')).toBe(
      'default server, starts by itself on your turn'
    );
  });

  it('leaves only after the user confirms, and "Stay in line" keeps the place', () => {
    const props = waitlistProps({ places: [place(bobWaitingPlaceJson())] });
    render(props);
    const leave = host.querySelector<HTMLButtonElement>(
      '[data-action="leave-waitlist"]'
    );
    expect(leave?.textContent).toBe('Leave the waitlist');
    expect(leave?.getAttribute('aria-label')).toBe(
      'Leave the waitlist for an H100 (default server)'
    );
    act(() => leave?.click());
    expect(props.onLeave).not.toHaveBeenCalled();
    expect(text('[data-field="leave-question"]')).toBe(
      'Leave the waitlist for an H100? You give up your place (2 of 3); joining again later queues you anew.'
    );
    const stay = host.querySelector<HTMLButtonElement>(
      '[data-action="cancel-leave"]'
    );
    // The safe answer has the focus.
    expect(document.activeElement).toBe(stay);
    act(() => stay?.click());
    expect(host.querySelector('[data-field="leave-question"]')).toBeNull();
    expect(props.onLeave).not.toHaveBeenCalled();
    act(() =>
      host
        .querySelector<HTMLButtonElement>('[data-action="leave-waitlist"]')
        ?.click()
    );
    act(() =>
      host
        .querySelector<HTMLButtonElement>('[data-action="confirm-leave"]')
        ?.click()
    );
    expect(props.onLeave).toHaveBeenCalledWith('');
  });

  it('shows a leave under way, a failure in words, and the confirmation after', () => {
    const waiting = place(bobWaitingPlaceJson());
    render(
      waitlistProps({
        places: [waiting],
        leaving: { '': { status: 'pending' } }
      })
    );
    const button = host.querySelector<HTMLButtonElement>(
      '[data-action="leave-waitlist"]'
    );
    expect(button?.textContent).toBe('Leaving…');
    expect(button?.disabled).toBe(true);

    render(
      waitlistProps({
        places: [waiting],
        leaving: { '': { status: 'failed', message: 'gpu-quota could not…' } }
      })
    );
    const err = host.querySelector('[data-field="leave-error"]');
    expect(err?.getAttribute('role')).toBe('alert');
    expect(err?.textContent).toBe('gpu-quota could not…');

    render(waitlistProps({ places: [], left: [waiting] }));
    const left = host.querySelector('[data-field="waitlist-left"]');
    expect(left?.getAttribute('role')).toBe('status');
    expect(left?.textContent).toBe(
      'You left the waitlist for an H100 (default server).'
    );
  });

  it('shows the turn prominently with a live countdown: started for the user', () => {
    jest.useFakeTimers();
    let clock = NOW.getTime();
    render(waitlistProps({ places: [place(bobTurnPlaceJson())] }), {
      clock: () => new Date(clock)
    });
    const turn = host.querySelector('[data-notice="Your turn"]');
    expect(turn?.getAttribute('role')).toBe('status');
    expect(turn?.getAttribute('data-server')).toBe('train');
    expect(text('[data-field="turn-headline"]')).toBe(
      `Your turn: an H100 is held for you until ${clockText('2026-11-22T10:10:00Z')}`
    );
    expect(text('[data-field="turn-countdown"]')).toBe('9 min 50 s left');
    act(() => {
      clock += 5000;
      jest.advanceTimersByTime(5000);
    });
    expect(text('[data-field="turn-countdown"]')).toBe('9 min 45 s left');
    const start = host.querySelector('[data-field="turn-start"]');
    expect(start?.getAttribute('data-start')).toBe('being-started');
    expect(start?.textContent).toBe(
      'Your server train is being started for you. Its page on the Hub home shows how far it got.'
    );
    expect(start?.querySelector('a')?.getAttribute('href')).toBe('/hub/home');
    // The turn is not listed again as a place in line.
    expect(host.querySelector('article[data-server="train"]')).toBeNull();
  });

  const starts: Record<
    string,
    {
      json: Record<string, unknown>;
      hubBase: string;
      want: string;
      href: string;
    }
  > = {
    'named server, no auto-start: its spawn page': {
      json: bobTurnPlaceJson({ autoStart: false, startRequested: false }),
      hubBase: '/jhub/',
      want: 'Start train before the hold ends, or the GPU passes to the next person in line.',
      href: '/jhub/hub/spawn/bob/train'
    },
    'default server, no auto-start: the Hub home': {
      json: bobTurnPlaceJson({
        server: '',
        autoStart: false,
        startRequested: false
      }),
      hubBase: '/',
      want: 'Start your server from the Hub home before the hold ends, or the GPU passes to the next person in line.',
      href: '/hub/home'
    },
    'auto-start not asked yet': {
      json: bobTurnPlaceJson({ server: '', startRequested: false }),
      hubBase: '/',
      want: 'Your server will be started for you in a moment. You can also start it yourself.',
      href: '/hub/home'
    }
  };
  it.each(Object.entries(starts))(
    'tells how the server starts: %s',
    (_, tc) => {
      render(waitlistProps({ places: [place(tc.json)] }), {
        hubBase: tc.hubBase
      });
      const start = host.querySelector('[data-field="turn-start"]');
      expect(start?.textContent).toBe(tc.want);
      expect(start?.querySelector('a')?.getAttribute('href')).toBe(tc.href);
    }
  );

  it('shows a server started from the queue as news with a link to it, not as a turn', () => {
    render(
      waitlistProps({
        places: [place(bobStartedPlaceJson()), place(bobWaitingPlaceJson())]
      }),
      { hubBase: '/jhub/' }
    );
    const started = host.querySelector('article[data-server="gpu"]');
    expect(started?.getAttribute('data-started-at')).toBe(
      '2026-11-22T09:58:00Z'
    );
    const message = started?.querySelector('[data-field="waitlist-started"]');
    expect(message?.getAttribute('role')).toBe('status');
    expect(message?.textContent).toBe(
      'Your server "gpu" was started for you at 09:58 UTC with a H100 from the waitlist.'
    );
    const open = started?.querySelector('[data-action="open-server"]');
    expect(open?.textContent).toBe('Open gpu');
    expect(open?.getAttribute('href')).toBe('/jhub/user/bob/gpu/');
    expect(text('[data-field="waitlist-started-open"]')).toBe(
      `Open gpu · started ${clockText('2026-11-22T09:58:00Z')}`
    );
    // Not a turn, not a place in line, nothing to leave.
    expect(host.querySelector('[data-notice="Your turn"]')).toBeNull();
    expect(started?.querySelector('[data-action="leave-waitlist"]')).toBeNull();
    expect(
      started?.querySelector('[data-field="waitlist-position"]')
    ).toBeNull();
    // The default server still waits, with its own Leave button.
    expect(
      host.querySelectorAll('[data-action="leave-waitlist"]')
    ).toHaveLength(1);
  });

  it('opens a started default server at user/<name>/, with words of its own when gpu-quota sends none', () => {
    render(
      waitlistProps({
        places: [
          place(
            bobStartedPlaceJson({
              server: '',
              message: '',
              startedAt: undefined
            })
          )
        ]
      })
    );
    expect(text('[data-field="waitlist-started"]')).toBe(
      'Your server was started with an H100 from the waitlist.'
    );
    const open = host.querySelector('[data-action="open-server"]');
    expect(open?.textContent).toBe('Open your server');
    expect(open?.getAttribute('href')).toBe('/user/bob/');
    expect(text('[data-field="waitlist-started-open"]')).toBe(
      'Open your server'
    );
  });

  it('names what giving up a turn means', () => {
    render(waitlistProps({ places: [place(bobTurnPlaceJson())] }));
    act(() =>
      host
        .querySelector<HTMLButtonElement>('[data-action="leave-waitlist"]')
        ?.click()
    );
    expect(text('[data-field="leave-question"]')).toBe(
      'Leave the waitlist for an H100? The H100 held for you passes to the next person in line.'
    );
  });

  it('says why a user over quota is passed over, once', () => {
    const blocked = 'you are over your 24-hour GPU budget';
    render(
      waitlistProps({
        places: [
          place(
            bobWaitingPlaceJson({
              blocked,
              message: `You are number 2 of 3 waiting for a H100. For now you cannot be served: ${blocked}`
            })
          )
        ]
      })
    );
    expect(host.querySelector('[data-field="waitlist-blocked"]')).toBeNull();
    render(
      waitlistProps({ places: [place(bobWaitingPlaceJson({ blocked }))] })
    );
    expect(text('[data-field="waitlist-blocked"]')).toBe(
      'For now you cannot be served: you are over your 24-hour GPU budget.'
    );
  });

  const silent: Record<string, Partial<WaitlistState>> = {
    'the waitlist is off': {
      status: 'off',
      places: [place(bobWaitingPlaceJson())]
    },
    'not answered yet': { status: 'loading' },
    'the user waits for nothing': { status: 'ok' }
  };
  it.each(Object.entries(silent))('says nothing when %s', (_, state) => {
    render(waitlistProps(state));
    expect(host.querySelector('[data-section="waitlist"]')).toBeNull();
    expect(host.textContent).not.toContain('waitlist');
  });

  it('keeps the last known places when gpu-quota cannot be read, and says so', () => {
    render(
      waitlistProps({
        status: 'unavailable',
        places: [place(bobWaitingPlaceJson())]
      })
    );
    expect(text('[data-field="waitlist-position"]')).toBe('2 of 3');
    expect(text('[data-field="waitlist-unavailable"]')).toContain(
      'last known state'
    );
  });

  it('shows the places even while the usage service is unreachable', () => {
    render(waitlistProps({ places: [place(bobTurnPlaceJson())] }), {
      state: { status: 'unreachable', message: 'x', since: NOW, failures: 1 }
    });
    expect(host.querySelector('[data-notice="Your turn"]')).not.toBeNull();
    render(waitlistProps({ places: [place(bobTurnPlaceJson())] }), {
      state: { status: 'not-hub' }
    });
    expect(host.querySelector('[data-section="waitlist"]')).toBeNull();
  });
});
