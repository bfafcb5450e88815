/**
 * The shared platform stack as the CLI sees it: its outputs, the capacity pools it must have, and
 * the CDK code, loaded only when a deploy needs it.
 */
import { z } from 'zod';
import { FerryError } from '../../../core/errors.js';
import type { Resources } from '../../../core/manifest.js';
import { platformStackName } from '../../../infra/names.js';
import type { StackOutputs } from '../toolkit.js';

/**
 * The CDK app and the Lambda bundler, loaded on first use: aws-cdk-lib, cdk-nag and esbuild take a
 * second or more to import, and `ferry app list` needs none of them.
 */
export async function loadInfra() {
  const [app, gpu, platform, bundle] = await Promise.all([
    import('../../../infra/app.js'),
    import('../../../infra/gpu.js'),
    import('../../../infra/platform-stack.js'),
    import('../../../functions/bundle.js'),
  ]);
  return {
    synthesize: app.synthesize,
    instanceTypesFor: gpu.instanceTypesFor,
    defaultInstanceTypes: platform.defaultInstanceTypes,
    bundleFunctions: bundle.bundleFunctions,
  };
}

/** The platform outputs the CLI reads (the stack has more; unknown ones are ignored on purpose). */
export const platformOutputsSchema = z.object({
  ApiUrl: z.string().min(1),
  BucketName: z.string().min(1),
  ControlTableName: z.string().min(1),
  /** The platform's capacity pools, comma-separated (absent on platforms of older versions). */
  InstanceTypes: z.string().optional(),
  /** The platform's ECR registry and image CodeBuild project (absent on older platforms). */
  ImageRegistry: z.string().optional(),
  ImageBuildProject: z.string().optional(),
  /** The VPC's zones, comma-separated (exported as Ferry-AvailabilityZones; aws/zones.ts reuses them). */
  AvailabilityZones: z.string().optional(),
  /** The alarm topic (exported as Ferry-AlarmTopicArn). */
  AlarmTopicArn: z.string().optional(),
});
export type PlatformOutputs = z.infer<typeof platformOutputsSchema>;

/**
 * The pools the shared platform needs: defaults, every deployed endpoint's, the new ones, and the
 * pools the platform already has (its `InstanceTypes` output). Pools are kept, never pruned: an idle
 * pool costs nothing, and dropping one could pull it from under an app stack still placed on it
 * (infra/platform-stack.ts).
 */
export async function platformInstanceTypes(
  resources: readonly Resources[],
  existing: readonly string[] = [],
): Promise<string[]> {
  const { defaultInstanceTypes, instanceTypesFor } = await loadInfra();
  return [...new Set([...defaultInstanceTypes(), ...instanceTypesFor(resources), ...existing])].sort();
}

/** The instance types listed in the platform's `InstanceTypes` output. */
export function platformPools(outputs: PlatformOutputs): string[] {
  return (outputs.InstanceTypes ?? '')
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '');
}

export function parsePlatformOutputs(outputs: StackOutputs): PlatformOutputs {
  const parsed = platformOutputsSchema.safeParse(outputs);
  if (!parsed.success) {
    throw new FerryError(
      'failed',
      `Stack ${platformStackName} lacks outputs the CLI needs: ${parsed.error.issues.map((i) => i.path.join('.')).join(', ')}`,
      { hint: 'It was deployed by another Ferry version: run `ferry deploy --provider aws` with this one.' },
    );
  }
  return parsed.data;
}
