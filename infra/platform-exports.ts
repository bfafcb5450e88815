/**
 * The contract between the shared platform stack and every app-environment stack: CloudFormation
 * exports under FIXED names, written by the platform and read by app stacks with `Fn::ImportValue`.
 *
 * Why not CDK's automatic (strong) cross-stack references: the platform (`FerryPlatform`) is one per
 * account and region, shared by every app, but it is synthesized next to ONE app stack at a time. With
 * automatic references CDK exports only what that app happens to use, under generated names, so
 * deploying app B would drop the exports app A still imports, and CloudFormation refuses the update
 * ("Export … cannot be deleted as it is in use by Ferry-a-production"). Here the platform exports the
 * same set whatever app is synthesized, and an app stack names the exports it reads, so:
 *   - the platform template is a function of the platform's own inputs only (bundles, instance types);
 *   - synthesizing app B never changes app A's imports;
 *   - CloudFormation still guards the other direction: while an app imports an export, the platform
 *     cannot delete or change it (so a pool or table in use can never be pulled from under an app).
 *
 *   export name                                  value
 *   Ferry-ApiUrl / Ferry-ApiId                   `<api>/v2` base URL / REST API id
 *   Ferry-BucketName / Ferry-BucketArn           payloads + artifacts bucket
 *   Ferry-ClusterName / Ferry-ClusterArn         the ECS cluster
 *   Ferry-VpcId                                  the platform VPC
 *   Ferry-AvailabilityZones                      comma-separated, `platformAzCount` of them
 *   Ferry-PublicSubnetIds                        comma-separated, same order as the zones
 *   Ferry-PublicSubnetRouteTableIds              comma-separated, same order
 *   Ferry-InstanceSecurityGroupId                the ECS hosts' security group (no longer imported:
 *                                                app stacks of older Ferry versions still do)
 *   Ferry-LoadBalancerSecurityGroupId            the group every ALB carries to reach the hosts
 *   Ferry-<Jobs|Chunks|Control|Workers>TableName / …TableArn   the four DynamoDB tables
 *   Ferry-AlarmTopicArn                          the SNS topic of every alarm (constructs/alarms.ts)
 *   Ferry-WebhookQueueUrl / Ferry-WebhookQueueArn  where agents hand final-status webhooks
 *                                                (core/adapters/aws/webhook-queue.ts)
 *   Ferry-Pool-<instance type, . → ->-CapacityProvider         one per capacity pool, e.g.
 *                                                Ferry-Pool-g5-xlarge-CapacityProvider
 *
 * Export names may only hold letters, digits, `-` and `:`, hence the dot of an instance type becomes
 * `-` (instance types have no `-` of their own, so no two collide). Exported values never change for
 * the life of the resource (CloudFormation refuses to change an imported value), which is why the list
 * of instance types is a plain output (`InstanceTypes`), not an export: it grows with deploys.
 *
 * No DLQ alarm topic is shared: each app stack makes its DLQ alarms itself (app-stack.ts).
 */
import { Fn } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';
import type { DynamoTable } from '../core/adapters/aws/dynamo.js';
import { FerryError } from '../core/errors.js';
import { type PlatformExportKey, platformExportNames, poolExportName } from './names.js';

/**
 * How many availability zones (and public subnets) the platform VPC spans when the CLI names none. An
 * app stack imports the subnet list as that many items (`Fn.importListValue` needs the length at
 * synth), so it is told the platform's count (`PlatformImportsProps.azCount`).
 */
export const platformAzCount = 2;
/** The most zones the platform VPC spans when the CLI names the region's zones (16 public /20s fit the /16). */
export const maxPlatformAzs = 6;

export {
  exportPrefix,
  outputIdOf,
  type PlatformExportKey,
  platformExportNames,
  poolExportName,
} from './names.js';

/** Table role → the `<role>TableName` / `<role>TableArn` keys above. */
export const tableExportKeys: Readonly<
  Record<DynamoTable, { name: PlatformExportKey; arn: PlatformExportKey }>
> = {
  jobs: { name: 'jobsTableName', arn: 'jobsTableArn' },
  chunks: { name: 'chunksTableName', arn: 'chunksTableArn' },
  control: { name: 'controlTableName', arn: 'controlTableArn' },
  workers: { name: 'workersTableName', arn: 'workersTableArn' },
};

/** What an app stack may read of a table: names for the environment, ARNs for IAM. */
export interface TableRef {
  readonly tableName: string;
  readonly tableArn: string;
}

/** What an app stack needs from the platform. Every value is a `Fn::ImportValue` of a fixed name. */
export interface PlatformRefs {
  readonly vpc: ec2.IVpc;
  readonly cluster: ecs.ICluster;
  /**
   * What a load-balanced endpoint's ALB carries besides its own group: the way to the agents' dynamic
   * host ports, the same for every ALB, so no app stack adds a rule to the hosts' group
   * (PlatformStack.hostsFromLoadBalancers).
   */
  readonly loadBalancerSecurityGroup: ec2.ISecurityGroup;
  readonly jobsTable: TableRef;
  readonly chunksTable: TableRef;
  /** Apps, envs, endpoints and hashed API keys (`KEY#<hash>`): load-balanced agents check keys here. */
  readonly controlTable: TableRef;
  readonly workersTable: TableRef;
  readonly bucketName: string;
  /** The name of the export holding the bucket name (cdk-nag names IAM resources by it). */
  readonly bucketNameExport: string;
  /** The SNS topic every Ferry alarm notifies (infra/constructs/alarms.ts). */
  readonly alarmTopic: sns.ITopic;
  /** The API stage's root URL: workers call other endpoints through it (docs/python.md). */
  readonly apiRootUrl: string;
  /** The platform's webhook queue: queue agents send the webhooks of the jobs they end there. */
  readonly webhookQueue: { readonly queueUrl: string; readonly queueArn: string };
  /** The capacity provider of one pool; a FerryError when the platform has no pool of that type. */
  capacityProviderNameFor(instanceType: string): string;
}

export interface PlatformImportsProps {
  /**
   * The instance types the platform is deployed with (the union the CLI passes to both stacks). Only
   * used to refuse, at synth, an endpoint whose pool the platform would not export.
   */
  instanceTypes: readonly string[];
  /** Zones (public subnets) the platform VPC spans (PlatformStack.azCount); default platformAzCount. */
  azCount?: number;
}

/**
 * The platform as seen from an app stack: imported constructs built from the fixed exports, no object
 * reference to the PlatformStack, so nothing the app uses can add to or shape the platform template.
 */
export class PlatformImports extends Construct implements PlatformRefs {
  readonly vpc: ec2.IVpc;
  readonly cluster: ecs.ICluster;
  readonly loadBalancerSecurityGroup: ec2.ISecurityGroup;
  readonly jobsTable: TableRef;
  readonly chunksTable: TableRef;
  readonly controlTable: TableRef;
  readonly workersTable: TableRef;
  readonly bucketName: string;
  readonly bucketNameExport = platformExportNames.bucketName;
  readonly alarmTopic: sns.ITopic;
  /**
   * The API stage's root URL (`https://<id>.execute-api.<region>.<suffix>/<stage>`): the export is
   * `<root>/v2` and the Python client appends `/v2/...` itself (worker-image/python/ferry/client.py).
   */
  readonly apiRootUrl: string;
  readonly webhookQueue: { readonly queueUrl: string; readonly queueArn: string };
  private readonly instanceTypes: ReadonlySet<string>;

  constructor(scope: Construct, id: string, props: PlatformImportsProps) {
    super(scope, id);
    this.instanceTypes = new Set(props.instanceTypes);
    const value = (key: PlatformExportKey) => Fn.importValue(platformExportNames[key]);
    const list = (key: PlatformExportKey) =>
      Fn.importListValue(platformExportNames[key], props.azCount ?? platformAzCount);
    const table = (role: DynamoTable): TableRef => ({
      tableName: value(tableExportKeys[role].name),
      tableArn: value(tableExportKeys[role].arn),
    });

    // No host name of execute-api contains "/v2", so the first piece of the split is the stage root.
    this.apiRootUrl = Fn.select(0, Fn.split('/v2', value('apiUrl')));
    this.vpc = ec2.Vpc.fromVpcAttributes(this, 'Vpc', {
      vpcId: value('vpcId'),
      availabilityZones: list('availabilityZones'),
      publicSubnetIds: list('publicSubnetIds'),
      publicSubnetRouteTableIds: list('publicSubnetRouteTableIds'),
    });
    // Not mutable: the group and its rules are the platform's, so nothing an app stack does (a
    // listener, a target group) can add a rule to it.
    this.loadBalancerSecurityGroup = ec2.SecurityGroup.fromSecurityGroupId(
      this,
      'LoadBalancerSecurityGroup',
      value('loadBalancerSecurityGroupId'),
      { allowAllOutbound: false, mutable: false },
    );
    this.cluster = ecs.Cluster.fromClusterAttributes(this, 'Cluster', {
      clusterName: value('clusterName'),
      clusterArn: value('clusterArn'),
      vpc: this.vpc,
      // No security groups (the hosts' group is the platform's alone): a bridge-mode service takes
      // the cluster's as its own, and a listener forwarding to it would then give the ALB's own
      // group an egress rule to the hosts, a second owner of the way the platform's load balancer
      // group carries.
      securityGroups: [],
      hasEc2Capacity: true,
    });
    this.alarmTopic = sns.Topic.fromTopicArn(this, 'AlarmTopic', value('alarmTopicArn'));
    this.jobsTable = table('jobs');
    this.chunksTable = table('chunks');
    this.controlTable = table('control');
    this.workersTable = table('workers');
    this.bucketName = value('bucketName');
    this.webhookQueue = { queueUrl: value('webhookQueueUrl'), queueArn: value('webhookQueueArn') };
  }

  capacityProviderNameFor(instanceType: string): string {
    if (!this.instanceTypes.has(instanceType)) {
      throw new FerryError('bad_request', `The platform has no capacity pool for ${instanceType}`, {
        hint: `Add "${instanceType}" to the platform's instanceTypes and deploy the platform first.`,
      });
    }
    return Fn.importValue(poolExportName(instanceType));
  }
}
