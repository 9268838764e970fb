// Lumino wrappers: the right-side panel and the status bar item, both
// re-rendering on the model's stateChanged signal.

import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { CullerProps, GpuPanel, GpuStatus, WaitlistProps } from './components';
import type { CullerModel } from './cullerModel';
import { gpuIcon } from './icon';
import type { UsageModel, UsageState } from './model';
import type { RightSizeModel } from './rightsizeModel';
import type { WaitlistModel } from './waitlistModel';

export const PANEL_ID = 'gpuhub-gpu-panel';

export class GpuPanelWidget extends ReactWidget {
  constructor(
    private readonly _model: UsageModel,
    private readonly _options: {
      currentServer: { user: string; name: string };
      hubBase: string;
      /** gpu-culler's side (last stop, Snooze); null without one. */
      culler?: CullerModel | null;
      /** gpu-quota's waitlist (the user's places); null without one. */
      waitlist?: WaitlistModel | null;
      /** The usage API's right-size advice; null without one. */
      rightSize?: RightSizeModel | null;
    }
  ) {
    super();
    // The culler's and the waitlist's states change apart from the usage polls: render again.
    this._options.culler?.changed.connect(() => this.update(), this);
    this._options.waitlist?.changed.connect(() => this.update(), this);
    this._options.rightSize?.changed.connect(() => this.update(), this);
    this.id = PANEL_ID;
    this.addClass('jp-GpuPanel');
    this.title.icon = gpuIcon;
    this.title.caption = 'GPU usage';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'GPU usage');
  }

  // One function for the life of the widget, so the countdowns' timers are not re-armed at every render.
  private readonly _clock = (): Date => this._model.now();

  protected render(): JSX.Element {
    return (
      <UseSignal<UsageModel, UsageState>
        signal={this._model.stateChanged}
        initialArgs={this._model.state}
      >
        {(_, state) => (
          <GpuPanel
            state={state ?? this._model.state}
            now={this._model.now()}
            currentServer={this._options.currentServer}
            hubBase={this._options.hubBase}
            onRefresh={() => void this._model.refresh()}
            clock={this._clock}
            culler={this._cullerProps()}
            waitlist={this._waitlistProps()}
            rightSize={
              this._options.rightSize?.isDisposed === false
                ? this._options.rightSize.state
                : undefined
            }
          />
        )}
      </UseSignal>
    );
  }

  private _cullerProps(): CullerProps | undefined {
    const culler = this._options.culler;
    if (!culler || culler.isDisposed) {
      return undefined;
    }
    return {
      state: culler.state,
      serviceName: culler.serviceName,
      onSnooze: (server, deadline) => void culler.snooze(server, deadline),
      onDismissStop: () => culler.dismissStop()
    };
  }

  private _waitlistProps(): WaitlistProps | undefined {
    const waitlist = this._options.waitlist;
    if (!waitlist || waitlist.isDisposed) {
      return undefined;
    }
    return {
      state: waitlist.state,
      user: waitlist.user,
      onLeave: server => void waitlist.leave(server)
    };
  }
}

export class GpuStatusWidget extends ReactWidget {
  constructor(
    private readonly _model: UsageModel,
    private readonly _open: () => void
  ) {
    super();
    this.addClass('jp-GpuStatus-item');
  }

  protected render(): JSX.Element {
    return (
      <UseSignal<UsageModel, UsageState>
        signal={this._model.stateChanged}
        initialArgs={this._model.state}
      >
        {(_, state) => (
          <GpuStatus state={state ?? this._model.state} onClick={this._open} />
        )}
      </UseSignal>
    );
  }
}
