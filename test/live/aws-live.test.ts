/**
 * `npm run test:aws-live`: the acceptance run (test/live/acceptance.ts) on a real AWS account.
 * Skipped unless FERRY_AWS_LIVE=1 and AWS credentials are set. It creates and deletes a fresh
 * app/env in the account the credentials point at, and costs a few cents of CPU instance time.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CloudFormationClient } from '@aws-sdk/client-cloudformation';
import { ECSClient } from '@aws-sdk/client-ecs';
import runpodSdk from 'runpod-sdk';
import { describe, it } from 'vitest';
import { runLiveAcceptance } from './acceptance.js';

const repo = path.resolve(import.meta.dirname, '../..');
const live =
  process.env.FERRY_AWS_LIVE === '1' &&
  Boolean(process.env.AWS_PROFILE || process.env.AWS_ACCESS_KEY_ID) &&
  Boolean(process.env.AWS_REGION);

describe.skipIf(!live)('AWS live acceptance (real account)', () => {
  it('deploys examples/hello, serves runpod-sdk, scales from zero and back, leaves nothing', async () => {
    const project = mkdtempSync(path.join(tmpdir(), 'ferry-live-'));
    cpSync(path.join(repo, 'examples/hello'), project, { recursive: true });
    const suffix = Date.now().toString(36);
    const cfn = new CloudFormationClient({});
    const ecs = new ECSClient({});
    try {
      await runLiveAcceptance(
        {
          ferry: async (args) => {
            const r = spawnSync(
              process.execPath,
              [path.join(repo, 'bin/ferry.js'), ...args, '--provider', 'aws'],
              {
                cwd: project,
                encoding: 'utf8',
                timeout: 3_600_000,
              },
            );
            return { code: r.status ?? 1, stdout: r.stdout, stderr: r.stderr };
          },
          cfn: cfn as never,
          ecs: ecs as never,
          runSync: async (baseUrl, apiKey, endpointId, input) => {
            const endpoint = runpodSdk(apiKey, { baseUrl }).endpoint(endpointId)!;
            return (await endpoint.runSync({ input }, 900_000)) as { status: string; output?: unknown };
          },
          sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
          log: (line) => process.stderr.write(`${line}\n`),
        },
        { app: `ferry-live-${suffix}`, env: 'live', scaleInTimeoutMs: 30 * 60_000, pollMs: 30_000 },
      );
    } finally {
      cfn.destroy();
      ecs.destroy();
      rmSync(project, { recursive: true, force: true });
    }
  }, 7_200_000);
});
