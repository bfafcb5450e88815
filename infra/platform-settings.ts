/**
 * The platform's account-wide settings: what FerryPlatform is built with that no app owns. The stack
 * outputs each one (output ids below), so that the next deploy, by any app from any shell, builds the
 * platform with the same values unless its deployer sets one on purpose
 * (cli/providers/aws/platform.ts platformSettings). No CDK import here: the CLI reads the outputs
 * without loading aws-cdk-lib.
 */
import { FerryError } from '../core/errors.js';

/** Output ids of FerryPlatform (its CfnOutputs; the CLI reads them by these names). */
export const platformSettingOutputs = {
  /** The Ferry version that deployed the platform: an older Ferry must not downgrade it. */
  ferryVersion: 'FerryVersion',
  /** The REST API's integration timeout (s): FERRY_AWS_INTEGRATION_TIMEOUT_SEC. */
  integrationTimeoutSec: 'IntegrationTimeoutSec',
  /** Stopped GPU instances kept ready per GPU pool: FERRY_AWS_GPU_WARM_POOL_SIZE, ferry:gpuWarmPoolSize. */
  gpuWarmPoolSize: 'GpuWarmPoolSize',
} as const;

/** At most this many stopped GPU instances per GPU pool (each costs its EBS volume). */
export const maxGpuWarmPoolSize = 100;

/** A warm pool size from text (`source` names where it came from); exit 2 with `hint` when it is none. */
export function gpuWarmPoolSizeOf(value: string, source: string, hint: string): number {
  const size = Number(value);
  if (value.trim() === '' || !Number.isInteger(size) || size < 0 || size > maxGpuWarmPoolSize) {
    throw new FerryError(
      'usage',
      `${source} must be a whole number from 0 to ${maxGpuWarmPoolSize}, got "${value}"`,
      { hint },
    );
  }
  return size;
}
