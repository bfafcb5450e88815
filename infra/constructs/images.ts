/**
 * Where the worker and agent images live in the account, and how they get built without docker on
 * the deploying machine:
 *
 *  - One ECR repository per image kind of worker-image/images.ts (`ferry/agent`,
 *    `ferry/worker-base-cpu`, …), private, immutable tags. A tag names its image's content
 *    (`<version>-<hash>[-py<python>]`, worker-image/images.ts imageContentHashes), so it never needs to
 *    change: `ferry deploy` checks the tag exists, and hosts that cached it (ECS_IMAGE_PULL_BEHAVIOR=once)
 *    run what it names. Changed agent or runtime code is a new tag, which the deploy builds. No
 *    repository-level scan setting: AWS deprecates it ("The PutImageScanningConfiguration API is being deprecated, in favor
 *    of specifying the image scanning configuration at the registry level":
 *    https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_PutImageScanningConfiguration.html),
 *    and Ferry reads no scan results; an account that wants scans sets them on its registry, where
 *    they cover these repositories too. A lifecycle
 *    rule expires untagged images only (untaggedImageDays). Kept when the platform is deleted (images
 *    take tens of minutes to rebuild, and ECR refuses to delete a repository that still holds
 *    images anyway: https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_DeleteRepository.html),
 *    but not when the platform's first create rolls back (../retention.ts): their names are fixed,
 *    so a repository left by a failed create made every retry fail on its name.
 *  - A CodeBuild project that builds missing tags. `ferry deploy` uploads the build context
 *    (worker-image/ with the agent bundle and a generated build script, cli/providers/aws-images.ts)
 *    to the platform bucket under `image-builds/`, starts the build with FERRY_CONTEXT_KEY, and follows
 *    it. The build runs docker (privileged mode, required for docker builds:
 *    https://docs.aws.amazon.com/codebuild/latest/userguide/sample-docker.html), logs in to ECR and
 *    pushes. It also logs in to ECR Public, where the Dockerfiles' node and python come from: its
 *    anonymous pulls are limited per IP address ("For unauthenticated customers, Amazon ECR Public
 *    supports up to 500GB of data per month":
 *    https://docs.aws.amazon.com/AmazonECR/latest/public/public-service-quotas.html), and CodeBuild
 *    hosts share their addresses with other accounts' builds (`toomanyrequests: Rate exceeded`,
 *    aws/aws-cdk#23923). A build waits at most imageBuildQueuedMinutes in the queue (CodeBuild's
 *    default is 8 hours), and a deploy says why while it waits (cli/providers/aws-images.ts).
 */
import { Aws, Duration, RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import * as codebuild from 'aws-cdk-lib/aws-codebuild';
import * as ecr from 'aws-cdk-lib/aws-ecr';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import { Construct } from 'constructs';
import { workerImages } from '../../worker-image/images.js';
import { imageBuildPrefix, imageBuildQueuedMinutes } from '../names.js';
import { keptWhenStackDeleted } from '../retention.js';

/**
 * Untagged images (a push that failed half way) go after this long. Tagged images are never expired
 * by rule: ECR's lifecycle rules count images or their age and know nothing of the task definitions
 * that still name a tag (https://docs.aws.amazon.com/AmazonECR/latest/userguide/lifecycle_policy_parameters.html),
 * so a rule keeping the newest N tags deleted the image of an environment deployed a few Ferry
 * versions ago, and its next task on a new host failed to pull (docs/aws.md "Images").
 */
export const untaggedImageDays = 1;

/** The pre_build line that logs docker in to ECR Public (us-east-1 only), and goes on where it cannot. */
export const ecrPublicLogin =
  'aws ecr-public get-login-password --region us-east-1 | docker login --username AWS --password-stdin public.ecr.aws || true';

export interface ImageRegistryProps {
  bucket: s3.IBucket;
}

export class ImageRegistry extends Construct {
  readonly repositories: ReadonlyMap<string, ecr.Repository>;
  readonly buildProject: codebuild.Project;
  /** `<account>.dkr.ecr.<region>.<suffix>`: what image names are prefixed with. */
  readonly registry: string;

  constructor(scope: Construct, id: string, props: ImageRegistryProps) {
    super(scope, id);
    const repositories = new Map<string, ecr.Repository>();
    for (const image of workerImages) {
      const repository = new ecr.Repository(this, `Repo-${image.kind}`, {
        repositoryName: image.repository,
        imageTagMutability: ecr.TagMutability.IMMUTABLE,
        encryption: ecr.RepositoryEncryption.AES_256,
        removalPolicy: keptWhenStackDeleted,
        lifecycleRules: [
          {
            description: `Expire untagged images after ${untaggedImageDays} day`,
            tagStatus: ecr.TagStatus.UNTAGGED,
            maxImageAge: Duration.days(untaggedImageDays),
          },
        ],
      });
      repositories.set(image.kind, repository);
    }
    this.repositories = repositories;
    this.registry = `${Aws.ACCOUNT_ID}.dkr.ecr.${Aws.REGION}.${Aws.URL_SUFFIX}`;

    const logGroup = new logs.LogGroup(this, 'BuildLogs', {
      retention: logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.buildProject = new codebuild.Project(this, 'ImageBuild', {
      description:
        'Ferry: builds the worker and agent images from an uploaded context and pushes them to ECR',
      environment: {
        buildImage: codebuild.LinuxBuildImage.STANDARD_7_0,
        // Docker builds need privileged mode; the torch and CUDA layers need the large shape's disk.
        privileged: true,
        computeType: codebuild.ComputeType.LARGE,
      },
      timeout: Duration.hours(2),
      queuedTimeout: Duration.minutes(imageBuildQueuedMinutes),
      logging: { cloudWatch: { logGroup } },
      environmentVariables: {
        FERRY_BUCKET: { value: props.bucket.bucketName },
        FERRY_REGISTRY: { value: this.registry },
        // Set per build by `ferry deploy` (StartBuild environmentVariablesOverride).
        FERRY_CONTEXT_KEY: { value: '' },
      },
      buildSpec: codebuild.BuildSpec.fromObject({
        version: '0.2',
        phases: {
          pre_build: {
            commands: [
              'test -n "$FERRY_CONTEXT_KEY"',
              'aws s3 cp "s3://$FERRY_BUCKET/$FERRY_CONTEXT_KEY" context.tar.gz',
              'mkdir context && tar -xzf context.tar.gz -C context',
              'aws ecr get-login-password --region "$AWS_REGION" | docker login --username AWS --password-stdin "$FERRY_REGISTRY"',
              // ECR Public, authenticated: its anonymous pulls are limited per IP, shared by every
              // build on the host. "When authenticating to a public registry, always authenticate to
              // the us-east-1 Region" (https://docs.aws.amazon.com/AmazonECR/latest/public/public-registry-auth.html).
              // `|| true`: where it cannot (ECR Public "is not available in China Regions":
              // https://docs.amazonaws.cn/en_us/aws/latest/userguide/ecr-public.html; GovCloud), the
              // pulls stay anonymous, as before.
              ecrPublicLogin,
            ],
          },
          // The script is generated from worker-image/images.ts: build, tag, push per missing image.
          build: { commands: ['cd context && sh ferry-build-images.sh "$FERRY_REGISTRY"'] },
        },
      }),
    });
    const role = this.buildProject.role as iam.Role;
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['s3:GetObject'],
        resources: [props.bucket.arnForObjects(`${imageBuildPrefix}*`)],
      }),
    );
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: [
          'ecr:BatchCheckLayerAvailability',
          'ecr:BatchGetImage',
          'ecr:GetDownloadUrlForLayer',
          'ecr:InitiateLayerUpload',
          'ecr:UploadLayerPart',
          'ecr:CompleteLayerUpload',
          'ecr:PutImage',
          // The build script skips a tag another build pushed meanwhile (cli/providers/aws-images.ts buildScript).
          'ecr:DescribeImages',
        ],
        resources: [...repositories.values()].map((r) => r.repositoryArn),
      }),
    );
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({ actions: ['ecr:GetAuthorizationToken'], resources: ['*'] }),
    );
    // `aws ecr-public get-login-password` "requires the 'ecr-public:GetAuthorizationToken' and
    // 'sts:GetServiceBearerToken' permissions"
    // (https://docs.aws.amazon.com/cli/latest/reference/ecr-public/get-login-password.html); neither
    // has a resource to scope to.
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['ecr-public:GetAuthorizationToken', 'sts:GetServiceBearerToken'],
        resources: ['*'],
      }),
    );
    const bucketId = Stack.of(this).getLogicalId(props.bucket.node.defaultChild as never);
    const projectId = Stack.of(this).getLogicalId(this.buildProject.node.defaultChild as never);
    Validations.of(role).acknowledge(
      {
        id: 'AwsSolutions-IAM5[Resource::*]',
        reason:
          'ecr:GetAuthorizationToken, ecr-public:GetAuthorizationToken and sts:GetServiceBearerToken have no resource-level scoping (docker login to ECR and ECR Public); pushes and lookups are limited to the Ferry repositories.',
      },
      {
        id: `AwsSolutions-IAM5[Resource::<${bucketId}.Arn>/${imageBuildPrefix}*]`,
        reason: 'Build contexts have one key per build under image-builds/; the read stops at that prefix.',
      },
      {
        id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:/aws/codebuild/<${projectId}>:*]`,
        reason: 'CodeBuild default log stream grant (per-build stream names are not known in advance).',
      },
      {
        id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:codebuild:<AWS::Region>:<AWS::AccountId>:report-group/<${projectId}>-*]`,
        reason: 'CodeBuild default report-group grant, scoped to this project.',
      },
    );
    Validations.of(this.buildProject).acknowledge(
      {
        id: 'AwsSolutions-CB3',
        reason: 'Privileged mode is what docker builds need; the project only runs the buildspec above.',
      },
      {
        id: 'AwsSolutions-CB4',
        reason:
          'Artifacts are ECR images (AES-256 at rest); the project produces no S3 artifacts to encrypt.',
      },
    );
  }
}
