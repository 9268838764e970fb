// The panel and status bar views as plain React components: they take a
// UsageState and render it; no JupyterLab imports, so jest renders them in jsdom.

import * as React from 'react';

import type { GpuHolding, MeResponse, ServerUsage, UserNotice } from './api';
import type { LastStop } from './culler';
import {
  CullerState,
  SnoozeState,
  isCullerNotice,
  withSnooze
} from './cullerModel';
import {
  asSentence,
  clockText,
  budgetLines,
  describeHolding,
  describeIdleCull,
  documentIsOld,
  documentProvenance,
  formatGpuHours,
  formatNumber,
  formatDuration,
  gpuHoursUnavailableText,
  holdsGpu,
  isSimulated,
  memoryText,
  noticeCountdown,
  noticeTitle,
  recentUtilization,
  sampleAgeSeconds,
  serverLabel,
  snoozesLeftText,
  sparklinePath,
  sparklineSummary,
  staleNotice,
  statusBarText,
  unitIsStale,
  unknownUsageNote,
  usedAboveAllocatedNote,
  utilizationView
} from './format';
import type { UsageState } from './model';
import {
  RightSize,
  adviceHeadline,
  alsoFits,
  evidenceText,
  periodText
} from './rightsize';
import type { RightSizeState } from './rightsizeModel';
import {
  Place,
  estimateText,
  holdCountdown,
  positionText,
  serverUrl,
  startUrl,
  turnHeadline,
  turnStart,
  waitedFor
} from './waitlist';
import type { LeaveState, WaitlistState } from './waitlistModel';

export interface PanelProps {
  state: UsageState;
  now: Date;
  /** The server this JupyterLab belongs to (page config hubServerName / hubServerUser). */
  currentServer: { user: string; name: string };
  /** Hub base URL (`/` or `/jhub/`) for the link to the Hub home page. */
  hubBase: string;
  onRefresh: () => void;
  /**
   * The clock the notice countdowns tick on, every second between polls
   * (default: the system clock); `now` is the time of the render.
   */
  clock?: () => Date;
  /** gpu-culler's side: the last stop and the snooze button; absent without a culler model. */
  culler?: CullerProps;
  /** gpu-quota's waitlist: the user's places; absent without a waitlist model. */
  waitlist?: WaitlistProps;
  /** The usage API's right-size advice; absent without a right-size model. */
  rightSize?: RightSizeState;
}

export interface WaitlistProps {
  state: WaitlistState;
  /** The Hub user the places belong to (for the spawn link of a named server). */
  user: string;
  /** Leave the queue `server` waits in. */
  onLeave: (server: string) => void;
}

export interface CullerProps {
  state: CullerState;
  /** The culler's Hub service name (notices of it get a Snooze button). */
  serviceName: string;
  /** Snooze the stop announced on `server`, whose deadline is `deadline`. */
  onSnooze: (server: string, deadline?: string) => void;
  onDismissStop: () => void;
}

export function GpuPanel(props: PanelProps): JSX.Element {
  const { state } = props;
  const lastStop =
    state.status !== 'not-hub' ? props.culler?.state.lastStop : null;
  const provenance =
    state.status === 'ok' ? documentProvenance(state.data) : null;
  return (
    <div className="jp-GpuPanel-content">
      <header className="jp-GpuPanel-header">
        <h2 className="jp-GpuPanel-title">GPU</h2>
        {provenance !== null && (
          <ProvenanceBadge simulated={provenance === 'simulated'} />
        )}
        <span className="jp-GpuPanel-spacer" />
        {state.status !== 'not-hub' && (
          <button
            type="button"
            className="jp-GpuPanel-refresh"
            onClick={props.onRefresh}
            title="Refresh GPU usage now"
            aria-label="Refresh GPU usage now"
          >
            <RefreshGlyph />
          </button>
        )}
      </header>
      {lastStop && props.culler && (
        <StopNotice stop={lastStop} onDismiss={props.culler.onDismissStop} />
      )}
      {props.waitlist && state.status !== 'not-hub' && (
        <Waitlist
          {...props.waitlist}
          hubBase={props.hubBase}
          now={props.now}
          clock={props.clock}
        />
      )}
      <Body {...props} />
    </div>
  );
}

function Body(props: PanelProps): JSX.Element {
  const { state } = props;
  switch (state.status) {
    case 'not-hub':
      return (
        <Notice kind="info" title="Not running under JupyterHub">
          The GPU panel reads your share of a GPU from the hub’s gpu-usage
          service. This JupyterLab was not started by JupyterHub, so there is
          nothing to show.
        </Notice>
      );
    case 'loading':
      return (
        <Notice kind="info" title="Loading GPU usage…">
          Asking the gpu-usage service for your share.
        </Notice>
      );
    case 'unreachable':
      return (
        <Notice kind="warn" title="GPU usage service unreachable">
          <p>
            The gpu-usage service did not answer ({state.message}). JupyterLab
            and your kernels keep working; only this panel is affected.
          </p>
          <p>
            Retrying with backoff (failed {state.failures}{' '}
            {state.failures === 1 ? 'time' : 'times'} since{' '}
            {formatClock(state.since)}).
          </p>
        </Notice>
      );
    case 'unauthorized':
      return (
        <Notice kind="warn" title="Not allowed to read GPU usage">
          <p>
            The gpu-usage service refused this session’s token ({state.message}
            ).
          </p>
          <p>
            Your hub administrator must grant the scope{' '}
            <code>access:services!service=gpu-usage</code>.
          </p>
        </Notice>
      );
    case 'error':
      return (
        <Notice kind="warn" title="GPU usage not available">
          {state.message}
        </Notice>
      );
    case 'ok':
      return <Usage {...props} data={state.data} fetchedAt={state.fetchedAt} />;
  }
}

function Usage(
  props: PanelProps & { data: MeResponse; fetchedAt: Date }
): JSX.Element {
  const { data, now } = props;
  const notice = staleNotice(data, now);
  const stale = notice !== null;
  const docOld = documentIsOld(data, now);
  const age = sampleAgeSeconds(data, now);
  const points = recentUtilization(data.history, now);
  const hoursUnavailable = gpuHoursUnavailableText(data);
  return (
    <div className="jp-GpuPanel-body">
      {data.notices.map(n => {
        const culler =
          props.culler && isCullerNotice(n, props.culler.serviceName)
            ? props.culler
            : undefined;
        const snooze = culler?.state.snoozes[n.server];
        return (
          <NoticeBanner
            key={n.service}
            notice={culler ? withSnooze(n, snooze) : n}
            now={now}
            clock={props.clock}
            snooze={
              culler && {
                state: snooze,
                onSnooze: () => culler.onSnooze(n.server, n.deadline)
              }
            }
          />
        );
      })}
      {notice && (
        <Notice kind="warn" title="No fresh GPU reading">
          {notice.reasons.map(r => `${asSentence(r)} `).join('')}
          {notice.until}
        </Notice>
      )}
      <Section title="Your share" id="share">
        {holdsGpu(data) ? (
          data.servers
            .filter(s => s.gpus.length > 0)
            .map(s => (
              <Server
                key={s.name || '(default)'}
                server={s}
                docOld={docOld}
                current={
                  s.name === props.currentServer.name &&
                  data.user === props.currentServer.user
                }
              />
            ))
        ) : (
          <Notice kind="info" title="No GPU attached">
            <p>
              {data.servers.length === 0
                ? 'You have no running server that holds a GPU.'
                : 'Your running servers hold no GPU.'}{' '}
              To use one, stop this server and start it with a GPU profile from
              the{' '}
              <a
                href={`${props.hubBase}hub/home`}
                target="_blank"
                rel="noreferrer"
              >
                hub control panel
              </a>
              .
            </p>
          </Notice>
        )}
        {data.servers
          .filter(s => s.gpus.length === 0)
          .map(s => (
            <p key={s.name || '(default)'} className="jp-GpuPanel-muted">
              {serverLabel(s.name)}: no GPU
            </p>
          ))}
      </Section>
      <Section title="Last hour" id="history">
        <Sparkline points={points} now={now} stale={stale} />
      </Section>
      <Section title="GPU-hours" id="hours">
        {hoursUnavailable ? (
          <Notice kind="warn" title="GPU-hours unavailable">
            {hoursUnavailable}
          </Notice>
        ) : (
          <GpuHours hours={data.gpuHours} />
        )}
      </Section>
      {props.rightSize && props.rightSize.status !== 'off' && (
        <Section title="Right size" id="rightsize">
          <RightSizeAdvice
            state={props.rightSize}
            current={
              data.user === props.currentServer.user
                ? props.currentServer.name
                : null
            }
          />
        </Section>
      )}
      <Section title="Budget" id="budget">
        {budgetLines(data.budget).map(line => (
          <p
            key={line.field}
            className={line.muted ? 'jp-GpuPanel-muted' : 'jp-GpuPanel-value'}
            data-field={line.field}
          >
            {line.text}
          </p>
        ))}
      </Section>
      <Section title="Idle cull" id="idle">
        <IdleCull data={data} now={now} culler={props.culler} />
      </Section>
      <footer className="jp-GpuPanel-footer">
        {data.user} · updated {formatClock(props.fetchedAt)}
        {age !== null && !stale && ` · sample ${formatDuration(age)} old`}
      </footer>
    </div>
  );
}

/**
 * The usage API's right-size advice per server, this server first: what it
 * would have taken, the evidence in words, and the service's caveats. Never
 * made up here: without an answer it says so.
 */
function RightSizeAdvice(props: {
  state: RightSizeState;
  /** This JupyterLab's server name, when the advice is its owner's. */
  current: string | null;
}): JSX.Element {
  const { state, current } = props;
  const data = state.data;
  if (!data) {
    return (
      <p className="jp-GpuPanel-muted" data-field="rightsize-status">
        {state.status === 'loading'
          ? 'Asking the gpu-usage service for advice…'
          : 'Right-size advice could not be read just now.'}
      </p>
    );
  }
  const servers = [...data.servers].sort(
    (a, b) => Number(b.server === current) - Number(a.server === current)
  );
  return (
    <>
      {servers.length === 0 && (
        <p className="jp-GpuPanel-muted" data-field="rightsize-none">
          No GPU use of yours was measured over the last{' '}
          {periodText(data.period)}.
        </p>
      )}
      {servers.map(a => (
        <Advice
          key={`${a.server}|${a.held.class}`}
          advice={a}
          current={a.server === current}
        />
      ))}
      <p className="jp-GpuPanel-footnote" data-field="rightsize-period">
        Measured over the last {periodText(data.period)} by the gpu-usage
        service.
        {state.status === 'unavailable' &&
          ' It could not be read just now; this is the last known advice.'}
      </p>
    </>
  );
}

function Advice(props: { advice: RightSize; current: boolean }): JSX.Element {
  const a = props.advice;
  const subject = props.current
    ? 'This server'
    : a.server
      ? `Your server “${a.server}”`
      : 'Your default server';
  const also = alsoFits(a);
  return (
    <div
      className="jp-GpuPanel-advice"
      data-field="rightsize-advice"
      data-server={a.server}
      data-verdict={a.verdict}
      data-current={props.current ? 'true' : 'false'}
    >
      <p className="jp-GpuPanel-value" data-field="rightsize-headline">
        {props.current ? '' : `${subject}: `}
        {adviceHeadline(a)}
        {a.simulated && ' '}
        {a.simulated && (
          <span
            className="jp-GpuPanel-badge jp-mod-simulated"
            data-field="rightsize-simulated"
          >
            simulated
          </span>
        )}
      </p>
      {a.verdict === 'not-enough-data' ? (
        <p className="jp-GpuPanel-muted" data-field="rightsize-evidence">
          {a.reason}
        </p>
      ) : (
        <p data-field="rightsize-evidence">{evidenceText(a, subject)}</p>
      )}
      {also && (
        <p className="jp-GpuPanel-muted" data-field="rightsize-also">
          {also}
        </p>
      )}
      {a.caveats.map(c => (
        <p
          key={c}
          className="jp-GpuPanel-footnote"
          data-field="rightsize-caveat"
        >
          {c}
        </p>
      ))}
    </div>
  );
}

/**
 * The idle-cull line: the culler's stop of this user's server when one is
 * announced, that the culler watches when it answers, else what `me` says.
 */
function IdleCull(props: {
  data: MeResponse;
  now: Date;
  culler?: CullerProps;
}): JSX.Element {
  const { data, now, culler } = props;
  let text = describeIdleCull(data.idleCull, now);
  let on = data.idleCull !== null;
  if (culler) {
    const n = data.notices.find(x => isCullerNotice(x, culler.serviceName));
    const deadline =
      n && withSnooze(n, culler.state.snoozes[n.server]).deadline;
    if (deadline) {
      text = `${serverLabel(n.server)} stops at ${clockText(deadline)} unless its GPU is used`;
      on = true;
    } else if (culler.state.installed && !data.idleCull) {
      text = `on: ${culler.serviceName} stops GPU servers that sit idle, after a warning here`;
      on = true;
    }
  }
  return (
    <p
      className={on ? 'jp-GpuPanel-value' : 'jp-GpuPanel-muted'}
      data-field="idle-cull"
    >
      {text}
    </p>
  );
}

function GpuHours(props: { hours: MeResponse['gpuHours'] }): JSX.Element {
  const { hours } = props;
  const notes = [usedAboveAllocatedNote(hours), unknownUsageNote(hours)].filter(
    (n): n is string => n !== null
  );
  return (
    <>
      <table className="jp-GpuPanel-hours">
        <thead>
          <tr>
            <th scope="col">
              <span className="jp-GpuPanel-visuallyHidden">Window</span>
            </th>
            <th scope="col">Allocated</th>
            <th scope="col">Used</th>
          </tr>
        </thead>
        <tbody>
          {(
            [
              ['today', 'Today'],
              ['7d', '7 days'],
              ['30d', '30 days']
            ] as const
          ).map(([key, label]) => {
            const w = hours[key];
            return (
              <tr key={key} data-window={key}>
                <th scope="row">{label}</th>
                <td data-field="allocated">{formatGpuHours(w?.allocated)}</td>
                <td data-field="used">{formatGpuHours(w?.used)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
      {notes.map(n => (
        <p key={n} className="jp-GpuPanel-footnote">
          {n}
        </p>
      ))}
    </>
  );
}

function Server(props: {
  server: ServerUsage;
  current: boolean;
  docOld: boolean;
}): JSX.Element {
  const { server } = props;
  const label = serverLabel(server.name);
  return (
    <article
      className="jp-GpuPanel-server"
      aria-label={`${label}${props.current ? ' (this server)' : ''}`}
      data-server={server.name}
    >
      <div className="jp-GpuPanel-serverHead">
        <span className="jp-GpuPanel-serverName">{label}</span>
        {props.current && <span className="jp-GpuPanel-tag">this server</span>}
        {!server.ready && <span className="jp-GpuPanel-tag">starting</span>}
        {server.node && (
          <span className="jp-GpuPanel-muted jp-GpuPanel-node">
            on {server.node}
          </span>
        )}
      </div>
      {server.gpus.map((g, i) => (
        <Holding
          key={g.uuid ?? i}
          gpu={g}
          stale={unitIsStale(g, server, props.docOld)}
        />
      ))}
    </article>
  );
}

function Holding(props: { gpu: GpuHolding; stale: boolean }): JSX.Element {
  const { gpu, stale } = props;
  const util = utilizationView(gpu, stale);
  return (
    <div className="jp-GpuPanel-holding" data-uuid={gpu.uuid}>
      <p className="jp-GpuPanel-description" data-field="description">
        {describeHolding(gpu)}
      </p>
      <Meter
        label="SM utilization"
        field="util"
        state={util.state}
        value={util.state === 'value' ? util.percent : null}
        text={util.text}
        valueText={util.state === 'value' ? util.valueText : undefined}
        note={
          util.state === 'value'
            ? util.note
            : util.state === 'unknown'
              ? util.reason
              : undefined
        }
        simulated={
          util.state === 'value' && gpu.utilizationSource === 'simulated'
        }
      />
      {util.state === 'value' && util.meaning && (
        <p className="jp-GpuPanel-meaning" data-field="util-meaning">
          {util.meaning}
        </p>
      )}
      <Meter
        label="Memory"
        field="memory"
        state={stale ? 'stale' : 'value'}
        value={
          !stale && gpu.memoryTotalBytes > 0
            ? (gpu.memoryUsedBytes / gpu.memoryTotalBytes) * 100
            : null
        }
        text={memoryText(gpu, stale)}
      />
    </div>
  );
}

function Meter(props: {
  label: string;
  field: string;
  /** value: a current number; stale / unknown: none is shown. */
  state: 'value' | 'stale' | 'unknown';
  value: number | null;
  text: string;
  /** What a screen reader hears for the bar (default: text). */
  valueText?: string;
  note?: string;
  simulated?: boolean;
}): JSX.Element {
  const pct =
    props.state !== 'value' || props.value === null
      ? null
      : Math.min(Math.max(props.value, 0), 100);
  return (
    <div
      className={`jp-GpuPanel-meter jp-mod-${props.state}`}
      data-field={props.field}
      data-state={props.state}
    >
      <div className="jp-GpuPanel-meterHead">
        <span className="jp-GpuPanel-meterLabel">{props.label}</span>
        <span
          className="jp-GpuPanel-meterValue"
          data-value={pct === null ? '' : String(Math.round(pct))}
        >
          {props.text}
        </span>
      </div>
      {pct !== null && (
        <div
          className="jp-GpuPanel-bar"
          role="meter"
          aria-label={props.label}
          aria-valuemin={0}
          aria-valuemax={100}
          aria-valuenow={Math.round(pct)}
          aria-valuetext={props.valueText ?? props.text}
        >
          <div
            className={
              'jp-GpuPanel-barFill' + (pct >= 90 ? ' jp-mod-high' : '')
            }
            style={{ width: `${pct}%` }}
          />
        </div>
      )}
      {props.note && (
        <span
          className={
            'jp-GpuPanel-note' + (props.simulated ? ' jp-mod-simulated' : '')
          }
        >
          {props.note}
        </span>
      )}
    </div>
  );
}

const SPARK_W = 240;
const SPARK_H = 48;

export function Sparkline(props: {
  points: { t: number; v: number }[];
  now: Date;
  stale?: boolean;
}): JSX.Element {
  const summary = sparklineSummary(props.points, props.stale);
  const d = sparklinePath(props.points, props.now, SPARK_W, SPARK_H);
  const area = d
    ? d
        .split(/ (?=M)/)
        .map(seg => {
          const coords: string[] = seg.match(/-?[\d.]+,-?[\d.]+/g) ?? [];
          if (coords.length === 0) {
            return '';
          }
          const first = coords[0].split(',')[0];
          const last = coords[coords.length - 1].split(',')[0];
          return `${seg} L${last},${SPARK_H} L${first},${SPARK_H} Z`;
        })
        .join(' ')
    : '';
  return (
    <figure className="jp-GpuPanel-spark">
      <svg
        role="img"
        aria-label={summary}
        viewBox={`0 0 ${SPARK_W} ${SPARK_H}`}
        preserveAspectRatio="none"
        className="jp-GpuPanel-sparkSvg"
      >
        <line
          className="jp-GpuPanel-sparkGrid"
          x1="0"
          x2={SPARK_W}
          y1={SPARK_H / 2}
          y2={SPARK_H / 2}
        />
        {area && <path className="jp-GpuPanel-sparkArea" d={area} />}
        {d && <path className="jp-GpuPanel-sparkLine" d={d} />}
      </svg>
      <figcaption className="jp-GpuPanel-sparkCaption" aria-hidden="true">
        <span>−60 min</span>
        <span>SM utilization</span>
        <span>now</span>
      </figcaption>
    </figure>
  );
}

function Section(props: {
  title: string;
  id: string;
  children: React.ReactNode;
}): JSX.Element {
  const headingId = `jp-GpuPanel-${props.id}`;
  return (
    <section
      className="jp-GpuPanel-section"
      aria-labelledby={headingId}
      data-section={props.id}
    >
      <h3 id={headingId} className="jp-GpuPanel-sectionTitle">
        {props.title}
      </h3>
      {props.children}
    </section>
  );
}

function Notice(props: {
  kind: 'info' | 'warn';
  title: string;
  children: React.ReactNode;
}): JSX.Element {
  return (
    <div
      className={`jp-GpuPanel-notice jp-mod-${props.kind}`}
      role="status"
      data-notice={props.title}
    >
      <strong className="jp-GpuPanel-noticeTitle">{props.title}</strong>
      <div className="jp-GpuPanel-noticeBody">{props.children}</div>
    </div>
  );
}

/**
 * A pending notice of an acting service (gpu-quota over a budget, ...): its
 * message and a countdown to its deadline that ticks every second, not only
 * when the panel polls.
 */
function NoticeBanner(props: {
  notice: UserNotice;
  now: Date;
  clock?: () => Date;
  /** A culler notice: its snooze, and the button's action. */
  snooze?: { state?: SnoozeState; onSnooze: () => void };
}): JSX.Element {
  const { notice: n } = props;
  const [now, setNow] = React.useState(props.now);
  React.useEffect(() => setNow(props.now), [props.now]);
  React.useEffect(() => {
    if (!n.deadline) {
      return;
    }
    const clock = props.clock ?? (() => new Date());
    const timer = setInterval(() => setNow(clock()), 1000);
    return () => clearInterval(timer);
  }, [n.deadline, props.clock]);
  const countdown = noticeCountdown(n, now);
  return (
    <div
      className="jp-GpuPanel-notice jp-mod-warn jp-GpuPanel-serviceNotice"
      role="status"
      data-notice={noticeTitle(n)}
      data-service={n.service}
      data-server={n.server}
      data-deadline={n.deadline ?? ''}
    >
      <strong className="jp-GpuPanel-noticeTitle">{noticeTitle(n)}</strong>
      <div className="jp-GpuPanel-noticeBody">
        <p data-field="notice-message">{n.message}</p>
        {countdown && (
          <p className="jp-GpuPanel-countdown" data-field="notice-countdown">
            {countdown}
          </p>
        )}
        {props.snooze && <Snooze notice={n} {...props.snooze} />}
      </div>
    </div>
  );
}

/**
 * The culler notice's snooze: what it did, how many are left, and the button
 * while the stop can still be snoozed.
 */
function Snooze(props: {
  notice: UserNotice;
  state?: SnoozeState;
  onSnooze: () => void;
}): JSX.Element {
  const { notice: n, state } = props;
  const left = snoozesLeftText(n);
  const pending = state?.status === 'pending';
  return (
    <>
      {state?.status === 'done' &&
        sameTime(state.result.deadline, n.deadline) && (
          <p className="jp-GpuPanel-value" data-field="snooze-result">
            Snoozed: this server now stops at {clockText(state.result.deadline)}
            .
          </p>
        )}
      {state?.status === 'failed' && (
        <p
          className="jp-GpuPanel-snoozeError"
          role="alert"
          data-field="snooze-error"
        >
          {state.message}
        </p>
      )}
      {(n.snoozable || left) && (
        <div className="jp-GpuPanel-snooze">
          {n.snoozable && (
            <button
              type="button"
              className="jp-GpuPanel-snoozeButton"
              onClick={props.onSnooze}
              disabled={pending}
              data-action="snooze"
            >
              {pending ? 'Snoozing…' : 'Snooze'}
            </button>
          )}
          {left && (
            <span className="jp-GpuPanel-muted" data-field="snoozes-left">
              {left}
            </span>
          )}
        </div>
      )}
    </>
  );
}

/** Two ISO 8601 times name the same instant. */
function sameTime(a: string, b?: string): boolean {
  return b !== undefined && Date.parse(a) === Date.parse(b);
}

/** Why the culler stopped a server last; shown until dismissed. */
function StopNotice(props: {
  stop: LastStop;
  onDismiss: () => void;
}): JSX.Element {
  return (
    <div
      className="jp-GpuPanel-notice jp-mod-info jp-GpuPanel-stopNotice"
      role="status"
      data-notice="Server stopped"
      data-field="last-stop"
    >
      <strong className="jp-GpuPanel-noticeTitle">
        {props.stop.server
          ? `Server ${props.stop.server} was stopped`
          : 'Your server was stopped'}
      </strong>
      <div className="jp-GpuPanel-noticeBody">
        <p data-field="last-stop-message">{props.stop.message}</p>
      </div>
      <button
        type="button"
        className="jp-GpuPanel-dismiss"
        onClick={props.onDismiss}
        aria-label="Dismiss this notice"
        title="Dismiss"
        data-action="dismiss-stop"
      >
        ×
      </button>
    </div>
  );
}

/**
 * gpu-quota's waitlist: the user's turn, prominent, a server just started
 * from the queue, and every place in line with its message, position,
 * estimate and a way out. Nothing at all while the user waits for nothing,
 * or the waitlist is off.
 */
export function Waitlist(
  props: WaitlistProps & {
    hubBase: string;
    now: Date;
    clock?: () => Date;
  }
): JSX.Element | null {
  const { state } = props;
  if (
    state.status === 'off' ||
    (state.places.length === 0 && state.left.length === 0)
  ) {
    return null;
  }
  const turns = state.places.filter(p => p.state === 'held');
  const started = state.places.filter(p => p.state === 'started');
  const inLine = state.places.filter(p => p.state === 'waiting');
  return (
    <section
      className="jp-GpuPanel-section jp-GpuPanel-waitlist"
      aria-labelledby="jp-GpuPanel-waitlist"
      data-section="waitlist"
    >
      <h3 id="jp-GpuPanel-waitlist" className="jp-GpuPanel-sectionTitle">
        GPU waitlist
      </h3>
      {turns.map(p => (
        <Turn
          key={p.server}
          place={p}
          user={props.user}
          hubBase={props.hubBase}
          now={props.now}
          clock={props.clock}
          leave={state.leaving[p.server]}
          onLeave={() => props.onLeave(p.server)}
        />
      ))}
      {started.map(p => (
        <Started
          key={p.server}
          place={p}
          user={props.user}
          hubBase={props.hubBase}
        />
      ))}
      {inLine.map(p => (
        <InLine
          key={p.server}
          place={p}
          now={props.now}
          leave={state.leaving[p.server]}
          onLeave={() => props.onLeave(p.server)}
        />
      ))}
      {state.left.map(p => (
        <p
          key={p.server}
          className="jp-GpuPanel-muted"
          role="status"
          data-field="waitlist-left"
          data-server={p.server}
        >
          You left the waitlist for {waitedFor(p)} ({serverLabel(p.server)}).
        </p>
      ))}
      {state.status === 'unavailable' && (
        <p className="jp-GpuPanel-footnote" data-field="waitlist-unavailable">
          The waitlist could not be read just now; this is its last known state.
        </p>
      )}
    </section>
  );
}

/** The user's turn: the unit held for them, until when, and how the server starts. */
function Turn(props: {
  place: Place;
  user: string;
  hubBase: string;
  now: Date;
  clock?: () => Date;
  leave?: LeaveState;
  onLeave: () => void;
}): JSX.Element {
  const { place: p } = props;
  const now = useTicking(props.now, props.clock, p.heldUntil);
  const countdown = holdCountdown(p, now);
  const href = startUrl(props.hubBase, props.user, p.server);
  const start = turnStart(p);
  const yourServer = p.server ? `your server ${p.server}` : 'your server';
  return (
    <div
      className="jp-GpuPanel-notice jp-GpuPanel-turn"
      role="status"
      data-notice="Your turn"
      data-server={p.server}
      data-held-until={p.heldUntil ?? ''}
    >
      <strong className="jp-GpuPanel-noticeTitle" data-field="turn-headline">
        {turnHeadline(p)}
      </strong>
      <div className="jp-GpuPanel-noticeBody">
        {countdown && (
          <p className="jp-GpuPanel-countdown" data-field="turn-countdown">
            {countdown}
          </p>
        )}
        <p data-field="turn-start" data-start={start}>
          {start === 'being-started' && (
            <>
              {asSentence(`${yourServer} is being started for you`)} Its page on
              the{' '}
              <a
                href={`${props.hubBase}hub/home`}
                target="_blank"
                rel="noreferrer"
              >
                Hub home
              </a>{' '}
              shows how far it got.
            </>
          )}
          {start === 'starts-soon' && (
            <>
              {asSentence(`${yourServer} will be started for you in a moment`)}{' '}
              You can also{' '}
              <a href={href} target="_blank" rel="noreferrer">
                start it yourself
              </a>
              .
            </>
          )}
          {start === 'start-it' && (
            <>
              <a href={href} target="_blank" rel="noreferrer">
                {p.server
                  ? `Start ${p.server}`
                  : 'Start your server from the Hub home'}
              </a>{' '}
              before the hold ends, or the GPU passes to the next person in
              line.
            </>
          )}
        </p>
        {p.blocked && (
          <p className="jp-GpuPanel-snoozeError" data-field="waitlist-blocked">
            {asSentence(`For now you cannot be served: ${p.blocked}`)}
          </p>
        )}
        <Leave
          place={p}
          state={props.leave}
          onLeave={props.onLeave}
          consequence={`The ${p.description || 'GPU'} held for you passes to the next person in line.`}
        />
      </div>
    </div>
  );
}

/**
 * A server started from the queue: gpu-quota's words and a way to open it;
 * nothing to leave any more.
 */
function Started(props: {
  place: Place;
  user: string;
  hubBase: string;
}): JSX.Element {
  const { place: p } = props;
  // gpu-quota writes UTC in its words; the local time goes next to them.
  const at = p.startedAt ? clockText(p.startedAt) : '';
  const yourServer = p.server ? `your server ${p.server}` : 'your server';
  return (
    <article
      className="jp-GpuPanel-place jp-GpuPanel-started"
      aria-label={`Started from the waitlist (${serverLabel(p.server)})`}
      data-server={p.server}
      data-started-at={p.startedAt ?? ''}
    >
      <p
        className="jp-GpuPanel-value"
        role="status"
        data-field="waitlist-started"
      >
        {p.message ||
          asSentence(
            `${yourServer} was started with ${waitedFor(p)} from the waitlist`
          )}
      </p>
      <p data-field="waitlist-started-open">
        <a
          href={serverUrl(props.hubBase, props.user, p.server)}
          target="_blank"
          rel="noreferrer"
          data-action="open-server"
        >
          {p.server ? `Open ${p.server}` : 'Open your server'}
        </a>
        {at && <span className="jp-GpuPanel-muted"> · started {at}</span>}
      </p>
    </article>
  );
}

/** A place in line: gpu-quota's words, the position, the estimate. */
function InLine(props: {
  place: Place;
  now: Date;
  leave?: LeaveState;
  onLeave: () => void;
}): JSX.Element {
  const { place: p } = props;
  const estimate = estimateText(p, props.now);
  const label = `Waiting for ${waitedFor(p)} (${serverLabel(p.server)})`;
  return (
    <article
      className="jp-GpuPanel-place"
      aria-label={label}
      data-server={p.server}
      data-position={p.position}
    >
      <p className="jp-GpuPanel-value" data-field="waitlist-message">
        {p.message || `${label}.`}
      </p>
      <dl className="jp-GpuPanel-placeFacts">
        <dt>Place in line</dt>
        <dd role="status" data-field="waitlist-position">
          {positionText(p)}
        </dd>
        <dt>Estimated</dt>
        <dd data-field="waitlist-estimate" data-estimate={p.estimate ?? ''}>
          {estimate ?? 'no estimate yet'}
        </dd>
        <dt>Server</dt>
        <dd data-field="waitlist-server">
          {serverLabel(p.server)}
          {p.autoStart ? ', starts by itself on your turn' : ''}
        </dd>
      </dl>
      {p.blocked && !p.message.includes(p.blocked) && (
        <p className="jp-GpuPanel-snoozeError" data-field="waitlist-blocked">
          {asSentence(`For now you cannot be served: ${p.blocked}`)}
        </p>
      )}
      <Leave
        place={p}
        state={props.leave}
        onLeave={props.onLeave}
        consequence={`You give up your place (${positionText(p)}); joining again later queues you anew.`}
      />
    </article>
  );
}

/**
 * "Leave the waitlist" with a confirmation in place: the first press asks,
 * naming what is given up; "Stay in line" (focused) keeps the place.
 */
function Leave(props: {
  place: Place;
  state?: LeaveState;
  consequence: string;
  onLeave: () => void;
}): JSX.Element {
  const [asking, setAsking] = React.useState(false);
  const pending = props.state?.status === 'pending';
  const what = waitedFor(props.place);
  return (
    <>
      {props.state?.status === 'failed' && (
        <p
          className="jp-GpuPanel-snoozeError"
          role="alert"
          data-field="leave-error"
        >
          {props.state.message}
        </p>
      )}
      {asking && !pending ? (
        <div
          className="jp-GpuPanel-confirm"
          role="group"
          aria-label={`Leave the waitlist for ${what}?`}
        >
          <p data-field="leave-question">
            Leave the waitlist for {what}? {props.consequence}
          </p>
          <div className="jp-GpuPanel-snooze">
            <button
              type="button"
              className="jp-GpuPanel-snoozeButton"
              onClick={() => {
                setAsking(false);
                props.onLeave();
              }}
              data-action="confirm-leave"
            >
              Leave
            </button>
            <button
              type="button"
              className="jp-GpuPanel-secondaryButton"
              onClick={() => setAsking(false)}
              autoFocus
              data-action="cancel-leave"
            >
              Stay in line
            </button>
          </div>
        </div>
      ) : (
        <div className="jp-GpuPanel-snooze">
          <button
            type="button"
            className="jp-GpuPanel-secondaryButton"
            onClick={() => setAsking(true)}
            disabled={pending}
            aria-label={`Leave the waitlist for ${what} (${serverLabel(props.place.server)})`}
            data-action="leave-waitlist"
          >
            {pending ? 'Leaving…' : 'Leave the waitlist'}
          </button>
        </div>
      )}
    </>
  );
}

/**
 * The render's time, then the clock's every second while `until` is ahead:
 * countdowns tick between polls.
 */
function useTicking(now: Date, clock?: () => Date, until?: string): Date {
  const [t, setT] = React.useState(now);
  React.useEffect(() => setT(now), [now]);
  React.useEffect(() => {
    if (!until) {
      return;
    }
    const read = clock ?? (() => new Date());
    const timer = setInterval(() => setT(read()), 1000);
    return () => clearInterval(timer);
  }, [until, clock]);
  return t;
}

function ProvenanceBadge(props: { simulated: boolean }): JSX.Element {
  return props.simulated ? (
    <span
      className="jp-GpuPanel-badge jp-mod-simulated"
      title="These numbers come from the simulated GPU backend, not from real hardware"
      data-provenance="simulated"
    >
      simulated
    </span>
  ) : (
    <span
      className="jp-GpuPanel-badge jp-mod-measured"
      title="These numbers are measured on the GPU"
      data-provenance="measured"
    >
      measured
    </span>
  );
}

function RefreshGlyph(): JSX.Element {
  return (
    <svg
      aria-hidden="true"
      focusable="false"
      width="16"
      height="16"
      viewBox="0 0 24 24"
      className="jp-GpuPanel-glyph"
    >
      <path d="M17.65 6.35A7.96 7.96 0 0 0 12 4a8 8 0 1 0 7.73 10h-2.08A6 6 0 1 1 12 6c1.66 0 3.14.69 4.22 1.78L13 11h7V4l-2.35 2.35z" />
    </svg>
  );
}

function formatClock(d: Date): string {
  return d.toLocaleTimeString(undefined, {
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit'
  });
}

export interface StatusProps {
  state: UsageState;
  onClick: () => void;
}

/** The compact status bar item: a button that opens the panel. */
export function GpuStatus(props: StatusProps): JSX.Element | null {
  const { state } = props;
  if (state.status === 'not-hub') {
    return null;
  }
  let text: string;
  let detail: string;
  let simulated = false;
  switch (state.status) {
    case 'ok':
      text = statusBarText(state.data);
      simulated = isSimulated(state.data) && text !== 'GPU stale';
      detail = holdsGpu(state.data)
        ? `You hold ${formatNumber(state.data.share.allocatedGPUs, 2)} GPU`
        : 'No GPU attached';
      if (text === 'GPU stale') {
        detail = `No fresh GPU reading. ${detail}`;
      }
      break;
    case 'loading':
      text = 'GPU …';
      detail = 'Loading GPU usage';
      break;
    default:
      text = 'GPU ?';
      detail = 'GPU usage service unreachable';
  }
  const label = `${detail}${simulated ? ' (simulated)' : ''}. ${text}. Open the GPU panel.`;
  return (
    <button
      type="button"
      className="jp-GpuStatus"
      onClick={props.onClick}
      title={label}
      aria-label={label}
    >
      <span className="jp-GpuStatus-text">{text}</span>
      {simulated && <span className="jp-GpuStatus-sim">sim</span>}
    </button>
  );
}
