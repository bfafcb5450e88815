/**
 * What a provider records for a deployed endpoint, shared by the CLI (which writes it), the local
 * worker pools and the AWS stacks (which read it). `EndpointRecord.config` holds an EndpointConfig.
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { FerryError, usage } from './errors.js';
import { manifestEndpointSchema, pythonVersions } from './manifest.js';
import type { EndpointRecord } from './ports.js';

export const endpointConfigSchema = z
  .object({
    /** The endpoint as the build manifest describes it. */
    endpoint: manifestEndpointSchema,
    pythonVersion: z.enum(pythonVersions),
    /** Local provider only: run the code in this folder as it is (`ferry dev`), not an artifact. */
    codeDir: z.string().optional(),
    /**
     * Local provider: the worker command, run in the code folder, instead of `python -m ferry.worker`
     * — e.g. `["python3", "-u", "handler.py"]` for a worker built on RunPod's SDK, which reads the same
     * RUNPOD_* environment.
     */
    command: z.array(z.string()).min(1).optional(),
  })
  .strict();
export type EndpointConfig = z.infer<typeof endpointConfigSchema>;

/**
 * The names apps and environments may have, on every provider: they become parts of URLs
 * (`/v2/by-name/<app>/<env>/<name>`), artifact keys, secret names and AWS resource and stack names
 * (infra/names.ts). An app is named like an endpoint (core/endpoint-spec.ts); an environment may also
 * hold dots (`prod.1`).
 */
export const recordNameRules = {
  app: { pattern: /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/, chars: 'letters, digits, _ and -' },
  environment: { pattern: /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/, chars: 'letters, digits, ., _ and -' },
} as const;

/**
 * `name` when an app or environment may have it, else a usage error (exit 2). Checked where a name is
 * chosen (deploy, `ferry dev`, `env create`, `app create`, `secrets`, `keys create`), not where one is
 * read, so a record made before the check can still be shown and deleted.
 */
export function checkRecordName(what: keyof typeof recordNameRules, name: string): string {
  const rule = recordNameRules[what];
  if (rule.pattern.test(name)) return name;
  throw usage(
    `${JSON.stringify(name)} is not a valid ${what} name`,
    `Use 1 to 63 ${rule.chars}, starting with a letter or digit${what === 'app' ? ' (--app, or `app` in .ferry/config.json)' : ' (--env)'}.`,
  );
}

/**
 * Whether a job with `input` streams by its endpoint's declaration: the handler it runs (a class
 * endpoint's method the input names in "method", or its only one, as ferry/invoke.py picks it) is a
 * generator. Undefined where the declaration does not show that handler: an image endpoint's, or a
 * worker command of the endpoint's own (a RunPod SDK handler.py, whose target the scan never saw).
 */
export function declaredStreaming(config: EndpointConfig, input: unknown): boolean | undefined {
  const target = config.endpoint.target;
  if (!target || config.command) return undefined;
  if (target.type === 'function') return target.isGenerator;
  const methods = target.methods ?? [];
  const named =
    input !== null && typeof input === 'object' ? (input as { method?: unknown }).method : undefined;
  const method = methods.length === 1 ? methods[0] : methods.find((m) => m.name === named);
  return method?.isGenerator ?? false;
}

export function endpointConfigOf(record: EndpointRecord): EndpointConfig {
  const parsed = endpointConfigSchema.safeParse(record.config);
  if (!parsed.success) {
    throw new FerryError('failed', `Endpoint ${record.id} has a configuration this Ferry cannot read`, {
      hint: 'Deploy it again with this version of Ferry.',
    });
  }
  return parsed.data;
}

/**
 * The DNS record a load-balanced endpoint's host needs and Ferry does not create: its domain was given
 * without a Route 53 hosted zone (infra/constructs/https-front.ts), so the user makes it at their DNS
 * provider. A CNAME to the ALB's DNS name is how a name outside Route 53 reaches an ALB
 * (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/application-load-balancers.html#dns-name).
 */
export const dnsRecordSchema = z
  .object({ name: z.string(), type: z.literal('CNAME'), value: z.string() })
  .strict();
export type DnsRecord = z.infer<typeof dnsRecordSchema>;

/**
 * Where an endpoint deployed on AWS is, kept on its record as `aws` (the control store saves the
 * record as JSON, so the field travels; EndpointRecord.config stays the strict EndpointConfig).
 * Written by the AWS provider (cli/providers/aws.ts); read by it and by the API's name route.
 */
export const awsEndpointInfoSchema = z
  .object({
    stack: z.string(),
    /** Clients' base URL: `<ApiUrl>/<id>` for queue endpoints, the HTTPS front for load-balanced ones. */
    url: z.string(),
    queueUrl: z.string().optional(),
    lowQueueUrl: z.string().optional(),
    /** Load-balanced, with a domain and no hosted zone: the record its URL waits for. */
    dnsRecord: dnsRecordSchema.optional(),
  })
  .strict();
export type AwsEndpointInfo = z.infer<typeof awsEndpointInfoSchema>;
export type AwsEndpointRecord = EndpointRecord & { aws?: AwsEndpointInfo };

export function awsInfoOf(record: EndpointRecord): AwsEndpointInfo | undefined {
  const parsed = awsEndpointInfoSchema.safeParse((record as AwsEndpointRecord).aws);
  return parsed.success ? parsed.data : undefined;
}

/** Endpoints created by `ferry dev` carry this prefix (docs/architecture.md#apps-environments-endpoints). */
export const livePrefix = 'live-';

/** Ids look like `hello-3kq9x2ab`: readable, unique, and safe in a URL path segment. */
export function newEndpointId(name: string): string {
  const slug = name
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40);
  return `${slug || 'endpoint'}-${randomBytes(5).toString('hex').slice(0, 8)}`;
}
