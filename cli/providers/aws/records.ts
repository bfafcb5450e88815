/** Where an app stack's endpoints are: its `Endpoints` output, and what each endpoint record keeps of it. */
import { z } from 'zod';
import type { EndpointRecord } from '../../../core/ports.js';

/** The app stack's `Endpoints` output. Not strict: the stack may add fields later versions read. */
export const endpointsOutputSchema = z.array(
  z.object({
    name: z.string(),
    id: z.string(),
    kind: z.enum(['queue', 'lb']),
    url: z.string().optional(),
    queueUrl: z.string().optional(),
    lowQueueUrl: z.string().optional(),
  }),
);

/**
 * Where a deployed endpoint is, kept on its record as `aws` (the control store saves the record as
 * JSON, so the field travels; EndpointRecord.config stays the strict EndpointConfig).
 */
export const awsEndpointInfoSchema = z
  .object({
    stack: z.string(),
    /** Clients' base URL: `<ApiUrl>/<id>` for queue endpoints, the ALB's URL for load-balanced ones. */
    url: z.string(),
    queueUrl: z.string().optional(),
    lowQueueUrl: z.string().optional(),
  })
  .strict();
export type AwsEndpointInfo = z.infer<typeof awsEndpointInfoSchema>;
export type AwsEndpointRecord = EndpointRecord & { aws?: AwsEndpointInfo };

export function awsInfoOf(record: EndpointRecord): AwsEndpointInfo | undefined {
  const parsed = awsEndpointInfoSchema.safeParse((record as AwsEndpointRecord).aws);
  return parsed.success ? parsed.data : undefined;
}
