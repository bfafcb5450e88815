/**
 * The agent's AWS credentials, kept from the worker container (docs/security-aws.md).
 *
 * ECS hands the task role to every container of a task: each one gets
 * AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and may fetch the role's credentials from 169.254.170.2
 * (https://docs.aws.amazon.com/AmazonECS/latest/bestpracticesguide/security-iam-roles.html). The
 * worker container runs user code, so the task role holds nothing of the platform. The agent's
 * permissions live in a second role whose trust policy demands an external id; that id reaches the
 * task's init container alone, as an ECS container secret (`secrets` are per container:
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html),
 * which writes it to a volume only the agent mounts besides (infra/task-layout.ts agentMount: a
 * secret of the agent container would reach the worker, which links to it).
 * The agent calls sts:AssumeRole with the task role's credentials and that id; the worker, holding
 * the same task-role credentials but not the id, is refused by STS.
 *
 * Role chaining caps a session at one hour
 * (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_use.html); the SDK's provider renews
 * the session before it expires.
 */
import { fromTemporaryCredentials } from '@aws-sdk/credential-providers';
import { readTaskSecret } from './artifact.js';

type CredentialProvider = ReturnType<typeof fromTemporaryCredentials>;

export interface AgentRoleEnv {
  AWS_REGION: string;
  FERRY_ENDPOINT_ID: string;
  /** The endpoint's agent role (the stack sets it; absent outside ECS: default credentials). */
  FERRY_AGENT_ROLE_ARN?: string | undefined;
  /** The role's sts:ExternalId, where the environment may hold it (outside ECS). */
  FERRY_AGENT_EXTERNAL_ID?: string | undefined;
  /** On ECS: the file the init container wrote it to (infra/task-layout.ts agentMount). */
  FERRY_AGENT_EXTERNAL_ID_FILE?: string | undefined;
}

/** One hour: the most a chained role session may last. */
export const agentSessionSec = 3600;

/**
 * Credentials of the agent role, or undefined (the SDK's default chain) when the environment names
 * none. `stsEndpoint` is for tests.
 */
export async function agentCredentials(
  env: AgentRoleEnv,
  options: { stsEndpoint?: string } = {},
): Promise<CredentialProvider | undefined> {
  if (!env.FERRY_AGENT_ROLE_ARN) return undefined;
  const externalId = env.FERRY_AGENT_EXTERNAL_ID_FILE
    ? await readTaskSecret(env.FERRY_AGENT_EXTERNAL_ID_FILE, 'FERRY_AGENT_EXTERNAL_ID_FILE')
    : env.FERRY_AGENT_EXTERNAL_ID;
  return fromTemporaryCredentials({
    params: {
      RoleArn: env.FERRY_AGENT_ROLE_ARN,
      ...(externalId ? { ExternalId: externalId } : {}),
      // CloudTrail names the endpoint whose agent acted.
      RoleSessionName: `ferry-agent-${env.FERRY_ENDPOINT_ID}`.slice(0, 64),
      DurationSeconds: agentSessionSec,
    },
    clientConfig: {
      region: env.AWS_REGION,
      ...(options.stsEndpoint ? { endpoint: options.stsEndpoint } : {}),
    },
  });
}
