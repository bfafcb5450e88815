/**
 * Cost model: what the AWS control plane costs for 1M jobs (API Gateway REST, Lambda, SQS, DynamoDB
 * on-demand, S3), from the list prices in bench/prices.json and the assumptions below, printed with
 * the result. Worker compute (ECS tasks on GPU/CPU capacity) is the user's own and is left out: it is
 * the same whatever carries the jobs.
 *
 *   node dist/bench/cost.js [jobs=1000000]
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface Prices {
  region: string;
  pricesFor: string;
  writtenOn: string;
  note: string;
  apiGatewayRest: { perMillionRequests: number };
  lambda: { perMillionRequests: number; perGbSecondX86: number; perGbSecondArm: number };
  sqsStandard: { perMillionRequests: number; requestChunkKb: number };
  dynamoDbOnDemand: {
    perMillionWriteRequestUnits: number;
    perMillionReadRequestUnits: number;
    storagePerGbMonth: number;
    writeUnitKb: number;
    readUnitKb: number;
  };
  s3Standard: { perThousandPut: number; perThousandGet: number; storagePerGbMonth: number };
}

/** What one job costs in requests: the design of docs/architecture.md#the-picture on the aws provider. */
export const assumptions = {
  /** /status (or /status-sync) calls per job on top of /run; runsync clients make 1 call in all. */
  statusCallsPerJob: 2,
  /** Job item size in DynamoDB (input + output + fields); bigger payloads go to S3. */
  jobItemKb: 2,
  /** Share of jobs whose input or output goes through S3 (claim-check over the item/message limits). */
  claimCheckShare: 0.01,
  /** Lambda: memory and mean billed duration of an API handler call (ARM). */
  lambdaMemoryMb: 256,
  lambdaMeanMs: 25,
  /** The API-key authorizer's answers are cached (300 s TTL), so it adds almost no invocations. */
  authorizerInvocationsPerJob: 0.001,
  /** Worker side (agent sidecar): SQS receive + delete per job, and one empty long poll per 10 jobs. */
  sqsRequestsPerJob: 1 /* send */ + 1 /* receive */ + 1 /* delete */ + 0.1 /* empty receives */,
  /** DynamoDB writes: create, take (conditional), done; pings renew leases about once per 30 s job. */
  writesPerJob: 3 + 1,
  /** Strongly consistent reads: one per status call, one for the take's check, one for job-done. */
  readsPerJobBase: 2,
  /** Job records are kept 30 min after completion (docs/api.md#retention): storage is negligible; counted anyway. */
  retentionDays: 1 / 48,
} as const;

export interface CostLine {
  service: string;
  quantity: string;
  usd: number;
}

export function costFor(jobs: number, prices: Prices): CostLine[] {
  const a = assumptions;
  const apiCalls = jobs * (1 + a.statusCallsPerJob);
  const lambdaCalls = apiCalls + jobs * a.authorizerInvocationsPerJob;
  const gbSeconds = lambdaCalls * (a.lambdaMemoryMb / 1024) * (a.lambdaMeanMs / 1000);
  const ddb = prices.dynamoDbOnDemand;
  const wruPerWrite = Math.ceil(a.jobItemKb / ddb.writeUnitKb);
  const rruPerRead = Math.ceil(a.jobItemKb / ddb.readUnitKb);
  const writeUnits = jobs * a.writesPerJob * wruPerWrite;
  const readUnits = jobs * (a.readsPerJobBase + a.statusCallsPerJob) * rruPerRead;
  const storageGbMonth = ((jobs * a.jobItemKb) / 1048576) * (a.retentionDays / 30);
  const sqsRequests = jobs * a.sqsRequestsPerJob; // messages are job ids: one 64 KB chunk each
  const s3Jobs = jobs * a.claimCheckShare;
  return [
    {
      service: 'API Gateway REST',
      quantity: `${apiCalls.toLocaleString('en-US')} requests`,
      usd: (apiCalls / 1e6) * prices.apiGatewayRest.perMillionRequests,
    },
    {
      service: 'Lambda requests',
      quantity: `${Math.round(lambdaCalls).toLocaleString('en-US')} invocations`,
      usd: (lambdaCalls / 1e6) * prices.lambda.perMillionRequests,
    },
    {
      service: 'Lambda duration (ARM)',
      quantity: `${Math.round(gbSeconds).toLocaleString('en-US')} GB-s`,
      usd: gbSeconds * prices.lambda.perGbSecondArm,
    },
    {
      service: 'SQS standard',
      quantity: `${Math.round(sqsRequests).toLocaleString('en-US')} requests`,
      usd: (sqsRequests / 1e6) * prices.sqsStandard.perMillionRequests,
    },
    {
      service: 'DynamoDB writes',
      quantity: `${writeUnits.toLocaleString('en-US')} WRU`,
      usd: (writeUnits / 1e6) * ddb.perMillionWriteRequestUnits,
    },
    {
      service: 'DynamoDB reads',
      quantity: `${readUnits.toLocaleString('en-US')} RRU`,
      usd: (readUnits / 1e6) * ddb.perMillionReadRequestUnits,
    },
    {
      service: 'DynamoDB storage',
      quantity: `${storageGbMonth.toFixed(4)} GB-month`,
      usd: storageGbMonth * ddb.storagePerGbMonth,
    },
    {
      service: 'S3 (claim-check)',
      quantity: `${s3Jobs.toLocaleString('en-US')} PUT + GET`,
      usd: (s3Jobs / 1000) * (prices.s3Standard.perThousandPut + prices.s3Standard.perThousandGet),
    },
  ];
}

export function loadPrices(path = join(process.cwd(), 'bench', 'prices.json')): Prices {
  return JSON.parse(readFileSync(path, 'utf8')) as Prices;
}

/** A markdown section: the table, the total, the assumptions and where the prices come from. */
export function costReport(jobs: number, prices: Prices): string {
  const lines = costFor(jobs, prices);
  const total = lines.reduce((sum, line) => sum + line.usd, 0);
  const rows = lines.map((l) => `| ${l.service} | ${l.quantity} | $${l.usd.toFixed(2)} |`);
  const assumed = Object.entries(assumptions).map(([k, v]) => `- \`${k}\`: ${Number(v.toFixed?.(4) ?? v)}`);
  return [
    `Control-plane cost of ${jobs.toLocaleString('en-US')} jobs on AWS, ${prices.region}, from bench/prices.json (${prices.pricesFor}; written down ${prices.writtenOn}):`,
    '',
    '| service | quantity | cost |',
    '|---|---|---|',
    ...rows,
    `| **total** | | **$${total.toFixed(2)}** (${((total / jobs) * 1e6).toFixed(2)} per million jobs) |`,
    '',
    'Assumptions (bench/cost.ts):',
    ...assumed,
    '',
    `Prices: ${prices.note}`,
    'Left out: worker compute (ECS tasks), data transfer, CloudWatch logs, free tiers.',
  ].join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const jobs = Number(process.argv[2] ?? 1_000_000);
  console.log(costReport(jobs, loadPrices()));
}
