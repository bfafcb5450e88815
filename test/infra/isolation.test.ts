/**
 * Template tests for what an endpoint's task may reach (infra/isolation.ts, docs/security-aws.md):
 * the agent role's LeadingKeys and prefix conditions, its external-id trust, a task role with nothing
 * of the platform, worker tokens and user secrets only as ECS secrets, and the hosts' IMDS settings.
 */
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { describe, expect, it } from 'vitest';
import { FerryError } from '../../core/errors.js';
import type { Manifest } from '../../core/manifest.js';
import { AppEnvironmentStack } from '../../infra/app-stack.js';
import { gpuInstanceFor } from '../../infra/gpu.js';
import {
  EndpointAgentAccess,
  EndpointWorkerToken,
  endpointKeyPatterns,
  userSecrets,
} from '../../infra/isolation.js';
import { leadingKeysCondition } from '../../infra/leading-keys.js';
import { ecsConfigLines } from '../../infra/platform-stack.js';
import { gpuEndpoint, sampleImages, sampleManifest } from './fixtures.js';
import { actionsOf, type Statement, statementsOf } from './iam.js';

const account = '123456789012';
const tableArn = (name: string) => `arn:aws:dynamodb:us-east-1:${account}:table/${name}`;
const tables = {
  jobs: { tableName: 'jobs', tableArn: tableArn('jobs') },
  chunks: { tableName: 'chunks', tableArn: tableArn('chunks') },
  workers: { tableName: 'workers', tableArn: tableArn('workers') },
  control: { tableName: 'control', tableArn: tableArn('control') },
};
const endpointId = 'abcdefghij0123';

function build(kind: 'queue' | 'lb' = 'queue') {
  const stack = new Stack(new App(), 'Iso');
  const taskRole = new iam.Role(stack, 'TaskRole', {
    assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
  });
  const queue = sqs.Queue.fromQueueArn(stack, 'Q', `arn:aws:sqs:us-east-1:${account}:ferry-${endpointId}`);
  const low = sqs.Queue.fromQueueArn(stack, 'QL', `arn:aws:sqs:us-east-1:${account}:ferry-${endpointId}-low`);
  const access = new EndpointAgentAccess(stack, 'Access', {
    appName: 'demo',
    envName: 'dev',
    endpointName: 'gen',
    endpointId,
    kind,
    taskRole,
    tables,
    bucketName: 'platform-bucket',
    bucketFindingName: 'platform-bucket',
    queues: [queue, low],
  });
  const token = new EndpointWorkerToken(stack, 'Token', { description: 'worker token' });
  const taskDefinition = new ecs.Ec2TaskDefinition(stack, 'Task', {
    networkMode: ecs.NetworkMode.AWS_VPC,
    taskRole,
  });
  const image = ecs.ContainerImage.fromRegistry('example/agent');
  taskDefinition.addContainer('artifact', {
    image,
    memoryReservationMiB: 128,
    essential: false,
    secrets: { ...access.initSecrets },
  });
  taskDefinition.addContainer('agent', {
    image,
    memoryReservationMiB: 128,
    environment: { ...access.environment },
    secrets: { ...token.agentSecrets },
  });
  const workerEnv = { MODEL: 'tiny' };
  taskDefinition.addContainer('worker', {
    image,
    memoryReservationMiB: 128,
    environment: workerEnv,
    secrets: {
      ...token.workerSecrets,
      ...userSecrets(stack, {
        appName: 'demo',
        envName: 'dev',
        endpointName: 'gen',
        names: ['HF_TOKEN', 'OPENAI_API_KEY'],
        env: workerEnv,
      }),
    },
  });
  const template = Template.fromStack(stack);
  return { stack, template, access, taskRole, taskDefinition };
}

const only = (statements: Statement[], action: string) =>
  statements.filter((s) => actionsOf([s]).includes(action));

/** The one grant on the endpoint's run of failed starts, as both agent kinds have it. */
function expectOwnStartsItem(starts: Statement[]): void {
  expect(starts).toHaveLength(1);
  expect(starts[0]!.Resource).toBe(tables.control.tableArn);
  // Read at start, ADD per failed start, delete at the first contact: no Put, so no endpoint record.
  expect(actionsOf(starts).sort()).toEqual([
    'dynamodb:DeleteItem',
    'dynamodb:GetItem',
    'dynamodb:UpdateItem',
  ]);
  // Its own partition, exact (no wildcard): not `EP#<id>`, not another endpoint's run.
  expect(starts[0]!.Condition).toEqual({
    'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`STARTS#${endpointId}`] },
    Null: { 'dynamodb:LeadingKeys': 'false' },
  });
}

describe('the agent role (queue endpoint)', () => {
  const { template, access, taskRole } = build();
  const statements = statementsOf(template, access.role);

  it('reads, writes and renews leases of only job items whose id starts with its endpoint id (LeadingKeys, no key = no access)', () => {
    const [jobs] = only(statements, 'dynamodb:PutItem').filter((s) => s.Resource === tables.jobs.tableArn);
    expect(jobs?.Condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${endpointId}-*`, `sync-${endpointId}-*`] },
      Null: { 'dynamodb:LeadingKeys': 'false' },
    });
    expect(actionsOf([jobs!]).sort()).toEqual([
      'dynamodb:BatchGetItem',
      'dynamodb:GetItem',
      'dynamodb:PutItem',
      'dynamodb:UpdateItem',
    ]);
  });

  it('queries only its own partitions of byEndpointStatus and of the chunks table, nothing else', () => {
    const query = only(statements, 'dynamodb:Query');
    expect(query.map((s) => s.Resource).sort()).toEqual([
      tables.chunks.tableArn,
      `${tables.jobs.tableArn}/index/byEndpointStatus`,
    ]);
    const index = query.find((s) => s.Resource !== tables.chunks.tableArn)!;
    expect(index.Condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${endpointId}#*`] },
      Null: { 'dynamodb:LeadingKeys': 'false' },
    });
  });

  it('writes, and queries to clear, chunks of its own jobs; only its own worker records', () => {
    const chunks = statements.find((s) => s.Resource === tables.chunks.tableArn)!;
    // Query: a requeue clears the old attempt's chunks (DynamoJobStore.clearStream), and IAM
    // authorizes each action alone
    // (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html).
    expect(actionsOf([chunks]).sort()).toEqual([
      'dynamodb:BatchWriteItem',
      'dynamodb:Query',
      'dynamodb:UpdateItem',
    ]);
    expect(chunks.Condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${endpointId}-*`, `sync-${endpointId}-*`] },
      Null: { 'dynamodb:LeadingKeys': 'false' },
    });
    const workers = statements.find((s) => s.Resource === tables.workers.tableArn)!;
    expect(workers.Condition).toMatchObject({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${endpointId}-*`] },
      Null: { 'dynamodb:LeadingKeys': 'false' },
    });
  });

  it('has every DynamoDB grant conditioned: none on a whole table, on the control table only its STARTS# key', () => {
    for (const s of statements.filter((s) => actionsOf([s]).some((a) => a.startsWith('dynamodb:')))) {
      expect(s.Condition).toBeDefined();
    }
    const control = statements.filter((s) => JSON.stringify(s).includes(tables.control.tableArn));
    expect(control).toHaveLength(1);
    expectOwnStartsItem(control);
  });

  it('reaches payload objects only under its own job ids', () => {
    const s3 = only(statements, 's3:GetObject');
    expect(s3).toHaveLength(1);
    const rendered = JSON.stringify(s3[0]!.Resource);
    expect(rendered).toContain(`platform-bucket/payloads/${endpointId}-*`);
    expect(rendered).toContain(`platform-bucket/payloads/sync-${endpointId}-*`);
    expect(rendered).not.toMatch(/payloads\/\*/);
  });

  it("lists only its own jobs' key names (s3:prefix), so a blob that is gone reads as missing, not refused", () => {
    // S3 answers a missing key 404 only to a principal with s3:ListBucket, else 403
    // (https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html); s3:prefix is a listing's
    // prefix parameter (https://docs.aws.amazon.com/AmazonS3/latest/userguide/amazon-s3-policy-keys.html).
    // Unfenced, the listing would show every endpoint's job ids.
    const listing = only(statements, 's3:ListBucket');
    expect(listing).toEqual([
      {
        Effect: 'Allow',
        Action: 's3:ListBucket',
        Resource: { 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':s3:::platform-bucket']] },
        Condition: {
          StringLike: { 's3:prefix': [`payloads/${endpointId}-*`, `payloads/sync-${endpointId}-*`] },
        },
      },
    ]);
    // The same prefixes as its object grant: it lists exactly the keys it may read.
    const objects = JSON.stringify(only(statements, 's3:GetObject')[0]!.Resource);
    for (const prefix of endpointKeyPatterns(endpointId).payloadKeys) {
      expect(objects).toContain(`platform-bucket/${prefix}`);
    }
  });

  it('uses only its own two queues', () => {
    const sqsStatement = only(statements, 'sqs:ReceiveMessage');
    expect(sqsStatement[0]!.Resource).toEqual([
      `arn:aws:sqs:us-east-1:${account}:ferry-${endpointId}`,
      `arn:aws:sqs:us-east-1:${account}:ferry-${endpointId}-low`,
    ]);
  });

  it('trusts only the task role, and only with the external id (a dynamic reference, never the value)', () => {
    const roleId = Stack.of(access.role).getLogicalId(access.role.node.defaultChild as iam.CfnRole);
    const trust = template.toJSON().Resources[roleId].Properties.AssumeRolePolicyDocument.Statement;
    expect(trust).toHaveLength(1);
    const taskRoleId = Stack.of(taskRole).getLogicalId(taskRole.node.defaultChild as iam.CfnRole);
    expect(trust[0].Principal).toEqual({ AWS: { 'Fn::GetAtt': [taskRoleId, 'Arn'] } });
    const externalId = JSON.stringify(trust[0].Condition.StringEquals['sts:ExternalId']);
    expect(externalId).toContain('{{resolve:secretsmanager:');
  });
});

describe('the task role (every container of the task has it)', () => {
  const { template, taskRole } = build();
  const statements = statementsOf(template, taskRole);

  it('can only ask for the agent role: no table, queue, bucket or secret', () => {
    expect(actionsOf(statements)).toEqual(['sts:AssumeRole']);
  });
});

describe('the load-balanced agent role', () => {
  const { template, access } = build('lb');
  const statements = statementsOf(template, access.role);

  it('reads only KEY# items of the control table, and its own STARTS# item', () => {
    const reads = only(statements, 'dynamodb:GetItem');
    expect(reads).toHaveLength(2);
    for (const read of reads) expect(read.Resource).toBe(tables.control.tableArn);
    expect(
      reads.map((r) => (r.Condition as Record<string, unknown> | undefined)?.['ForAllValues:StringLike']),
    ).toEqual(
      expect.arrayContaining([
        { 'dynamodb:LeadingKeys': ['KEY#*'] },
        { 'dynamodb:LeadingKeys': [`STARTS#${endpointId}`] },
      ]),
    );
  });

  it('writes only its own worker records (its load, for the scaler), and nothing else', () => {
    const writes = only(statements, 'dynamodb:PutItem');
    expect(writes).toHaveLength(1);
    expect(writes[0]!.Resource).toBe(tables.workers.tableArn);
    expect(actionsOf(writes).sort()).toEqual(['dynamodb:DeleteItem', 'dynamodb:PutItem']);
    expect(writes[0]!.Condition).toEqual(leadingKeysCondition(endpointKeyPatterns(endpointId).workers));
    expect(writes[0]!.Condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${endpointId}-*`] },
      Null: { 'dynamodb:LeadingKeys': 'false' },
    });
    // Besides: KEY# reads, its STARTS# item, and describing its own service (superseded.ts).
    expect(statements).toHaveLength(4);
    const ecsReads = only(statements, 'ecs:DescribeServices');
    expect(ecsReads).toHaveLength(1);
    expect(actionsOf(ecsReads)).toEqual(['ecs:DescribeServices']);
    expect(JSON.stringify(ecsReads[0]!.Resource)).toContain(`:service/ferry/ferry-${endpointId}`);
  });

  it("counts its endpoint's failed worker starts on exactly its STARTS# key, as a queue agent does", () => {
    expectOwnStartsItem(statements.filter((s) => actionsOf([s]).includes('dynamodb:UpdateItem')));
    // Of the control table, besides KEY# reads: nothing that could write an endpoint record or a key.
    const control = statements.filter((s) => JSON.stringify(s).includes(tables.control.tableArn));
    expect(actionsOf(control).filter((a) => a === 'dynamodb:PutItem')).toEqual([]);
  });
});

describe('secrets in the task definition', () => {
  const { template, taskDefinition } = build();
  const containers = template.toJSON().Resources[
    Stack.of(taskDefinition).getLogicalId(taskDefinition.node.defaultChild as ecs.CfnTaskDefinition)
  ].Properties.ContainerDefinitions as {
    Name: string;
    Environment?: { Name: string }[];
    Secrets?: { Name: string; ValueFrom: unknown }[];
  }[];
  const byName = (name: string) => containers.find((c) => c.Name === name)!;
  const secretNames = (name: string) => (byName(name).Secrets ?? []).map((s) => s.Name).sort();
  const envNames = (name: string) => (byName(name).Environment ?? []).map((e) => e.Name);

  it('hands the external id to the init container only', () => {
    expect(secretNames('artifact')).toEqual(['FERRY_AGENT_EXTERNAL_ID']);
    expect(secretNames('agent')).toEqual(['FERRY_WORKER_TOKEN']);
    expect(secretNames('worker')).not.toContain('FERRY_AGENT_EXTERNAL_ID');
  });

  it('gives user secrets and the worker token to the worker as ECS secrets, never as environment', () => {
    expect(secretNames('worker')).toEqual(['HF_TOKEN', 'OPENAI_API_KEY', 'RUNPOD_AI_API_KEY']);
    for (const name of ['HF_TOKEN', 'OPENAI_API_KEY', 'RUNPOD_AI_API_KEY', 'FERRY_WORKER_TOKEN']) {
      expect(envNames('worker')).not.toContain(name);
      expect(envNames('agent')).not.toContain(name);
    }
    const hf = byName('worker').Secrets!.find((s) => s.Name === 'HF_TOKEN')!;
    expect(JSON.stringify(hf.ValueFrom)).toContain(':secret:ferry/demo/dev/HF_TOKEN');
  });

  it('lets the execution role read exactly those user secrets (name + the six-character suffix)', () => {
    const policies = Object.values(template.findResources('AWS::IAM::Policy'));
    const statements = policies.flatMap((p) => p.Properties.PolicyDocument.Statement as Statement[]);
    const resources = statements
      .filter((s) => actionsOf([s]).includes('secretsmanager:GetSecretValue'))
      .flatMap((s) => (Array.isArray(s.Resource) ? s.Resource : [s.Resource]))
      .map((r) => JSON.stringify(r));
    const user = resources.filter((r) => r.includes('ferry/demo/dev/'));
    expect(user).toHaveLength(2);
    expect(user.join()).toContain('secret:ferry/demo/dev/HF_TOKEN-??????');
    expect(user.join()).toContain('secret:ferry/demo/dev/OPENAI_API_KEY-??????');
    expect(resources.join()).not.toMatch(/secret:\*|secret:ferry\/\*/);
  });

  it('puts no secret value in the template', () => {
    const text = JSON.stringify(template.toJSON());
    // Generated secrets appear as GenerateSecretString specs and {{resolve:…}} references only.
    expect(text).not.toMatch(/"SecretString":/);
  });

  it('refuses secret names that are reserved, malformed or also in env', () => {
    const stack = new Stack(new App(), 'Bad');
    const attempt =
      (names: string[], env: Record<string, string> = {}) =>
      () =>
        userSecrets(stack, { appName: 'a', envName: 'e', endpointName: 'x', names, env });
    expect(attempt(['FERRY_TOKEN'])).toThrow(FerryError);
    expect(attempt(['RUNPOD_AI_API_KEY'])).toThrow(FerryError);
    expect(attempt(['bad-name'])).toThrow(FerryError);
    expect(attempt(['HF_TOKEN'], { HF_TOKEN: 'x' })).toThrow(FerryError);
  });
});

describe('endpoint ids', () => {
  it('must not contain "-" nor be "sync", or a prefix could reach another endpoint', () => {
    expect(() => endpointKeyPatterns('ab-c')).toThrow(FerryError);
    expect(() => endpointKeyPatterns('sync')).toThrow(FerryError);
    expect(endpointKeyPatterns('abc').payloadKeys).toEqual(['payloads/abc-*', 'payloads/sync-abc-*']);
  });
});

describe('ECS hosts', () => {
  it('block IMDS for awsvpc tasks in the ECS agent config', () => {
    expect(ecsConfigLines).toContain('ECS_AWSVPC_BLOCK_IMDS=true');
  });
});

interface ContainerDefinition {
  Name: string;
  Environment?: { Name: string }[];
  Secrets?: { Name: string; ValueFrom: unknown }[];
}

/** An app stack of `manifest` on a GPU pool, its template, and its first endpoint's containers. */
function firstEndpointOf(manifest: Manifest) {
  const stack = new AppEnvironmentStack(new App(), 'Ferry-demo-dev', {
    appName: 'demo',
    envName: 'dev',
    manifest,
    artifact: { key: 'artifacts/demo/dev/fff.tar.gz' },
    platform: { instanceTypes: [gpuInstanceFor('A10G', 1).instanceType] },
    images: sampleImages,
  });
  const template = Template.fromStack(stack);
  const deployed = stack.endpoints[0]!;
  const containers = template.toJSON().Resources[
    Stack.of(deployed.taskDefinition).getLogicalId(
      deployed.taskDefinition.node.defaultChild as ecs.CfnTaskDefinition,
    )
  ].Properties.ContainerDefinitions as ContainerDefinition[];
  return { template, containers };
}

describe('an endpoint with secrets, through the app stack', () => {
  // resourcesSchema gains `secrets` with issue 13's manifest field; the stack reads it from there.
  const withSecrets = {
    ...sampleManifest,
    endpoints: [{ ...gpuEndpoint, resources: { ...gpuEndpoint.resources, secrets: ['HF_TOKEN'] } }],
  } as unknown as Manifest;
  const { template, containers } = firstEndpointOf(withSecrets);
  const worker = containers.find((c) => c.Name === 'worker')!;

  it('hands the secret to the worker as an ECS secret from ferry/<app>/<env>/<NAME>, not as environment', () => {
    const hf = worker.Secrets?.find((s) => s.Name === 'HF_TOKEN');
    expect(JSON.stringify(hf?.ValueFrom)).toContain(':secret:ferry/demo/dev/HF_TOKEN');
    expect((worker.Environment ?? []).map((e) => e.Name)).not.toContain('HF_TOKEN');
    for (const c of containers.filter((c) => c.Name !== 'worker')) {
      expect((c.Secrets ?? []).map((s) => s.Name)).not.toContain('HF_TOKEN');
    }
  });

  it('lets only the execution role read it, by its exact name', () => {
    const readers = Object.values(template.findResources('AWS::IAM::Policy')).filter((p) =>
      JSON.stringify(p.Properties.PolicyDocument).includes('ferry/demo/dev/HF_TOKEN'),
    );
    expect(readers).toHaveLength(1);
    expect(JSON.stringify(readers[0]!.Properties.Roles)).toContain('ExecutionRole');
    expect(JSON.stringify(readers[0]!.Properties.PolicyDocument)).toContain('ferry/demo/dev/HF_TOKEN-??????');
  });
});

describe('the call key of an endpoint whose name ends in "-" and six characters', () => {
  // Secrets Manager takes a partial ARN ending in `-` + six characters for a complete one with its
  // random suffix (https://docs.aws.amazon.com/secretsmanager/latest/userguide/troubleshoot.html#ARN_secretnamehyphen):
  // `…:secret:ferry-call/demo/dev/gpu-worker` would name a secret `ferry-call/demo/dev/gpu`, and no
  // task of the endpoint could start.
  const { template, containers } = firstEndpointOf({
    ...sampleManifest,
    endpoints: [{ ...gpuEndpoint, name: 'gpu-worker' }],
  });
  /** An ARN as CloudFormation builds it (Fn::Join of strings and pseudo-parameter Refs), as text. */
  const arnText = (value: unknown): string => {
    const join = (value as { 'Fn::Join'?: [string, unknown[]] })['Fn::Join'];
    if (!join) return String(value);
    return join[1]
      .map((part) => (typeof part === 'string' ? part : `<${(part as { Ref: string }).Ref}>`))
      .join(join[0]);
  };

  it('is named by a partial ARN that cannot be misread: its last segment is /key', () => {
    const worker = containers.find((c) => c.Name === 'worker')!;
    const valueFrom = arnText(worker.Secrets?.find((s) => s.Name === 'FERRY_CALL_TOKEN')?.ValueFrom);
    expect(valueFrom).toMatch(/:secret:ferry-call\/demo\/dev\/gpu-worker\/key$/);
    expect(valueFrom).not.toMatch(/-[A-Za-z0-9]{6}$/);
  });

  it("is read by the endpoint's execution role, by that exact name plus the suffix", () => {
    const readers = Object.values(template.findResources('AWS::IAM::Policy'))
      .flatMap((p) => p.Properties.PolicyDocument.Statement as Statement[])
      .filter((s) => actionsOf([s]).includes('secretsmanager:GetSecretValue'))
      .flatMap((s) => (Array.isArray(s.Resource) ? s.Resource : [s.Resource]))
      .map(arnText)
      .filter((arn) => arn.includes('ferry-call/'));
    expect(readers).toEqual([
      'arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:ferry-call/demo/dev/gpu-worker/key-??????',
    ]);
  });
});
