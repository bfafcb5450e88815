/**
 * IAM in front of the emulators. DynamoDB Local and fauxqs do not evaluate IAM, so a test puts a
 * role's policy in front of them: the role's statements come from a synthesized template, and every
 * request a client sends is checked against them before it leaves. The check covers exactly what
 * Ferry's statements use, as AWS documents it: the action, the resource ARN (`*` and `?` as in
 * StringLike), `ForAllValues:StringLike` / `ForAllValues:StringEquals` on `dynamodb:LeadingKeys` (a
 * request's partition key values) and `Null` on it
 * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html,
 * https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html),
 * and `StringEquals` / `StringLike` / `ArnEquals` / `ArnLike` on single-valued keys a request carries
 * (`ecs:cluster`, `s3:prefix`), false when the request does not carry the key
 * (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html).
 * Anything else (another operator, a call whose resource it cannot read) is denied. What it does NOT
 * show: that AWS evaluates these statements the same way; that needs a real account
 * (docs/security-aws.md).
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { S3Client } from '@aws-sdk/client-s3';
import type { SQSClient } from '@aws-sdk/client-sqs';
import { type DynamoTable, dynamoSchema } from '../../core/adapters/aws/dynamo.js';
import type { Statement } from '../infra/iam.js';
import { fakeAwsConfig } from './emulators.js';

export const account = '123456789012';
export const region = fakeAwsConfig.region;

/** ARNs as AWS forms them, in the emulators' region and the tests' account. */
export const arnOf = {
  table: (name: string, index?: string) =>
    `arn:aws:dynamodb:${region}:${account}:table/${name}${index ? `/index/${index}` : ''}`,
  queue: (name: string) => `arn:aws:sqs:${region}:${account}:${name}`,
  /** A queue's ARN from its URL (the name is the URL's last path segment). */
  queueAt: (url: string) => arnOf.queue(queueNameOf({ QueueUrl: url })!),
  bucket: (name: string) => `arn:aws:s3:::${name}`,
  object: (bucket: string, key: string) => `arn:aws:s3:::${bucket}/${key}`,
  /**
   * A log group as IAM evaluates a request on its events (FilterLogEvents): the group's ARN with a
   * log-stream part, as AccessDenied messages name it, so only a policy on the group's ARN with the
   * trailing `:*` matches, as CloudWatch Logs documents
   * (https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/iam-access-control-overview-cwl.html).
   */
  logGroupEvents: (name: string) => `arn:aws:logs:${region}:${account}:log-group:${name}:log-stream:`,
  function: (name: string) => `arn:aws:lambda:${region}:${account}:function:${name}`,
  service: (cluster: string, name: string) => `arn:aws:ecs:${region}:${account}:service/${cluster}/${name}`,
  cluster: (name: string) => `arn:aws:ecs:${region}:${account}:cluster/${name}`,
  task: (cluster: string, id: string) => `arn:aws:ecs:${region}:${account}:task/${cluster}/${id}`,
};

/** One action on one resource, as IAM authorizes it. */
export interface Access {
  action: string;
  resource: string;
  /** The partition key values of a DynamoDB request (`dynamodb:LeadingKeys`); [] elsewhere. */
  leadingKeys: string[];
  /** Other condition keys the request carries, by name (`ecs:cluster` of an ECS list, `s3:prefix`). */
  context?: Record<string, string>;
}

/** What the gate decided for one request (every access of it must be allowed). */
export interface Decision {
  operation: string;
  resources: string[];
  keys: string[];
  allowed: boolean;
}

export class AccessDenied extends Error {
  override name = 'AccessDeniedException';
}

/** S3's refusal as its SDK raises it: the error code AccessDenied with HTTP 403, not IAM's exception name. */
export class S3AccessDenied extends AccessDenied {
  override name = 'AccessDenied';
  readonly $metadata = { httpStatusCode: 403 };
}

/** What a test expects of a refused S3 request (`rejects.toMatchObject(s3Denied)`). */
export const s3Denied = { name: 'AccessDenied', $metadata: { httpStatusCode: 403 } };

/** IAM's StringLike: `*` any run of characters, `?` one character, everything else literal. */
export const stringLike = (pattern: string, value: string): boolean =>
  new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  ).test(value);

const list = <T>(v: T | T[]): T[] => (Array.isArray(v) ? v : [v]);

/**
 * A template value as the text AWS would see: `Fn::Join`, the pseudo parameters, and `Fn::GetAtt
 * [<logicalId>, Arn]` of the resources in `arns`. Anything else throws: a statement the gate cannot
 * read must not quietly deny (or allow) in a test.
 */
function resolve(value: unknown, arns: Record<string, string>): string {
  if (typeof value === 'string') return value;
  const token = value as Record<string, any>;
  if (token.Ref === 'AWS::Partition') return 'aws';
  if (token.Ref === 'AWS::Region') return region;
  if (token.Ref === 'AWS::AccountId') return account;
  const getAtt = token['Fn::GetAtt'] as [string, string] | undefined;
  if (getAtt?.[1] === 'Arn' && arns[getAtt[0]] !== undefined) return arns[getAtt[0]]!;
  const join = token['Fn::Join'] as [string, unknown[]] | undefined;
  if (join) return join[1].map((part) => resolve(part, arns)).join(join[0]);
  throw new Error(`the IAM gate cannot resolve ${JSON.stringify(value)}`);
}

interface ResolvedStatement {
  actions: string[];
  resources: string[];
  condition: Record<string, Record<string, unknown>>;
}

function conditionHolds(condition: Record<string, Record<string, unknown>>, access: Access): boolean {
  for (const [operator, keys] of Object.entries(condition)) {
    for (const [key, expected] of Object.entries(keys)) {
      const values = list(expected as string | string[]);
      if (key !== 'dynamodb:LeadingKeys') {
        // A single-valued key of the request (ecs:cluster); absent from it, the condition fails.
        const actual = access.context?.[key];
        if (actual === undefined) return false;
        if (operator === 'ArnEquals' || operator === 'StringEquals') {
          if (!values.includes(actual)) return false;
        } else if (operator === 'ArnLike' || operator === 'StringLike') {
          if (!values.some((p) => stringLike(p, actual))) return false;
        } else {
          return false;
        }
        continue;
      }
      if (operator === 'ForAllValues:StringLike') {
        if (!access.leadingKeys.every((k) => values.some((p) => stringLike(p, k)))) return false;
      } else if (operator === 'ForAllValues:StringEquals') {
        if (!access.leadingKeys.every((k) => values.includes(k))) return false;
      } else if (operator === 'Null') {
        if (String(access.leadingKeys.length === 0) !== String(expected)) return false;
      } else {
        return false;
      }
    }
  }
  return true;
}

/** A role's Allow statements, resolved: it allows an access when one statement covers it. */
export class Policy {
  private readonly statements: ResolvedStatement[];

  /** `arns`: logical id → ARN of the template's resources its statements name by `Fn::GetAtt`. */
  constructor(statements: Statement[], arns: Record<string, string> = {}) {
    this.statements = statements
      .filter((s) => s.Effect === 'Allow')
      .map((s) => ({
        actions: list(s.Action),
        resources: list(s.Resource).map((r) => resolve(r, arns)),
        // Values may be template tokens too (an ARN built with Fn::Join).
        condition: Object.fromEntries(
          Object.entries((s.Condition ?? {}) as Record<string, Record<string, unknown>>).map(
            ([operator, keys]) => [
              operator,
              Object.fromEntries(
                Object.entries(keys).map(([key, value]) => {
                  const token = (v: unknown) => (v !== null && typeof v === 'object' ? resolve(v, arns) : v);
                  return [key, Array.isArray(value) ? value.map(token) : token(value)];
                }),
              ),
            ],
          ),
        ),
      }));
  }

  allows(access: Access): boolean {
    return this.statements.some(
      (s) =>
        s.actions.includes(access.action) &&
        s.resources.some((r) => stringLike(r, access.resource)) &&
        conditionHolds(s.condition, access),
    );
  }
}

type AttributeValue = Record<string, unknown>;
const scalar = (value: AttributeValue | undefined): string => String(value?.S ?? value?.N ?? '');

/** What IAM authorizes for one DynamoDB wire request; undefined when the gate cannot read it. */
function dynamoAccesses(
  tables: Record<DynamoTable, string>,
  operation: string,
  body: Record<string, any>,
): Access[] | undefined {
  const action = `dynamodb:${operation}`;
  const roleOf = (name: string) =>
    (Object.keys(tables) as DynamoTable[]).find((role) => tables[role] === name)!;
  const pk = (table: string) => dynamoSchema[roleOf(table)].partitionKey.name;
  switch (operation) {
    case 'GetItem':
    case 'DeleteItem':
    case 'UpdateItem':
      return [
        {
          action,
          resource: arnOf.table(body.TableName),
          leadingKeys: [scalar(body.Key[pk(body.TableName)])],
        },
      ];
    case 'PutItem':
      return [
        {
          action,
          resource: arnOf.table(body.TableName),
          leadingKeys: [scalar(body.Item[pk(body.TableName)])],
        },
      ];
    case 'BatchWriteItem':
      return Object.entries(body.RequestItems as Record<string, any[]>).map(([table, requests]) => ({
        action,
        resource: arnOf.table(table),
        leadingKeys: requests.map((r) => scalar((r.PutRequest?.Item ?? r.DeleteRequest?.Key)?.[pk(table)])),
      }));
    case 'BatchGetItem':
      return Object.entries(body.RequestItems as Record<string, { Keys: any[] }>).map(
        ([table, { Keys }]) => ({
          action,
          resource: arnOf.table(table),
          leadingKeys: Keys.map((key) => scalar(key[pk(table)])),
        }),
      );
    // A transaction is authorized action by action, each as its own operation
    // (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html).
    case 'TransactWriteItems':
      return (body.TransactItems as Record<string, any>[]).map((item) => {
        const [kind, request] = Object.entries(item)[0]!;
        const key = request.Key ?? request.Item;
        const operation =
          { Put: 'PutItem', Update: 'UpdateItem', Delete: 'DeleteItem' }[kind] ?? 'ConditionCheckItem';
        return {
          action: `dynamodb:${operation}`,
          resource: arnOf.table(request.TableName),
          leadingKeys: [scalar(key[pk(request.TableName)])],
        };
      });
    case 'Query': {
      const spec = dynamoSchema[roleOf(body.TableName)];
      const index = body.IndexName
        ? Object.values(
            spec.indexes as Record<string, { indexName: string; partitionKey: { name: string } }>,
          ).find((i) => i.indexName === body.IndexName)
        : undefined;
      const keyName = index ? index.partitionKey.name : spec.partitionKey.name;
      const names: Record<string, string> = body.ExpressionAttributeNames ?? {};
      const keys: string[] = [];
      for (const [, left, placeholder] of String(body.KeyConditionExpression).matchAll(
        /([#\w]+)\s*=\s*(:\w+)/g,
      )) {
        if ((names[left!] ?? left) === keyName)
          keys.push(scalar(body.ExpressionAttributeValues[placeholder!]));
      }
      return [{ action, resource: arnOf.table(body.TableName, body.IndexName), leadingKeys: keys }];
    }
    default:
      return undefined;
  }
}

/** The queue a request names, by URL (its last path segment) or by name. */
const queueNameOf = (input: { QueueUrl?: string; QueueName?: string }): string | undefined =>
  input.QueueName ?? input.QueueUrl?.split('/').pop();

/** s3:ListBucket on `bucket`, with `prefix` as the request's `s3:prefix` when it has one. */
const listingOf = (bucket: string, prefix: unknown): Access => ({
  action: 's3:ListBucket',
  resource: arnOf.bucket(bucket),
  leadingKeys: [],
  ...(typeof prefix === 'string' ? { context: { 's3:prefix': prefix } } : {}),
});

/**
 * The S3 action IAM checks for an operation: HeadObject is authorized by s3:GetObject, a listing by
 * s3:ListBucket on the bucket, a multi-object delete by s3:DeleteObject on each key
 * (https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadObject.html,
 * https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObjects.html). A listing carries its
 * prefix parameter as `s3:prefix`, and none when it names no prefix
 * (https://docs.aws.amazon.com/AmazonS3/latest/userguide/amazon-s3-policy-keys.html,
 * https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html).
 */
function s3Accesses(operation: string, input: Record<string, any>): Access[] | undefined {
  const bucket = input.Bucket as string | undefined;
  if (!bucket) return undefined;
  const onObject = (action: string, key: string | undefined): Access[] | undefined =>
    key === undefined ? undefined : [{ action, resource: arnOf.object(bucket, key), leadingKeys: [] }];
  switch (operation) {
    case 'GetObject':
    case 'HeadObject':
      return onObject('s3:GetObject', input.Key);
    case 'PutObject':
    case 'CreateMultipartUpload':
    case 'UploadPart':
    case 'CompleteMultipartUpload':
      return onObject('s3:PutObject', input.Key);
    case 'DeleteObject':
      return onObject('s3:DeleteObject', input.Key);
    case 'CopyObject': {
      // GetObject on the source (`<bucket>/<key>`, URL-encoded), PutObject on the copy
      // (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CopyObject.html).
      const source = decodeURIComponent(String(input.CopySource ?? '')).replace(/^\//, '');
      const slash = source.indexOf('/');
      if (slash < 1) return undefined;
      return [
        {
          action: 's3:GetObject',
          resource: arnOf.object(source.slice(0, slash), source.slice(slash + 1)),
          leadingKeys: [],
        },
        ...(onObject('s3:PutObject', input.Key) ?? []),
      ];
    }
    case 'DeleteObjects':
      return (input.Delete?.Objects ?? []).map((o: { Key: string }) => ({
        action: 's3:DeleteObject',
        resource: arnOf.object(bucket, o.Key),
        leadingKeys: [],
      }));
    case 'ListObjectsV2':
    case 'ListObjects':
      return [listingOf(bucket, input.Prefix)];
    default:
      return undefined;
  }
}

/**
 * One role's gate: clients put behind it send only what its policy allows, and every decision is
 * kept (`decisions`), so a test can show both that nothing it needs was refused and that the policy
 * was exercised rather than bypassed.
 */
export class IamGate {
  readonly decisions: Decision[] = [];

  constructor(readonly policy: Policy) {}

  /** Decides one request; throws AccessDenied (as AWS answers) unless every access is allowed. */
  check(operation: string, accesses: Access[] | undefined, Denied: typeof AccessDenied = AccessDenied): void {
    const allowed = accesses?.every((a) => this.policy.allows(a)) ?? false;
    this.decisions.push({
      operation,
      resources: (accesses ?? []).map((a) => a.resource),
      keys: (accesses ?? []).flatMap((a) => a.leadingKeys),
      allowed,
    });
    if (!allowed) throw new Denied(`not authorized to perform ${operation}`);
  }

  /** The refused decisions (a test of a working path expects none). */
  denied(): Decision[] {
    return this.decisions.filter((d) => !d.allowed);
  }

  /** DynamoDB: the real wire request (X-Amz-Target and JSON body), checked before it is sent. */
  dynamo<T extends DynamoDBClient>(client: T, tables: Record<DynamoTable, string>): T {
    client.middlewareStack.add(
      (next) => async (args) => {
        const request = args.request as { headers: Record<string, string>; body: string | Uint8Array };
        const body = typeof request.body === 'string' ? request.body : new TextDecoder().decode(request.body);
        const operation = String(request.headers['x-amz-target']).split('.')[1]!;
        this.check(`dynamodb:${operation}`, dynamoAccesses(tables, operation, JSON.parse(body)));
        return next(args);
      },
      { step: 'build', name: 'iamGate' },
    );
    return client;
  }

  /**
   * SQS: the queue named by the command's QueueUrl or QueueName. A batch action is authorized by its
   * single action ("setting permissions for SendMessage, DeleteMessage, or ChangeMessageVisibility
   * sets permissions for the corresponding batch versions":
   * https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-batch-api.html).
   */
  sqs<T extends SQSClient>(client: T): T {
    return this.commands(client, 'sqs', (operation, input) => {
      const name = queueNameOf(input);
      const action = `sqs:${operation.replace(/Batch$/, '')}`;
      return name === undefined ? undefined : [{ action, resource: arnOf.queue(name), leadingKeys: [] }];
    });
  }

  /**
   * S3: objects and listings. Presigned URLs go through it too (the presigner runs the client's
   * middleware), as they should: a presigned request acts with the signer's permissions.
   */
  s3<T extends S3Client>(client: T): T {
    this.commands(client, 's3', s3Accesses);
    // A missing key reads as 404 only to a caller that may list the bucket, else as 403: "If you
    // don't have the s3:ListBucket permission, Amazon S3 returns an HTTP status code 403"
    // (https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html). The emulator always says 404.
    // Weighed as a listing with the key itself as `s3:prefix`, so a grant fenced to a prefix tells
    // the keys under it: AWS's pages do not say which `s3:prefix` S3 uses here; Ceph's S3 gateway
    // does this to match S3 (https://github.com/ceph/ceph/pull/68577). Not run on a real account.
    client.middlewareStack.add(
      (next: (args: any) => Promise<any>, context: { commandName?: string }) => async (args: any) => {
        try {
          return await next(args);
        } catch (error) {
          const missing = ['NoSuchKey', 'NotFound'].includes((error as Error).name);
          const read = ['GetObjectCommand', 'HeadObjectCommand'].includes(String(context.commandName));
          if (missing && read && !this.policy.allows(listingOf(args.input.Bucket, args.input.Key))) {
            throw new S3AccessDenied(
              `not authorized to learn that ${args.input.Key} is missing (no s3:ListBucket that covers it)`,
            );
          }
          throw error;
        }
      },
      { step: 'initialize', name: 'iamGateMissingKey' },
    );
    return client;
  }

  /** An SDK client's commands, by name and input as the caller gave them, before they are sent. */
  private commands<T extends { middlewareStack: { add(middleware: any, options: any): void } }>(
    client: T,
    service: string,
    accesses: (operation: string, input: Record<string, any>) => Access[] | undefined,
  ): T {
    client.middlewareStack.add(
      (next: (args: any) => Promise<any>, context: { commandName?: string }) => async (args: any) => {
        const operation = String(context.commandName).replace(/Command$/, '');
        const Denied = service === 's3' ? S3AccessDenied : AccessDenied;
        this.check(`${service}:${operation}`, accesses(operation, args.input), Denied);
        return next(args);
      },
      { step: 'initialize', name: 'iamGate' },
    );
    return client;
  }

  /**
   * A stand-in client with no emulator (CloudWatch Logs, Lambda, ECS): `accesses` reads each command;
   * `service` prefixes the operation's name in the decisions (`lambda:Invoke`).
   */
  send<T extends { send(command: any): Promise<any> }>(
    client: T,
    service: string,
    accesses: (command: { constructor: { name: string }; input: any }) => Access[] | undefined,
  ): T {
    const send = client.send.bind(client);
    const gated = async (command: { constructor: { name: string }; input: any }) => {
      this.check(`${service}:${command.constructor.name.replace(/Command$/, '')}`, accesses(command));
      return send(command);
    };
    return Object.assign(Object.create(Object.getPrototypeOf(client)), client, { send: gated });
  }
}
