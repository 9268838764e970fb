import { BackoffPoll, pollFrequency } from '../poll';

describe('pollFrequency', () => {
  it.each([
    [60, 600_000, { interval: 60_000, backoff: true, max: 600_000 }],
    [0, 300_000, { interval: 1000, backoff: true, max: 300_000 }],
    [900, 300_000, { interval: 900_000, backoff: true, max: 900_000 }]
  ])('%p s, max %p ms', (seconds, maxMs, want) => {
    expect(pollFrequency(seconds, maxMs)).toEqual(want);
  });
});

describe('BackoffPoll', () => {
  afterEach(() => {
    jest.useRealTimers();
    jest.restoreAllMocks();
  });

  // After a failed first tick, lumino's plain Poll waits 60 s at draw 0 and
  // less the higher the draw (60 ms at 0.999).
  it.each([0, 0.5, 0.999])(
    'never asks a failing service sooner than its interval (random %p)',
    async draw => {
      jest.useFakeTimers();
      jest.spyOn(Math, 'random').mockReturnValue(draw);
      const at: number[] = [];
      const poll = new BackoffPoll({
        auto: false,
        factory: async () => {
          at.push(Date.now());
          throw new Error('down');
        },
        frequency: pollFrequency(60, 600_000),
        name: 'test'
      });
      await poll.start();
      await jest.advanceTimersByTimeAsync(30 * 60_000);
      poll.dispose();
      expect(at.length).toBeGreaterThanOrEqual(3);
      const gaps = at.slice(1).map((t, i) => t - at[i]);
      for (const gap of gaps) {
        expect(gap).toBeGreaterThanOrEqual(60_000);
        expect(gap).toBeLessThanOrEqual(600_000);
      }
    }
  );

  it('asks every interval while the service answers', async () => {
    jest.useFakeTimers();
    let calls = 0;
    const poll = new BackoffPoll({
      auto: false,
      factory: async () => {
        calls++;
      },
      frequency: pollFrequency(5, 300_000),
      name: 'test'
    });
    await poll.start();
    await jest.advanceTimersByTimeAsync(60_000);
    poll.dispose();
    expect(calls).toBe(13);
  });
});
