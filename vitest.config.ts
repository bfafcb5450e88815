import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Suites start real servers, emulators and Python processes: give them room on a 2-core machine.
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // One DynamoDB Local for the run, stopped after the last file (test/support/run-setup.ts).
    globalSetup: ['test/support/run-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
  },
});
