/**
 * Where an app stack's endpoints are: its `Endpoints` output, and what each endpoint record keeps of
 * it. And what an environment's record keeps of the deploy that built its stack.
 */
import { z } from 'zod';
import { dnsRecordSchema } from '../../../core/deployment.js';
import { FerryError } from '../../../core/errors.js';
import type { EnvironmentRecord } from '../../../core/ports.js';

/** The app stack's `Endpoints` output. Not strict: the stack may add fields later versions read. */
export const endpointsOutputSchema = z.array(
  z.object({
    name: z.string(),
    id: z.string(),
    kind: z.enum(['queue', 'lb']),
    url: z.string().optional(),
    queueUrl: z.string().optional(),
    lowQueueUrl: z.string().optional(),
    dnsRecord: dnsRecordSchema.optional(),
  }),
);

// Where a deployed endpoint is, kept on its record as `aws`: core/deployment.ts owns the shape,
// since the API also reads it (a load-balanced endpoint's URL for by-name callers).
export {
  type AwsEndpointInfo,
  type AwsEndpointRecord,
  awsEndpointInfoSchema,
  awsInfoOf,
} from '../../../core/deployment.js';

/**
 * What a deploy of an environment took from the deployer's shell and project folder, kept on the
 * environment's record as `aws` (the control store saves the record as JSON, so the field travels):
 * the HTTPS front of its load-balanced endpoints (settings.ts lbHttpsFrom; none: CloudFront) and the
 * images the deploy resolved (settings.ts workerImagesFrom, or the platform registry's at the
 * deploying CLI's version). Removing some of the environment's endpoints deploys its stack again
 * from these, never from whoever runs the undeploy: CloudFormation changes whatever differs from the
 * stack's current template (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-updatereplacepolicy.html),
 * so another folder's settings would move the remaining endpoints to CloudFront, or off it, and onto
 * other images. Written by the AWS provider once CloudFormation deployed the stack.
 */
export const awsEnvironmentSettingsSchema = z
  .object({
    https: z
      .object({
        domainName: z.string().min(1),
        certificateArn: z.string().min(1).optional(),
        hostedZoneId: z.string().min(1).optional(),
      })
      .strict()
      .optional(),
    images: z.object({ gpuWorker: z.string(), cpuWorker: z.string(), agent: z.string() }).strict(),
  })
  .strict();
export type AwsEnvironmentSettings = z.infer<typeof awsEnvironmentSettingsSchema>;
export type AwsEnvironmentRecord = EnvironmentRecord & { aws?: AwsEnvironmentSettings };

/**
 * The settings the environment's stack was last deployed with; undefined when its record has none
 * (no record, or one written by a Ferry version that saved none). A record whose settings this
 * version cannot read is an error, not a reason to take the caller's instead.
 */
export function awsSettingsOf(record: EnvironmentRecord | undefined): AwsEnvironmentSettings | undefined {
  const saved = (record as AwsEnvironmentRecord | undefined)?.aws;
  if (saved === undefined) return undefined;
  const parsed = awsEnvironmentSettingsSchema.safeParse(saved);
  if (parsed.success) return parsed.data;
  throw new FerryError(
    'failed',
    `The record of ${record!.app}/${record!.name} has deploy settings this Ferry cannot read`,
    {
      hint: 'Run this with the Ferry version that deployed the environment, or deploy it again with this one.',
    },
  );
}
