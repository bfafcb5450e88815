/**
 * Call keys: how the workers of a deployed endpoint call the other endpoints of their app and
 * environment (docs/security-aws.md, "Call keys"). On the AWS provider each endpoint's workers hold a
 * client API key scoped to the endpoint's app and environment, minted by `ferry deploy`, recorded
 * hashed in the control table like any other key (so the REST authorizer, the API and the
 * load-balanced agent check it with the one scope rule, core/auth.ts scopeCovers), and handed to the
 * worker container as the ECS secret FERRY_CALL_TOKEN, which the Python client reads first. Its
 * record's endpointId makes it a call token to the API (KeyScope.callFrom): it submits and follows
 * the jobs it submitted, nothing more (core/api.ts CallTokenRule).
 *
 * Lifecycle: a deploy that creates an endpoint mints a key, and one that changes it a new key when
 * its key is 10 minutes old or more (callKeyRotationMinAgeMs says why), retiring the older ones once
 * the stack is deployed (the old tasks are gone by then); undeploy deletes them and the secret.
 * The local provider uses HMAC call tokens instead (core/names.ts): it has no secret store to hand
 * them out with.
 */
import { randomBytes } from 'node:crypto';
import { hashKey, newSecret } from './auth.js';
import type { ApiKeyRecord, ControlStore, EndpointRecord } from './ports.js';

/** Where a call key's value lives until ECS hands it to the worker container (Secrets Manager). */
export interface CallTokenSecrets {
  put(name: string, value: string): Promise<void>;
  /** Whether a task starting now could read the secret (it exists and is not being deleted). */
  exists(name: string): Promise<boolean>;
  /** Deletes at once (no recovery window): a redeploy must be able to reuse the name. Missing is fine. */
  delete(name: string): Promise<void>;
}

/** The worker container's variable; the Python client's first choice (ferry/client.py). */
export const callTokenVariable = 'FERRY_CALL_TOKEN';

type EndpointNames = Pick<EndpointRecord, 'app' | 'env' | 'name'>;

/**
 * The Secrets Manager name of an endpoint's call key, `ferry-call/<app>/<env>/<name>/key`. Outside
 * `ferry/<app>/<env>/` (user secrets, core/adapters/aws/secrets.ts) so `ferry secrets list` does not
 * show it and no user secret can shadow it. infra/ reads the same function.
 *
 * The fixed last segment: the task definition names the secret by a partial ARN (infra/isolation.ts
 * callKeySecret), and Secrets Manager takes a partial ARN that ends in `-` and six characters for a
 * complete one with its random suffix, so an endpoint called `gpu-worker` or `img-resize` could
 * never start a task (https://docs.aws.amazon.com/secretsmanager/latest/userguide/troubleshoot.html#ARN_secretnamehyphen,
 * and CreateSecret's Name: https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_CreateSecret.html).
 * `/key` cannot end that way, whatever the endpoint's name.
 */
export const callTokenSecretName = (endpoint: EndpointNames): string =>
  `ferry-call/${endpoint.app}/${endpoint.env}/${endpoint.name}/key`;

/**
 * Where deploys of earlier Ferry versions kept the key (the name without `/key`). Nothing reads it
 * once the stack's tasks use the new name: a deploy deletes it when its stack is deployed, and
 * undeploy deletes it with the current one. By friendly name, which Secrets Manager never misreads
 * (only partial ARNs are ambiguous).
 */
export const legacyCallTokenSecretName = (endpoint: EndpointNames): string =>
  `ferry-call/${endpoint.app}/${endpoint.env}/${endpoint.name}`;

/** The call keys of one endpoint's workers among `keys`, oldest first. */
const callKeysIn = (keys: readonly ApiKeyRecord[], endpointId: string): ApiKeyRecord[] =>
  keys.filter((key) => key.endpointId === endpointId).sort((a, b) => a.createdAt - b.createdAt);

/** The call keys of one endpoint's workers, oldest first. */
export async function callKeysOf(
  control: Pick<ControlStore, 'listApiKeys'>,
  endpointId: string,
): Promise<ApiKeyRecord[]> {
  return callKeysIn(await control.listApiKeys(), endpointId);
}

/**
 * A new call key for `endpoint`: recorded first, then stored where its workers get it, so no worker
 * can ever hold a value the authorizer does not know.
 */
export async function issueCallKey(
  deps: { control: Pick<ControlStore, 'putApiKey'>; secrets: CallTokenSecrets; nowMs: () => number },
  endpoint: EndpointRecord,
): Promise<ApiKeyRecord> {
  const key = newSecret('fy');
  const record: ApiKeyRecord = {
    id: `call-${randomBytes(4).toString('hex')}`,
    name: `workers of ${endpoint.app}/${endpoint.env}/${endpoint.name}`,
    hash: hashKey(key),
    createdAt: deps.nowMs(),
    app: endpoint.app,
    env: endpoint.env,
    endpointId: endpoint.id,
  };
  await deps.control.putApiKey(record);
  await deps.secrets.put(callTokenSecretName(endpoint), key);
  return record;
}

/**
 * The youngest key a changed endpoint's deploy replaces. What a key grants never changes with a
 * deploy (its scope is the endpoint's app and environment, core/auth.ts scopeCovers), so a new one on
 * a change is hygiene only: a key the old code may have leaked dies with it. Each new key is a new
 * version of the endpoint's secret, and Secrets Manager keeps up with one every 10 minutes, no more:
 * "Secrets Manager removes unlabeled versions when there are more than 100, but it does not remove
 * versions created less than 24 hours ago. If you update the secret value more than once every 10
 * minutes, you create more versions than Secrets Manager removes, and you will reach the quota for
 * secret versions" (https://docs.aws.amazon.com/secretsmanager/latest/userguide/reference_limits.html).
 * A CI pipeline deploying every few minutes would reach it and every deploy would then fail, so a
 * changed endpoint whose key is younger keeps it; the next change after that replaces it.
 */
export const callKeyRotationMinAgeMs = 10 * 60_000;

/**
 * The call key each endpoint's tasks will run with, by endpoint name: a new one for the endpoints in
 * `rotate` whose key is at least `callKeyRotationMinAgeMs` old, for any without one, and for any
 * whose secret is missing (deployed by a Ferry that named it otherwise, or deleted by hand: the key's
 * value is known only to that secret, so it cannot be written again), else the newest recorded. The
 * key id goes into the worker's task definition (FERRY_CALL_KEY_ID), so a new key rolls the tasks
 * that hold the old one.
 */
export async function prepareCallKeys(
  deps: {
    control: Pick<ControlStore, 'putApiKey' | 'listApiKeys'>;
    secrets: CallTokenSecrets;
    nowMs: () => number;
  },
  endpoints: readonly EndpointRecord[],
  rotate: ReadonlySet<string>,
): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const keys = await deps.control.listApiKeys();
  for (const endpoint of endpoints) {
    const current = callKeysIn(keys, endpoint.id).at(-1);
    const keep =
      current !== undefined &&
      (!rotate.has(endpoint.id) || deps.nowMs() - current.createdAt < callKeyRotationMinAgeMs) &&
      (await deps.secrets.exists(callTokenSecretName(endpoint)));
    out[endpoint.name] = keep ? current.id : (await issueCallKey(deps, endpoint)).id;
  }
  return out;
}

/** After a deploy: every call key of `endpointId` but `keepId` stops working. */
export async function retireCallKeys(
  control: Pick<ControlStore, 'listApiKeys' | 'deleteApiKey'>,
  endpointId: string,
  keepId: string,
): Promise<void> {
  for (const key of await callKeysOf(control, endpointId)) {
    if (key.id !== keepId) await control.deleteApiKey(key.id);
  }
}

/**
 * After a deploy: the secret an earlier Ferry version kept the endpoint's key in is gone. The stack's
 * tasks read callTokenSecretName now, and the key that secret held was retired with the others.
 */
export async function deleteLegacyCallTokenSecret(
  secrets: CallTokenSecrets,
  endpoint: EndpointNames,
): Promise<void> {
  await secrets.delete(legacyCallTokenSecretName(endpoint));
}

/** After an undeploy: the endpoint's call keys and their secret (under either name) are gone. */
export async function revokeCallKeys(
  deps: { control: Pick<ControlStore, 'listApiKeys' | 'deleteApiKey'>; secrets: CallTokenSecrets },
  endpoint: EndpointRecord,
): Promise<void> {
  for (const key of await callKeysOf(deps.control, endpoint.id)) await deps.control.deleteApiKey(key.id);
  await deps.secrets.delete(callTokenSecretName(endpoint));
  await deleteLegacyCallTokenSecret(deps.secrets, endpoint);
}
