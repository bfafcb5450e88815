/**
 * The two offline ways to get the CloudFormation templates, with no AWS credentials at all:
 *   - `cdk synth` (aws-cdk CLI, the devDependency) with the repo's cdk.json (`node dist/infra/app.js`)
 *     and `-c ferry:*` context;
 *   - `ferry deploy --provider aws --synth-only` (toolkit-lib in process) in a `ferry init` project.
 * Both need the compiled dist/ (`npm run build`).
 */

import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { appStackName } from '../../infra/names.js';
import { CliSandbox, repoRoot } from '../e2e/cli-support.js';
import { sampleImages, sampleManifest, stubFunctionsDir } from './fixtures.js';

const run = promisify(execFile);

/** No credentials, no instance metadata, no version check or telemetry: nothing may go online. */
function offlineEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of Object.keys(env)) if (key.startsWith('AWS_')) delete env[key];
  return {
    ...env,
    AWS_EC2_METADATA_DISABLED: 'true',
    AWS_CONFIG_FILE: path.join(tmpdir(), 'ferry-no-aws-config'),
    AWS_SHARED_CREDENTIALS_FILE: path.join(tmpdir(), 'ferry-no-aws-credentials'),
    CDK_DISABLE_VERSION_CHECK: 'true',
    CDK_DISABLE_CLI_TELEMETRY: 'true',
  };
}

const cleanups: Array<() => void | Promise<void>> = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

type Template = { Resources?: Record<string, { Type?: string }>; Outputs?: Record<string, unknown> };
const typesIn = (template: Template) => Object.values(template.Resources ?? {}).map((r) => r.Type);

describe('offline synth', () => {
  it('`cdk synth` with cdk.json and ferry:* context writes both templates (GPU queue, CPU queue, LB)', async () => {
    const fns = stubFunctionsDir();
    const work = mkdtempSync(path.join(tmpdir(), 'ferry-cdk-cli-'));
    cleanups.push(fns.cleanup, () => rmSync(work, { recursive: true, force: true }));
    const manifestPath = path.join(work, 'ferry_manifest.json');
    writeFileSync(manifestPath, JSON.stringify(sampleManifest));
    const out = path.join(work, 'cdk.out');
    const context = {
      manifest: manifestPath,
      env: 'production',
      functionsDir: fns.dir,
      artifactKey: `artifacts/demo/production/${sampleManifest.sourceFingerprint}.tar.gz`,
      gpuWorkerImage: sampleImages.gpuWorker,
      cpuWorkerImage: sampleImages.cpuWorker,
      agentImage: sampleImages.agent,
      // CloudFront's origin-facing prefix list, which `ferry deploy` looks up (its id in us-east-1).
      cloudFrontPrefixList: 'pl-3b927c52',
    };
    const args = [
      path.join(repoRoot, 'node_modules', 'aws-cdk', 'bin', 'cdk'),
      'synth',
      '--quiet',
      '--no-notices',
      '-o',
      out,
    ];
    for (const [key, value] of Object.entries(context)) args.push('-c', `ferry:${key}=${value}`);
    const result = await run(process.execPath, args, { cwd: repoRoot, env: offlineEnv(), timeout: 170_000 });
    expect(result.stderr).not.toMatch(/Error:/);

    const platform = JSON.parse(
      readFileSync(path.join(out, 'FerryPlatform.template.json'), 'utf8'),
    ) as Template;
    const app = JSON.parse(
      readFileSync(path.join(out, `${appStackName('demo', 'production')}.template.json`), 'utf8'),
    ) as Template;
    expect(Object.keys(platform.Outputs ?? {})).toEqual(
      expect.arrayContaining(['ApiUrl', 'BucketName', 'ControlTableName']),
    );
    expect(Object.keys(app.Outputs ?? {})).toContain('Endpoints');
    const appTypes = typesIn(app);
    // Two queue endpoints (queue + DLQ each, at least), three services, one load balancer.
    expect(appTypes.filter((t) => t === 'AWS::SQS::Queue').length).toBeGreaterThanOrEqual(4);
    expect(appTypes.filter((t) => t === 'AWS::ECS::Service')).toHaveLength(3);
    expect(appTypes.filter((t) => t === 'AWS::ElasticLoadBalancingV2::LoadBalancer')).toHaveLength(1);
    expect(JSON.stringify(app)).toContain(sampleManifest.sourceFingerprint);
    // The load balancer behind CloudFront admits port 80 from the given prefix list only.
    const rules = Object.values(app.Resources ?? {}).filter(
      (r) => r.Type === 'AWS::EC2::SecurityGroupIngress',
    ) as Array<{ Properties: Record<string, unknown> }>;
    expect(
      rules.filter((r) => r.Properties.FromPort === 80).map((r) => r.Properties.SourcePrefixListId),
    ).toEqual(['pl-3b927c52']);
    expect(JSON.stringify(app)).not.toContain('0.0.0.0/0');
  }, 180_000);

  it('`ferry deploy --provider aws --synth-only` writes the templates to .ferry/cdk.out', async () => {
    const sandbox = new CliSandbox();
    cleanups.push(() => sandbox.cleanup());
    expect((await sandbox.run(['init', 'shop'])).code).toBe(0);
    const project = path.join(sandbox.root, 'shop');
    const env: Record<string, string | undefined> = {};
    for (const [key, value] of Object.entries(offlineEnv()))
      if (key.startsWith('AWS_') || key.startsWith('CDK_')) env[key] = value;
    for (const key of Object.keys(process.env))
      if (key.startsWith('AWS_') && !(key in env)) env[key] = undefined;
    const result = await sandbox.run(
      ['deploy', '--provider', 'aws', '--synth-only', '--env', 'staging', '--json'],
      {
        cwd: project,
        env,
        timeoutMs: 170_000,
      },
    );
    expect(result.code, result.stderr).toBe(0);
    const json = JSON.parse(result.stdout) as {
      directory: string;
      stacks: Array<{ name: string; template: string }>;
    };
    expect(json.directory).toBe(path.join(project, '.ferry', 'cdk.out'));
    expect(json.stacks.map((s) => s.name).sort()).toEqual([appStackName('shop', 'staging'), 'FerryPlatform']);
    for (const stack of json.stacks) expect(existsSync(stack.template)).toBe(true);
    const app = JSON.parse(
      readFileSync(path.join(json.directory, `${appStackName('shop', 'staging')}.template.json`), 'utf8'),
    ) as Template;
    expect(typesIn(app).filter((t) => t === 'AWS::ECS::Service')).toHaveLength(3);
    // Nothing was deployed: --synth-only never asks for credentials.
    expect(result.stderr).not.toContain('[3/5] Upload');
    // The tens of seconds of a synth are said as their phases, not left silent.
    expect(result.stderr).toContain('  bundling the platform functions…\n');
    expect(result.stderr).toContain('  synthesizing the CloudFormation templates…\n');
    // Nor EC2: the load-balanced endpoint's ALB admits port 80 from any IPv4 in this template, and
    // the output says that a deploy narrows it to CloudFront's prefix list.
    expect(JSON.stringify(app)).toContain('0.0.0.0/0');
    expect(result.stderr).toContain('admit port 80 from any IPv4');
  }, 180_000);
});
