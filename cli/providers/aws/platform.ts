/**
 * The shared platform stack as the CLI sees it: its outputs, the capacity pools it must have, and
 * the CDK code, loaded only when a deploy needs it.
 */
import { z } from 'zod';
import { FerryError } from '../../../core/errors.js';
import type { Resources } from '../../../core/manifest.js';
import { platformStackName } from '../../../infra/names.js';
import {
  type GpuPoolSettings,
  gpuPoolSettings,
  platformSettingOutputs,
} from '../../../infra/platform-settings.js';
import { instanceTypeZonesOutput } from '../../../infra/pool-zones.js';
import type { Reporter } from '../../io.js';
import type { StackOutputs } from '../toolkit.js';
import { gpuPoolSettingsFromShell, integrationTimeoutFrom } from './settings.js';

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
  /**
   * The zones of the platform that offer each pool's types, `type:zone,zone;…` (infra/pool-zones.ts;
   * a plain output; aws/zones.ts poolOfferings reuses it). Absent on older platforms.
   */
  [instanceTypeZonesOutput]: z.string().optional(),
  /** The alarm topic (exported as Ferry-AlarmTopicArn). */
  AlarmTopicArn: z.string().optional(),
  /** How long runsync waits hold a request (ms), from the integration timeout. */
  RunsyncMaxWaitMs: z.string().optional(),
  /** The platform-wide settings (infra/platform-settings.ts; absent on platforms of older versions). */
  [platformSettingOutputs.ferryVersion]: z.string().optional(),
  [platformSettingOutputs.integrationTimeoutSec]: z.string().optional(),
  [platformSettingOutputs.gpuWarmPoolSize]: z.string().optional(),
  [platformSettingOutputs.gpuScaleOutStep]: z.string().optional(),
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

/**
 * `a` against `b` as semantic versions (https://semver.org, "Precedence"): negative when `a` is older,
 * 0 when equal, positive when newer; build metadata is ignored. undefined when either is no version.
 */
export function compareVersions(a: string, b: string): number | undefined {
  const parse = (v: string) =>
    /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/.exec(v.trim());
  const [pa, pb] = [parse(a), parse(b)];
  if (!pa || !pb) return undefined;
  for (let i = 1; i <= 3; i++) {
    const diff = Number(pa[i]) - Number(pb[i]);
    if (diff !== 0) return diff;
  }
  // A pre-release is older than its release; between two, identifier by identifier.
  const [ra, rb] = [pa[4], pb[4]];
  if (ra === undefined || rb === undefined) return (ra === undefined ? 1 : 0) - (rb === undefined ? 1 : 0);
  const [ia, ib] = [ra.split('.'), rb.split('.')];
  for (let i = 0; i < Math.min(ia.length, ib.length); i++) {
    const [x, y] = [ia[i]!, ib[i]!];
    if (x === y) continue;
    const [nx, ny] = [/^\d+$/.test(x), /^\d+$/.test(y)];
    if (nx && ny) return Number(x) - Number(y);
    if (nx !== ny) return nx ? -1 : 1;
    return x < y ? -1 : 1;
  }
  return ia.length - ib.length;
}

/**
 * Refuses (exit 2) to deploy the shared platform with a Ferry older than the one that last deployed
 * it: every `ferry deploy` deploys FerryPlatform from the deployer's own Ferry, and an older one would
 * put its older Lambdas and template under every app in the account. A platform without the output
 * was deployed by a Ferry from before it, older than any that writes it: this one may update it.
 */
export function checkPlatformVersion(platform: PlatformOutputs, version: string): void {
  const deployed = platform[platformSettingOutputs.ferryVersion];
  if (!deployed || (compareVersions(deployed, version) ?? 0) <= 0) return;
  throw new FerryError(
    'usage',
    `${platformStackName} was deployed by Ferry ${deployed}, newer than this Ferry ${version}: deploying it with this one would downgrade the platform of every app in this account and region`,
    {
      hint: `Upgrade Ferry to ${deployed} or later (the one your teammates or CI use), then deploy again.`,
    },
  );
}

/** The platform-wide settings a synth builds FerryPlatform with (infra/platform-settings.ts). */
export type PlatformSettings = { integrationTimeoutSec?: number } & GpuPoolSettings;

/** Each platform-wide setting's variable, what a deploy that changes it calls it, and its default. */
const settingWords: Record<keyof PlatformSettings, { variable: string; title: string; fallback: number }> = {
  integrationTimeoutSec: {
    variable: 'FERRY_AWS_INTEGRATION_TIMEOUT_SEC',
    title: 'integration timeout (s)',
    fallback: 29,
  },
  ...gpuPoolSettings,
};

/**
 * The platform-wide settings of a deploy: the deployed platform's (its outputs), unless the
 * deployer's shell sets one (FERRY_AWS_INTEGRATION_TIMEOUT_SEC, FERRY_AWS_GPU_WARM_POOL_SIZE,
 * FERRY_AWS_GPU_SCALE_OUT_STEP), which then wins; with `reporter`, each value the shell changes is
 * said. Without this, every deploy from a shell that lacks the variable (a teammate, CI, another app)
 * set the platform back to the default: the account's runsync wait to 29 s, its warm pools to none.
 * No platform yet: the shell's, else the defaults.
 *
 * An older platform has no IntegrationTimeoutSec output; its RunsyncMaxWaitMs still tells the timeout
 * when below RunPod's 90 s (infra/platform-stack.ts integrationTiming: wait = timeout - 4 s). Its GPU
 * pool settings are not in its outputs at all: `ferry deploy` never set them before (only `npx cdk`
 * could set the warm pool), so each is its default unless the shell sets it.
 */
export function platformSettings(
  deployed: PlatformOutputs | undefined,
  env: NodeJS.ProcessEnv,
  reporter?: Reporter,
): PlatformSettings {
  const kept = deployed ? deployedSettings(deployed) : {};
  const shell: PlatformSettings = { ...integrationTimeoutFrom(env), ...gpuPoolSettingsFromShell(env) };
  if (deployed && reporter) {
    for (const key of Object.keys(settingWords) as Array<keyof PlatformSettings>) {
      const { variable, title, fallback } = settingWords[key];
      const [now, next] = [kept[key] ?? fallback, shell[key]];
      if (next !== undefined && next !== now) {
        reporter.line(
          `  ${variable}=${next}: the platform's ${title} changes from ${now} to ${next}, for every app in this account and region`,
        );
      }
    }
    if (kept.integrationTimeoutSec === undefined && shell.integrationTimeoutSec === undefined) {
      reporter.line(
        `  warning: ${platformStackName} does not say its integration timeout (an older Ferry deployed it): ` +
          'it is deployed with 29 s unless FERRY_AWS_INTEGRATION_TIMEOUT_SEC is set to the value it was deployed with',
      );
    }
  }
  return { ...kept, ...shell };
}

/** The settings the deployed platform says it was built with (its outputs; see platformSettings). */
function deployedSettings(platform: PlatformOutputs): PlatformSettings {
  const whole = (value: string | undefined) =>
    value !== undefined && /^\d+$/.test(value.trim()) ? Number(value) : undefined;
  let timeout = whole(platform[platformSettingOutputs.integrationTimeoutSec]);
  const waitMs = whole(platform.RunsyncMaxWaitMs);
  if (timeout === undefined && waitMs !== undefined && waitMs < 90_000) timeout = waitMs / 1000 + 4;
  const settings: PlatformSettings =
    timeout !== undefined && Number.isInteger(timeout) ? { integrationTimeoutSec: timeout } : {};
  for (const key of Object.keys(gpuPoolSettings) as Array<keyof GpuPoolSettings>) {
    const value = whole(platform[platformSettingOutputs[key]]);
    if (value !== undefined) settings[key] = value;
  }
  return settings;
}
