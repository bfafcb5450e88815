/** The AWS provider's settings from the environment and the project's .env. */
import { FerryError, usage } from '../../../core/errors.js';
import type { WorkerImages } from '../../../infra/app-stack.js';
import type { LbHttpsOptions } from '../../../infra/constructs/https-front.js';
import { type GpuPoolSettings, gpuPoolSettingsFrom } from '../../../infra/platform-settings.js';
import { agentImage, baseImageFor } from '../../../worker-image/images.js';
import { ferryVersion, readDotEnv } from '../../config.js';

/**
 * The worker images: FERRY_AWS_GPU_IMAGE / FERRY_AWS_CPU_IMAGE / FERRY_AWS_AGENT_IMAGE (environment or
 * .env) win; otherwise the images of worker-image/images.ts under FERRY_AWS_IMAGE_REGISTRY
 * (e.g. `123456789012.dkr.ecr.us-east-1.amazonaws.com`). The agent has its own small image.
 */
export function workerImagesFrom(
  env: NodeJS.ProcessEnv,
  projectDir: string,
  pythonVersion: string,
): { images: WorkerImages; fromRegistry: boolean } {
  const dotenv = readDotEnv(projectDir);
  const get = (key: string) => (env[key] ?? dotenv[key])?.trim() || undefined;
  const registry = get('FERRY_AWS_IMAGE_REGISTRY')?.replace(/\/+$/, '');
  const version = ferryVersion();
  const at = (tag: string) => (registry ? `${registry}/${tag}` : tag);
  const cpuWorker = get('FERRY_AWS_CPU_IMAGE') ?? at(baseImageFor('cpu', version, pythonVersion));
  const images = {
    gpuWorker: get('FERRY_AWS_GPU_IMAGE') ?? at(baseImageFor('gpu', version, pythonVersion)),
    cpuWorker,
    agent: get('FERRY_AWS_AGENT_IMAGE') ?? at(agentImage(version)),
  };
  const explicit = ['FERRY_AWS_GPU_IMAGE', 'FERRY_AWS_CPU_IMAGE', 'FERRY_AWS_AGENT_IMAGE'].every(
    (k) => get(k) !== undefined,
  );
  return { images, fromRegistry: registry !== undefined || explicit };
}

/**
 * HTTPS of load-balanced endpoints (infra/constructs/https-front.ts), from FERRY_AWS_DOMAIN,
 * FERRY_AWS_CERTIFICATE_ARN and FERRY_AWS_HOSTED_ZONE_ID (environment, then the project's .env).
 * Without a domain: undefined, and each load-balanced endpoint gets a CloudFront https address.
 */
export function lbHttpsFrom(env: NodeJS.ProcessEnv, projectDir: string): LbHttpsOptions | undefined {
  const dotenv = readDotEnv(projectDir);
  const get = (key: string) => (env[key] ?? dotenv[key])?.trim() || undefined;
  const domainName = get('FERRY_AWS_DOMAIN')?.replace(/\.+$/, '');
  const certificateArn = get('FERRY_AWS_CERTIFICATE_ARN');
  const hostedZoneId = get('FERRY_AWS_HOSTED_ZONE_ID');
  if (!domainName) {
    if (certificateArn || hostedZoneId) {
      throw usage(
        'FERRY_AWS_CERTIFICATE_ARN and FERRY_AWS_HOSTED_ZONE_ID need FERRY_AWS_DOMAIN',
        'Set FERRY_AWS_DOMAIN to the domain your load-balanced endpoints answer under.',
      );
    }
    return undefined;
  }
  return {
    domainName,
    ...(certificateArn ? { certificateArn } : {}),
    ...(hostedZoneId ? { hostedZoneId } : {}),
  };
}

/**
 * FERRY_AWS_INTEGRATION_TIMEOUT_SEC: the API Gateway integration timeout this account's quota allows
 * (docs/aws.md "runsync"). Platform-wide, so read from the shell only, never a project's .env: a
 * deploy that does not set it keeps the deployed platform's value (aws/platform.ts platformSettings).
 */
export function integrationTimeoutFrom(env: NodeJS.ProcessEnv): { integrationTimeoutSec?: number } {
  const raw = env.FERRY_AWS_INTEGRATION_TIMEOUT_SEC?.trim();
  if (!raw) return {};
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 29 || value > 900) {
    throw new FerryError(
      'usage',
      `FERRY_AWS_INTEGRATION_TIMEOUT_SEC must be a whole number 29-900, got ${raw}`,
      {
        hint: 'Leave it unset (29 s), or set the integration timeout API Gateway granted this account.',
      },
    );
  }
  return { integrationTimeoutSec: value };
}

/**
 * The GPU pools' settings from the deployer's shell (infra/platform-settings.ts gpuPoolSettings:
 * FERRY_AWS_GPU_WARM_POOL_SIZE, FERRY_AWS_GPU_SCALE_OUT_STEP; `-c ferry:<key>` with `npx cdk`).
 * Platform-wide like the integration timeout, and read the same way: the shell only; one left unset
 * keeps the deployed platform's value.
 */
export function gpuPoolSettingsFromShell(env: NodeJS.ProcessEnv): GpuPoolSettings {
  return gpuPoolSettingsFrom('shell', (_key, variable) => env[variable]);
}
