/** Where an app stack's endpoints are: its `Endpoints` output, and what each endpoint record keeps of it. */
import { z } from 'zod';

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

// Where a deployed endpoint is, kept on its record as `aws`: core/deployment.ts owns the shape,
// since the API also reads it (a load-balanced endpoint's URL for by-name callers).
export {
  type AwsEndpointInfo,
  type AwsEndpointRecord,
  awsEndpointInfoSchema,
  awsInfoOf,
} from '../../../core/deployment.js';
