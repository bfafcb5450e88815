/**
 * The pure parts of observability: PutLogEvents batching within AWS's limits, the CloudWatch read
 * cursor (no line twice, even at the same millisecond), the EMF job-metrics line, the time-series
 * buckets and percentiles, and the CLI's --since and endpoint-name rules.
 */
import { describe, expect, it } from 'vitest';
import { resolveEndpoint, sinceMs } from '../../cli/manage-client.js';
import {
  batchesOf,
  CloudWatchLogStore,
  putLogEventsLimits,
} from '../../core/adapters/aws/cloudwatch-logs.js';
import type { Job } from '../../core/job.js';
import { metricsOf, percentile } from '../../core/manage.js';
import { jobMetricsLine } from '../../core/metrics.js';
import type { EndpointRecord, LogLine } from '../../core/ports.js';
import { FakeCloudWatchLogs } from '../support/cloudwatchLogs.js';

const line = (atMs: number, text = 'x', jobId = 'job-1'): LogLine => ({
  atMs,
  endpointId: 'ep',
  workerId: 'w',
  jobId,
  stream: 'stdout',
  text,
});

describe('PutLogEvents batches', () => {
  it('are in time order whatever order lines came in', () => {
    const [batch] = batchesOf([line(3), line(1), line(2)]);
    expect(batch!.map((e) => e.timestamp)).toEqual([1, 2, 3]);
  });

  it('split at 10,000 events, at 1 MiB counting 26 bytes per event, and at 24 h', () => {
    expect(
      batchesOf(Array.from({ length: 10_001 }, (_, i) => ({ ...line(i), jobId: undefined }))).map(
        (b) => b.length,
      ),
    ).toEqual([10_000, 1]);
    const big = 'y'.repeat(300_000);
    const sized = batchesOf([line(1, big), line(2, big), line(3, big), line(4, big)]);
    expect(sized.length).toBe(2);
    for (const batch of sized) {
      const bytes = batch.reduce((n, e) => n + Buffer.byteLength(e.message ?? '') + 26, 0);
      expect(bytes).toBeLessThanOrEqual(putLogEventsLimits.bytes);
    }
    const day = 24 * 3_600_000;
    expect(batchesOf([line(0), line(day), line(day + 1)]).map((b) => b.length)).toEqual([2, 1]);
  });
});

describe('CloudWatchLogStore', () => {
  it('writes JSON events into its own stream and reads a job back, resuming without repeats', async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    const writer = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'ep/1' });
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g' });
    await writer.append([line(5, 'a'), line(5, 'b'), line(5, 'other', 'job-2')]);
    const first = await reader.read({ endpointId: 'ep', jobId: 'job-1', limit: 1 });
    expect(first.lines.map((l) => l.text)).toEqual(['a']);
    await writer.append([line(5, 'c'), line(6, 'd')]);
    const rest = await reader.read({ endpointId: 'ep', jobId: 'job-1', after: first.next, limit: 100 });
    expect(rest.lines.map((l) => l.text)).toEqual(['b', 'c', 'd']);
    const none = await reader.read({ endpointId: 'ep', jobId: 'job-1', after: rest.next, limit: 100 });
    expect(none.lines).toEqual([]);
    expect(fake.calls.filter((c) => c === 'CreateLogStream')).toHaveLength(1);
  });

  it("reads an endpoint's lines from its own streams only: a line that names another endpoint is not that endpoint's", async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    // The attacker's agent may write only its own streams (`attacker/…`), but the event is its to shape.
    const attacker = new CloudWatchLogStore({
      client: fake.asClient(),
      logGroup: '/g',
      logStream: 'attacker/1',
    });
    const victim = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g', logStream: 'victim/1' });
    await victim.append([{ ...line(5, 'real'), endpointId: 'victim' }]);
    await attacker.append([{ ...line(6, 'forged'), endpointId: 'victim' }]);
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g' });
    const read = await reader.read({ endpointId: 'victim', jobId: 'job-1', limit: 10 });
    expect(read.lines.map((l) => l.text)).toEqual(['real']);
  });

  it('never puts a quote or backslash of an id into a filter pattern', async () => {
    const fake = new FakeCloudWatchLogs(['/g']);
    const reader = new CloudWatchLogStore({ client: fake.asClient(), logGroup: '/g' });
    expect((await reader.read({ endpointId: 'ep', jobId: 'x" || $.a = "', limit: 5 })).lines).toEqual([]);
    expect(fake.calls).toEqual([]);
    await expect(reader.read({ endpointId: 'ep', after: 'not-a-cursor', limit: 5 })).rejects.toThrow(
      /cursor/,
    );
  });
});

describe('job metrics (EMF)', () => {
  it('one line per ended job with delay and execution, by EndpointId', () => {
    const doc = JSON.parse(
      jobMetricsLine('ep', { id: 'j', status: 'FAILED', delayTime: 12, executionTime: 340 }, 1_000)!,
    );
    expect(doc._aws.CloudWatchMetrics[0]).toMatchObject({ Namespace: 'Ferry', Dimensions: [['EndpointId']] });
    expect(doc).toMatchObject({
      EndpointId: 'ep',
      JobsEnded: 1,
      JobsFailed: 1,
      DelayMs: 12,
      ExecutionMs: 340,
    });
    expect(jobMetricsLine('ep', { id: 'j', status: 'IN_PROGRESS' }, 1_000)).toBeUndefined();
  });
});

describe('time series', () => {
  it('nearest-rank percentiles', () => {
    expect(percentile([], 0.5)).toBeUndefined();
    expect(percentile([1, 2, 3, 4], 0.5)).toBe(2);
    expect(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.95)).toBe(10);
  });

  it('buckets finished jobs by when they finished', () => {
    const job = (finishedAt: number, status: Job['status'] = 'COMPLETED') =>
      ({ status, createdAt: finishedAt - 30, startedAt: finishedAt - 20, finishedAt }) as Job;
    const m = metricsOf([job(5_000), job(15_000), job(16_000, 'FAILED'), job(99_000)], [], 0, 20_000, 10);
    expect(m.t).toEqual([0, 10]);
    expect(m.jobsPerSec).toEqual([0.1, 0.2]);
    expect(m.failedPerSec).toEqual([0, 0.1]);
    expect(m.executionP50Ms).toEqual([20, 20]);
    expect(m.delayP95Ms).toEqual([10, 10]);
  });
});

describe('CLI rules', () => {
  it('--since takes durations and dates; anything else is a usage error', () => {
    expect(sinceMs('10m', 1_000_000)).toBe(400_000);
    expect(sinceMs('2h', 10_000_000)).toBe(10_000_000 - 7_200_000);
    expect(sinceMs('2026-01-01T00:00:00Z', 0)).toBe(Date.parse('2026-01-01T00:00:00Z'));
    expect(() => sinceMs('soon', 0)).toThrow(/--since/);
  });

  it('an endpoint by id, by name, by its live- name; repeated names need --app/--env', () => {
    const record = (id: string, name: string, app = 'a', env = 'production') =>
      ({ id, name, app, env }) as EndpointRecord;
    const records = [
      record('e1', 'hello'),
      record('e2', 'live-dev'),
      record('e3', 'twin', 'a'),
      record('e4', 'twin', 'b'),
    ];
    expect(resolveEndpoint(records, 'e1').id).toBe('e1');
    expect(resolveEndpoint(records, 'hello').id).toBe('e1');
    expect(resolveEndpoint(records, 'dev').id).toBe('e2');
    expect(() => resolveEndpoint(records, 'twin')).toThrow(/Several/);
    expect(resolveEndpoint(records, 'twin', { app: 'b' }).id).toBe('e4');
    expect(() => resolveEndpoint(records, 'nope')).toThrow(/No endpoint/);
  });
});
