import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { documentClient } from '../../../core/adapters/aws/dynamo.js';
import { s3ClientConfig } from '../../../core/adapters/aws/s3.js';
import { usage } from '../../../core/errors.js';

export interface AwsClients {
  doc: DynamoDBDocumentClient;
  s3: S3Client;
  close(): void;
}

/** Region and credentials from the usual AWS chain; endpoints only for emulators (test hooks). */
export function awsClientsFromEnv(env: NodeJS.ProcessEnv): AwsClients {
  const dynamo = new DynamoDBClient(
    env.FERRY_DYNAMODB_ENDPOINT ? { endpoint: env.FERRY_DYNAMODB_ENDPOINT } : {},
  );
  const doc = documentClient(dynamo);
  const s3 = new S3Client({
    ...s3ClientConfig,
    ...(env.FERRY_S3_ENDPOINT ? { endpoint: env.FERRY_S3_ENDPOINT, forcePathStyle: true } : {}),
  });
  return {
    doc,
    s3,
    close: () => {
      doc.destroy();
      dynamo.destroy();
      s3.destroy();
    },
  };
}

/**
 * The region and credentials every client will use, resolved through the SDK's default chains before
 * a command builds or calls anything. "The SDK for JavaScript doesn't select a Region by default"
 * (https://docs.aws.amazon.com/sdk-for-javascript/v3/developer-guide/setting-region.html), and the
 * credential chain ends in an error when no source has any
 * (https://docs.aws.amazon.com/sdk-for-javascript/v3/developer-guide/setting-credentials-node.html);
 * unchecked, either surfaced minutes later inside a deploy step as "Region is missing" or "Could not
 * load credentials from any providers", under a hint about something else.
 */
export async function checkAwsConfiguration(config: {
  region: () => Promise<string>;
  credentials: () => Promise<unknown>;
}): Promise<{ region: string }> {
  let region: string;
  try {
    region = await config.region();
  } catch (error) {
    // The SDK refuses a region that cannot be part of a host name ("us east") with the value quoted;
    // that is a typo to point at, not a missing setting.
    const given = /region="([^"]+)"/.exec((error as Error)?.message ?? '')?.[1];
    if (given)
      throw usage(
        `The AWS region "${given}" is not a region name`,
        "Regions look like us-east-1 or eu-west-1: fix AWS_REGION (or AWS_DEFAULT_REGION, or the profile's region in ~/.aws/config), then run the command again.",
      );
    throw usage(
      'No AWS region is configured',
      'Set one for this shell (export AWS_REGION=us-east-1) or in ~/.aws/config (`aws configure`), then run the command again.',
    );
  }
  try {
    await config.credentials();
  } catch (error) {
    throw usage(
      `No usable AWS credentials: ${(error as Error).message}`,
      'Run `aws configure` (access keys) or `aws sso login` (IAM Identity Center; set AWS_PROFILE to its profile), then run the command again.',
    );
  }
  return { region };
}
