/**
 * The live acceptance run (test/live/acceptance.ts) up to its AWS calls: CloudFormation and ECS are
 * injected stand-ins that record the exact commands, the CLI and runpod-sdk are recorded calls, time
 * is counted, not slept. The run on a real account is `npm run test:aws-live`.
 */
import { DescribeStackResourcesCommand } from '@aws-sdk/client-cloudformation';
import { DescribeServicesCommand } from '@aws-sdk/client-ecs';
import { describe, expect, it } from 'vitest';
import { appStackName } from '../../infra/names.js';
import { type LivePorts, runLiveAcceptance } from '../live/acceptance.js';

const app = 'ferry-live-test';
const stack = appStackName(app, 'live');
const apiUrl = 'https://abc.execute-api.us-east-1.amazonaws.com/api/v2';

function world(options: { scaleIn?: boolean; output?: unknown } = {}) {
  const calls: string[] = [];
  const sent: unknown[] = [];
  let deleted = false;
  let desired = 0;
  let polls = 0;
  const ports: LivePorts = {
    ferry: async (args) => {
      calls.push(args.join(' '));
      if (args[0] === 'deploy') {
        return {
          code: 0,
          stderr: '',
          stdout: JSON.stringify({
            endpoints: [{ name: 'hello', id: 'helloid0000000', url: `${apiUrl}/helloid0000000` }],
          }),
        };
      }
      if (args[0] === 'keys' && args[1] === 'create')
        return { code: 0, stderr: '', stdout: '{"id":"k1","key":"secret"}' };
      if (args[0] === 'app') deleted = true;
      return { code: 0, stdout: '', stderr: '' };
    },
    cfn: {
      send: async (command) => {
        sent.push(command);
        if (deleted) throw new Error(`Stack with id ${stack} does not exist`);
        return {
          StackResources: [
            { ResourceType: 'AWS::ECS::Service', PhysicalResourceId: 'arn:svc/hello' },
            { ResourceType: 'AWS::SQS::Queue', PhysicalResourceId: 'q' },
          ],
        } as never;
      },
    },
    ecs: {
      send: async (command) => {
        sent.push(command);
        polls++;
        // After the job: scaled out; then back to zero on the third look (unless told otherwise).
        if (calls.some((c) => c.startsWith('runSync')) && (polls < 4 || options.scaleIn === false))
          desired = 1;
        else desired = 0;
        return { services: [{ desiredCount: desired, status: 'ACTIVE' }] } as never;
      },
    },
    runSync: async (baseUrl, apiKey, endpointId, input) => {
      calls.push(`runSync ${baseUrl} ${apiKey} ${endpointId} ${JSON.stringify(input)}`);
      return { status: 'COMPLETED', output: options.output ?? { greeting: 'Hello, live!' } };
    },
    sleep: async () => {},
    log: () => {},
  };
  return { ports, calls, sent };
}

const options = { app, env: 'live', scaleInTimeoutMs: 60_000, pollMs: 30_000 };

describe('live acceptance, up to the AWS calls', () => {
  it('deploys, keys, runs through runpod-sdk from zero, waits for zero, deletes, and checks the stack is gone', async () => {
    const { ports, calls, sent } = world();
    await runLiveAcceptance(ports, options);
    expect(calls).toEqual([
      `deploy --yes --app ${app} --env live --json`,
      'keys create --name live-live --json',
      `runSync ${apiUrl} secret helloid0000000 {"name":"live"}`,
      'keys revoke k1',
      `app delete ${app} --force`,
    ]);
    expect(sent[0]).toBeInstanceOf(DescribeStackResourcesCommand);
    expect((sent[0] as DescribeStackResourcesCommand).input).toEqual({ StackName: stack });
    const describes = sent.filter((c) => c instanceof DescribeServicesCommand) as DescribeServicesCommand[];
    expect(describes[0]!.input).toEqual({ cluster: 'ferry', services: ['arn:svc/hello'] });
    expect(describes.length).toBeGreaterThanOrEqual(3);
    expect(sent.at(-1)).toBeInstanceOf(DescribeStackResourcesCommand);
  });

  it('fails, and still deletes the app, when the services never scale back to zero', async () => {
    const { ports, calls } = world({ scaleIn: false });
    await expect(runLiveAcceptance(ports, options)).rejects.toThrow('did not scale back to zero');
    expect(calls.at(-1)).toBe(`app delete ${app} --force`);
  });

  it('fails on a wrong answer from the endpoint', async () => {
    const { ports } = world({ output: { greeting: 'nope' } });
    await expect(runLiveAcceptance(ports, options)).rejects.toThrow('unexpected output');
  });
});
