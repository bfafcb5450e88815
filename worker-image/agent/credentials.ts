/**
 * The agent's AWS credentials, kept from the worker container (docs/security-aws.md).
 *
 * ECS hands the task role to every container of a task: each one gets
 * AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and may fetch the role's credentials from 169.254.170.2
 * (https://docs.aws.amazon.com/AmazonECS/latest/bestpracticesguide/security-iam-roles.html). The
 * worker container runs user code, so the task role holds nothing of the platform. The agent's
 * permissions live in a second role whose trust policy demands an external id; that id reaches the
 * agent container alone, as an ECS container secret (`secrets` are per container:
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/secrets-envvar-secrets-manager.html).
 * The agent calls sts:AssumeRole with the task role's credentials and that id; the worker, holding
 * the same task-role credentials but not the id, is refused by STS.
 *
 * Role chaining caps a session at one hour
 * (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_use.html); the SDK's provider renews
 * the session before it expires.
 */
import { fromTemporaryCredentials } from '@aws-sdk/credential-providers';

type CredentialProvider = ReturnType<typeof fromTemporaryCredentials>;

export interface AgentRoleEnv {
  AWS_REGION: string;
  FERRY_ENDPOINT_ID: string;
  /** The endpoint's agent role (the stack sets it; absent outside ECS: default credentials). */
  FERRY_AGENT_ROLE_ARN?: string | undefined;
  /** The role's sts:ExternalId, injected into the agent container only as an ECS secret. */
  FERRY_AGENT_EXTERNAL_ID?: string | undefined;
}

/** One hour: the most a chained role session may last. */
export const agentSessionSec = 3600;

/**
 * Credentials of the agent role, or undefined (the SDK's default chain) when the environment names
 * none. `stsEndpoint` is for tests.
 */
export function agentCredentials(
  env: AgentRoleEnv,
  options: { stsEndpoint?: string } = {},
): CredentialProvider | undefined {
  if (!env.FERRY_AGENT_ROLE_ARN) return undefined;
  return fromTemporaryCredentials({
    params: {
      RoleArn: env.FERRY_AGENT_ROLE_ARN,
      ...(env.FERRY_AGENT_EXTERNAL_ID ? { ExternalId: env.FERRY_AGENT_EXTERNAL_ID } : {}),
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
