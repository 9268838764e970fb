import * as schema from '../../schema/plugin.json';
import { DEFAULTS, readSettings } from '../settings';

describe('readSettings', () => {
  const cases: Record<
    string,
    [Record<string, unknown>, Partial<typeof DEFAULTS>]
  > = {
    empty: [{}, {}],
    'panel off': [{ enabled: false }, { enabled: false }],
    'interval clamped low': [{ refreshInterval: 0.1 }, { refreshInterval: 2 }],
    'interval clamped high': [
      { refreshInterval: 1e9 },
      { refreshInterval: 3600 }
    ],
    'wrong types fall back': [{ enabled: 'no', refreshInterval: 'fast' }, {}],
    'service name trimmed, blank is default': [{ serviceName: '  ' }, {}],
    'url override': [{ usageUrl: ' /x/me ' }, { usageUrl: '/x/me' }],
    'culler service name': [
      { cullerServiceName: ' culler ' },
      { cullerServiceName: 'culler' }
    ],
    'blank culler service name is default': [{ cullerServiceName: '' }, {}],
    'quota service name': [
      { quotaServiceName: ' quota ' },
      { quotaServiceName: 'quota' }
    ],
    'blank quota service name is default': [{ quotaServiceName: ' ' }, {}]
  };
  it.each(Object.entries(cases))('%s', (_, [raw, want]) => {
    expect(readSettings(raw)).toEqual({ ...DEFAULTS, ...want });
  });

  it('defaults match the schema', () => {
    const fromSchema = Object.fromEntries(
      Object.entries(schema.properties).map(([k, v]) => [k, v.default])
    );
    expect(fromSchema).toEqual(DEFAULTS);
  });
});
