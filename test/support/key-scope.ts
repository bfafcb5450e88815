/**
 * What a key scoped to one app must not learn about another app's endpoints and jobs
 * (docs/security.md#api-key-scopes), asked the same way of both front doors (the local server, and
 * the AWS shim in front of the authorizer and the api Lambda).
 */

export interface OtherAppEndpoint {
  id: string;
  app: string;
  env: string;
  name: string;
}

type Request = [method: string, path: string, body?: unknown];

/**
 * Pairs of requests a scoped key must get the same answer to: one names an endpoint (or job) of
 * another app that exists, the other one that does not. Where the two name different things, the
 * answer to `unknown` is compared with `swap` applied (the name asked, which the message repeats).
 */
export function hiddenPairs(
  other: OtherAppEndpoint,
  jobId: string,
): { label: string; existing: Request; unknown: Request; swap?: [string, string] }[] {
  const unknownId = 'nosuchendpoint9';
  const unknownName = 'no-such-name';
  const byId = (id: string) => `/v2/${id}`;
  const byName = (name: string) => `/v2/by-name/${other.app}/${other.env}/${name}`;
  const routes = (base: string): Request[] => [
    ['GET', base],
    ['POST', `${base}/run`, { input: { n: 1 } }],
    ['GET', `${base}/status/${jobId}`],
    ['GET', `${base}/health`],
  ];
  const pairs = (label: string, base: (x: string) => string, known: string, unknown: string) =>
    routes(base(known)).map((existing, i) => ({
      label: `${label}: ${existing[0]} ${existing[1]}`,
      existing,
      unknown: routes(base(unknown))[i]!,
      swap: [unknown, known] as [string, string],
    }));
  return [
    ...pairs('by id', byId, other.id, unknownId),
    ...pairs('by name', byName, other.name, unknownName),
    // A job of an endpoint the key cannot see: whether the job exists is not told either.
    ...[byId(other.id), byName(other.name)].map((base) => ({
      label: `a job that does not exist: ${base}`,
      existing: ['GET', `${base}/status/${jobId}`] as Request,
      unknown: ['GET', `${base}/status/nosuchjob-0000`] as Request,
    })),
  ];
}

/** An answer as the client gets it, status and body bytes, for comparing two of them exactly. */
export async function rawAnswer(
  baseUrl: string,
  key: string,
  [method, path, body]: Request,
): Promise<{ status: number; text: string }> {
  const response = await fetch(`${baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, text: await response.text() };
}
