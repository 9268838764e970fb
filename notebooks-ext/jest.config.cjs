// Unit tests for the model, the request helper, formatting and the React views.
// They import no @jupyterlab package, so plain ts-jest in jsdom is enough.
module.exports = {
  testEnvironment: 'jsdom',
  roots: ['<rootDir>/src'],
  testMatch: ['**/__tests__/**/*.spec.ts?(x)'],
  transform: {
    '^.+\\.tsx?$': ['ts-jest', { tsconfig: '<rootDir>/tsconfig.test.json' }]
  },
  collectCoverageFrom: [
    'src/**/*.{ts,tsx}',
    '!src/index.ts',
    '!src/widget.tsx',
    '!src/icon.ts'
  ],
  coverageReporters: ['text-summary']
};
