// Settings of schema/plugin.json, read with defaults and bounds.

export interface PanelSettings {
  enabled: boolean;
  statusBar: boolean;
  refreshInterval: number;
  serviceName: string;
  usageUrl: string;
  /** gpu-culler's Hub service name (its last stop and the Snooze button). */
  cullerServiceName: string;
  /** gpu-quota's Hub service name (the GPU waitlist). */
  quotaServiceName: string;
}

export const DEFAULTS: PanelSettings = {
  enabled: true,
  statusBar: true,
  refreshInterval: 10,
  serviceName: 'gpu-usage',
  usageUrl: '',
  cullerServiceName: 'gpu-culler',
  quotaServiceName: 'gpu-quota'
};

/** Settings from a composite settings object; bad values fall back to defaults. */
export function readSettings(raw: Record<string, unknown>): PanelSettings {
  const bool = (v: unknown, d: boolean): boolean =>
    typeof v === 'boolean' ? v : d;
  const text = (v: unknown, d: string): string =>
    typeof v === 'string' ? v.trim() : d;
  const interval =
    typeof raw.refreshInterval === 'number' &&
    Number.isFinite(raw.refreshInterval)
      ? Math.min(Math.max(raw.refreshInterval, 2), 3600)
      : DEFAULTS.refreshInterval;
  return {
    enabled: bool(raw.enabled, DEFAULTS.enabled),
    statusBar: bool(raw.statusBar, DEFAULTS.statusBar),
    refreshInterval: interval,
    serviceName:
      text(raw.serviceName, DEFAULTS.serviceName) || DEFAULTS.serviceName,
    usageUrl: text(raw.usageUrl, DEFAULTS.usageUrl),
    cullerServiceName:
      text(raw.cullerServiceName, DEFAULTS.cullerServiceName) ||
      DEFAULTS.cullerServiceName,
    quotaServiceName:
      text(raw.quotaServiceName, DEFAULTS.quotaServiceName) ||
      DEFAULTS.quotaServiceName
  };
}
