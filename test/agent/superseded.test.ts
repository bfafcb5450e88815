/**
 * The agent's deployment check (worker-image/agent/superseded.ts): on a fake clock, against the task
 * metadata endpoint v4's task answer and DescribeServices answers as AWS documents them.
 */
import type { DescribeServicesCommand } from '@aws-sdk/client-ecs';
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.js';
import { watchSuperseded } from '../../worker-image/agent/superseded.js';

const cluster = 'arn:aws:ecs:eu-west-1:123456789012:cluster/ferry';
const definition = (revision: number) =>
  `arn:aws:ecs:eu-west-1:123456789012:task-definition/FerryShopProdGen:${revision}`;

function setup(primaryRevisions: (number | Error)[]) {
  const clock = new FakeClock();
  const stop = new AbortController();
  const asked: { cluster?: string; services?: string[] }[] = [];
  const superseded: string[] = [];
  const warnings: string[] = [];
  let looks = 0;
  const ecs = {
    send: async (command: DescribeServicesCommand) => {
      asked.push(command.input);
      const next = primaryRevisions[Math.min(looks++, primaryRevisions.length - 1)]!;
      if (next instanceof Error) throw next;
      return {
        $metadata: {},
        services: [
          {
            deployments: [
              // During a rollout the old one is ACTIVE beside the PRIMARY.
              { status: 'ACTIVE', taskDefinition: definition(7) },
              { status: 'PRIMARY', taskDefinition: definition(next) },
            ],
          },
        ],
      };
    },
  };
  const fetchTask = (async () =>
    new Response(
      JSON.stringify({
        Cluster: cluster,
        Family: 'FerryShopProdGen',
        Revision: '7',
        DesiredStatus: 'RUNNING',
      }),
    )) as typeof fetch;
  const watching = watchSuperseded({
    ecs,
    metadataUri: 'http://169.254.170.2/v4/abc',
    serviceName: 'ferry-gen0000000000',
    clock,
    signal: stop.signal,
    pollMs: 60_000,
    fetch: fetchTask,
    onSuperseded: (primary) => superseded.push(primary),
    warn: (line) => warnings.push(line),
  });
  const minute = async () => {
    clock.advance(60_000);
    for (let i = 0; i < 20; i++) await Promise.resolve();
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { stop, asked, superseded, warnings, watching, minute };
}

describe('the deployment check of a queue agent', () => {
  it('stays quiet while its service runs its own task definition, and asks about its own service', async () => {
    const t = setup([7]);
    for (let i = 0; i < 3; i++) await t.minute();
    expect(t.superseded).toEqual([]);
    expect(t.asked.length).toBeGreaterThanOrEqual(2);
    expect(t.asked[0]).toEqual({ cluster, services: ['ferry-gen0000000000'] });
    t.stop.abort();
    await t.watching;
  });

  it('calls onSuperseded once when the PRIMARY deployment runs another revision, then stops looking', async () => {
    const t = setup([7, 8]);
    for (let i = 0; i < 4; i++) await t.minute();
    expect(t.superseded).toEqual([definition(8)]);
    await t.watching;
    const asked = t.asked.length;
    await t.minute();
    expect(t.asked).toHaveLength(asked);
  });

  it('goes on serving when ECS cannot be asked, with one warning per kind of failure', async () => {
    const refused = Object.assign(new Error('not authorized to perform: ecs:DescribeServices'), {
      name: 'AccessDeniedException',
    });
    const t = setup([refused, refused, refused, 8]);
    for (let i = 0; i < 6; i++) await t.minute();
    expect(t.warnings).toEqual(['deployment check: not authorized to perform: ecs:DescribeServices']);
    expect(t.superseded).toEqual([definition(8)]);
    await t.watching;
  });
});
