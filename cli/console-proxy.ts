/**
 * `ferry console --provider aws`: the web console on localhost, in front of the platform's API in the
 * user's AWS account. The console's files are served here; its /manage/v1 and /v2 calls go to the
 * deployed API Gateway as they are (the user's API key in Authorization, nothing added), so the
 * browser never needs the API to allow another origin. The AWS credentials only find the API
 * (CloudFormation outputs); the key decides what the console may read.
 */
import Fastify from 'fastify';
import { registerConsole } from '../core/adapters/local/console.js';
import { houseClientErrors, noRoute } from '../core/adapters/local/http.js';
import { limits } from '../core/limits.js';

export interface ConsoleProxy {
  url: string;
  close(): Promise<void>;
}

/** Headers passed through each way; hop-by-hop and host headers never are. */
const requestHeaders = ['authorization', 'content-type', 'accept'];

export async function startConsoleProxy(options: {
  /** The API's origin, e.g. `https://abc.execute-api.eu-west-1.amazonaws.com/prod`. */
  origin: string;
  consoleDir: string;
  host: string;
  port: number;
}): Promise<ConsoleProxy> {
  const app = Fastify({
    logger: false,
    bodyLimit: limits.runsyncBodyBytes + 1024 * 1024,
    forceCloseConnections: true,
    // The console reads `{"error"}` from every answer, the API's shape: also what never reaches a route.
    ...houseClientErrors,
  });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  registerConsole(app, options.consoleDir);
  const forward = async (
    request: import('fastify').FastifyRequest,
    reply: import('fastify').FastifyReply,
  ) => {
    const headers: Record<string, string> = {};
    for (const name of requestHeaders) {
      const value = request.headers[name];
      if (typeof value === 'string') headers[name] = value;
    }
    try {
      const response = await fetch(`${options.origin}${request.url}`, {
        method: request.method,
        headers,
        ...(Buffer.isBuffer(request.body) && request.method !== 'GET' ? { body: request.body } : {}),
      });
      const body = Buffer.from(await response.arrayBuffer());
      reply.code(response.status).type(response.headers.get('content-type') ?? 'application/json');
      return reply.send(body);
    } catch (error) {
      return reply
        .code(502)
        .send({ error: `The API at ${options.origin} did not answer: ${(error as Error).message}` });
    }
  };
  const methods = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'] as (
    | 'GET'
    | 'POST'
    | 'PUT'
    | 'DELETE'
    | 'PATCH'
  )[];
  app.route({ method: methods, url: '/manage/v1/*', handler: forward });
  app.route({ method: methods, url: '/v2/*', handler: forward });
  app.get('/', async (_request, reply) => reply.redirect('/console'));
  app.setNotFoundHandler(noRoute);
  // What Fastify refuses itself (a body over bodyLimit, a bad Content-Length) keeps its 4xx in our
  // shape; anything else is this proxy's failure.
  app.setErrorHandler((error: { statusCode?: number; message: string }, _request, reply) => {
    const client = error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500;
    return reply.code(client ? error.statusCode! : 500).send({ error: error.message });
  });
  await app.listen({ host: options.host, port: options.port });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  return {
    url: `http://${options.host.includes(':') ? `[${options.host}]` : options.host}:${port}`,
    close: () => app.close(),
  };
}
