/**
 * The build manifest: what `ferry build` found in a project by a static scan, and what every provider
 * deploys from. It travels inside the artifact as `ferry_manifest.json`.
 */
import { z } from 'zod';
import {
  bounds,
  cpuSchema,
  endpointNameSchema,
  gpuModels,
  imageSchema,
  pythonVersions,
  workersInOrder,
} from './endpoint-spec.js';

// The declaration rules live in endpoint-spec.ts; these names stay importable from here.
export { gpuModels, pythonVersions };

export const resourcesSchema = z
  .object({
    /** GPU models allowed, or 'any'. Absent for CPU endpoints. */
    gpu: z.array(z.union([z.enum(gpuModels), z.literal('any')])).optional(),
    /** vCPUs and GiB as "2-8", for CPU endpoints. */
    cpu: cpuSchema.optional(),
    gpuCount: z.number().int().min(bounds.gpuCount.min).max(bounds.gpuCount.max),
    workersMin: z.number().int().min(0),
    workersMax: z.number().int().min(bounds.workersMax.min),
    idleTimeoutSec: z.number().int().min(bounds.idleTimeoutSec.min).max(bounds.idleTimeoutSec.max),
    /** 0 means the platform default (policy.executionTimeout or 600 s). */
    executionTimeoutMs: z.number().int().min(bounds.executionTimeoutMs.min),
    maxConcurrency: z.number().int().min(bounds.maxConcurrency.min),
    /**
     * Load-balanced endpoints: seconds ECS ignores failing load-balancer health checks after a task
     * starts (model loading). 0 or absent means the platform default (infra/constructs/service.ts).
     */
    healthCheckGraceSec: z.number().int().min(0).max(7200).optional(),
    env: z.record(z.string(), z.string()),
    /** Names of secrets handed to the workers as environment variables (docs/security.md). */
    secrets: z.array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/)).optional(),
    dependencies: z.array(z.string()),
    systemDependencies: z.array(z.string()),
    pythonVersion: z.enum(pythonVersions).optional(),
  })
  .strict()
  .refine((r) => workersInOrder(r.workersMin, r.workersMax), {
    message: 'workersMin must not exceed workersMax',
  });
export type Resources = z.infer<typeof resourcesSchema>;

const callableSchema = z
  .object({
    name: z.string(),
    isAsync: z.boolean(),
    isGenerator: z.boolean(),
    /** First line of the docstring: the Swagger summary in `ferry dev`. */
    summary: z.string().optional(),
    params: z.array(z.string()),
    /**
     * Each parameter from the signature: required, JSON type from a plain hint (and nullable when None
     * is allowed too), literal default. `ferry dev` checks a route's input against them and shows them
     * in its OpenAPI document (cli/dev/inputs.ts); cli/build/scan.py annotation_schema says which hints.
     */
    inputs: z
      .array(
        z
          .object({
            name: z.string(),
            required: z.boolean(),
            type: z.enum(['integer', 'number', 'string', 'boolean', 'object', 'array']).optional(),
            nullable: z.literal(true).optional(),
            default: z.unknown().optional(),
          })
          .strict(),
      )
      .optional(),
    /** The signature has **kwargs: any other input key is an argument too. */
    varKeywords: z.literal(true).optional(),
  })
  .strict();

export const routeSchema = callableSchema
  .extend({
    method: z.enum(['GET', 'POST', 'PUT', 'DELETE', 'PATCH']),
    path: z.string().startsWith('/'),
  })
  .strict();
export type Route = z.infer<typeof routeSchema>;

export const targetSchema = callableSchema
  .extend({
    type: z.enum(['function', 'class']),
    /** Public methods of a class endpoint; with several, the job input names one in "method". */
    methods: z.array(callableSchema).optional(),
  })
  .strict();
export type Target = z.infer<typeof targetSchema>;

export const manifestEndpointSchema = z
  .object({
    name: endpointNameSchema,
    kind: z.enum(['queue', 'lb']),
    /** Project-relative POSIX path of the file that declares it. */
    file: z.string(),
    /** Dotted module path (`workers/gpu.py` → `workers.gpu`). */
    module: z.string(),
    /** Queue-based: the decorated function or class. */
    target: targetSchema.optional(),
    /**
     * Queue-based image endpoint (`Endpoint(name=..., image=...)`): the worker container is this prebuilt
     * RunPod-protocol image and `target` is absent; `module` only names the declaring file
     * (docs/python.md, image endpoints).
     */
    image: imageSchema.optional(),
    /** Load-balanced: the module variable holding the Endpoint, and its routes. */
    variable: z.string().optional(),
    routes: z.array(routeSchema).optional(),
    resources: resourcesSchema,
    /** sha256 of the user-owned resource configuration only (no injected env), for drift detection. */
    configHash: z.string(),
  })
  .strict();
export type ManifestEndpoint = z.infer<typeof manifestEndpointSchema>;

export const manifestSchema = z
  .object({
    version: z.literal(1),
    app: z.string(),
    pythonVersion: z.enum(pythonVersions),
    generatedAt: z.string(),
    /** sha256 over the shipped files' relative paths and contents; a change rolls the workers. */
    sourceFingerprint: z.string(),
    endpoints: z.array(manifestEndpointSchema),
    dependencies: z
      .object({
        /** Requirement strings installed into the artifact. */
        installed: z.array(z.string()),
        /** Packages left out, and why ("base image" or "--exclude"). */
        excluded: z.array(z.object({ name: z.string(), reason: z.string() }).strict()),
      })
      .strict(),
  })
  .strict();
export type Manifest = z.infer<typeof manifestSchema>;

export const manifestFileName = 'ferry_manifest.json';
