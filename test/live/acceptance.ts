/**
 * The live acceptance run for a real AWS account (`npm run test:aws-live`), written against ports so
 * that everything up to the AWS calls is tested here (test/unit/aws-live.test.ts) with injected
 * clients. On an account it: deploys examples/hello as a fresh app/env, creates a key, checks the
 * queue endpoint's service starts at zero, runs jobs through the real runpod-sdk client against the
 * real API Gateway URL (scale from zero), waits for the service to go back to zero, deletes the app,
 * and checks nothing billable of it is left (stack gone, services gone, key revoked).
 */
import {
  DescribeStackResourcesCommand,
  type DescribeStackResourcesCommandOutput,
} from '@aws-sdk/client-cloudformation';
import { DescribeServicesCommand, type DescribeServicesCommandOutput } from '@aws-sdk/client-ecs';
import { appStackName } from '../../infra/names.js';

export interface LivePorts {
  /** Runs `ferry <args> --provider aws` in the project; stdout, stderr, exit code. */
  ferry(args: string[]): Promise<{ code: number; stdout: string; stderr: string }>;
  cfn: { send(command: DescribeStackResourcesCommand): Promise<DescribeStackResourcesCommandOutput> };
  ecs: { send(command: DescribeServicesCommand): Promise<DescribeServicesCommandOutput> };
  /** runpod-sdk's runSync against `<baseUrl>/<endpointId>`. */
  runSync(
    baseUrl: string,
    apiKey: string,
    endpointId: string,
    input: unknown,
  ): Promise<{ status: string; output?: unknown }>;
  sleep(ms: number): Promise<void>;
  log(line: string): void;
}

export interface LiveOptions {
  app: string;
  env: string;
  /** How long to wait for scale-in back to zero (the endpoint's idle timeout plus alarm periods). */
  scaleInTimeoutMs: number;
  pollMs: number;
}

const cluster = 'ferry';

async function queueServiceArns(ports: LivePorts, stack: string): Promise<string[]> {
  const { StackResources } = await ports.cfn.send(new DescribeStackResourcesCommand({ StackName: stack }));
  return (StackResources ?? [])
    .filter((r) => r.ResourceType === 'AWS::ECS::Service' && r.PhysicalResourceId)
    .map((r) => r.PhysicalResourceId as string);
}

async function counts(
  ports: LivePorts,
  services: string[],
): Promise<Array<{ desired: number; status: string }>> {
  const { services: found } = await ports.ecs.send(new DescribeServicesCommand({ cluster, services }));
  return (found ?? []).map((s) => ({ desired: s.desiredCount ?? 0, status: s.status ?? 'MISSING' }));
}

function must(condition: boolean, message: string): void {
  if (!condition) throw new Error(`live acceptance: ${message}`);
}

export async function runLiveAcceptance(ports: LivePorts, options: LiveOptions): Promise<void> {
  const stack = appStackName(options.app, options.env);
  const deploy = await ports.ferry(['deploy', '--yes', '--app', options.app, '--env', options.env, '--json']);
  must(deploy.code === 0, `deploy failed: ${deploy.stderr}`);
  const deployed = JSON.parse(deploy.stdout) as {
    endpoints: Array<{ name: string; id: string; url: string }>;
  };
  const hello = deployed.endpoints.find((e) => e.name === 'hello');
  must(hello !== undefined, 'the hello endpoint is not in the deploy output');
  const key = await ports.ferry(['keys', 'create', '--name', `live-${options.env}`, '--json']);
  must(key.code === 0, `keys create failed: ${key.stderr}`);
  const { id: keyId, key: apiKey } = JSON.parse(key.stdout) as { id: string; key: string };
  try {
    const services = await queueServiceArns(ports, stack);
    must(services.length >= 1, `stack ${stack} has no ECS service`);
    const before = await counts(ports, services);
    must(
      before.every((s) => s.desired === 0),
      'services did not start at zero',
    );
    ports.log('scale from zero: runSync on hello');
    const baseUrl = hello!.url.slice(0, hello!.url.lastIndexOf('/'));
    const result = await ports.runSync(baseUrl, apiKey, hello!.id, { name: 'live' });
    must(result.status === 'COMPLETED', `runSync ended ${result.status}`);
    must(
      JSON.stringify(result.output).includes('Hello, live!'),
      `unexpected output ${JSON.stringify(result.output)}`,
    );
    const during = await counts(ports, services);
    must(
      during.some((s) => s.desired >= 1),
      'no service scaled out',
    );
    ports.log('waiting for scale-in back to zero');
    let waited = 0;
    for (;;) {
      const now = await counts(ports, services);
      if (now.every((s) => s.desired === 0)) break;
      must(waited < options.scaleInTimeoutMs, 'services did not scale back to zero');
      await ports.sleep(options.pollMs);
      waited += options.pollMs;
    }
  } finally {
    const revoked = await ports.ferry(['keys', 'revoke', keyId]);
    const deleted = await ports.ferry(['app', 'delete', options.app, '--force']);
    must(revoked.code === 0 && deleted.code === 0, `cleanup failed: ${revoked.stderr}${deleted.stderr}`);
  }
  // Nothing billable of the app is left: its stack (and with it queues, services, ALBs) is gone.
  const gone = await ports.cfn
    .send(new DescribeStackResourcesCommand({ StackName: stack }))
    .then(() => false)
    .catch((error: Error) => /does not exist/i.test(error.message));
  must(gone, `stack ${stack} still exists after app delete`);
}
