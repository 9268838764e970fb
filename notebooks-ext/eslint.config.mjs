// eslint 9 flat config: typescript-eslint recommended, React rules, prettier last.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import react from 'eslint-plugin-react';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'node_modules/',
      'lib/',
      'ui-tests/lib/',
      'gpuhub_panel/labextension/',
      'coverage/',
      '**/*.cjs',
      '**/*.mjs',
      'style/index.js'
    ]
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.{ts,tsx}'],
    plugins: { react },
    settings: { react: { version: '18' } },
    rules: {
      ...react.configs.recommended.rules,
      'react/react-in-jsx-scope': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { args: 'none' }],
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-non-null-assertion': 'off',
      eqeqeq: ['error', 'smart'],
      curly: ['error', 'all'],
      'no-console': ['error', { allow: ['warn', 'error'] }],
      'prefer-const': 'error'
    }
  },
  {
    files: ['ui-tests/**/*.ts'],
    rules: { 'no-console': 'off' }
  },
  prettier
);
