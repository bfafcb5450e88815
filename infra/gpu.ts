/**
 * The one table from what users write in `@Endpoint(gpu=..., cpu=..., gpu_count=...)` to EC2 instance
 * types (docs/architecture.md#the-ferry-python-package). Pure functions: the platform stack builds one capacity pool per instance type,
 * the app stack picks the pool and sizes the task from the same answer, and the CLI can print it.
 *
 * One worker task per instance: the worker reserves nearly all of the instance's memory, so ECS never
 * packs two tasks on one host, and gives each worker the whole machine it asked for. (Port clashes
 * would not stop two tasks anyway: tasks use bridge networking with no fixed host port, task-layout.ts.)
 */
import { cpuPattern } from '../core/endpoint-spec.js';
import { FerryError } from '../core/errors.js';
import type { gpuModels, Resources } from '../core/manifest.js';

export type GpuModel = (typeof gpuModels)[number];

export interface InstanceShape {
  /** EC2 instance type, e.g. `g5.xlarge`. */
  instanceType: string;
  vcpus: number;
  memoryGiB: number;
  /** NVIDIA GPUs on the instance; 0 for CPU instances. */
  gpus: number;
  /**
   * Larger sizes of the same family with the same GPU model and count, in the order the pool falls
   * back to them when EC2 has no capacity for `instanceType` (platform-stack.ts `addPool`). Each has at
   * least this shape's vCPUs and memory, so the worker's memory reservation still fits.
   */
  fallbacks?: readonly Omit<InstanceShape, 'fallbacks'>[];
}

type Shape = Omit<InstanceShape, 'fallbacks'>;
/** `family.size` shapes with one GPU model and count: vCPUs and GiB per size, from the AWS table. */
function sizes(family: string, gpus: number, list: readonly [string, number, number][]): Shape[] {
  return list.map(([size, vcpus, memoryGiB]) => ({
    instanceType: `${family}.${size}`,
    vcpus,
    memoryGiB,
    gpus,
  }));
}

/**
 * GPU model → the instance sizes that carry it, smallest first, one per GPU count. Sizes in between
 * (g5.2xlarge …) add CPU and memory but not GPUs: they are not a user's choice but a pool's fallbacks,
 * tried in order when EC2 answers InsufficientInstanceCapacity for the first. Two fallbacks at most,
 * the next sizes up, so a fallback costs at most ~2× the first choice. GPU counts, vCPUs and memory
 * per size are AWS's accelerated computing table
 * (https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html).
 */
export const gpuInstanceTable: Readonly<Record<GpuModel, readonly InstanceShape[]>> = {
  T4: [
    {
      instanceType: 'g4dn.xlarge',
      vcpus: 4,
      memoryGiB: 16,
      gpus: 1,
      fallbacks: sizes('g4dn', 1, [
        ['2xlarge', 8, 32],
        ['4xlarge', 16, 64],
      ]),
    },
    { instanceType: 'g4dn.12xlarge', vcpus: 48, memoryGiB: 192, gpus: 4 },
    { instanceType: 'g4dn.metal', vcpus: 96, memoryGiB: 384, gpus: 8 },
  ],
  A10G: [
    {
      instanceType: 'g5.xlarge',
      vcpus: 4,
      memoryGiB: 16,
      gpus: 1,
      fallbacks: sizes('g5', 1, [
        ['2xlarge', 8, 32],
        ['4xlarge', 16, 64],
      ]),
    },
    {
      instanceType: 'g5.12xlarge',
      vcpus: 48,
      memoryGiB: 192,
      gpus: 4,
      fallbacks: sizes('g5', 4, [['24xlarge', 96, 384]]),
    },
    { instanceType: 'g5.48xlarge', vcpus: 192, memoryGiB: 768, gpus: 8 },
  ],
  L4: [
    {
      instanceType: 'g6.xlarge',
      vcpus: 4,
      memoryGiB: 16,
      gpus: 1,
      fallbacks: sizes('g6', 1, [
        ['2xlarge', 8, 32],
        ['4xlarge', 16, 64],
      ]),
    },
    {
      instanceType: 'g6.12xlarge',
      vcpus: 48,
      memoryGiB: 192,
      gpus: 4,
      fallbacks: sizes('g6', 4, [['24xlarge', 96, 384]]),
    },
    { instanceType: 'g6.48xlarge', vcpus: 192, memoryGiB: 768, gpus: 8 },
  ],
  L40S: [
    {
      instanceType: 'g6e.xlarge',
      vcpus: 4,
      memoryGiB: 32,
      gpus: 1,
      fallbacks: sizes('g6e', 1, [
        ['2xlarge', 8, 64],
        ['4xlarge', 16, 128],
      ]),
    },
    {
      instanceType: 'g6e.12xlarge',
      vcpus: 48,
      memoryGiB: 384,
      gpus: 4,
      fallbacks: sizes('g6e', 4, [['24xlarge', 96, 768]]),
    },
    { instanceType: 'g6e.48xlarge', vcpus: 192, memoryGiB: 1536, gpus: 8 },
  ],
  A100: [{ instanceType: 'p4d.24xlarge', vcpus: 96, memoryGiB: 1152, gpus: 8 }],
  // p5.4xlarge: one H100, so gpu_count=1 does not rent eight.
  H100: [
    { instanceType: 'p5.4xlarge', vcpus: 16, memoryGiB: 256, gpus: 1 },
    { instanceType: 'p5.48xlarge', vcpus: 192, memoryGiB: 2048, gpus: 8 },
  ],
};

/**
 * The instance types a pool of `instanceType` may launch, in order of preference: the type itself,
 * then its fallbacks. Just the type for CPU pools and for types without fallbacks.
 */
export function equivalentInstanceTypes(instanceType: string): string[] {
  for (const shapes of Object.values(gpuInstanceTable)) {
    const shape = shapes.find((s) => s.instanceType === instanceType);
    if (shape) return [instanceType, ...(shape.fallbacks ?? []).map((f) => f.instanceType)];
  }
  return [instanceType];
}

/**
 * The instance types a pool of `instanceType` launches (platform-stack.ts `addPool`): its equivalents,
 * unless it is a GPU pool with a warm pool, which cannot sit on a mixed-instances group (PutWarmPool
 * refuses one: https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_PutWarmPool.html) and so
 * keeps to its first type.
 */
export function poolInstanceTypes(instanceType: string, gpuWarmPoolSize: number): string[] {
  return isGpuInstanceType(instanceType) && gpuWarmPoolSize > 0
    ? [instanceType]
    : equivalentInstanceTypes(instanceType);
}

/**
 * `gpu='any'` (or neither gpu nor cpu): A10G. 24 GB of GPU memory runs most open models, and g5 is
 * offered in more regions than g6/g6e, so a first deploy is least likely to hit capacity errors.
 */
export const defaultGpuModel: GpuModel = 'A10G';

/** CPU families by GiB per vCPU: compute (2), general purpose (4), memory (8). */
const cpuFamilies = [
  { family: 'c7i', gibPerVcpu: 2 },
  { family: 'm7i', gibPerVcpu: 4 },
  { family: 'r7i', gibPerVcpu: 8 },
] as const;
const cpuSizes = [
  { size: 'large', vcpus: 2 },
  { size: 'xlarge', vcpus: 4 },
  { size: '2xlarge', vcpus: 8 },
  { size: '4xlarge', vcpus: 16 },
  { size: '8xlarge', vcpus: 32 },
  { size: '12xlarge', vcpus: 48 },
  { size: '16xlarge', vcpus: 64 },
  { size: '24xlarge', vcpus: 96 },
  { size: '48xlarge', vcpus: 192 },
] as const;

/** The instance a CPU endpoint gets when it names no shape. */
export const defaultCpuSpec = '2-8';

export interface CpuSpec {
  vcpus: number;
  memoryGiB: number;
}

/** Parses `cpu="V-G"` (vCPUs and GiB, e.g. "2-8"). Anything else is a FerryError with a hint. */
export function parseCpuSpec(spec: string): CpuSpec {
  const match = new RegExp(cpuPattern).exec(spec);
  const hint = 'Write cpu as "<vCPUs>-<GiB>", for example cpu="2-8".';
  if (!match)
    throw new FerryError('bad_request', `Invalid cpu "${spec}": expected "V-G", each at least 1`, { hint });
  return { vcpus: Number(match[1]), memoryGiB: Number(match[2]) };
}

/**
 * The smallest instance with at least the vCPUs and memory asked for, in the family whose memory per
 * vCPU is the closest one at or above the ratio asked for (so "2-4" is a c7i.large, "2-8" an m7i.large,
 * "2-16" an r7i.large, and "4-64" an r7i.2xlarge).
 */
export function cpuInstanceFor(spec: string): InstanceShape {
  const { vcpus, memoryGiB } = parseCpuSpec(spec);
  const ratio = memoryGiB / vcpus;
  const family = cpuFamilies.find((f) => f.gibPerVcpu >= ratio) ?? cpuFamilies[cpuFamilies.length - 1]!;
  for (const size of cpuSizes) {
    const memory = size.vcpus * family.gibPerVcpu;
    if (size.vcpus >= vcpus && memory >= memoryGiB) {
      return { instanceType: `${family.family}.${size.size}`, vcpus: size.vcpus, memoryGiB: memory, gpus: 0 };
    }
  }
  throw new FerryError('bad_request', `No instance type offers cpu "${spec}"`, {
    hint: 'The largest CPU shape is 192 vCPUs with 1536 GiB.',
  });
}

/** The smallest instance of `model` with at least `gpuCount` GPUs. */
export function gpuInstanceFor(model: GpuModel, gpuCount: number): InstanceShape {
  const shapes = gpuInstanceTable[model];
  const shape = shapes.find((s) => s.gpus >= gpuCount);
  if (!shape) {
    const most = Math.max(...shapes.map((s) => s.gpus));
    throw new FerryError('bad_request', `gpu_count=${gpuCount} is more than one ${model} instance has`, {
      hint: `${model} instances carry at most ${most} GPUs.`,
    });
  }
  return shape;
}

export interface Placement {
  kind: 'gpu' | 'cpu';
  /** The GPU model chosen, for GPU placements. */
  gpuModel?: GpuModel;
  shape: InstanceShape;
}

/**
 * Where an endpoint runs. `gpu` lists models in the user's order of preference (as RunPod's gpuIds do);
 * the first one wins, because one ECS service scales one capacity pool. `cpu` makes a CPU endpoint;
 * neither means any GPU (docs/architecture.md#the-ferry-python-package).
 */
export function placementFor(resources: Pick<Resources, 'gpu' | 'cpu' | 'gpuCount'>): Placement {
  if (resources.cpu !== undefined && resources.gpu === undefined) {
    return { kind: 'cpu', shape: cpuInstanceFor(resources.cpu) };
  }
  const first = resources.gpu?.[0] ?? 'any';
  const model: GpuModel = first === 'any' ? defaultGpuModel : first;
  return { kind: 'gpu', gpuModel: model, shape: gpuInstanceFor(model, resources.gpuCount) };
}

/**
 * The most instances of one capacity pool (its Auto Scaling group's MaxSize), shared by every
 * endpoint of every app placed on that instance type. A worker reserves its whole instance
 * (workerMemoryReservationMiB), so this is also the most workers of that type at once. A task asked
 * for beyond it never leaves PROVISIONING: "If the Auto Scaling group is unable to scale out to
 * accommodate the number of tasks run, the tasks will fail to transition beyond the PROVISIONING
 * state" (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/asg-capacity-providers.html),
 * and a cluster holds at most 100 such tasks. So the scaler never asks one endpoint for more
 * (functions/scaler.ts) and a deploy refuses a `workers` minimum above it (poolFitOf).
 */
export const poolMaxInstances = 8;

/**
 * What an endpoint's `workers=(min, max)` can get from its pool: an error when the minimum cannot
 * run at all, a warning when the maximum is out of reach.
 */
export function poolFitOf(endpoint: {
  name: string;
  resources: Pick<Resources, 'gpu' | 'cpu' | 'gpuCount' | 'workersMin' | 'workersMax'>;
}): { error?: FerryError; warning?: string } {
  const { instanceType } = placementFor(endpoint.resources).shape;
  const { workersMin, workersMax } = endpoint.resources;
  const pool = `its ${instanceType} pool holds ${poolMaxInstances} instances (one worker each, shared by every app on ${instanceType})`;
  if (workersMin > poolMaxInstances) {
    return {
      error: new FerryError(
        'usage',
        `Endpoint "${endpoint.name}": workers min ${workersMin} can never run: ${pool}`,
        {
          hint: `Lower the minimum of workers=(min, max) to ${poolMaxInstances} or less.`,
        },
      ),
    };
  }
  if (workersMax > poolMaxInstances) {
    return {
      warning: `${endpoint.name}: workers max ${workersMax}, but ${pool}: at most ${poolMaxInstances} run at once`,
    };
  }
  return {};
}

/** Every instance type a set of endpoints needs, sorted and without repeats (the platform's pools). */
export function instanceTypesFor(
  resources: readonly Pick<Resources, 'gpu' | 'cpu' | 'gpuCount'>[],
): string[] {
  return [...new Set(resources.map((r) => placementFor(r).shape.instanceType))].sort();
}

/** True for the instance types of the GPU table (they boot the ECS GPU AMI). */
export function isGpuInstanceType(instanceType: string): boolean {
  return Object.values(gpuInstanceTable).some((shapes) =>
    shapes.some(
      (s) => s.instanceType === instanceType || s.fallbacks?.some((f) => f.instanceType === instanceType),
    ),
  );
}

/** The agent sidecar's memory reservation; the worker gets the rest of the instance. */
export const agentMemoryMiB = 256;
/** The artifact init container's (it streams one S3 object to a file, then exits). */
export const artifactInitMemoryMiB = 64;

/**
 * The worker container's memory reservation: the instance's memory minus room for the OS and the ECS
 * agent and minus the agent sidecar and the artifact init container. Reserving this much is what keeps
 * one task per instance. ECS registers less than the instance type's memory, the kernel's share
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/memory-management.html; an m4.large's
 * 8 GiB register as 7985 MiB in AWS's example), and never places a task whose reservations exceed
 * what is registered: 10 %, at least 1 GiB, is a safe margin (test/infra/gpu.test.ts holds it).
 */
export function workerMemoryReservationMiB(shape: InstanceShape): number {
  const totalMiB = shape.memoryGiB * 1024;
  const headroomMiB = Math.max(1024, Math.ceil(totalMiB * 0.1));
  return totalMiB - headroomMiB - agentMemoryMiB - artifactInitMemoryMiB;
}

/**
 * The worker's /dev/shm, half its memory reservation. Docker gives a container 64 MiB unless told
 * (`sharedMemorySize` "maps to the --shm-size option to docker run",
 * https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_LinuxParameters.html), and GPU code
 * lives in it: PyTorch's DataLoader workers hand batches over shared memory, NCCL moves tensors
 * between the GPUs of one host through it, so a multi-GPU model (vLLM's tensor parallelism) or a
 * loader with workers dies with a bus error on 64 MiB. A tmpfs holds memory only as it is written,
 * and what it holds counts as the container's, so this is a ceiling, not a reservation.
 */
export function workerSharedMemoryMiB(shape: InstanceShape): number {
  return Math.floor(workerMemoryReservationMiB(shape) / 2);
}
