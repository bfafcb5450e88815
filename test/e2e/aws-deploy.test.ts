/**
 * `--provider aws` through the real binary: CloudFormation is the recording fake toolkit (hidden hook
 * FERRY_TEST_FAKE_TOOLKIT: it synthesizes the real templates but only records deploys and destroys),
 * and the records and the artifact go to DynamoDB Local and fauxqs S3 (hooks FERRY_DYNAMODB_ENDPOINT,
 * FERRY_S3_ENDPOINT). What is real: the CLI, the build, the CDK synth of both stacks, the control
 * table and the bucket.
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwsEnvironmentRecord } from '../../cli/providers/aws/records.js';
import {
  type AwsEndpointRecord,
  appStackName as cliAppStackName,
  manifestFromRecords,
} from '../../cli/providers/aws.js';
import { fakeCallTokensFile } from '../../cli/providers/index.js';
import { type FakeToolkitState, toolkitEventOf } from '../../cli/providers/toolkit.js';
import { FileCallTokens } from '../../core/adapters/aws/secrets.js';
import { callTokenSecretName, legacyCallTokenSecretName } from '../../core/call-keys.js';
import type { EndpointRecord } from '../../core/ports.js';
import { appStackName } from '../../infra/app-stack.js';
import { poolMaxInstances } from '../../infra/gpu.js';
import { type AwsFixture, fakeAwsConfig, startAwsFixture } from '../support/emulators.js';
import { CliSandbox, deployStages } from './cli-support.js';

const apiUrl = 'https://abc123.execute-api.us-east-1.amazonaws.com/api/v2';
const PROD = appStackName('shop', 'production');
const STAGING = appStackName('shop', 'staging');

type TemplateResources = Record<string, { Type: string; Properties: Record<string, unknown> }>;

/**
 * The resource types of a synthesized template, and the images its task definitions name (as JSON:
 * an ECR image is an `Fn::Join` of account, region and repository).
 */
const templateView = (file: string) => {
  const resources = Object.values(JSON.parse(readFileSync(file, 'utf8')).Resources as TemplateResources);
  const images = resources
    .filter((r) => r.Type === 'AWS::ECS::TaskDefinition')
    .flatMap((r) => (r.Properties.ContainerDefinitions as Array<{ Image: unknown }>).map((c) => c.Image));
  return {
    types: new Set(resources.map((r) => r.Type)),
    images: [...new Set(images.map((image) => JSON.stringify(image)))].sort(),
  };
};

/** The DesiredCount of each ECS service in a synthesized template. */
const desiredCounts = (template: string): unknown[] =>
  Object.values(
    JSON.parse(template).Resources as Record<string, { Type: string; Properties: { DesiredCount?: number } }>,
  )
    .filter((resource) => resource.Type === 'AWS::ECS::Service')
    .map((resource) => resource.Properties.DesiredCount);

describe('ferry --provider aws (fake toolkit, emulated records and bucket)', () => {
  const sandbox = new CliSandbox();
  let fixture: AwsFixture;
  let project = '';
  let stateFile = '';

  const state = (): FakeToolkitState => JSON.parse(readFileSync(stateFile, 'utf8')) as FakeToolkitState;
  const editState = (edit: (s: FakeToolkitState) => void) => {
    const s = state();
    edit(s);
    writeFileSync(stateFile, JSON.stringify(s));
  };
  const ferry = (args: string[], extra: Record<string, string | undefined> = {}, cwd = project) =>
    sandbox.run([...args, '--provider', 'aws'], {
      cwd,
      timeoutMs: 240_000,
      env: {
        // The fake platform has no ECR registry of its own: the user's registry (docs/aws.md "Images").
        FERRY_AWS_IMAGE_REGISTRY: '123456789012.dkr.ecr.us-east-1.amazonaws.com',
        ...extra,
        FERRY_TEST_FAKE_TOOLKIT: stateFile,
        FERRY_DYNAMODB_ENDPOINT: fixture.dynamo.endpoint,
        FERRY_S3_ENDPOINT: fixture.fauxqs.endpoint,
        AWS_REGION: fakeAwsConfig.region,
        AWS_ACCESS_KEY_ID: fakeAwsConfig.credentials.accessKeyId,
        AWS_SECRET_ACCESS_KEY: fakeAwsConfig.credentials.secretAccessKey,
        AWS_PROFILE: undefined,
        AWS_EC2_METADATA_DISABLED: 'true',
      },
    });
  const callKeys = async () => (await fixture.control().listApiKeys()).filter((k) => k.endpointId);
  /** The call keys' secrets the fake deploys wrote (Secrets Manager's stand-in), by name. */
  const callSecrets = () => new FileCallTokens(fakeCallTokensFile(stateFile));
  const records = async (app: string, env?: string) =>
    (await fixture.control().listEndpoints({ app, ...(env ? { env } : {}) })) as AwsEndpointRecord[];

  beforeAll(async () => {
    // The emulators (a JVM) and `ferry init` start side by side: neither needs the other.
    const [started, init] = await Promise.all([startAwsFixture(), sandbox.run(['init', 'shop'])]);
    fixture = started;
    expect(init.code, init.stderr).toBe(0);
    project = path.join(sandbox.root, 'shop');
    stateFile = path.join(sandbox.root, 'fake-toolkit.json');
    const initial: FakeToolkitState = {
      stacks: {},
      platformOutputs: {
        ApiUrl: apiUrl,
        BucketName: fixture.bucket,
        ClusterName: 'ferry-cluster',
        ControlTableName: fixture.tables.control,
        JobsTableName: fixture.tables.jobs,
        ChunksTableName: fixture.tables.chunks,
        WorkersTableName: fixture.tables.workers,
      },
      calls: [],
    };
    writeFileSync(stateFile, JSON.stringify(initial));
  }, 180_000);
  afterAll(async () => {
    await sandbox.cleanup();
    await fixture?.stop();
  });

  it('names stacks as infra/ does', () => {
    expect(cliAppStackName('my_app', 'prod.1')).toBe(appStackName('my_app', 'prod.1'));
  });

  it('says so, and exits 2, when the account has no platform yet', async () => {
    const result = await ferry(['app', 'list']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('No Ferry platform in this AWS account and region');
    expect(result.stderr).toContain('ferry deploy --provider aws');
  });

  let firstFingerprint = '';

  it('first deploy: creates the platform, deploys the app stack, uploads, records, lists every endpoint', async () => {
    const result = await ferry(['deploy', '--yes']);
    expect(result.code, result.stderr).toBe(0);
    for (const stage of deployStages) expect(result.stderr).toContain(stage);
    expect(result.stderr).toContain('no FerryPlatform stack in this account/region yet');

    const calls = state().calls;
    expect(calls.map((c) => [c.op, c.stacks])).toEqual([
      ['deploy', ['FerryPlatform']],
      ['deploy', ['FerryPlatform', PROD]],
    ]);
    const summary = calls[1]!.summaries![PROD]!;
    expect(summary.endpoints.map((e) => e.name)).toEqual(['cpu_worker', 'gpu_worker', 'lb_worker']);
    expect(summary.fingerprints).toHaveLength(1);
    firstFingerprint = summary.fingerprints[0]!;

    // Records in the shared control table, with the stack's queue URLs and the endpoint URLs.
    const control = fixture.control();
    expect(await control.getApp('shop')).toBeDefined();
    const env = await control.getEnvironment('shop', 'production');
    expect(env?.fingerprint).toBe(firstFingerprint);
    const eps = await records('shop', 'production');
    expect(eps.map((e) => e.name)).toEqual(['cpu_worker', 'gpu_worker', 'lb_worker']);
    for (const ep of eps) {
      expect(summary.endpoints.find((e) => e.name === ep.name)?.id).toBe(ep.id);
      expect(ep.fingerprint).toBe(firstFingerprint);
      if (ep.kind === 'queue') {
        expect(ep.aws?.queueUrl).toBe(`https://sqs.us-east-1.amazonaws.com/123456789012/ferry-${ep.id}`);
        expect(ep.aws?.url).toBe(`${apiUrl}/${ep.id}`);
        expect(summary.queueNames).toContain(`ferry-${ep.id}`);
        expect(result.stdout).toMatch(
          new RegExp(`${ep.name}\\s+${apiUrl.replace(/\./g, '\\.')}/${ep.id}\\s+\\(queue\\)`),
        );
      } else {
        expect(ep.aws?.url).toBe(`http://ferry-${ep.id}.us-east-1.elb.amazonaws.com`);
        expect(result.stdout).toContain(`${ep.aws?.url}  (load-balanced)`);
      }
    }
    expect(result.stdout).toContain('POST /process');
    // CloudFront's name resolves by itself: no DNS record for the user to create.
    expect(result.stdout).not.toContain('at your DNS provider');
    expect(result.stdout).toMatch(
      new RegExp(
        `curl -X POST ${apiUrl.replace(/\./g, '\\.')}/\\S+/runsync -H "Authorization: Bearer \\$FERRY_API_KEY"`,
      ),
    );

    // The artifact in the platform bucket; the templates in .ferry/cdk.out.
    expect(await fixture.blobs().exists(`artifacts/shop/production/${firstFingerprint}.tar.gz`)).toBe(true);
    const template = readFileSync(path.join(project, '.ferry', 'cdk.out', `${PROD}.template.json`), 'utf8');
    expect(template).toContain(firstFingerprint);
    // New services start at zero tasks; the scaler owns the count from then on.
    expect(desiredCounts(template)).toEqual([0, 0, 0]);

    // Each endpoint's workers got a call key (core/call-keys.ts), scoped to shop/production, named
    // in the template by its id, its value only in the secret the worker container reads.
    const keys = await callKeys();
    for (const ep of eps) {
      const own = keys.filter((k) => k.endpointId === ep.id);
      expect(own, ep.name).toHaveLength(1);
      expect(own[0]).toMatchObject({ app: 'shop', env: 'production' });
      expect(template).toContain(own[0]!.id);
      const secret = callTokenSecretName(ep);
      expect(secret).toBe(`ferry-call/shop/production/${ep.name}/key`);
      expect(template).toContain(`:secret:${secret}"`);
      expect(callSecrets().read()[secret]).toMatch(/^fy_/);
    }
  });

  it('a source change deploys again with the new fingerprint in the template; ids stay', async () => {
    const before = await records('shop', 'production');
    const callKeysBefore = new Map((await callKeys()).map((k) => [k.endpointId, k.id]));
    // The secret an earlier Ferry version kept gpu_worker's key in: deleted once the stack deployed.
    const legacy = legacyCallTokenSecretName(before.find((e) => e.name === 'gpu_worker')!);
    await callSecrets().put(legacy, 'fy_from_an_earlier_version');
    appendFileSync(path.join(project, 'cpu_worker.py'), '\n# changed\n');
    const result = await ferry(['deploy', '--yes', '--json']);
    expect(result.code, result.stderr).toBe(0);
    expect(callSecrets().read()[legacy]).toBeUndefined();
    const calls = state().calls;
    expect(calls).toHaveLength(3);
    expect(calls[2]!.stacks).toEqual(['FerryPlatform', PROD]);
    const fingerprints = calls[2]!.summaries![PROD]!.fingerprints;
    expect(fingerprints).toHaveLength(1);
    expect(fingerprints[0]).not.toBe(firstFingerprint);
    const after = await records('shop', 'production');
    expect(after.map((e) => e.id)).toEqual(before.map((e) => e.id));
    expect(after.every((e) => e.fingerprint === fingerprints[0])).toBe(true);
    const json = JSON.parse(result.stdout);
    expect(json.fingerprint).toBe(fingerprints[0]);
    // The services exist now: the template states no count, which CloudFormation would send with
    // this update of each service and so set the scaler's counts back to 0.
    const template = readFileSync(path.join(project, '.ferry', 'cdk.out', `${PROD}.template.json`), 'utf8');
    expect(desiredCounts(template)).toEqual([undefined, undefined, undefined]);
    expect(json.endpoints.every((e: { change: string }) => e.change === 'updated')).toBe(true);
    // Updated endpoints get a new call key only once theirs is 10 minutes old (core/call-keys.ts
    // callKeyRotationMinAgeMs: each new key is a new secret version, and Secrets Manager keeps up
    // with one every 10 minutes); this deploy follows the first within seconds, so each keeps its key.
    const keys = await callKeys();
    for (const ep of after) {
      const own = keys.filter((k) => k.endpointId === ep.id);
      expect(own, ep.name).toHaveLength(1);
      expect(callKeysBefore.get(ep.id)).toBe(own[0]!.id);
    }
  });

  it('with several environments and no --env: the spec error before the build, and nothing deployed', async () => {
    expect((await ferry(['deploy', '--yes', '--env', 'staging'])).code).toBe(0);
    expect(state().calls.at(-1)!.stacks).toEqual(['FerryPlatform', STAGING]);
    const count = state().calls.length;
    const result = await ferry(['deploy', '--yes']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('Error: Multiple environments found: production, staging');
    expect(result.stderr).not.toContain('[1/5] Build');
    expect(state().calls).toHaveLength(count);
  });

  it('a failing stack deploy exits 1 with the error, prints no success, and keeps the old records', async () => {
    const before = await records('shop', 'staging');
    editState((s) => {
      s.failDeploy = [STAGING];
    });
    appendFileSync(path.join(project, 'gpu_worker.py'), '\n# changed again\n');
    const result = await ferry(['deploy', '--yes', '--env', 'staging']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`Error: Deploying of ${STAGING} failed`);
    expect(result.stdout).not.toContain('Deployed');
    expect(await records('shop', 'staging')).toEqual(before);
    editState((s) => {
      delete s.failDeploy;
    });
  });

  it('lists endpoints, environments and apps from the control table', async () => {
    const list = await ferry(['undeploy', 'list', '--json']);
    expect(list.code, list.stderr).toBe(0);
    const endpoints = JSON.parse(list.stdout) as Array<{ env: string; url: string }>;
    expect(endpoints).toHaveLength(6);
    expect(endpoints.every((e) => e.url.startsWith(apiUrl) || e.url.includes('.elb.amazonaws.com'))).toBe(
      true,
    );
    const envs = JSON.parse((await ferry(['env', 'list', '--json'])).stdout) as Array<{ name: string }>;
    expect(envs.map((e) => e.name)).toEqual(['production', 'staging']);
    const apps = JSON.parse((await ferry(['app', 'list', '--json'])).stdout);
    expect(apps).toEqual([
      expect.objectContaining({ name: 'shop', environments: ['production', 'staging'] }),
    ]);
  });

  it('keys create | list | revoke keep hashed keys in the control table', async () => {
    const created = await ferry(['keys', 'create', '--name', 'ci', '--json']);
    expect(created.code, created.stderr).toBe(0);
    const { id, key } = JSON.parse(created.stdout) as { id: string; key: string };
    const stored = await fixture.control().listApiKeys();
    expect(stored.map((k) => k.id)).toContain(id);
    expect(JSON.stringify(stored)).not.toContain(key);
    expect((await ferry(['keys', 'revoke', id])).code).toBe(0);
    expect((await fixture.control().listApiKeys()).map((k) => k.id)).not.toContain(id);
  });

  it('undeploy NAME redeploys the stack without it, then deletes its record', async () => {
    // Staging as an earlier Ferry left it: no deploy settings on its record. The undeploy takes this
    // folder's, as that Ferry did, says so, and saves them.
    const control = fixture.control();
    const { aws: _saved, ...earlier } = (await control.getEnvironment(
      'shop',
      'staging',
    )) as AwsEnvironmentRecord;
    await control.putEnvironment(earlier);
    const result = await ferry(['undeploy', 'cpu_worker', '--env', 'staging', '--force']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain('warning: shop/staging has no saved deploy settings');
    expect(result.stderr).toContain(`this shell and ${path.join(project, '.env')}`);
    expect(
      ((await control.getEnvironment('shop', 'staging')) as AwsEnvironmentRecord).aws?.images,
    ).toBeDefined();
    const call = state().calls.at(-1)!;
    expect(call.op).toBe('deploy');
    // The app stack alone: the shared platform is not the undeploy's to change.
    expect(call.stacks).toEqual([STAGING]);
    expect(call.summaries![STAGING]!.endpoints.map((e) => e.name)).toEqual(['gpu_worker', 'lb_worker']);
    expect((await records('shop', 'staging')).map((e) => e.name)).toEqual(['gpu_worker', 'lb_worker']);
    // Its workers' call key is revoked; the others stay.
    const scoped = (await callKeys()).filter((k) => k.env === 'staging');
    expect(scoped.map((k) => k.name).sort()).toEqual([
      'workers of shop/staging/gpu_worker',
      'workers of shop/staging/lb_worker',
    ]);
    // And its secret is gone; the others' stay.
    const secrets = Object.keys(callSecrets().read()).filter((n) => n.startsWith('ferry-call/shop/staging/'));
    expect(secrets.sort()).toEqual([
      'ferry-call/shop/staging/gpu_worker/key',
      'ferry-call/shop/staging/lb_worker/key',
    ]);
  });

  describe('undeploy from another folder, shell and machine', () => {
    const EDGE = appStackName('edge', 'prod');
    // The deployer's registry, in the project's .env; the remover's shell names another.
    const [deployerAccount, removerAccount] = ['111111111111', '222222222222'];
    const registryOf = (account: string) => `${account}.dkr.ecr.us-east-1.amazonaws.com`;
    let elsewhere = '';
    let deployed: ReturnType<typeof templateView>;
    const edgeTemplate = (dir: string) => path.join(dir, '.ferry', 'cdk.out', `${EDGE}.template.json`);
    const undeploy = (name: string, ...flags: string[]) =>
      ferry(
        ['undeploy', name, '--app', 'edge', '--env', 'prod', '--force', ...flags],
        { FERRY_AWS_IMAGE_REGISTRY: registryOf(removerAccount) },
        elsewhere,
      );

    beforeAll(async () => {
      // Deployed from the project, whose .env puts the load-balanced endpoints under a domain.
      const dotEnv = path.join(project, '.env');
      writeFileSync(
        dotEnv,
        `FERRY_AWS_DOMAIN=api.example.com\nFERRY_AWS_HOSTED_ZONE_ID=Z0123456789ABCDEFGHIJ\nFERRY_AWS_IMAGE_REGISTRY=${registryOf(deployerAccount)}\n`,
      );
      try {
        const result = await ferry(['deploy', '--yes', '--app', 'edge', '--env', 'prod'], {
          FERRY_AWS_IMAGE_REGISTRY: undefined,
        });
        expect(result.code, result.stderr).toBe(0);
        // The hosted zone got the alias: nothing for the user to create.
        expect(result.stdout).not.toContain('at your DNS provider');
      } finally {
        rmSync(dotEnv);
      }
      deployed = templateView(edgeTemplate(project));
      expect(deployed.types).toContain('AWS::CertificateManager::Certificate');
      expect(deployed.types).not.toContain('AWS::CloudFront::Distribution');
      expect(deployed.images.length).toBeGreaterThan(0);
      expect(deployed.images.every((image) => image.includes(deployerAccount))).toBe(true);
      // An empty folder: no .env, no project.
      elsewhere = path.join(sandbox.root, 'elsewhere');
      mkdirSync(elsewhere);
    }, 300_000);

    it('keeps the domain (no CloudFront), the images and the platform as the deploy left them', async () => {
      const count = state().calls.length;
      const result = await undeploy('cpu_worker');
      expect(result.code, result.stderr).toBe(0);
      expect(result.stderr).not.toContain('no saved deploy settings');
      expect(
        state()
          .calls.slice(count)
          .map((c) => [c.op, c.stacks]),
      ).toEqual([['deploy', [EDGE]]]);
      expect((await records('edge', 'prod')).map((e) => e.name)).toEqual(['gpu_worker', 'lb_worker']);
      const after = templateView(edgeTemplate(elsewhere));
      expect(after.types).toContain('AWS::CertificateManager::Certificate');
      expect(after.types).not.toContain('AWS::CloudFront::Distribution');
      expect(after.images.length).toBeGreaterThan(0);
      expect(after.images.every((image) => deployed.images.includes(image))).toBe(true);
      expect(after.images.join()).not.toContain(removerAccount);
    });

    it('undeploy --yes approves IAM changes as deploy --yes does, for a run without a terminal', async () => {
      const result = await undeploy('gpu_worker', '--yes');
      expect(result.code, result.stderr).toBe(0);
      expect((await records('edge', 'prod')).map((e) => e.name)).toEqual(['lb_worker']);
      const after = templateView(edgeTemplate(elsewhere));
      expect(after.types).toContain('AWS::CertificateManager::Certificate');
      expect(after.images.every((image) => deployed.images.includes(image))).toBe(true);
    });
  });

  it('a domain without a hosted zone: says which CNAME to create for the URL, in the listing and in --json', async () => {
    const DNS = appStackName('dns', 'prod');
    const dotEnv = path.join(project, '.env');
    writeFileSync(dotEnv, 'FERRY_AWS_DOMAIN=api.example.com\n');
    try {
      const deploy = (...flags: string[]) =>
        ferry(['deploy', '--yes', '--app', 'dns', '--env', 'prod', ...flags]);
      const result = await deploy();
      expect(result.code, result.stderr).toBe(0);
      // The fake resolves the template's own output: the ALB's DNS name is its logical id's.
      const template = JSON.parse(
        readFileSync(path.join(project, '.ferry', 'cdk.out', `${DNS}.template.json`), 'utf8'),
      ) as { Resources: TemplateResources };
      const albs = Object.entries(template.Resources).filter(
        ([, r]) => r.Type === 'AWS::ElasticLoadBalancingV2::LoadBalancer',
      );
      expect(albs).toHaveLength(1);
      const dnsRecord = {
        name: 'lb-worker.api.example.com',
        type: 'CNAME',
        value: `${albs[0]![0].toLowerCase()}.us-east-1.elb.amazonaws.com`,
      };
      expect(result.stdout).toContain(
        `DNS: create CNAME ${dnsRecord.name} → ${dnsRecord.value} at your DNS provider; the URL resolves once it exists`,
      );
      // Once, for the load-balanced endpoint only.
      expect(result.stdout.split('at your DNS provider')).toHaveLength(2);
      const lb = (await records('dns', 'prod')).find((e) => e.kind === 'lb')!;
      expect(lb.aws?.dnsRecord).toEqual(dnsRecord);

      const json = await deploy('--json');
      expect(json.code, json.stderr).toBe(0);
      const listed = (JSON.parse(json.stdout) as { endpoints: Array<{ name: string; dnsRecord?: unknown }> })
        .endpoints;
      expect(listed.map((e) => [e.name, e.dnsRecord])).toEqual([
        ['cpu_worker', undefined],
        ['gpu_worker', undefined],
        ['lb_worker', dnsRecord],
      ]);
    } finally {
      rmSync(dotEnv);
    }
  }, 300_000);

  it('env delete destroys the environment stack once, then removes the records', async () => {
    const count = state().calls.length;
    const result = await ferry(['env', 'delete', 'staging', '--force']);
    expect(result.code, result.stderr).toBe(0);
    expect(
      state()
        .calls.slice(count)
        .map((c) => [c.op, c.stacks]),
    ).toEqual([['destroy', [STAGING]]]);
    expect(await records('shop', 'staging')).toEqual([]);
    expect(await fixture.control().getEnvironment('shop', 'staging')).toBeUndefined();
  });

  it('app delete that cannot destroy a stack exits 1 and keeps the app and its records (flash#367)', async () => {
    editState((s) => {
      s.failDestroy = [PROD];
    });
    const result = await ferry(['app', 'delete', 'shop', '--force']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("App 'shop' was kept");
    expect(result.stdout).not.toContain('Deleted');
    expect(await fixture.control().getApp('shop')).toBeDefined();
    expect(await records('shop', 'production')).toHaveLength(3);
    editState((s) => {
      delete s.failDestroy;
    });
  });

  it('app delete destroys the stacks, then removes every record', async () => {
    const result = await ferry(['app', 'delete', 'shop', '--force']);
    expect(result.code, result.stderr).toBe(0);
    expect(state().calls.at(-1)).toEqual({ op: 'destroy', stacks: [PROD] });
    expect(state().stacks[PROD]).toBeUndefined();
    expect(await fixture.control().getApp('shop')).toBeUndefined();
    expect(await records('shop')).toEqual([]);
    expect((await callKeys()).filter((k) => k.app === 'shop')).toEqual([]);
    expect(existsSync(stateFile)).toBe(true);
  });
  it('refuses (exit 2, with the fix) to deploy without usable images, before any stack changes', async () => {
    const calls = state().calls.length;
    const result = await ferry(['deploy', '--yes', '--env', 'noimages'], {
      FERRY_AWS_IMAGE_REGISTRY: undefined,
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('No usable worker images');
    expect(result.stderr).toContain('ferry images build && ferry images push');
    expect(
      state()
        .calls.slice(calls)
        .filter((c) => c.op === 'deploy'),
    ).toEqual([]);
    expect(await records('shop', 'noimages')).toEqual([]);
  });

  it('deletes an app stack left in ROLLBACK_COMPLETE, says so, and deploys it again', async () => {
    editState((s) => {
      s.statuses = { [STAGING]: 'ROLLBACK_COMPLETE' };
    });
    const result = await ferry(['deploy', '--yes', '--env', 'staging']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain(`stack ${STAGING} is in ROLLBACK_COMPLETE`);
    const ops = state()
      .calls.slice(-2)
      .map((c) => [c.op, c.stacks]);
    expect(ops).toEqual([
      ['destroy', [STAGING]],
      ['deploy', ['FerryPlatform', STAGING]],
    ]);
    expect(state().statuses?.[STAGING]).toBeUndefined();
    expect(state().tags?.[STAGING]).toEqual({ 'ferry:app': 'shop', 'ferry:env': 'staging' });
  });

  it('refuses (exit 2, nothing deployed) a stack another deploy is working on', async () => {
    editState((s) => {
      s.statuses = { [STAGING]: 'UPDATE_IN_PROGRESS' };
    });
    const count = state().calls.length;
    const result = await ferry(['deploy', '--yes', '--env', 'staging']);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(
      `Stack ${STAGING} is in UPDATE_IN_PROGRESS: another deploy of this stack is running`,
    );
    expect(result.stderr).toContain('CloudFormation console');
    expect(state().calls.slice(count)).toEqual([]);
    editState((s) => {
      delete s.statuses;
    });
  }, 240_000);

  it('refuses (exit 2, nothing deployed) a platform stuck in UPDATE_ROLLBACK_FAILED, naming the command that unblocks it', async () => {
    // CloudFormation refuses to update such a stack until its rollback is continued
    // (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html).
    editState((s) => {
      s.statuses = { FerryPlatform: 'UPDATE_ROLLBACK_FAILED' };
      s.rollbackFailures = {
        FerryPlatform: [
          { logicalId: 'ApiFunction', type: 'AWS::Lambda::Function', reason: 'Function not found' },
        ],
      };
    });
    const count = state().calls.length;
    const result = await ferry(['deploy', '--yes', '--env', 'staging']);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain('Stack FerryPlatform is in UPDATE_ROLLBACK_FAILED');
    expect(result.stderr).toContain(
      'aws cloudformation continue-update-rollback --stack-name FerryPlatform --resources-to-skip ApiFunction',
    );
    expect(state().calls.slice(count)).toEqual([]);
    editState((s) => {
      delete s.statuses;
      delete s.rollbackFailures;
    });
  }, 240_000);

  it('refuses (exit 2, nothing deployed) to deploy a platform a newer Ferry deployed', async () => {
    const platform = state().stacks.FerryPlatform!;
    editState((s) => {
      s.stacks.FerryPlatform = { ...platform, FerryVersion: '999.0.0' };
      s.platformOutputs = { ...s.platformOutputs, FerryVersion: '999.0.0' };
    });
    const count = state().calls.length;
    const result = await ferry(['deploy', '--yes', '--env', 'staging']);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toMatch(/FerryPlatform was deployed by Ferry 999\.0\.0, newer than this Ferry \d/);
    expect(result.stderr).toContain('Upgrade Ferry');
    expect(state().calls.slice(count)).toEqual([]);
    editState((s) => {
      s.stacks.FerryPlatform = platform;
      delete s.platformOutputs.FerryVersion;
    });
  }, 240_000);

  it('takes a platform stack left in REVIEW_IN_PROGRESS (never created) as none: deletes it and creates it', async () => {
    // A first deploy stopped at its approval prompt: CloudFormation has the stack's id and a change
    // set, no resources and no outputs.
    editState((s) => {
      delete s.stacks.FerryPlatform;
      s.statuses = { FerryPlatform: 'REVIEW_IN_PROGRESS' };
    });
    const listed = await ferry(['app', 'list']);
    expect(listed.code).toBe(2);
    expect(listed.stderr).toContain('No Ferry platform in this AWS account and region');
    const count = state().calls.length;
    const result = await ferry(['deploy', '--yes', '--env', 'staging']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain('stack FerryPlatform is in REVIEW_IN_PROGRESS');
    expect(
      state()
        .calls.slice(count)
        .map((c) => [c.op, c.stacks]),
    ).toEqual([
      ['destroy', ['FerryPlatform']],
      ['deploy', ['FerryPlatform']],
      ['deploy', ['FerryPlatform', STAGING]],
    ]);
    expect(state().statuses?.FerryPlatform).toBeUndefined();
  }, 240_000);

  it('a stack left in DELETE_FAILED that cannot be deleted again: each resource and why, how to keep them, exit 1, nothing deployed', async () => {
    // A failed undeploy (`ferry env delete`) keeps the records and leaves the stack in DELETE_FAILED
    // (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/view-stack-events.html).
    const reason = 'Target group is currently in use by a listener or a rule';
    editState((s) => {
      s.statuses = { [STAGING]: 'DELETE_FAILED' };
      s.failDestroy = [STAGING];
      s.deleteFailures = {
        [STAGING]: [
          {
            logicalId: 'LbWorkerTargetGroup1F2E3D',
            type: 'AWS::ElasticLoadBalancingV2::TargetGroup',
            reason,
          },
        ],
      };
    });
    const before = await records('shop', 'staging');
    const count = state().calls.length;
    const result = await ferry(['deploy', '--yes', '--env', 'staging']);
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toContain(`stack ${STAGING} is in DELETE_FAILED`);
    expect(result.stderr).toContain(`Error: Stack ${STAGING} could not be deleted`);
    expect(result.stderr).toContain(
      `  LbWorkerTargetGroup1F2E3D (AWS::ElasticLoadBalancingV2::TargetGroup): ${reason}`,
    );
    expect(result.stderr).toContain(
      `hint: Remove what holds them (above), then run the command again. Or delete the stack and keep them: \`aws cloudformation delete-stack --stack-name ${STAGING} --retain-resources LbWorkerTargetGroup1F2E3D\``,
    );
    expect(
      state()
        .calls.slice(count)
        .map((c) => [c.op, c.stacks]),
    ).toEqual([['destroy', [STAGING]]]);
    expect(await records('shop', 'staging')).toEqual(before);
  }, 240_000);

  it('deletes a stack left in DELETE_FAILED, says so, and creates its services again at 0 tasks although their records remain', async () => {
    editState((s) => {
      delete s.failDestroy;
      delete s.deleteFailures;
    });
    expect(await records('shop', 'staging')).toHaveLength(3);
    const count = state().calls.length;
    const result = await ferry(['deploy', '--yes', '--env', 'staging']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain(`stack ${STAGING} is in DELETE_FAILED`);
    expect(
      state()
        .calls.slice(count)
        .map((c) => [c.op, c.stacks]),
    ).toEqual([
      ['destroy', [STAGING]],
      ['deploy', ['FerryPlatform', STAGING]],
    ]);
    expect(state().statuses?.[STAGING]).toBeUndefined();
    // The services are new again: a template without a count would start one task each (ECS's
    // default), a GPU instance per GPU endpoint.
    const template = readFileSync(
      path.join(project, '.ferry', 'cdk.out', `${STAGING}.template.json`),
      'utf8',
    );
    expect(desiredCounts(template)).toEqual([0, 0, 0]);
  }, 240_000);

  it('refuses (exit 2, nothing deployed) an environment past 60 dynamic references: 21 load-balanced endpoints behind CloudFront', async () => {
    // CloudFormation resolves at most 60 per template
    // (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/dynamic-references.html); each
    // such endpoint holds 3 (test/infra/template-limits.test.ts), and 21 hold 444 resources of 500.
    expect((await sandbox.run(['init', 'wide'])).code).toBe(0);
    const wide = path.join(sandbox.root, 'wide');
    for (const file of ['cpu_worker.py', 'gpu_worker.py', 'lb_worker.py']) rmSync(path.join(wide, file));
    for (let i = 0; i < 21; i++) {
      writeFileSync(
        path.join(wide, `lb_${i}.py`),
        [
          'from ferry import Endpoint',
          '',
          `api = Endpoint(name="lb_${i}", cpu="1-2", workers=(1, 3))`,
          '',
          '',
          '@api.get("/health")',
          'async def health() -> dict:',
          '    return {"status": "healthy"}',
          '',
        ].join('\n'),
      );
    }
    editState((s) => {
      s.stacks.FerryPlatform = { ...s.platformOutputs };
      delete s.statuses;
    });
    const count = state().calls.length;
    const result = await ferry(['deploy', '--yes', '--env', 'production'], {}, wide);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(
      'The template of wide/production (21 endpoints) holds 63 dynamic references ({{resolve:…}}), 3 over the 60',
    );
    expect(result.stderr).toContain('ferry deploy -e <env>');
    expect(state().calls.slice(count)).toEqual([]);
    expect(await records('wide')).toEqual([]);
  }, 240_000);

  it('refuses (exit 2, nothing deployed) workers a capacity pool can never hold; warns of a maximum out of reach', async () => {
    expect((await sandbox.run(['init', 'big'])).code).toBe(0);
    const big = path.join(sandbox.root, 'big');
    for (const file of ['cpu_worker.py', 'gpu_worker.py', 'lb_worker.py']) rmSync(path.join(big, file));
    const endpointFile = (workers: string) =>
      writeFileSync(
        path.join(big, 'big.py'),
        [
          'from ferry import Endpoint',
          '',
          '',
          `@Endpoint(name="big", gpu="A10G", workers=${workers})`,
          'def big(x: int) -> int:',
          '    return x',
          '',
        ].join('\n'),
      );
    editState((s) => {
      s.stacks.FerryPlatform = { ...s.platformOutputs };
      delete s.statuses;
    });
    endpointFile(`(${poolMaxInstances + 1}, 20)`);
    const count = state().calls.length;
    const refused = await ferry(['deploy', '--yes', '--env', 'production'], {}, big);
    expect(refused.code, refused.stderr).toBe(2);
    expect(refused.stderr).toContain(`Endpoint "big": workers min ${poolMaxInstances + 1} can never run`);
    expect(state().calls.slice(count)).toEqual([]);
    expect(await records('big')).toEqual([]);

    endpointFile('(0, 20)');
    const warned = await ferry(['deploy', '--yes', '--env', 'production'], {}, big);
    expect(warned.code, warned.stderr).toBe(0);
    expect(warned.stderr).toContain(
      `warning: big: workers max 20, but its g5.xlarge pool holds ${poolMaxInstances} instances`,
    );
  }, 240_000);
});

describe('aws provider pieces', () => {
  it('turns toolkit messages into progress events and drops the chatter', () => {
    expect(
      toolkitEventOf({
        level: 'info',
        code: 'CDK_TOOLKIT_I5502',
        message: 'x',
        data: {
          event: {
            StackName: 'Ferry-a-b',
            ResourceStatus: 'CREATE_COMPLETE',
            ResourceType: 'AWS::SQS::Queue',
            LogicalResourceId: 'Q',
          },
          progress: { completed: 3, total: 12, formatted: '3/12' },
        },
      }),
    ).toEqual({
      type: 'resources',
      stack: 'Ferry-a-b',
      message: 'CREATE_COMPLETE AWS::SQS::Queue Q',
      completed: 3,
      total: 12,
    });
    expect(
      toolkitEventOf({ level: 'error', code: 'CDK_TOOLKIT_E5500', message: '\u001b[31mboom\u001b[0m' }),
    ).toEqual({
      type: 'error',
      message: 'boom',
    });
    expect(toolkitEventOf({ level: 'debug', message: 'noise' })).toBeUndefined();
    expect(
      toolkitEventOf({ level: 'info', code: 'CDK_TOOLKIT_I1000', message: 'synth time' }),
    ).toBeUndefined();
  });

  it('refuses to rebuild a stack from records of two different builds', () => {
    const base = {
      app: 'a',
      env: 'e',
      kind: 'queue' as const,
      config: {},
      createdAt: 0,
      updatedAt: 0,
      artifactKey: 'artifacts/a/e/1.tar.gz',
    };
    const records: EndpointRecord[] = [
      { ...base, id: 'x-1', name: 'x', fingerprint: '1'.repeat(64) },
      { ...base, id: 'y-1', name: 'y', fingerprint: '2'.repeat(64) },
    ];
    expect(() => manifestFromRecords('a', records)).toThrow(/run different builds/);
  });
});
