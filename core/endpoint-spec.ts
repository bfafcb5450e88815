/**
 * What an endpoint declaration may say: the one owner of the rules for `Endpoint(...)`'s parameters
 * (docs/architecture.md#the-ferry-python-package). Three places check declarations, and all three
 * follow this file:
 *
 *   - the build manifest (core/manifest.ts) reuses the patterns and bounds below;
 *   - the static scanner (cli/build/scan.py) and the `ferry` package (worker-image/python/ferry/
 *     endpoint.py) are Python, standard library only, so they cannot import this file. They share one
 *     Python copy of its tables, worker-image/python/ferry/declaration.py, tested against it instead:
 *     `endpoint-spec.schema.json` (generated from `endpointSpecSchema`, kept up to
 *     date by test/unit/endpoint-spec.test.ts) gives them the patterns, enums and bounds, and
 *     `test/fixtures/endpoint-declarations.json` is a table of declarations that the zod schema, the
 *     scanner and the package must all accept or all refuse.
 *
 * Rules between fields (gpu or cpu, min ≤ max, ...) are not expressible in the generated JSON Schema;
 * the shared table covers them.
 */
import { z } from 'zod';
import { pythonVersions } from './python-versions.js';

export { pythonVersions };

/** GPU models users may name; each maps to EC2 instance types in infra/gpu.ts. */
export const gpuModels = ['T4', 'A10G', 'L4', 'L40S', 'A100', 'H100'] as const;

/** 1–63 letters, digits, '-' or '_', starting with a letter or digit (it becomes AWS resource names). */
export const endpointNamePattern = '^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$';
/** vCPUs and GiB, e.g. "2-8": whole numbers from 1, no leading zeros, no spaces. */
export const cpuPattern = '^([1-9][0-9]*)-([1-9][0-9]*)$';
export const envNamePattern = '^[A-Za-z_][A-Za-z0-9_]*$';
/** A container image reference, `[registry/]repository[:tag][@sha256:digest]`: no spaces, no shell characters. */
export const imagePattern = '^[a-z0-9][A-Za-z0-9._/:-]*(@sha256:[a-f0-9]{64})?$';
/**
 * Variables the platform sets in a worker's environment itself: Ferry's own namespace (FERRY_APP,
 * FERRY_CALL_TOKEN, ...) and the RunPod worker protocol's names (core/adapters/local/pool.ts,
 * infra/constructs/service.ts); an entry ending in `_` is a prefix. An `env` key among them is
 * refused: on AWS FERRY_CALL_TOKEN and RUNPOD_AI_API_KEY are ECS secrets of the worker container,
 * and ECS refuses a container whose variable is in both `environment` and `secrets` ("The secret name
 * must be unique and not shared with any new or existing environment variables set on the
 * container"), so the stack's deploy failed and rolled back; the others were overridden without a
 * word. Other RUNPOD_ names (RUNPOD_DEBUG_LEVEL, read by RunPod's SDK) stay the user's to set.
 * Compared without case, as secret names are (core/adapters/local/secrets.ts).
 */
export const platformEnvNames = [
  'FERRY_',
  'RUNPOD_WEBHOOK_',
  'RUNPOD_AI_API_KEY',
  'RUNPOD_ENDPOINT_ID',
  'RUNPOD_PING_INTERVAL',
  'RUNPOD_POD_ID',
  'RUNPOD_POD_HOSTNAME',
] as const;

/** The entry of platformEnvNames that `name` is (or starts with, for a prefix), if any. */
export const platformEnvNameOf = (name: string): string | undefined => {
  const upper = name.toUpperCase();
  return platformEnvNames.find((entry) => (entry.endsWith('_') ? upper.startsWith(entry) : upper === entry));
};

/** Why an `env` key is refused: the one wording of the scanner, the package and the schema. */
export const platformEnvKeyProblem = (key: string, entry: string): string =>
  `env key ${key} is one the platform sets in every worker itself (${entry.endsWith('_') ? `${entry}*` : entry}): a secret goes in secrets=, a setting under another name`;

/** Parameters about our code and its packages: an image endpoint's image brings its own. */
export const imageExcludedParameters = ['dependencies', 'system_dependencies', 'python_version'] as const;

export const bounds = {
  gpuCount: { min: 1, max: 8 },
  idleTimeoutSec: { min: 1, max: 3600 },
  workersMax: { min: 1 },
  maxConcurrency: { min: 1 },
  /** 0 means the platform default (policy.executionTimeout or 600 s). */
  executionTimeoutMs: { min: 0 },
} as const;

export const endpointNameSchema = z.string().regex(new RegExp(endpointNamePattern));
export const cpuSchema = z.string().regex(new RegExp(cpuPattern));
export const imageSchema = z.string().regex(new RegExp(imagePattern));
const gpuName = z.union([z.enum(gpuModels), z.literal('any')]);
const int = (min: number, max?: number) => {
  const atLeast = z.number().int().min(min);
  return max === undefined ? atLeast : atLeast.max(max);
};
/** A non-empty requirement string ("torch", "pillow>=10", "ffmpeg"). */
const requirement = z.string().regex(/\S/);

/** The parameters of `Endpoint(...)`, as the user writes them in Python (snake_case). */
export const endpointSpecSchema = z
  .object({
    name: endpointNameSchema.optional(),
    gpu: z.union([gpuName, z.array(gpuName).min(1)]).optional(),
    cpu: cpuSchema.optional(),
    workers: z.union([int(1), z.tuple([int(0), int(bounds.workersMax.min)])]).optional(),
    idle_timeout: int(bounds.idleTimeoutSec.min, bounds.idleTimeoutSec.max).optional(),
    dependencies: z.array(requirement).optional(),
    system_dependencies: z.array(requirement).optional(),
    env: z.record(z.string().regex(new RegExp(envNamePattern)), z.string()).optional(),
    gpu_count: int(bounds.gpuCount.min, bounds.gpuCount.max).optional(),
    execution_timeout_ms: int(bounds.executionTimeoutMs.min).optional(),
    max_concurrency: int(bounds.maxConcurrency.min).optional(),
    python_version: z.enum(pythonVersions).optional(),
    /** An endpoint whose worker is this prebuilt RunPod-protocol image (docs/python.md, image endpoints). */
    image: imageSchema.optional(),
  })
  .strict()
  .superRefine((spec, ctx) => {
    const issue = (message: string) => ctx.addIssue({ code: 'custom', message });
    if (spec.gpu !== undefined && spec.cpu !== undefined) issue('gpu and cpu are exclusive: give one');
    if (spec.cpu !== undefined && spec.gpu_count !== undefined && spec.gpu_count !== 1) {
      issue('gpu_count applies to GPU endpoints only');
    }
    if (Array.isArray(spec.gpu) && spec.gpu.includes('any') && spec.gpu.length > 1) {
      issue('gpu "any" cannot be combined with specific models');
    }
    for (const key of Object.keys(spec.env ?? {})) {
      const entry = platformEnvNameOf(key);
      if (entry) issue(platformEnvKeyProblem(key, entry));
    }
    if (Array.isArray(spec.workers) && !workersInOrder(spec.workers[0], spec.workers[1])) {
      issue('workers=(min, max) needs min <= max');
    }
    if (spec.image !== undefined) {
      // It is called by name (it has no function of ours to decorate), so it needs one.
      if (spec.name === undefined) issue('an image endpoint needs a name');
      for (const parameter of imageExcludedParameters) {
        if (spec[parameter] !== undefined) issue(`${parameter} does not apply to an image endpoint`);
      }
    }
  });
export type EndpointSpec = z.infer<typeof endpointSpecSchema>;

/** The one rule between a pool's bounds: min may equal max, never exceed it. */
export const workersInOrder = (min: number, max: number): boolean => min <= max;

/** The JSON Schema the Python side is tested against (written to core/endpoint-spec.schema.json). */
export function endpointSpecJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(endpointSpecSchema, { target: 'draft-2020-12' }) as Record<string, unknown>;
}
