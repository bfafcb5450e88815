/**
 * What one endpoint's task may reach on AWS, and what its worker container (user code, or any
 * RunPod image) may not. The reasoning, with AWS's documents, is in docs/security-aws.md; in short:
 *
 *  - The task role reaches every container of the task: ECS puts the same
 *    AWS_CONTAINER_CREDENTIALS_RELATIVE_URI into each one, and any of them can fetch the role's
 *    credentials from 169.254.170.2
 *    (https://docs.aws.amazon.com/AmazonECS/latest/bestpracticesguide/security-iam-roles.html).
 *    So the task role carries nothing of the platform: the artifact object (the endpoint's own code,
 *    which the worker runs anyway), task scale-in protection (the ECS agent endpoint acts with the
 *    task role), and the right to *ask* for the agent role.
 *  - The agent role holds the platform permissions, scoped to this endpoint: its two queues, job,
 *    chunk and worker items whose partition key starts with its endpoint id (`dynamodb:LeadingKeys`,
 *    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html),
 *    payload objects under `payloads/<its job ids>` (S3 object ARNs) and the listing of those key
 *    names alone (`s3:prefix`), so a blob that is gone reads as missing. Its trust policy demands an
 *    sts:ExternalId that lives in a Secrets Manager secret handed to the agent container alone as
 *    an ECS container secret; the worker has the task role's credentials but not the id, so STS
 *    refuses it (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_common-scenarios_third-party.html).
 *  - The worker token is a random Secrets Manager value per endpoint, injected as an ECS secret: the
 *    template and task definition carry only its ARN, nothing another endpoint could compute it from.
 *  - User secrets (`secrets:` in the manifest) are Secrets Manager secrets `ferry/<app>/<env>/<NAME>`,
 *    injected as ECS secrets; only the task *execution* role (used by the ECS agent on the host, never
 *    handed to containers) may read them, by their exact name
 *    (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html).
 */

import { Aws, RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { dynamoSchema, startFailuresKey } from '../core/adapters/aws/dynamo.js';
import { awsSecretName } from '../core/adapters/aws/secrets.js';
import { webhookBodyPrefix } from '../core/adapters/aws/webhook-queue.js';
import { reservedSecretPrefixes } from '../core/adapters/local/secrets.js';
import { callTokenSecretName, callTokenVariable } from '../core/call-keys.js';
import { FerryError } from '../core/errors.js';
import { endpointJobIdPatterns } from '../core/job.js';
import { leadingKeysCondition } from './leading-keys.js';
import { clusterName, serviceName } from './names.js';
import type { TableRef } from './platform-exports.js';
import { allowTellingMissing, blobPrefix, keyLookupStatement, payloadsPrefix } from './platform-stack.js';

/**
 * Endpoint ids scope keys by prefix (core/job.ts): they must not contain '-', or `<id>-*` could match
 * another endpoint's keys, nor be `sync` (the /runsync marker).
 */
export function assertScopableEndpointId(endpointId: string): void {
  if (!/^[a-z0-9]{1,64}$/.test(endpointId) || endpointId === 'sync') {
    throw new FerryError(
      'bad_request',
      `Endpoint id "${endpointId}" must be 1-64 lowercase letters and digits (not "sync"): IAM scopes keys by it`,
    );
  }
}

/** Partition-key patterns of everything an endpoint's agent may touch, by table. */
export function endpointKeyPatterns(endpointId: string) {
  assertScopableEndpointId(endpointId);
  const jobs = endpointJobIdPatterns(endpointId);
  return {
    /** jobs and chunks are keyed by job id. */
    jobs,
    /** byEndpointStatus is keyed `<endpointId>#<status>` (core/adapters/aws/dynamo.ts). */
    byEndpointStatus: [`${endpointId}#*`],
    /** Worker ids are `<endpointId>-<random>` (worker-image/agent/agent.ts). */
    workers: [`${endpointId}-*`],
    /** Big job fields live at `payloads/<jobId>/…` (DynamoJobStore). */
    payloadKeys: jobs.map((pattern) => `${payloadsPrefix}${pattern}`),
    /** Webhook bodies too big for a message wait at `payloads/webhooks/<jobId>/…` (webhookBodyKey). */
    webhookBodyKeys: jobs.map((pattern) => `${blobPrefix}${webhookBodyPrefix}${pattern}`),
    /** The one control item of the endpoint's failed worker starts (its own partition). */
    startFailures: [startFailuresKey(endpointId).pk],
  };
}

export interface EndpointAgentAccessProps {
  appName: string;
  envName: string;
  endpointName: string;
  endpointId: string;
  kind: 'queue' | 'lb';
  /** The task role: the only principal that may assume the agent role (with the external id). */
  taskRole: iam.IRole;
  tables: { jobs: TableRef; chunks: TableRef; workers: TableRef; control: TableRef };
  bucketName: string;
  /** How cdk-nag renders the bucket name in a finding id (the platform export's name). */
  bucketFindingName: string;
  /** The endpoint's own queues (queue endpoints). */
  queues?: readonly sqs.IQueue[];
  /** The platform's webhook queue (queue endpoints): the agent hands its jobs' webhooks to it. */
  webhookQueueArn?: string;
}

/** The agent's role, its external id, and what the agent container needs to use them. */
export class EndpointAgentAccess extends Construct {
  readonly role: iam.Role;
  readonly externalId: secretsmanager.Secret;

  constructor(scope: Construct, id: string, props: EndpointAgentAccessProps) {
    super(scope, id);
    const keys = endpointKeyPatterns(props.endpointId);
    this.externalId = new secretsmanager.Secret(this, 'ExternalId', {
      description: `Ferry ${props.appName}/${props.envName}/${props.endpointName}: sts:ExternalId of the agent role (init and agent containers only)`,
      // ExternalId allows [\w+=,.@:/-]: letters and digits only.
      generateSecretString: { passwordLength: 64, excludePunctuation: true, includeSpace: false },
      removalPolicy: RemovalPolicy.DESTROY,
    });
    Validations.of(this.externalId).acknowledge({
      id: 'AwsSolutions-SMG4',
      reason:
        'The value is the agent role trust policy condition (a CloudFormation dynamic reference); a stack update ' +
        'replaces both together. It grants nothing without the task role, which only this endpoint has.',
    });

    this.role = new iam.Role(this, 'Role', {
      description: `Ferry ${props.appName}/${props.envName}/${props.endpointName} agent (assumed with an external id)`,
      // A chained session lasts at most 1 h whatever the role says; the agent renews it.
      assumedBy: new iam.PrincipalWithConditions(new iam.ArnPrincipal(props.taskRole.roleArn), {
        // CloudFormation resolves the reference at deploy; the template holds only the reference
        // (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/dynamic-references.html).
        StringEquals: { 'sts:ExternalId': this.externalId.secretValue.unsafeUnwrap() },
      }),
    });
    props.taskRole.addToPrincipalPolicy(
      new iam.PolicyStatement({ actions: ['sts:AssumeRole'], resources: [this.role.roleArn] }),
    );

    // The run of failed worker starts, shared by the endpoint's tasks (core/supervisor.ts): read at
    // start, ADDed to when a worker dies before contact, deleted on the first contact. The exact key:
    // not the endpoint record, not another endpoint's run, nothing else of the control table.
    this.role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:GetItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem'],
        resources: [props.tables.control.tableArn],
        conditions: leadingKeysCondition(keys.startFailures),
      }),
    );
    // Which task definition its own service's deployment runs, so a busy task steps aside for a
    // deploy (worker-image/agent/superseded.ts): its service only, read only.
    this.role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['ecs:DescribeServices'],
        resources: [
          Stack.of(this).formatArn({
            service: 'ecs',
            resource: 'service',
            resourceName: `${clusterName}/${serviceName(props.endpointId)}`,
          }),
        ],
      }),
    );
    if (props.kind === 'lb') {
      // Client keys: KEY#<hash> items of the control table.
      this.role.addToPolicy(keyLookupStatement(props.tables.control));
      // Its own worker record: requests in flight and last busy time, read by the scaler
      // (worker-image/agent/lb.ts, docs/scaling.md).
      this.role.addToPolicy(
        new iam.PolicyStatement({
          actions: ['dynamodb:PutItem', 'dynamodb:DeleteItem'],
          resources: [props.tables.workers.tableArn],
          conditions: leadingKeysCondition(keys.workers),
        }),
      );
      return;
    }
    const { jobs, chunks, workers } = props.tables;
    const queues = props.queues ?? [];
    if (queues.length > 0) {
      this.role.addToPolicy(
        new iam.PolicyStatement({
          actions: [
            'sqs:ReceiveMessage',
            'sqs:DeleteMessage',
            'sqs:ChangeMessageVisibility',
            'sqs:SendMessage',
          ],
          resources: queues.map((q) => q.queueArn),
        }),
      );
    }
    this.role.addToPolicy(
      new iam.PolicyStatement({
        // UpdateItem: a ping renews a lease without rewriting the job (DynamoJobStore.renewLease),
        // and a transition moves the endpoint's count items (`<endpointId>-#counts#…`, same fence).
        // BatchGetItem: a list reads the jobs its index query found by key.
        actions: ['dynamodb:GetItem', 'dynamodb:BatchGetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem'],
        resources: [jobs.tableArn],
        conditions: leadingKeysCondition(keys.jobs),
      }),
    );
    this.role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:Query'],
        resources: [`${jobs.tableArn}/index/${dynamoSchema.jobs.indexes.byEndpointStatus.indexName}`],
        conditions: leadingKeysCondition(keys.byEndpointStatus),
      }),
    );
    this.role.addToPolicy(
      new iam.PolicyStatement({
        // Query: a requeue (the worker exited, JobEngine.workerGone) clears the old attempt's chunks,
        // and DynamoJobStore.clearStream finds them with a Query on the job's partition. IAM
        // authorizes each action alone: UpdateItem and BatchWriteItem do not cover it
        // (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html).
        actions: ['dynamodb:UpdateItem', 'dynamodb:BatchWriteItem', 'dynamodb:Query'],
        resources: [chunks.tableArn],
        conditions: leadingKeysCondition(keys.jobs),
      }),
    );
    this.role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:DeleteItem'],
        resources: [workers.tableArn],
        conditions: leadingKeysCondition(keys.workers),
      }),
    );
    this.role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject', 's3:PutObject', 's3:DeleteObject'],
        resources: keys.payloadKeys.map((key) => `arn:${Aws.PARTITION}:s3:::${props.bucketName}/${key}`),
      }),
    );
    // A blob that is gone must read as missing, not as refused: the job store re-reads a job whose
    // blob a writer replaced meanwhile. Listing its own jobs' key names only (s3:prefix), never
    // another endpoint's (allowTellingMissing says why and how).
    allowTellingMissing(this.role, `arn:${Aws.PARTITION}:s3:::${props.bucketName}`, keys.payloadKeys);
    if (props.webhookQueueArn) {
      // The webhooks of the jobs this agent ends (job-done, its own timeouts): a message each, a big
      // body beside it under its own jobs' keys. Send only: the webhook function receives.
      this.role.addToPolicy(
        new iam.PolicyStatement({ actions: ['sqs:SendMessage'], resources: [props.webhookQueueArn] }),
      );
      this.role.addToPolicy(
        new iam.PolicyStatement({
          actions: ['s3:PutObject'],
          resources: keys.webhookBodyKeys.map(
            (key) => `arn:${Aws.PARTITION}:s3:::${props.bucketName}/${key}`,
          ),
        }),
      );
    }
    Validations.of(this.role).acknowledge(
      ...(props.webhookQueueArn ? keys.webhookBodyKeys : []).map((key) => ({
        id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::${props.bucketFindingName}/${key}]`,
        reason: `Webhook bodies are per delivery; the grant stops at this endpoint's job ids (${key}).`,
      })),
      ...keys.payloadKeys.map((key) => ({
        id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::${props.bucketFindingName}/${key}]`,
        reason: `Payload keys are per job; the grant stops at this endpoint's job ids (${key}).`,
      })),
    );
  }

  /** The agent container's variables: which role to assume. */
  get environment(): Record<string, string> {
    return { FERRY_AGENT_ROLE_ARN: this.role.roleArn };
  }

  /**
   * The external id, as an ECS secret of the task's init container, which writes it to the agent's
   * own volume (task-layout.ts agentMount): never in the worker container, and never in a container
   * the worker links to.
   */
  get initSecrets(): Record<string, ecs.Secret> {
    return { FERRY_AGENT_EXTERNAL_ID: ecs.Secret.fromSecretsManager(this.externalId) };
  }
}

/**
 * A random worker token per endpoint (Secrets Manager), for the agent (FERRY_WORKER_TOKEN) and the
 * worker (RUNPOD_AI_API_KEY, what RunPod's SDK sends). Replaces a token derived from values in the
 * task definition, which any endpoint could compute for any other.
 */
export class EndpointWorkerToken extends Construct {
  readonly secret: secretsmanager.Secret;

  constructor(scope: Construct, id: string, props: { description: string }) {
    super(scope, id);
    this.secret = new secretsmanager.Secret(this, 'Token', {
      description: props.description,
      generateSecretString: { passwordLength: 48, excludePunctuation: true, includeSpace: false },
      removalPolicy: RemovalPolicy.DESTROY,
    });
    Validations.of(this.secret).acknowledge({
      id: 'AwsSolutions-SMG4',
      reason:
        'Read by ECS when a task starts; a rotation would split running agents and workers. It opens only ' +
        "this endpoint's agent, on the task's own network namespace.",
    });
  }

  get agentSecrets(): Record<string, ecs.Secret> {
    return { FERRY_WORKER_TOKEN: ecs.Secret.fromSecretsManager(this.secret) };
  }

  get workerSecrets(): Record<string, ecs.Secret> {
    return { RUNPOD_AI_API_KEY: ecs.Secret.fromSecretsManager(this.secret) };
  }
}

const reservedPrefixes = reservedSecretPrefixes;

/** The Secrets Manager name of a user secret (the one rule: core/adapters/aws/secrets.ts). */
export const userSecretName = (app: string, env: string, name: string): string =>
  awsSecretName({ app, env }, name);

/**
 * The manifest's `secrets` (names) as ECS container secrets read from `ferry/<app>/<env>/<NAME>`.
 * Adding them to a container grants the task execution role GetSecretValue on exactly these secrets
 * (the ARN ends in `-??????`: Secrets Manager appends six random characters to every secret's ARN,
 * https://docs.aws.amazon.com/secretsmanager/latest/userguide/auth-and-access_iam-policies.html).
 */
export function userSecrets(
  scope: Construct,
  props: {
    appName: string;
    envName: string;
    endpointName: string;
    names: readonly string[];
    env: Record<string, string>;
  },
): Record<string, ecs.Secret> {
  const out: Record<string, ecs.Secret> = {};
  for (const name of props.names) {
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(name)) {
      throw new FerryError(
        'bad_request',
        `Endpoint "${props.endpointName}": secret name "${name}" is not a variable name`,
      );
    }
    if (reservedPrefixes.some((prefix) => name.toUpperCase().startsWith(prefix))) {
      throw new FerryError(
        'bad_request',
        `Endpoint "${props.endpointName}": secret "${name}" uses a reserved prefix (${reservedPrefixes.join(', ')})`,
      );
    }
    if (name in props.env) {
      throw new FerryError(
        'bad_request',
        `Endpoint "${props.endpointName}": "${name}" is both in env and in secrets`,
      );
    }
    const secret = secretsmanager.Secret.fromSecretNameV2(
      scope,
      `Secret-${props.endpointName}-${name}`,
      userSecretName(props.appName, props.envName, name),
    );
    out[name] = ecs.Secret.fromSecretsManager(secret);
  }
  return out;
}

/**
 * The worker container's call key (core/call-keys.ts): FERRY_CALL_TOKEN from the endpoint's own
 * `ferry-call/<app>/<env>/<name>/key` secret, written by `ferry deploy` before the stack deploys. As
 * with user secrets, only the task execution role may read it, by exact name (the `-??????` suffix);
 * the task role, which user code holds, gets no Secrets Manager action at all.
 *
 * Imported by name, so the task definition holds a partial ARN. That is unambiguous only because the
 * name ends in `/key`, never in `-` and six characters, which Secrets Manager would read as the
 * random suffix of a complete ARN (https://docs.aws.amazon.com/secretsmanager/latest/userguide/troubleshoot.html#ARN_secretnamehyphen;
 * callTokenSecretName owns that rule). User secrets are safe the same way: a NAME has no `-`.
 */
export function callKeySecret(
  scope: Construct,
  props: { appName: string; envName: string; endpoint: { name: string } },
): Record<string, ecs.Secret> {
  const secret = secretsmanager.Secret.fromSecretNameV2(
    scope,
    'CallKey',
    callTokenSecretName({ app: props.appName, env: props.envName, name: props.endpoint.name }),
  );
  return { [callTokenVariable]: ecs.Secret.fromSecretsManager(secret) };
}
