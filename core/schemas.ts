/**
 * zod schemas for what crosses the HTTP boundary: client request bodies and query strings, and the
 * bodies workers post. Messages are written for the person who sent the request.
 */
import { z } from 'zod';
import { badRequest } from './errors.js';
import { roundedIfMarker } from './json.js';
import { limits } from './limits.js';

/**
 * Whole milliseconds in [min, max]. An integer beyond 2^53 reaches the schema as a marker string
 * (core/json.ts): it is refused as too big (or too small), not as "expected number".
 */
const msBetween = (min: number, max: number) =>
  z.preprocess(roundedIfMarker, z.number().min(min).max(max).int());

export const policySchema = z
  .object({
    executionTimeout: msBetween(limits.executionTimeoutMinMs, limits.executionTimeoutMaxMs).optional(),
    ttl: msBetween(limits.ttlMinMs, limits.ttlMaxMs).optional(),
    lowPriority: z.boolean().optional(),
  })
  .strict();

export const s3ConfigSchema = z
  .object({
    accessId: z.string(),
    accessSecret: z.string(),
    bucketName: z.string(),
    endpointUrl: z.string(),
    objectPath: z.string().optional(),
  })
  .strict();

const httpUrl = z
  .string()
  .url()
  .refine((url) => /^https?:\/\//i.test(url), 'must be an http or https URL');

/** The body of /run and /runsync (docs/api.md#request-body). */
export const runRequestSchema = z
  .object({
    input: z.record(z.string(), z.unknown()),
    webhook: httpUrl
      .refine(
        (url) => url.length <= limits.webhookUrlChars,
        `must be at most ${limits.webhookUrlChars} characters`,
      )
      .optional(),
    /** Sent by some clients; its semantics are undocumented upstream, so it is accepted and ignored. */
    webhookV2: z.unknown().optional(),
    policy: policySchema.optional(),
    s3Config: s3ConfigSchema.optional(),
  })
  .strict();
export type RunRequest = z.infer<typeof runRequestSchema>;

/**
 * The most bytes an upload may hold: the largest input /run or /runsync reads through an `inputRef`
 * (each hands its own body limit to PayloadStore.readInput).
 */
export const uploadMaxBytes = Math.max(limits.runBodyBytes, limits.runsyncBodyBytes);

const sendSizeBytes = `send {"sizeBytes": <bytes of the JSON you will PUT>}, a whole number from 1 to ${uploadMaxBytes}`;

/**
 * The body of POST uploads (AWS; docs/api.md#aws-front-door): the exact length of the PUT to come,
 * which the upload URL signs, so S3 takes no object of any other size through it.
 */
export const uploadRequestSchema = z
  .object(
    {
      sizeBytes: z.preprocess(
        roundedIfMarker,
        z
          .number({ error: sendSizeBytes })
          .int(sendSizeBytes)
          .min(1, sendSizeBytes)
          .max(
            uploadMaxBytes,
            `${sendSizeBytes} (the most /runsync reads from an upload; /run reads ${limits.runBodyBytes})`,
          ),
      ),
    },
    { error: sendSizeBytes },
  )
  .strict();

/** What a worker posts to job-done: a result, an error, or a progress update (`status: IN_PROGRESS`). */
export const jobDoneSchema = z
  .object({
    output: z.unknown().optional(),
    error: z.unknown().optional(),
    status: z.string().optional(),
    stopPod: z.boolean().optional(),
  })
  .passthrough();
export type JobDoneBody = z.infer<typeof jobDoneSchema>;

/**
 * What the ferry runtime posts to job-done-batch (a Ferry route; RunPod workers never call it): the
 * results of several jobs that finished together, each the body its own job-done would carry. Each
 * result is checked on its own (docs/architecture.md#worker-protocol).
 */
export const jobDoneBatchSchema = z
  .object({
    jobs: z
      .array(z.object({ id: z.string().min(1).max(256), result: z.unknown() }).strict())
      .min(1)
      .max(limits.jobDoneBatchJobs),
  })
  .strict();

/** What a worker posts to job-stream: one chunk; RunPod's SDK sends `{output}`, §2.2 chunks add `metrics`. */
export const jobStreamSchema = z
  .object({ output: z.unknown(), metrics: z.unknown().optional() })
  .passthrough();

/**
 * What the ferry runtime posts to job-log (a Ferry route; RunPod workers never call it): a batch of
 * a worker's output lines, each of one job. Over-long lines are cut, not refused (docs/observability.md).
 */
export const jobLogSchema = z
  .object({
    lines: z
      .array(
        z
          .object({
            jobId: z.string().min(1).max(256),
            atMs: z.preprocess(roundedIfMarker, z.number().int().nonnegative()),
            stream: z.enum(['stdout', 'stderr']),
            text: z.string(),
          })
          .strict(),
      )
      .max(limits.logBatchLines),
  })
  .strict();

/** Parses with a schema and turns the first issue into a 400 that names the field. */
export function parseOr400<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const at = issue.path.length > 0 ? ` at '${issue.path.join('.')}'` : '';
  let message = issue.message;
  if (issue.code === 'unrecognized_keys') {
    // The unknown field is named; when the schema says what to send (its own `error`, as POST
    // uploads' does), that follows, as in its other 400s. zod's own wording adds nothing to the name.
    const unknown = `unknown field ${issue.keys.map((k) => `'${k}'`).join(', ')}`;
    message = message.startsWith('Unrecognized key') ? unknown : `${unknown}; ${message}`;
  }
  throw badRequest(`Invalid ${what}${at}: ${message}`);
}

/** An integer query parameter in [min, max], or undefined when absent. */
export function queryInt(
  value: string | undefined,
  name: string,
  min: number,
  max: number,
): number | undefined {
  if (value === undefined || value === '') return undefined;
  if (!/^\d+$/.test(value))
    throw badRequest(`Query parameter '${name}' must be an integer number of milliseconds`);
  const n = Number(value);
  if (n < min || n > max)
    throw badRequest(`Query parameter '${name}' must be between ${min} and ${max} (given ${n})`);
  return n;
}
