import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Files that change what a module or the process environment is for the files after them: a module
 * mock (vi.mock), a stubbed environment, variables set for a platform started in the test process.
 * They run in a process of their own each, as every file did before.
 */
const isolated = [
  'test/unit/toolkit-bootstrap.test.ts',
  'test/unit/toolkit-change-set.test.ts',
  'test/agent/credentials.test.ts',
  'test/e2e/supervisor.test.ts',
];

/** What both projects run with. */
const common = {
  // Suites start real servers, emulators and Python processes: give them room on a 2-core machine.
  testTimeout: 60_000,
  hookTimeout: 120_000,
  pool: 'forks',
} as const;

export default defineConfig({
  test: {
    maxWorkers: 2,
    // One DynamoDB Local for the run, stopped after the last file (test/support/run-setup.ts). Here
    // only: a project that inherited it would run a setup, and a DynamoDB Local, of its own.
    globalSetup: ['test/support/run-setup.ts'],
    projects: [
      {
        // The rest share their worker's modules: each file loaded aws-cdk-lib, the AWS SDK, zod and
        // Fastify again (vitest counted 228 s of imports in a CI run), where every file cleans up
        // after itself and sets nothing a later file reads.
        test: {
          ...common,
          name: 'shared',
          include: ['test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...isolated],
          isolate: false,
        },
      },
      { test: { ...common, name: 'isolated', include: isolated } },
    ],
  },
});
