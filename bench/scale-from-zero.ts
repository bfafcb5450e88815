/**
 * Scale from zero: time from submit to the first result on an endpoint with no worker.
 *
 *   node dist/bench/scale-from-zero.js     (after `npm run build`; FERRY_BENCH_RUNS, default 5)
 *
 * Locally it is measured: `cold` (workers=(0,1), idle_timeout=1) is left to go back to zero before
 * each run, and the same runsync on `echo` kept warm (workers min 1) is the peer, measured in the same
 * run, so the difference is what starting a worker costs (the scaling decision, the Python process,
 * its imports, its first job-take).
 *
 * On AWS it is on paper (no account here): `awsScaleFromZeroModel()` adds up the stages, each with
 * where its figure comes from. bench/run.ts prints the same model into bench/results.md.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startPlatformChild } from './lib/child.js';
import { api, benchKey, echoProject } from './lib/faults.js';
import { envInt, pause, round, say } from './lib/util.js';

export interface Stage {
  stage: string;
  /** Seconds, low and high. */
  lowSec: number;
  highSec: number;
  /** Where the figure comes from: an AWS document, or the assumption it rests on. */
  source: string;
}

/**
 * Scale-from-zero on AWS for a GPU endpoint, stage by stage. Figures AWS documents are cited; the
 * others are stated assumptions (a 10 GB worker image, a 7 GB model) to be replaced by a measurement
 * on a real account.
 */
export function awsScaleFromZeroModel(options: { warmPool: boolean }): Stage[] {
  const stages: Stage[] = [
    {
      stage: 'scaling decision (API nudge → scaler → UpdateService)',
      lowSec: 0.2,
      highSec: 1,
      source:
        'one async Lambda invoke plus a DynamoDB query, an SQS GetQueueAttributes and two ECS calls; ' +
        'without the nudge, the next run of the one-minute schedule ' +
        '(https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rate-expressions.html)',
    },
    {
      stage: 'ECS managed scaling sees the PROVISIONING task and raises the ASG',
      lowSec: 15,
      highSec: 60,
      source:
        'CapacityProviderReservation is a one-minute metric behind a target-tracking policy ' +
        '(https://docs.aws.amazon.com/AmazonECS/latest/developerguide/managed-scaling-behavior.html)',
    },
  ];
  stages.push(
    options.warmPool
      ? {
          stage: 'start a stopped warm-pool instance, ECS agent registers',
          lowSec: 30,
          highSec: 90,
          source:
            'a stopped instance has done its first boot and keeps its EBS volume ' +
            '(https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-warm-pools.html, ' +
            'https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using-warm-pool.html); assumption: ' +
            'a restart of the GPU AMI takes 30–90 s',
        }
      : {
          stage: 'launch a GPU instance from the ECS GPU AMI, ECS agent registers',
          lowSec: 60,
          highSec: 180,
          source:
            'assumption: first boot of an accelerated AL2023 AMI (driver load included); ECS managed scaling ' +
            'counts instanceWarmupPeriod (default 300 s, Ferry sets 180 s) for new instances ' +
            '(https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ManagedScaling.html)',
        },
    {
      // A warm-pool instance never ran a task (ECS_WARM_POOLS_CHECK keeps it out of the cluster while
      // it is prepared) and ReuseOnScaleIn is off, so it holds no image unless user data pulls one.
      stage: 'pull the worker image (assumed 10 GB: CUDA + torch; not pre-pulled by Ferry yet)',
      lowSec: 80,
      highSec: 240,
      source:
        'a fresh gp3 volume writes at a baseline of 125 MiB/s ' +
        '(https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html#gp3-ebs-volume-type): ' +
        '10 GB ≥ 80 s before decompression; ECR and layer extraction add to it',
    },
  );
  stages.push(
    {
      stage: 'task start: artifact init container, agent, worker process',
      lowSec: 2,
      highSec: 10,
      source: 'measured locally for the worker process (see the local figure); the artifact is one S3 GET',
    },
    {
      stage: 'model load into GPU memory (assumed 7 GB of weights)',
      lowSec: 55,
      highSec: 120,
      source: 'assumption: weights in the image or downloaded, read from a cold gp3 volume at 125 MiB/s',
    },
  );
  return stages;
}

const sum = (stages: Stage[], key: 'lowSec' | 'highSec') => round(stages.reduce((n, s) => n + s[key], 0));

/** The on-paper model as a Markdown section (bench/results.md). */
export function awsScaleFromZeroReport(): string {
  const table = (warmPool: boolean) => {
    const stages = awsScaleFromZeroModel({ warmPool });
    return [
      '| stage | seconds | where the figure comes from |',
      '|---|---|---|',
      ...stages.map((s) => `| ${s.stage} | ${s.lowSec}–${s.highSec} | ${s.source} |`),
      `| **total** | **${sum(stages, 'lowSec')}–${sum(stages, 'highSec')}** | |`,
    ].join('\n');
  };
  return `## (c′) Scale from zero on AWS, on paper (GPU endpoint; not measured: no AWS account here)

The scaler decides within a second of the submit (the API nudges it; docs/scaling.md), so what
remains is capacity: an instance, the image, the model. Stages in order; the figures AWS documents
are cited, the rest are stated assumptions to replace with a measurement on a real account.

Without a warm pool:

${table(false)}

With \`gpuWarmPoolSize\` (stopped instances that already booted once):

${table(true)}

The warm pool saves the first boot only. The next saving is the image pull: a warm-pool instance
never ran a task, so it holds no image. Pulling the worker image (and model weights) in the launch
template's user data while the instance is prepared, before it stops, would take the pull and most
of the model load off the path (assumed 80–240 s and 55–120 s above); Ferry does not do that yet,
because the platform stack does not know the apps' images. A custom AMI with the image baked in is
the other way.

Before this change the decision alone could take 1–3 minutes (a CloudWatch alarm on one-minute SQS
metrics, which an idle queue stops emitting) and then asked for one task per minute while the job
waited, so a single job through a 6-minute cold start ramped a workers=(0,3) endpoint to 3 GPU
instances; test/unit/scaling-sim.test.ts shows both.
`;
}

async function main(): Promise<void> {
  const runs = envInt('FERRY_BENCH_RUNS', 5);
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-bench-s0-'));
  const child = await startPlatformChild({
    dataDir,
    apiKey: benchKey,
    workerWaitMs: 20_000,
    project: {
      ...echoProject(),
      resources: {
        echo: { workersMin: 1, workersMax: 1, idleTimeoutSec: 600 },
        cold: { workersMin: 0, workersMax: 1, idleTimeoutSec: 1 },
      },
    },
  });
  const workersOf = async (endpoint: string) => {
    const w = (await api(child.url, 'GET', `/${endpoint}/health`)).body.workers;
    return w.idle + w.running;
  };
  const waitFor = async (endpoint: string, count: number) => {
    const deadline = Date.now() + 60_000;
    while ((await workersOf(endpoint)) !== count) {
      if (Date.now() > deadline) throw new Error(`${endpoint} did not reach ${count} workers`);
      await pause(100);
    }
  };
  const timed = async (endpoint: string, i: number): Promise<number> => {
    const began = performance.now();
    const r = await api(child.url, 'POST', `/${endpoint}/runsync?wait=60000`, { input: { i } });
    if (r.body.status !== 'COMPLETED') throw new Error(`${endpoint} job ended ${r.body.status}`);
    return Math.round(performance.now() - began);
  };
  const cold: number[] = [];
  const warm: number[] = [];
  try {
    await waitFor('echo', 1);
    for (let i = 0; i < runs; i++) {
      await waitFor('cold', 0);
      await pause(300);
      cold.push(await timed('cold', i));
      warm.push(await timed('echo', i));
      say(`run ${i + 1}: scaled to zero ${cold.at(-1)} ms, warm ${warm.at(-1)} ms`);
    }
  } finally {
    await child.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  process.stdout.write(
    `Scale from zero, locally: submit → first result (runsync), ${runs} runs\n` +
      `  scaled to zero: ${cold.join(', ')} ms (median ${median(cold)} ms)\n` +
      `  warm peer (same handler kind, worker up): ${warm.join(', ')} ms (median ${median(warm)} ms)\n` +
      `  starting a worker costs ${median(cold) - median(warm)} ms at the median (${round(median(cold) / Math.max(1, median(warm)), 1)}× the warm job)\n\n` +
      `${awsScaleFromZeroReport()}\n`,
  );
}

if (process.argv[1]?.endsWith('scale-from-zero.js')) {
  main().catch((error) => {
    process.stderr.write(`${(error as Error).stack ?? error}\n`);
    process.exit(1);
  });
}
