import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { documentClient } from '../../../core/adapters/aws/dynamo.js';
import { s3ClientConfig } from '../../../core/adapters/aws/s3.js';

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
