// ESLint 9 flat config for the browser scripts of the e2e tests (node ESM driving Chromium through playwright-core;
// page.evaluate callbacks run in the page). Run by `make ext-test` with the GPU panel's pinned ESLint: this folder
// has no ESLint of its own (its package.json is the browser driver's), so @eslint/js is resolved from notebooks-ext.
import { createRequire } from 'node:module';

const js = createRequire(new URL('../../notebooks-ext/package.json', import.meta.url))('@eslint/js');

const node = ['console', 'process', 'Buffer', 'URL', 'URLSearchParams', 'setTimeout', 'clearTimeout', 'setInterval',
  'clearInterval', 'fetch', 'AbortSignal', 'AbortController', 'performance', 'TextDecoder', 'TextEncoder'];
const page = ['document', 'window', 'getComputedStyle', 'HTMLElement', 'Element', 'Node', 'navigator', 'location',
  'MutationObserver', 'requestAnimationFrame'];

export default [
  js.configs.recommended,
  {
    files: ['**/*.mjs'],
    languageOptions: {
      ecmaVersion: 2024,
      sourceType: 'module',
      globals: Object.fromEntries([...node, ...page].map(name => [name, 'readonly']))
    },
    rules: {
      eqeqeq: ['error', 'smart'],
      'prefer-const': 'error',
      'no-unused-vars': ['error', { args: 'none', caughtErrors: 'none' }]
    }
  }
];
