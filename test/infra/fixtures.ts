/**
 * A sample build manifest for the infra tests: a GPU queue endpoint (A10G, 1 GPU, workers 0–3),
 * a CPU queue endpoint ("2-8") and a load-balanced endpoint with two routes.
 */

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Manifest, ManifestEndpoint, Resources } from '../../core/manifest.js';
import { manifestSchema } from '../../core/manifest.js';
import { functionEntries } from '../../functions/bundle.js';

/** The resources of a plain queue endpoint (1 GPU, workers 0–3); tests spread it and override. */
export const sampleResources: Resources = {
  gpuCount: 1,
  workersMin: 0,
  workersMax: 3,
  idleTimeoutSec: 60,
  executionTimeoutMs: 0,
  maxConcurrency: 1,
  env: {},
  dependencies: [],
  systemDependencies: [],
};

const callable = { isAsync: false, isGenerator: false, params: ['prompt'] };

export const gpuEndpoint: ManifestEndpoint = {
  name: 'gpu_worker',
  kind: 'queue',
  file: 'gpu_worker.py',
  module: 'gpu_worker',
  target: { ...callable, name: 'generate', type: 'function' },
  resources: { ...sampleResources, gpu: ['A10G'], env: { MODEL: 'tiny' } },
  configHash: 'a'.repeat(64),
};

export const cpuEndpoint: ManifestEndpoint = {
  name: 'cpu_worker',
  kind: 'queue',
  file: 'cpu_worker.py',
  module: 'cpu_worker',
  target: { ...callable, name: 'resize', type: 'function' },
  resources: {
    ...sampleResources,
    cpu: '2-8',
    workersMin: 1,
    workersMax: 5,
    idleTimeoutSec: 300,
    maxConcurrency: 4,
  },
  configHash: 'b'.repeat(64),
};

export const lbEndpoint: ManifestEndpoint = {
  name: 'lb_worker',
  kind: 'lb',
  file: 'lb_worker.py',
  module: 'lb_worker',
  variable: 'api',
  routes: [
    { ...callable, name: 'process', method: 'POST', path: '/process' },
    { ...callable, name: 'health', method: 'GET', path: '/health', params: [] },
  ],
  resources: { ...sampleResources, cpu: '2-8', workersMin: 1, workersMax: 2 },
  configHash: 'c'.repeat(64),
};

export const sampleManifest: Manifest = manifestSchema.parse({
  version: 1,
  app: 'demo',
  pythonVersion: '3.11',
  generatedAt: '2025-01-01T00:00:00.000Z',
  sourceFingerprint: 'f'.repeat(64),
  endpoints: [gpuEndpoint, cpuEndpoint, lbEndpoint],
  dependencies: { installed: [], excluded: [] },
});

export const sampleImages = {
  gpuWorker: '123456789012.dkr.ecr.us-east-1.amazonaws.com/ferry-worker:gpu-py3.11',
  cpuWorker: '123456789012.dkr.ecr.us-east-1.amazonaws.com/ferry-worker:cpu-py3.11',
  agent: 'public.ecr.aws/example/ferry-agent:1',
};

/** A directory standing in for the esbuild bundles: synth tests never bundle. */
export function stubFunctionsDir(): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-infra-fns-'));
  for (const name of Object.keys(functionEntries).map((entry) => `${entry}.mjs`)) {
    writeFileSync(join(dir, name), 'export const handler = async () => ({ statusCode: 200, body: "{}" });\n');
  }
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}
