/**
 * The agent's deployment check (worker-image/agent/superseded.ts): on a fake clock, against the task
 * metadata endpoint v4's task answer and DescribeServices answers as AWS documents them.
 */
import type { DescribeServicesCommand } from '@aws-sdk/client-ecs';
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.js';
import { clockMarginMs, watchSuperseded } from '../../worker-image/agent/superseded.js';

const cluster = 'arn:aws:ecs:eu-west-1:123456789012:cluster/ferry';
const definition = (revision: number) =>
  `arn:aws:ecs:eu-west-1:123456789012:task-definition/FerryShopProdGen:${revision}`;

/** The task's own times in the metadata answer, and the PRIMARY deployment's creation time. */
interface Times {
  pullStartedAt?: string;
  containersCreatedAt?: string[];
  deployedAt?: (look: number) => Date | undefined;
}

function setup(primaryRevisions: (number | Error)[], times: Times = {}) {
  const clock = new FakeClock();
  const stop = new AbortController();
  const asked: { cluster?: string; services?: string[] }[] = [];
  const superseded: string[] = [];
  const warnings: string[] = [];
  let looks = 0;
  const ecs = {
    send: async (command: DescribeServicesCommand) => {
      asked.push(command.input);
      const look = looks++;
      const next = primaryRevisions[Math.min(look, primaryRevisions.length - 1)]!;
      if (next instanceof Error) throw next;
      const createdAt = times.deployedAt?.(look);
      return {
        $metadata: {},
        services: [
          {
            deployments: [
              // During a rollout the old one is ACTIVE beside the PRIMARY.
              { status: 'ACTIVE', taskDefinition: definition(7) },
              {
                status: 'PRIMARY',
                id: `ecs-svc/${1000 + look}`,
                taskDefinition: definition(next),
                ...(createdAt ? { createdAt } : {}),
              },
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
        ...(times.pullStartedAt ? { PullStartedAt: times.pullStartedAt } : {}),
        Containers: (times.containersCreatedAt ?? []).map((CreatedAt) => ({ CreatedAt })),
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
    expect(t.superseded).toEqual([`a deploy replaced this task's definition (now ${definition(8)})`]);
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
    expect(t.superseded).toEqual([`a deploy replaced this task's definition (now ${definition(8)})`]);
    await t.watching;
  });

  // A forced new deployment (ferry secrets set) keeps the definition: the task's own times tell.
  it('steps aside for a newer deployment of its own definition (a forced one), made after the task', async () => {
    const madeAt = '2026-11-28T10:00:00.000Z';
    const forcedAt = new Date('2026-11-28T11:00:00.000Z');
    const t = setup([7], {
      pullStartedAt: madeAt,
      containersCreatedAt: ['2026-11-28T10:00:05.000Z'],
      // The deployment that started the task, then the forced one from the third look on.
      deployedAt: (look) => (look < 2 ? new Date('2026-11-28T09:59:58.000Z') : forcedAt),
    });
    for (let i = 0; i < 2; i++) await t.minute();
    expect(t.superseded).toEqual([]);
    for (let i = 0; i < 2; i++) await t.minute();
    expect(t.superseded).toEqual([
      `a newer deployment of this task's definition started (ecs-svc/1002, created ${forcedAt.toISOString()})`,
    ]);
    await t.watching;
  });

  it("stays for the deployment that started it, within the clock margin, and reads a cached image's containers", async () => {
    // No pull (the image was cached): the containers' CreatedAt is the task's time. ECS's clock may
    // put the deployment a little after the task's own clock says it was made.
    const t = setup([7], {
      containersCreatedAt: ['2026-11-28T10:00:05.000Z', '2026-11-28T10:00:04.000Z'],
      deployedAt: () => new Date(Date.parse('2026-11-28T10:00:04.000Z') + clockMarginMs - 1_000),
    });
    for (let i = 0; i < 4; i++) await t.minute();
    expect(t.superseded).toEqual([]);
    t.stop.abort();
    await t.watching;
  });
});
