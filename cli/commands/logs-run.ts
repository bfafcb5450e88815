/** What `ferry logs` runs (cli/commands/logs.ts defines the command): loaded when it runs. */
import { setTimeout as sleep } from 'node:timers/promises';
import { FerryError } from '../../core/errors.js';
import type { EndpointRecord } from '../../core/ports.js';
import { apiKeyFromUser, ferryHome } from '../config.js';
import type { CliContext } from '../context.js';
import { runningDevAbove } from '../dev/lock.js';
import {
  BusyError,
  type EndpointName,
  formatLine,
  ManageClient,
  namedAs,
  resolveEndpoint,
  sinceMs,
} from '../manage-client.js';
import { providerName, withProvider } from '../providers/index.js';

export interface LogsArgs {
  endpoint: string;
  job?: string;
  follow: boolean;
  since?: string;
  json: boolean;
  app?: string;
  env?: string;
  provider?: string;
  'poll-ms': number;
}

export async function logs(ctx: CliContext, args: LogsArgs): Promise<void> {
  // The command line first: a bad --since is the user's to fix whether or not a server is up.
  const since = args.since !== undefined ? sinceMs(args.since, Date.now()) : undefined;
  const print = (client: ManageClient, record: EndpointName) =>
    printLogs({
      client,
      endpoint: record,
      job: args.job,
      sinceMs: since,
      follow: args.follow,
      json: args.json,
      pollMs: args['poll-ms'],
      write: (line) => ctx.io.stdout.write(`${line}\n`),
    }).catch((error: unknown) => {
      // The endpoint was found: a 404 now is the --job id.
      if (args.job !== undefined && FerryError.is(error) && error.code === 'not_found' && !error.hint) {
        throw new FerryError('not_found', error.message, {
          hint: `Give the id that /run returned for a job of ${record.name}; a job's lines are kept as long as its results.`,
        });
      }
      throw error;
    });
  const local = providerName(ctx, args.provider) === 'local';
  // `ferry dev` keeps its platform in the project's .ferry, not in FERRY_HOME: in the folder where it
  // runs, or below it, its endpoints are the ones meant (a name it does not have is looked up in
  // FERRY_HOME's). Its key is the one it runs with: the environment's, else its project's .env.
  const dev = local ? runningDevAbove(ctx.io.cwd) : undefined;
  if (dev?.platformUrl) {
    const key = apiKeyFromUser(ctx.io.env, dev.projectDir);
    if (!key) {
      throw new FerryError(
        'unauthorized',
        `FERRY_API_KEY is not set: \`ferry logs\` needs it to read \`ferry dev\`'s logs`,
        {
          hint: 'Set it (or .env FERRY_API_KEY) to the key that `ferry dev` runs with.',
        },
      );
    }
    const client = new ManageClient(dev.platformUrl, key.key);
    const { endpoints } = await client.endpoints();
    if (endpoints.some((r) => r.id === args.endpoint || namedAs(r, args.endpoint)))
      return print(client, resolveEndpoint(endpoints, args.endpoint, args));
  }
  await withProvider(ctx, args.provider, async (provider) => {
    const url = await provider.serving();
    if (!url) {
      throw new FerryError('failed', 'Nothing serves these endpoints right now', {
        hint: !local
          ? 'Deploy first.'
          : dev
            ? `\`ferry dev\` in ${dev.projectDir} (pid ${dev.pid}) has no endpoint '${args.endpoint}' ${devProvisions}, and no \`ferry serve\` runs for ${ferryHome(ctx.io.env)}.`
            : "Start it with `ferry serve`; for `ferry dev`'s endpoints, run this in the folder where it runs (or below it).",
      });
    }
    const records = await provider.control.listEndpoints();
    // In a `ferry dev` folder the name is most likely one of its functions, not called yet: say so,
    // not only what FERRY_HOME's platform has.
    if (dev?.platformUrl && !records.some((r) => r.id === args.endpoint || namedAs(r, args.endpoint))) {
      throw new FerryError('usage', `No endpoint has the id or name '${args.endpoint}'`, {
        hint: `\`ferry dev\` in ${dev.projectDir} has none ${devProvisions}; the \`ferry serve\` of ${ferryHome(ctx.io.env)} has none either${records.length > 0 ? ` (it has: ${records.map((r) => `${r.name} (${r.id})`).join(', ')})` : ''}.`,
      });
    }
    const record = resolveEndpoint(records, args.endpoint, args);
    await print(new ManageClient(ManageClient.originOf(url), (await provider.apiKey()).key), record);
  });
}

/** Why `ferry dev` may not have an endpoint of the project yet (cli/commands/dev-run.ts). */
const devProvisions =
  "yet: it starts a function's endpoint on its first call (all at once with `ferry dev --auto-provision`)";

/** How often in a row a one-shot `ferry logs` waits out a busy platform before it gives up. */
const busyTriesOneShot = 6;

/**
 * What `ferry logs` prints: every line from the start (or `sinceMs`), then, with `follow`, new ones
 * as they come (polling with the API's cursor, so none is printed twice), until `signal` aborts.
 * A follower asks for `follow` reads from the first one: their `next` never passes a line that
 * arrives late (docs/observability.md). A busy platform (429/503, e.g. CloudWatch Logs' read quota
 * on AWS) is waited out for its Retry-After.
 */
export async function printLogs(options: {
  client: ManageClient;
  endpoint: Pick<EndpointRecord, 'id' | 'name'>;
  job?: string | undefined;
  sinceMs?: number | undefined;
  follow: boolean;
  json: boolean;
  pollMs: number;
  write: (line: string) => void;
  signal?: AbortSignal;
}): Promise<void> {
  const { client, endpoint } = options;
  const pageSize = 1000;
  let after: string | undefined;
  let busy = 0;
  while (!options.signal?.aborted) {
    let page: Awaited<ReturnType<ManageClient['logs']>>;
    try {
      page = await client.logs(endpoint.id, {
        job: options.job,
        since: options.sinceMs,
        after,
        limit: pageSize,
        ...(options.follow ? { follow: '1' as const } : {}),
      });
      busy = 0;
    } catch (error) {
      if (!(error instanceof BusyError) || (!options.follow && ++busy > busyTriesOneShot)) throw error;
      await pause(error.retryAfterMs, options.signal);
      continue;
    }
    for (const line of page.lines) {
      options.write(
        options.json ? JSON.stringify({ endpointId: endpoint.id, ...line }) : formatLine(line, endpoint.name),
      );
    }
    after = page.next;
    // Read on at once while the API says there is more (a platform without `more`: a full page).
    if (page.more ?? page.lines.length === pageSize) continue;
    // A finished job's lines are all out: nothing more to follow.
    if (!options.follow || page.ended) return;
    await pause(options.pollMs, options.signal);
  }
}

/** Waits `ms`, or less when `signal` aborts (the loop then ends at its check). */
const pause = (ms: number, signal: AbortSignal | undefined): Promise<void> =>
  sleep(ms, undefined, { signal }).catch(() => {});
