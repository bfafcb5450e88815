/**
 * Endpoints by name: `/v2/by-name/<app>/<env>/<endpoint>/…` (docs/python.md, "Remote calls"). Scripts
 * and workers call `@Endpoint` functions without knowing the random endpoint id; the platform
 * resolves the id from its records. One owner for the rule, used by the v2 API and the LB front door.
 *
 * Caller credentials: a client API key, within its scope (core/auth.ts scopeCovers). A local worker
 * gets a *call token* (FERRY_CALL_TOKEN), an HMAC of its worker id under a platform secret, which the
 * authenticator treats as a client key scoped to its endpoint's app and environment for as long as
 * the supervisor (core/supervisor.ts) counts that worker as live, narrowed to submitting and to the
 * jobs its endpoint submitted (KeyScope.callFrom, core/api.ts CallTokenRule). On AWS workers get call keys
 * instead (core/call-keys.ts).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { livePrefix } from './deployment.js';
import { badRequest, notFound } from './errors.js';
import type { EndpointDirectory, EndpointRecord } from './ports.js';

/** `<env>` given as this means "the app's only environment that has the endpoint". */
export const anyEnv = '-';
export const byNameSegment = 'by-name';

const callTokenPrefix = 'fyc_';

const callMac = (secret: string, workerId: string) =>
  createHmac('sha256', secret).update(`call:${workerId}`, 'utf8').digest('base64url');

/** The call token handed to the worker `workerId` (an id the supervisor issued). */
export function callTokenFor(secret: string, workerId: string): string {
  return `${callTokenPrefix}${Buffer.from(workerId, 'utf8').toString('base64url')}.${callMac(secret, workerId)}`;
}

/**
 * The worker id a call token was issued to, or undefined when it is not a valid call token. Whether
 * that worker is still live is the supervisor's to say (core/auth.ts).
 */
export function callerOfToken(secret: string | undefined, key: string | undefined): string | undefined {
  if (!secret || !key?.startsWith(callTokenPrefix)) return undefined;
  const [encoded, mac] = key.slice(callTokenPrefix.length).split('.', 2);
  if (!encoded || !mac) return undefined;
  const workerId = Buffer.from(encoded, 'base64url').toString('utf8');
  const expected = Buffer.from(callMac(secret, workerId));
  const given = Buffer.from(mac);
  return expected.length === given.length && timingSafeEqual(expected, given) ? workerId : undefined;
}

/**
 * The record named `name` in `app`/`env`. Under `ferry dev` endpoints are recorded as `live-<name>`:
 * the bare name finds them too, so code calls its functions the same way in dev and deployed.
 */
export async function resolveByName(
  control: EndpointDirectory,
  app: string,
  env: string,
  name: string,
): Promise<EndpointRecord> {
  const records = await control.listEndpoints(env === anyEnv ? { app } : { app, env });
  const matches = (r: EndpointRecord) => r.name === name || r.name === `${livePrefix}${name}`;
  const found = records.filter(matches);
  if (found.length === 0) {
    const where = env === anyEnv ? `app '${app}'` : `app '${app}', environment '${env}'`;
    throw notFound(
      `Endpoint '${name}' is not deployed in ${where}: deploy it first (ferry deploy), or run ferry dev`,
    );
  }
  const envs = [...new Set(found.map((r) => r.env))].sort();
  if (envs.length > 1) {
    // The API's answer is the message alone ({"error"}), and a Python call is what reaches this
    // route most: the message itself says how to name the environment there and in the URL.
    throw badRequest(
      `Endpoint '${name}' of app '${app}' is deployed in several environments (${envs.join(', ')}): ` +
        `name one (FERRY_ENV=${envs[0]} for a Python call; /v2/by-name/${app}/${envs[0]}/${name} in a URL)`,
    );
  }
  // Deployed beats live when both exist in one environment (a `ferry deploy --env dev` next to dev).
  return found.find((r) => r.name === name) ?? found[0]!;
}
