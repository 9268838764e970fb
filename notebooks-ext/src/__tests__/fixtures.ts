import type { MeResponse } from '../api';

export const NOW = new Date('2026-11-22T10:00:10Z');

/** alice on a MIG 3g.20gb slice of an A100, simulated backend (the contract's example). */
export function aliceMe(overrides: Partial<MeResponse> = {}): MeResponse {
  return {
    user: 'alice',
    sampledAt: '2026-11-22T10:00:05Z',
    intervalSeconds: 5,
    simulated: true,
    stale: false,
    share: {
      allocatedGPUs: 0.428571,
      usedGPUs: 0.21,
      memoryUsedBytes: 1073741824,
      memoryTotalBytes: 21474836480
    },
    servers: [
      {
        name: '',
        pod: 'jupyter-alice',
        node: 'gpu-a100-0',
        ready: true,
        allocatedGPUs: 0.428571,
        usedGPUs: 0.21,
        stale: false,
        simulated: true,
        gpus: [
          {
            kind: 'mig',
            resource: 'nvidia.com/mig-3g.20gb',
            product: 'NVIDIA A100-SXM4-40GB',
            profile: '3g.20gb',
            share: 0.428571,
            shareNumerator: 3,
            shareDenominator: 7,
            description: 'MIG 3g.20gb on an A100, 3/7 of a GPU',
            uuid: 'MIG-1',
            smUtilPercent: 49,
            utilizationSource: 'simulated',
            memoryUsedBytes: 1073741824,
            memoryTotalBytes: 21474836480,
            stale: false
          }
        ]
      }
    ],
    history: [
      {
        t: '2026-11-22T09:10:00Z',
        allocatedGPUs: 0.43,
        usedGPUs: 0.1,
        smUtilPercent: 10,
        memoryUsedBytes: 0
      },
      {
        t: '2026-11-22T09:30:00Z',
        allocatedGPUs: 0.43,
        usedGPUs: 0.3,
        smUtilPercent: 70,
        memoryUsedBytes: 0
      },
      {
        t: '2026-11-22T10:00:00Z',
        allocatedGPUs: 0.43,
        usedGPUs: 0.2,
        smUtilPercent: 49,
        memoryUsedBytes: 0
      }
    ],
    gpuHours: {
      today: { allocated: 0.5, used: 0.1 },
      '7d': { allocated: 12.25, used: 3.5 },
      '30d': { allocated: 40, used: 9 }
    },
    budget: null,
    idleCull: null,
    ...overrides
  };
}
