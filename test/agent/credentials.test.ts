/**
 * The agent assumes its endpoint's role with the external id only it and the init container hold
 * (worker-image/agent/credentials.ts). STS here is a local HTTP server that records the AssumeRole
 * call and answers it the way STS does (query protocol, XML), so the test sees the exact request.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { writeTaskSecret } from '../../worker-image/agent/artifact.js';
import { agentCredentials, agentSessionSec } from '../../worker-image/agent/credentials.js';

const assumeRoleResponse = `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleResult>
    <Credentials>
      <AccessKeyId>ASIAAGENTROLE</AccessKeyId>
      <SecretAccessKey>agent-secret</SecretAccessKey>
      <SessionToken>agent-session</SessionToken>
      <Expiration>2099-01-01T00:00:00Z</Expiration>
    </Credentials>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/agent/ferry-agent-ep1</Arn>
      <AssumedRoleId>AROAEXAMPLE:ferry-agent-ep1</AssumedRoleId>
    </AssumedRoleUser>
  </AssumeRoleResult>
  <ResponseMetadata><RequestId>00000000-0000-0000-0000-000000000000</RequestId></ResponseMetadata>
</AssumeRoleResponse>`;

let server: Server;
let endpoint: string;
const bodies: URLSearchParams[] = [];

beforeEach(async () => {
  bodies.length = 0;
  // The task role's credentials, as the SDK's default chain would find them in the container.
  vi.stubEnv('AWS_ACCESS_KEY_ID', 'ASIATASKROLE');
  vi.stubEnv('AWS_SECRET_ACCESS_KEY', 'task-secret');
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      bodies.push(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
      res.writeHead(200, { 'content-type': 'text/xml' }).end(assumeRoleResponse);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterEach(async () => {
  vi.unstubAllEnvs();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe('agentCredentials', () => {
  it('assumes the agent role with the external id and returns that session', async () => {
    const provider = await agentCredentials(
      {
        AWS_REGION: 'us-east-1',
        FERRY_ENDPOINT_ID: 'abcdefghij0123',
        FERRY_AGENT_ROLE_ARN: 'arn:aws:iam::123456789012:role/agent',
        FERRY_AGENT_EXTERNAL_ID: 'only-the-agent-knows-this',
      },
      { stsEndpoint: endpoint },
    );
    expect(provider).toBeDefined();
    const credentials = await provider!();
    expect(credentials).toMatchObject({
      accessKeyId: 'ASIAAGENTROLE',
      secretAccessKey: 'agent-secret',
      sessionToken: 'agent-session',
    });
    expect(bodies).toHaveLength(1);
    const call = bodies[0]!;
    expect(call.get('Action')).toBe('AssumeRole');
    expect(call.get('RoleArn')).toBe('arn:aws:iam::123456789012:role/agent');
    expect(call.get('ExternalId')).toBe('only-the-agent-knows-this');
    expect(call.get('RoleSessionName')).toBe('ferry-agent-abcdefghij0123');
    expect(call.get('DurationSeconds')).toBe(String(agentSessionSec));
  });

  it('on ECS reads the external id from the file the init container wrote to the agent volume', async () => {
    // What the init container does with its ECS secret (worker-image/agent/main.ts runArtifact):
    // no container the worker links to holds the id in its environment (infra/task-layout.ts agentMount).
    const file = join(mkdtempSync(join(tmpdir(), 'ferry-agent-volume-')), 'external-id');
    await writeTaskSecret(file, 'written-by-the-init-container');
    const provider = await agentCredentials(
      {
        AWS_REGION: 'us-east-1',
        FERRY_ENDPOINT_ID: 'ep1',
        FERRY_AGENT_ROLE_ARN: 'arn:aws:iam::123456789012:role/agent',
        FERRY_AGENT_EXTERNAL_ID_FILE: file,
      },
      { stsEndpoint: endpoint },
    );
    await provider!();
    expect(bodies.map((b) => b.get('ExternalId'))).toEqual(['written-by-the-init-container']);
    rmSync(dirname(file), { recursive: true, force: true });
  });

  it('refuses to start without that file, naming it', async () => {
    const env = {
      AWS_REGION: 'us-east-1',
      FERRY_ENDPOINT_ID: 'ep1',
      FERRY_AGENT_ROLE_ARN: 'arn:aws:iam::123456789012:role/agent',
      FERRY_AGENT_EXTERNAL_ID_FILE: join(tmpdir(), 'ferry-no-such-volume', 'external-id'),
    };
    await expect(agentCredentials(env)).rejects.toThrow(/FERRY_AGENT_EXTERNAL_ID_FILE .* cannot be read/);
  });

  it('leaves the default chain alone when no role is configured (tests, local runs)', async () => {
    expect(await agentCredentials({ AWS_REGION: 'us-east-1', FERRY_ENDPOINT_ID: 'ep' })).toBeUndefined();
    expect(bodies).toHaveLength(0);
  });
});
