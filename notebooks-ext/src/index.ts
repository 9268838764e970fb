// The plugin: reads the Hub's page config, builds the usage model from the
// settings and puts the GPU panel in the right sidebar and a status bar item.

import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { IDisposable } from '@lumino/disposable';

import { HubPageConfig, hubBaseUrl, usageUrl } from './api';
import { cullerApiUrl } from './culler';
import { CullerModel } from './cullerModel';
import { UsageModel } from './model';
import { rightSizeUrl } from './rightsize';
import { RightSizeModel } from './rightsizeModel';
import { readSettings, PanelSettings } from './settings';
import { quotaApiUrl } from './waitlist';
import { WaitlistModel } from './waitlistModel';
import { GpuPanelWidget, GpuStatusWidget, PANEL_ID } from './widget';

const PLUGIN_ID = '@gpuhub/jupyterlab-gpu-panel:plugin';
const OPEN_COMMAND = 'gpuhub:open-gpu-panel';

/** The page config values jupyterhub-singleuser sets (empty when not under a Hub). */
export function readPageConfig(): HubPageConfig {
  return {
    hubPrefix: PageConfig.getOption('hubPrefix'),
    hubHost: PageConfig.getOption('hubHost'),
    hubUser: PageConfig.getOption('hubUser'),
    hubServerName: PageConfig.getOption('hubServerName'),
    token: PageConfig.getToken()
  };
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Shows a JupyterHub user their own share of a GPU.',
  autoStart: true,
  requires: [ISettingRegistry],
  optional: [IStatusBar, ILayoutRestorer, ICommandPalette],
  activate: async (
    app: JupyterFrontEnd,
    registry: ISettingRegistry,
    statusBar: IStatusBar | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): Promise<void> => {
    const page = readPageConfig();
    const currentServer = {
      // The server's owner; an admin visiting someone else's server sees their own usage.
      user: PageConfig.getOption('hubServerUser') || page.hubUser,
      name: page.hubServerName
    };

    let model: UsageModel | null = null;
    let culler: CullerModel | null = null;
    let waitlist: WaitlistModel | null = null;
    let rightSize: RightSizeModel | null = null;
    let panel: GpuPanelWidget | null = null;
    let status: IDisposable | null = null;
    let applied: PanelSettings | null = null;

    const teardown = (): void => {
      status?.dispose();
      status = null;
      panel?.dispose();
      panel = null;
      culler?.dispose();
      culler = null;
      waitlist?.dispose();
      waitlist = null;
      rightSize?.dispose();
      rightSize = null;
      model?.dispose();
      model = null;
    };

    const setup = (s: PanelSettings): void => {
      const usage = new UsageModel({
        url: usageUrl(page, s.serviceName, s.usageUrl),
        token: page.token,
        refreshSeconds: s.refreshInterval
      });
      model = usage;
      const cullerModel = new CullerModel({
        url: cullerApiUrl(page, s.cullerServiceName),
        token: page.token,
        serviceName: s.cullerServiceName,
        // The moved deadline is shown at once; me catches up on this poll.
        onSnoozed: () => void usage.refresh()
      });
      culler = cullerModel;
      usage.stateChanged.connect((_, st) => {
        if (st.status === 'ok') {
          cullerModel.syncNotices(st.data.notices);
        }
      });
      // The token's owner: their own places, as `me` is their own usage.
      const waitlistModel = new WaitlistModel({
        url: quotaApiUrl(page, s.quotaServiceName),
        user: page.hubUser,
        token: page.token,
        serviceName: s.quotaServiceName,
        refreshSeconds: s.refreshInterval
      });
      waitlist = waitlistModel;
      // The token's owner's advice, from the same usage API as `me`.
      const rightSizeModel = new RightSizeModel({
        url: rightSizeUrl(model.url),
        token: page.token
      });
      rightSize = rightSizeModel;
      panel = new GpuPanelWidget(model, {
        currentServer,
        hubBase: hubBaseUrl(page.hubPrefix),
        culler: cullerModel,
        waitlist: waitlistModel,
        rightSize: rightSizeModel
      });
      app.shell.add(panel, 'right', { rank: 650 });
      restorer?.add(panel, PANEL_ID);
      if (statusBar && s.statusBar && model.url) {
        const item = new GpuStatusWidget(model, () =>
          app.commands.execute(OPEN_COMMAND)
        );
        status = statusBar.registerStatusItem(`${PLUGIN_ID}:status`, {
          item,
          align: 'left',
          rank: 4
        });
      }
      void model.start();
      // Silent when no culler is installed: its poll backs off and shows nothing.
      cullerModel.start().catch(() => undefined);
      // Silent when the waitlist is off: the first 404 ends its poll.
      waitlistModel.start().catch(() => undefined);
      // Silent when the usage API has no advice route: the first 404 ends its poll.
      rightSizeModel.start().catch(() => undefined);
    };

    const apply = (s: PanelSettings): void => {
      const needsRebuild =
        !applied ||
        applied.enabled !== s.enabled ||
        applied.serviceName !== s.serviceName ||
        applied.usageUrl !== s.usageUrl ||
        applied.cullerServiceName !== s.cullerServiceName ||
        applied.quotaServiceName !== s.quotaServiceName ||
        applied.statusBar !== s.statusBar;
      if (needsRebuild) {
        teardown();
        if (s.enabled) {
          setup(s);
        }
      } else if (
        model &&
        applied &&
        applied.refreshInterval !== s.refreshInterval
      ) {
        model.setRefreshSeconds(s.refreshInterval);
        waitlist?.setRefreshSeconds(s.refreshInterval);
      }
      applied = s;
    };

    app.commands.addCommand(OPEN_COMMAND, {
      label: 'Show GPU Panel',
      caption: 'Show your share of a GPU',
      isEnabled: () => panel !== null,
      execute: () => {
        if (panel) {
          app.shell.activateById(panel.id);
        }
      }
    });
    palette?.addItem({ command: OPEN_COMMAND, category: 'GPU' });

    try {
      const settings = await registry.load(PLUGIN_ID);
      apply(readSettings(settings.composite));
      settings.changed.connect(() => apply(readSettings(settings.composite)));
    } catch (err) {
      console.warn('gpu panel: settings unavailable, using defaults', err);
      apply(readSettings({}));
    }
  }
};

export default plugin;
