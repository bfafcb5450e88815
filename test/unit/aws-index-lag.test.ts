/**
 * A deploy that adds and removes endpoints of one environment, and undeploys one after another, when
 * the control table's index lags the writes: "All reads from GSIs and streams are eventually
 * consistent ... the responses may not reflect the results of a recently completed write operation"
 * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.ReadConsistency.html).
 * DynamoDB Local's index is never behind, so the listing (the one call that reads the index) answers
 * from a snapshot taken before the last writes; everything else is the real provider over DynamoDB
 * Local, with the real synth and the recording fake toolkit.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Ec2Like } from '../../cli/providers/aws/zones.js';
import { type FakeToolkitState, RecordingToolkit } from '../../cli/providers/toolkit.js';
import { DynamoControlStore } from '../../core/adapters/aws/dynamo.js';
import type { EndpointRecord } from '../../core/ports.js';
import { appStackName, platformStackName } from '../../infra/names.js';
import { cpuEndpoint, gpuEndpoint } from '../infra/fixtures.js';
import { awsProviderHarness, deployedRecord, offeringsOnlyEc2 } from '../support/aws-provider.js';

const noEc2: Ec2Like = offeringsOnlyEc2(['us-east-1a', 'us-east-1b']);

describe('the stack is built from what was deployed, not from a lagging index', () => {
  const reporter = { line: () => {} } as never;
  const harness = awsProviderHarness({ region: 'us-east-1', reporter, scratchPrefix: 'ferry-index-lag-' });
  const provider = () => harness.provider(noEc2, new RecordingToolkit(harness.stateFile));
  const state = () => JSON.parse(readFileSync(harness.stateFile, 'utf8')) as FakeToolkitState;
  afterEach(() => {
    vi.restoreAllMocks();
  });

  /** From now on the index answers with what it held at this moment. */
  async function freezeIndex(): Promise<void> {
    const original = DynamoControlStore.prototype.listEndpoints;
    const byFilter = new Map<string, EndpointRecord[]>();
    const store = await provider().control;
    for (const filter of [
      { app: 'lag', env: 'production' },
      { app: 'lag', env: 'staging' },
    ]) {
      byFilter.set(JSON.stringify(filter), await original.call(store as DynamoControlStore, filter));
    }
    vi.spyOn(DynamoControlStore.prototype, 'listEndpoints').mockImplementation(async (filter = {}) => [
      ...(byFilter.get(JSON.stringify(filter)) ?? []),
    ]);
  }

  async function platformDeployed(): Promise<void> {
    const s = state();
    s.platformOutputs = { ...s.platformOutputs, AvailabilityZones: 'us-east-1a,us-east-1b' };
    s.stacks[platformStackName] = s.platformOutputs;
    writeFileSync(harness.stateFile, JSON.stringify(s));
  }

  it('renaming an environment’s only endpoint keeps the stack and the new endpoint', async () => {
    await platformDeployed();
    const env = 'production';
    const before = deployedRecord('lag', env, cpuEndpoint);
    const after = deployedRecord('lag', env, gpuEndpoint);
    const first = provider();
    await first.control.putEnvironment({ app: 'lag', name: env, createdAt: 1 });
    await first.provision([before], { app: 'lag', env, all: [before], reporter });
    await first.close();

    await freezeIndex();
    // The deploy (cli/deploy/run.ts): provision what stays, then remove what left, one provider.
    const deploy = provider();
    await deploy.provision([after], { app: 'lag', env, all: [after], reporter });
    const calls = state().calls.length;
    const removed = await deploy.destroy([before]);
    expect(removed.failed).toEqual([]);
    expect(removed.deleted.map((r) => r.name)).toEqual(['cpu_worker']);
    // The stack was deployed with gpu_worker alone already: nothing more to do to it.
    expect(state().calls.slice(calls)).toEqual([]);
    expect(state().stacks[appStackName('lag', env)]).toBeDefined();
    expect((await deploy.control.getEndpoint(after.id))?.name).toBe('gpu_worker');
    await deploy.close();
  }, 240_000);

  it('an undeploy right after another does not bring the first one’s endpoint back', async () => {
    await platformDeployed();
    const env = 'staging';
    const [cpu, gpu] = [deployedRecord('lag', env, cpuEndpoint), deployedRecord('lag', env, gpuEndpoint)];
    const third = deployedRecord('lag', env, { ...cpuEndpoint, name: 'cpu_three' });
    const first = provider();
    await first.control.putEnvironment({ app: 'lag', name: env, createdAt: 1 });
    await first.provision([cpu, gpu, third], { app: 'lag', env, all: [cpu, gpu, third], reporter });
    await first.close();

    await freezeIndex();
    // `ferry undeploy cpu_worker`, then `ferry undeploy cpu_three`, each its own process.
    expect((await provider().destroy([cpu])).failed).toEqual([]);
    const calls = state().calls.length;
    expect((await provider().destroy([third])).failed).toEqual([]);
    const [redeploy] = state().calls.slice(calls);
    expect(redeploy?.op).toBe('deploy');
    const stack = appStackName('lag', env);
    expect(redeploy?.summaries?.[stack]?.endpoints.map((e) => e.name)).toEqual(['gpu_worker']);
  }, 240_000);
});
