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
  /** GPU hosts each managed scale-out round adds: FERRY_AWS_GPU_SCALE_OUT_STEP, ferry:gpuScaleOutStep. */
  gpuScaleOutStep: 'GpuScaleOutStep',
} as const;

/**
 * A whole-number setting of the GPU pools: set by the deployer's shell (`variable`; never a project's
 * .env, cli/providers/aws/settings.ts) or, with `npx cdk`, by the CDK context `ferry:<key>`
 * (infra/app.ts). Unset on a platform that never had it: `fallback`.
 */
interface GpuPoolSetting {
  variable: string;
  min: number;
  max: number;
  fallback: number;
  /** What a deploy that changes it calls it ("the platform's … changes from 2 to 0"). */
  title: string;
  /** The hint of a bad value, by where it came from. */
  hint: Record<SettingSource, string>;
}

/** Where a setting was read: the deployer's shell, or CDK context (`npx cdk -c ferry:<key>=…`). */
export type SettingSource = 'shell' | 'context';

/** The GPU pools' settings (infra/platform-stack.ts PlatformStackProps has each under its key). */
export const gpuPoolSettings = {
  gpuWarmPoolSize: {
    variable: 'FERRY_AWS_GPU_WARM_POOL_SIZE',
    // Each stopped instance costs its EBS volume.
    min: 0,
    max: 100,
    fallback: 0,
    title: 'GPU warm pool size',
    hint: {
      shell:
        'Leave it unset (the platform keeps its warm pool), or set 0 to remove the warm pool, 1 to keep one stopped GPU instance ready per GPU pool.',
      context: 'Pass -c ferry:gpuWarmPoolSize=1 to keep one stopped GPU instance ready per GPU pool.',
    },
  },
  gpuScaleOutStep: {
    variable: 'FERRY_AWS_GPU_SCALE_OUT_STEP',
    // ECS managed scaling's minimumScalingStepSize: 1 to 10000, 1 when omitted
    // (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ManagedScaling.html).
    min: 1,
    max: 10_000,
    fallback: 1,
    title: 'GPU scale-out step',
    hint: {
      shell:
        'Leave it unset (the platform keeps its step), or set 1 (the default) to add one GPU host per scale-out round, N to add N at a time.',
      context: 'Pass -c ferry:gpuScaleOutStep=N to add N GPU hosts per scale-out round (default 1).',
    },
  },
} as const satisfies Record<string, GpuPoolSetting>;

export type GpuPoolSettings = { -readonly [K in keyof typeof gpuPoolSettings]?: number };

/**
 * The GPU pool settings `read` finds, each checked (exit 2 with the setting's hint when out of its
 * range or not a whole number). `read` gets each setting's key and variable: the shell reads the
 * variable, CDK context `ferry:<key>`. Unset or blank: left out.
 */
export function gpuPoolSettingsFrom(
  from: SettingSource,
  read: (key: keyof typeof gpuPoolSettings, variable: string) => string | undefined,
): GpuPoolSettings {
  const found: GpuPoolSettings = {};
  for (const key of Object.keys(gpuPoolSettings) as Array<keyof typeof gpuPoolSettings>) {
    const setting = gpuPoolSettings[key];
    const raw = read(key, setting.variable)?.trim();
    if (!raw) continue;
    found[key] = wholeNumberOf(
      raw,
      from === 'shell' ? setting.variable : `ferry:${key}`,
      setting,
      setting.hint[from],
    );
  }
  return found;
}

/**
 * A whole number from text, digits only (`source` names where it came from); exit 2 with `hint` when
 * it is none or out of `range`.
 */
function wholeNumberOf(
  value: string,
  source: string,
  range: { min: number; max: number },
  hint: string,
): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < range.min || n > range.max) {
    throw new FerryError(
      'usage',
      `${source} must be a whole number from ${range.min} to ${range.max}, got "${value}"`,
      { hint },
    );
  }
  return n;
}
