/**
 * The build manifest: what `ferry build` found in a project by a static scan, and what every provider
 * deploys from. It travels inside the artifact as `ferry_manifest.json`.
 */
import { z } from 'zod';

export const pythonVersions = ['3.10', '3.11', '3.12', '3.13'] as const;

/** GPU models users may name (docs/architecture.md#the-ferry-python-package); each maps to EC2 instance types in infra/. */
export const gpuModels = ['T4', 'A10G', 'L4', 'L40S', 'A100', 'H100'] as const;

export const resourcesSchema = z
  .object({
    /** GPU models allowed, or 'any'. Absent for CPU endpoints. */
    gpu: z.array(z.union([z.enum(gpuModels), z.literal('any')])).optional(),
    /** vCPUs and GiB as "2-8", for CPU endpoints. */
    cpu: z.string().optional(),
    gpuCount: z.number().int().min(1).max(8),
    workersMin: z.number().int().min(0),
    workersMax: z.number().int().min(1),
    idleTimeoutSec: z.number().int().min(1).max(3600),
    /** 0 means the platform default (policy.executionTimeout or 600 s). */
    executionTimeoutMs: z.number().int().min(0),
    maxConcurrency: z.number().int().min(1),
    env: z.record(z.string(), z.string()),
    dependencies: z.array(z.string()),
    systemDependencies: z.array(z.string()),
    pythonVersion: z.enum(pythonVersions).optional(),
  })
  .strict();
export type Resources = z.infer<typeof resourcesSchema>;

const callableSchema = z
  .object({
    name: z.string(),
    isAsync: z.boolean(),
    isGenerator: z.boolean(),
    /** First line of the docstring: the Swagger summary in `ferry dev`. */
    summary: z.string().optional(),
    params: z.array(z.string()),
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
    name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/),
    kind: z.enum(['queue', 'lb']),
    /** Project-relative POSIX path of the file that declares it. */
    file: z.string(),
    /** Dotted module path (`workers/gpu.py` → `workers.gpu`). */
    module: z.string(),
    /** Queue-based: the decorated function or class. */
    target: targetSchema.optional(),
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
