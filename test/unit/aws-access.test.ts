/**
 * The hint for an AWS call that failed for the machine's or the account's reason (cli/providers/aws/access.ts),
 * on errors a real AWS SDK client throws: a call that never reached AWS is not a credentials problem.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import { describe, expect, it } from 'vitest';
import { awsAccessHint, credentialsHint, isAwsSdkError } from '../../cli/providers/aws/access.js';
import { closedPort } from '../support/closed-port.js';

async function sdkErrorFrom(endpoint: string): Promise<unknown> {
  const client = new CloudFormationClient({
    region: 'us-east-1',
    endpoint,
    credentials: { accessKeyId: 'AKIAEXAMPLE', secretAccessKey: 'example' },
    maxAttempts: 1,
  });
  try {
    await client.send(new DescribeStacksCommand({}));
    throw new Error('the call was expected to fail');
  } catch (error) {
    return error;
  } finally {
    client.destroy();
  }
}

describe('awsAccessHint', () => {
  it('says the network, not credentials, for a call refused before it reached AWS', async () => {
    const error = await sdkErrorFrom(`http://127.0.0.1:${await closedPort()}`);
    expect(isAwsSdkError(error)).toBe(true);
    const hint = awsAccessHint(error);
    expect(hint).toContain('AWS did not answer');
    expect(hint).toContain('HTTPS_PROXY');
    expect(hint).not.toBe(credentialsHint);
  });

  it('says the network for a name that does not resolve, also behind terminal colours', () => {
    const dns = Object.assign(new Error('getaddrinfo ENOTFOUND cloudformation.us-east-1.amazonaws.com'), {
      code: 'ENOTFOUND',
    });
    expect(awsAccessHint(dns)).toContain('AWS did not answer');
    const coloured = new Error(`${String.fromCharCode(27)}[31mENOTFOUND${String.fromCharCode(27)}[39m`);
    expect(awsAccessHint(coloured)).toContain('AWS did not answer');
  });

  it('says credentials for the refusal AWS answers a key it does not know with', async () => {
    // What AWS answers a query-protocol call (CloudFormation, IAM, STS) signed with an unknown key:
    // the code is only in the error's name; the message does not say "credentials".
    const server = createServer((_, res) => {
      res.writeHead(403, { 'content-type': 'text/xml' });
      res.end(
        '<ErrorResponse><Error><Type>Sender</Type><Code>InvalidClientTokenId</Code>' +
          '<Message>The security token included in the request is invalid.</Message></Error>' +
          '<RequestId>example</RequestId></ErrorResponse>',
      );
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const error = await sdkErrorFrom(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
      expect((error as Error).name).toBe('InvalidClientTokenId');
      expect((error as Error).message).not.toMatch(/credential/i);
      expect(awsAccessHint(error)).toBe(credentialsHint);
    } finally {
      server.close();
    }
  });

  it('says credentials for credentials AWS refused, and nothing for other failures', () => {
    expect(
      awsAccessHint(new Error('The security token included in the request is expired (ExpiredToken)')),
    ).toBe(credentialsHint);
    expect(awsAccessHint(new Error('Could not load credentials from any providers'))).toBe(credentialsHint);
    expect(
      awsAccessHint(new Error('Stack FerryPlatform is in UPDATE_ROLLBACK_FAILED state')),
    ).toBeUndefined();
    expect(isAwsSdkError(new Error('plain'))).toBe(false);
  });
});
