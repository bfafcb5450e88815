/**
 * The numbers of docs/api.md#limits, in one place. Units are in the names.
 */
export const limits = {
  /** `/run` request body. */
  runBodyBytes: 10 * 1024 * 1024,
  /** `/runsync` request body. */
  runsyncBodyBytes: 20 * 1024 * 1024,
  /**
   * A load-balanced request's body (`/lb/<endpoint id>/...`), refused with 413 by the front door
   * before anything reaches the worker. Ferry's Python LB runtime (worker-image/python/ferry/lb.py
   * MAX_BODY_BYTES) has the same limit, so the front door answers before that worker would; a custom
   * worker image keeps its own limits under this one (test/unit/lb-body-limit.test.ts).
   */
  lbBodyBytes: 20 * 1024 * 1024,
  /** A worker's job-done body; RunPod answers 400 above ~20 MB (worker-comfyui#129). */
  jobDoneBodyBytes: 20 * 1024 * 1024,
  /** Results in one job-done-batch (the ferry runtime's; the body is under jobDoneBodyBytes too). */
  jobDoneBatchJobs: 100,
  /**
   * Job ids one ping lists (400 above): each renews a lease in the store. A worker lists the jobs it
   * holds, and a URL of real ids (39 characters and more) fits about 400 in Node's 16 KB of URL and
   * headers; made-up one-letter ids fit 7 600, which cost the platform 78 ms of CPU per ping.
   */
  pingJobIds: 500,
  /** A single stream chunk; larger output is split across chunks. */
  streamChunkBytes: 1024 * 1024,
  /**
   * The chunks' JSON in one JobStore.readStream (the console's read of a stream), past its first
   * chunk: as much as one drain answers on AWS (streamDrainBytes, core/adapters/aws/dynamo/job-item.ts).
   */
  streamReadBytes: 2 * 1024 * 1024,

  runsyncDefaultWaitMs: 90_000,
  /**
   * RunPod's `?wait=` range. runsync's and status-sync's wait is brought into it (core/api.ts
   * syncWaitMs); stream's may be 0 to waitMaxMs, 400 outside.
   */
  waitMinMs: 1_000,
  waitMaxMs: 300_000,
  /**
   * How long `/stream` holds a request open when nothing new has arrived: well inside runpod-python's
   * 10 s read timeout on each `Job.stream()` GET (a hold near it ended in a ReadTimeout, and lost any
   * chunk handed out meanwhile), yet long enough that runpod-sdk, which polls with no sleep, does not spin.
   */
  streamWaitMs: 5_000,
  /** How long job-take and job-stop hold a worker's request open (the RunPod SDK gives up after 90 s). */
  workerPollWaitMs: 30_000,

  /** Results of `/run` jobs: 30 minutes after completion. */
  runRetentionMs: 30 * 60_000,
  /** Results of `/runsync` jobs: 1 minute, up to 5 minutes with a longer wait. */
  runsyncRetentionMs: 60_000,
  runsyncMaxRetentionMs: 5 * 60_000,

  /** policy.executionTimeout default and bounds (RunPod docs: 5 s – 7 d). */
  executionTimeoutDefaultMs: 600_000,
  executionTimeoutMinMs: 5_000,
  executionTimeoutMaxMs: 7 * 24 * 3_600_000,
  /** policy.ttl default and bounds (RunPod docs: 10 s – 7 d), counted from submission. */
  ttlDefaultMs: 24 * 3_600_000,
  ttlMinMs: 10_000,
  ttlMaxMs: 7 * 24 * 3_600_000,
  /**
   * The longest a job and its result are kept, from its (last) submission: policy.ttl's 7 days to
   * run, then 7 of `?ttl=` retention. A retention asked for past it is cut to it, so storage that
   * expires by age (the AWS bucket's payload rule, infra/platform-stack.ts) never outlives a job.
   */
  jobLifetimeMaxMs: 14 * 24 * 3_600_000,

  /** A taken job's lease; the worker's ping renews it (the RunPod SDK pings every 10 s). */
  leaseMs: 60_000,
  /** How many times a job whose lease lapsed goes back to the queue before it fails. */
  maxAttempts: 3,

  /** Webhook delivery: the first POST and 2 retries 10 s apart (RunPod docs). */
  webhookAttempts: 3,
  webhookRetryDelayMs: 10_000,
  webhookTimeoutMs: 10_000,
  /** A webhook URL's length: past common servers' request-line limit (8 KB), and a message's room on AWS. */
  webhookUrlChars: 8_192,

  /** A worker's own log lines (not a job's: those go with the job) are kept this long. */
  workerLogRetentionMs: 24 * 3_600_000,
  /** The longest log line kept; longer ones are cut (a handler printing a whole tensor). */
  logLineChars: 16 * 1024,
  /** Lines one job-log request may carry. */
  logBatchLines: 1_000,
  /**
   * Jobs whose lines one job-log request carries (400 above): each is a read of the job in the store,
   * as a ping's ids are each a write (pingJobIds). The ferry runtime sends at most 500 lines a batch
   * (worker-image/python/ferry/logs.py LogShipper), so never more jobs than that.
   */
  logBatchJobs: 500,
  /**
   * The local front door (docs/security.md): how long a client may take to send its headers and its
   * whole request, how long an idle keep-alive socket stays open, and how many sockets are open at
   * once. Waiting for an answer (runsync, long polls) is not sending, so long waits are unaffected.
   */
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 120_000,
  keepAliveTimeoutMs: 10_000,
  /** Inactivity on a socket, answer included: above the longest wait a request may ask for. */
  socketIdleTimeoutMs: 330_000,
  maxConnections: 1_000,
  /** Client requests per API key (per address without a valid key) per window; 429 with Retry-After above. */
  rateLimitRequests: 2_000,
  /**
   * Requests per worker token per window (429 with Retry-After above; docs/security.md). Measured on
   * 2 cores: a worker of the ferry runtime in the bench's 2 × 8 pool sent at most 2 000 per window
   * (it batches takes and results); one worker's code looping on a route that does not wait sent
   * 52 000 per window and held the platform's CPU.
   */
  workerRateLimitRequests: 20_000,
  rateLimitWindowMs: 10_000,
  /** Jobs waiting in one endpoint's queue; /run and /runsync answer 429 above it. */
  queueCapJobs: 100_000,

  /** Deployment artifact. */
  artifactBytes: 1.5 * 1024 * 1024 * 1024,
} as const;

/**
 * How much of a body over its route's limit a front door still reads, and drops, so that the client,
 * which is still sending, hears the 413 (or job-done's 400): most clients (fetch, Python requests)
 * read no answer before their upload is done, and a socket closed under them is a broken pipe, not an
 * answer. Past this the socket is closed unread. Only callers with a known credential get this far.
 * The one rule is core/request-body.ts readLimitedBody, used by the local front door and the agent.
 */
export const overLimitReadBytes = 64 * 1024 * 1024;

/** Packages every base image ships, so the artifact build leaves them out. */
export const baseImagePackages = ['torch', 'torchvision', 'torchaudio', 'numpy', 'triton'] as const;

export const defaultPort = 8888;
