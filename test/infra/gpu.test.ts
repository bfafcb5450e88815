import { describe, expect, it } from 'vitest';
import { FerryError } from '../../core/errors.js';
import { gpuModels } from '../../core/manifest.js';
import {
  agentMemoryMiB,
  artifactInitMemoryMiB,
  cpuInstanceFor,
  equivalentInstanceTypes,
  gpuInstanceFor,
  gpuInstanceTable,
  instanceTypesFor,
  isGpuInstanceType,
  parseCpuSpec,
  placementFor,
  workerMemoryReservationMiB,
} from '../../infra/gpu.js';

describe('gpu table', () => {
  it('covers every GPU model users may name, smallest instance first', () => {
    for (const model of gpuModels) {
      const shapes = gpuInstanceTable[model];
      expect(shapes.length).toBeGreaterThan(0);
      const gpus = shapes.map((s) => s.gpus);
      expect(gpus).toEqual([...gpus].sort((a, b) => a - b));
    }
  });

  it.each([
    ['T4', 1, 'g4dn.xlarge'],
    ['A10G', 1, 'g5.xlarge'],
    ['L4', 1, 'g6.xlarge'],
    ['L40S', 1, 'g6e.xlarge'],
    ['A100', 1, 'p4d.24xlarge'],
    ['H100', 1, 'p5.4xlarge'],
    ['H100', 2, 'p5.48xlarge'],
    ['H100', 8, 'p5.48xlarge'],
    ['A10G', 2, 'g5.12xlarge'],
    ['A10G', 4, 'g5.12xlarge'],
    ['A10G', 5, 'g5.48xlarge'],
    ['T4', 8, 'g4dn.metal'],
  ] as const)('%s × %i → %s', (model, count, instanceType) => {
    const shape = gpuInstanceFor(model, count);
    expect(shape.instanceType).toBe(instanceType);
    expect(shape.gpus).toBeGreaterThanOrEqual(count);
  });

  // Every model, every count 1..8: the first choice and every fallback carry the same number of GPUs
  // as the smallest shape that fits, so gpu_count=1 never lands on a 4- or 8-GPU machine when the
  // model has a 1-GPU type.
  const counts = gpuModels.flatMap((model) => [1, 2, 3, 4, 5, 6, 7, 8].map((n) => [model, n] as const));
  it.each(counts)('%s × %i: first choice and fallbacks have the fewest GPUs that fit', (model, count) => {
    const shape = gpuInstanceFor(model, count);
    const fewest = Math.min(...gpuInstanceTable[model].map((s) => s.gpus).filter((g) => g >= count));
    expect(shape.gpus).toBe(fewest);
    for (const fallback of shape.fallbacks ?? []) expect(fallback.gpus).toBe(fewest);
    if (count === 1 && gpuInstanceTable[model].some((s) => s.gpus === 1)) {
      for (const type of equivalentInstanceTypes(shape.instanceType)) {
        const all = Object.values(gpuInstanceTable).flatMap((shapes) =>
          shapes.flatMap((s) => [s, ...(s.fallbacks ?? [])]),
        );
        expect(all.find((s) => s.instanceType === type)?.gpus).toBe(1);
      }
    }
  });

  it('fallbacks are the same family, at least as large, in ascending order', () => {
    for (const shapes of Object.values(gpuInstanceTable)) {
      for (const shape of shapes) {
        const family = shape.instanceType.split('.')[0];
        let previous = shape;
        for (const fallback of shape.fallbacks ?? []) {
          expect(fallback.instanceType.split('.')[0]).toBe(family);
          expect(fallback.vcpus).toBeGreaterThan(previous.vcpus);
          expect(fallback.memoryGiB).toBeGreaterThan(previous.memoryGiB);
          // The worker reserves memory from the first choice; a fallback must hold it.
          expect(workerMemoryReservationMiB(shape)).toBeLessThan(fallback.memoryGiB * 1024);
          previous = fallback;
        }
      }
    }
  });

  it.each([
    ['g5.xlarge', ['g5.xlarge', 'g5.2xlarge', 'g5.4xlarge']],
    ['g6.xlarge', ['g6.xlarge', 'g6.2xlarge', 'g6.4xlarge']],
    ['g4dn.xlarge', ['g4dn.xlarge', 'g4dn.2xlarge', 'g4dn.4xlarge']],
    ['g5.12xlarge', ['g5.12xlarge', 'g5.24xlarge']],
    ['g5.48xlarge', ['g5.48xlarge']],
    ['m7i.large', ['m7i.large']],
  ])('pool %s launches %j, in that order', (type, expected) => {
    expect(equivalentInstanceTypes(type)).toEqual(expected);
  });

  it('refuses more GPUs than an instance has, with a hint', () => {
    try {
      gpuInstanceFor('A100', 9);
      expect.unreachable();
    } catch (error) {
      expect(FerryError.is(error) && error.code).toBe('bad_request');
      expect((error as FerryError).hint).toMatch(/at most 8/);
    }
  });
});

describe('cpu shapes', () => {
  it.each([
    ['2-4', 'c7i.large'],
    ['2-8', 'm7i.large'],
    ['2-16', 'r7i.large'],
    ['4-64', 'r7i.2xlarge'],
    ['3-8', 'm7i.xlarge'],
    ['8-16', 'c7i.2xlarge'],
    ['16-64', 'm7i.4xlarge'],
  ])('"%s" → %s', (spec, instanceType) => {
    const shape = cpuInstanceFor(spec);
    expect(shape.instanceType).toBe(instanceType);
    const { vcpus, memoryGiB } = parseCpuSpec(spec);
    expect(shape.vcpus).toBeGreaterThanOrEqual(vcpus);
    expect(shape.memoryGiB).toBeGreaterThanOrEqual(memoryGiB);
    expect(shape.gpus).toBe(0);
  });

  // The one cpu rule (core/endpoint-spec.ts): no spaces, no leading zeros, as the scanner and `ferry` refuse them.
  it.each(['', '2', '2-', 'two-8', '0-8', '2-0', '2x8', ' 16 - 64 ', '02-8'])(
    'rejects "%s" as bad input',
    (spec) => {
      expect(() => cpuInstanceFor(spec)).toThrowError(/Invalid cpu/);
    },
  );

  it('rejects shapes no instance offers', () => {
    expect(() => cpuInstanceFor('500-1000')).toThrowError(/No instance type/);
  });
});

describe('placement', () => {
  const base = { gpuCount: 1 };

  it('takes the first GPU model listed (the user’s preference order)', () => {
    expect(placementFor({ ...base, gpu: ['L4', 'A10G'] })).toMatchObject({ kind: 'gpu', gpuModel: 'L4' });
  });

  it('maps any, and neither gpu nor cpu, to the default GPU family', () => {
    expect(placementFor({ ...base, gpu: ['any'] }).shape.instanceType).toBe('g5.xlarge');
    expect(placementFor(base).shape.instanceType).toBe('g5.xlarge');
  });

  it('makes a CPU placement from cpu alone', () => {
    expect(placementFor({ ...base, cpu: '2-8' })).toMatchObject({
      kind: 'cpu',
      shape: { instanceType: 'm7i.large' },
    });
  });

  it('lists the instance types a set of endpoints needs, once each', () => {
    const types = instanceTypesFor([
      { ...base, gpu: ['A10G'] },
      { ...base, gpu: ['any'] },
      { ...base, cpu: '2-8' },
      { gpuCount: 2, gpu: ['L4'] },
    ]);
    expect(types).toEqual(['g5.xlarge', 'g6.12xlarge', 'm7i.large']);
    expect(types.map(isGpuInstanceType)).toEqual([true, true, false]);
  });
});

describe('worker memory reservation', () => {
  it('leaves room for the OS, the ECS agent, the sidecar and the init container, but keeps one task per host', () => {
    const small = cpuInstanceFor('2-8');
    const reservation = workerMemoryReservationMiB(small);
    expect(reservation).toBe(8 * 1024 - 1024 - 256 - 64);
    // Two tasks never fit on one host.
    expect(2 * reservation).toBeGreaterThan(small.memoryGiB * 1024);
    const big = gpuInstanceFor('H100', 8);
    expect(workerMemoryReservationMiB(big)).toBe(2048 * 1024 - Math.ceil(2048 * 1024 * 0.1) - 256 - 64);
  });

  // A task is placed only on an instance whose registered memory holds the sum of its containers'
  // reservations, and ECS registers less than the instance type's memory ("Because of platform memory
  // overhead and memory occupied by the system kernel, this number is different than the installed
  // memory amount", https://docs.aws.amazon.com/AmazonECS/latest/developerguide/memory-management.html):
  // an m4.large's 8 GiB register as 7985 MiB, 97.5 % (AWS's worked example, for the same agent:
  // https://docs.aws.amazon.com/batch/latest/userguide/memory-management.html). A task asking for
  // the whole instance would wait in PROVISIONING while managed scaling launched hosts it never fits.
  // Its GPUs likewise: "the number of physical GPUs that the Amazon ECS container agent reserves for
  // the container", never more than the host has
  // (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ResourceRequirement.html).
  it('asks for no more memory than ECS registers, nor GPUs than the host has, on every instance a pool may launch', () => {
    const registeredShare = 7985 / 8192;
    const cpuShapes = ['1-2', '2-4', '2-8', '2-16', '4-64', '16-32', '96-768', '192-1536'].map(
      cpuInstanceFor,
    );
    const gpuShapes = Object.values(gpuInstanceTable).flat();
    for (const shape of [...gpuShapes, ...cpuShapes]) {
      const taskMiB = workerMemoryReservationMiB(shape) + agentMemoryMiB + artifactInitMemoryMiB;
      for (const host of [shape, ...(shape.fallbacks ?? [])]) {
        expect([host.instanceType, taskMiB <= host.memoryGiB * 1024 * registeredShare]).toEqual([
          host.instanceType,
          true,
        ]);
        expect(host.gpus, host.instanceType).toBe(shape.gpus);
      }
    }
    // Every GPU count a user may ask for lands on a shape that has at least that many.
    for (const model of gpuModels) {
      const most = Math.max(...gpuInstanceTable[model].map((s) => s.gpus));
      for (let count = 1; count <= most; count++) {
        expect(gpuInstanceFor(model, count).gpus).toBeGreaterThanOrEqual(count);
      }
    }
  });
});
