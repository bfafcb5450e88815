/**
 * What a command needs from where endpoints live. The local provider keeps records in FERRY_HOME's
 * SQLite file and serves them with `ferry serve`; the AWS provider (infra issue) keeps them in
 * DynamoDB and provisions CloudFormation stacks. Commands only talk to this interface.
 */
import type { RolloutReport } from '../../core/adapters/local/rollout.js';
import type { DnsRecord } from '../../core/deployment.js';
import type { Manifest } from '../../core/manifest.js';
import type { BlobStore, ControlStore, EndpointRecord } from '../../core/ports.js';
import type { ProviderName } from '../config.js';
import type { Reporter } from '../io.js';

export interface DestroyResult {
  deleted: EndpointRecord[];
  /** `hint`: how to fix it, when the failure says (a FerryError's hint). */
  failed: Array<{ record: EndpointRecord; error: string; hint?: string }>;
}

/**
 * What Provider.passNow says while the running platform makes its pass, in the caller's words: the
 * pass is the same after a deploy and after a deleted secret, what it does for the user is not.
 */
export interface PassWording {
  /** Said before asking: what the platform does now. */
  asking: string;
  /** Said every 5 s until the platform answers, with the seconds waited so far. */
  waiting: (waitedSec: number) => string;
  /** The warning when the platform at `url` could not be asked or did not answer in time (`why`). */
  unasked: (url: string, why: string) => string;
}

export interface ServingState {
  url: string;
  /** True when this call started the platform. */
  started: boolean;
}

/** What a deploy knows when it provisions: the whole environment, not only what changed. */
export interface ProvisionContext {
  app: string;
  env: string;
  /** Every endpoint the environment has after this deploy (created, updated and unchanged). */
  all: EndpointRecord[];
  reporter: Reporter;
}

export interface PrepareInput {
  manifest: Manifest;
  /** The environment asked for, if any. */
  env?: string | undefined;
  reporter: Reporter;
}

export interface Provider {
  readonly name: ProviderName;
  /** Apps, environments, endpoints and keys: shared by everyone using this provider. */
  readonly control: ControlStore;
  readonly blobs: BlobStore;
  /** Puts the artifact where workers fetch it; `onProgress` gets bytes sent so far. */
  uploadArtifact(key: string, filePath: string, onProgress?: (sentBytes: number) => void): Promise<void>;
  /**
   * Before a deploy reads or writes records (AWS: finds the platform stack, or creates it on first
   * use, so the control table and the artifact bucket exist). Local: nothing to do.
   */
  prepare?(input: PrepareInput): Promise<void>;
  /**
   * Creates or updates the endpoints; workers roll when fingerprint or config changed. AWS deploys
   * whole environments, from `context.all`, and writes the records once CloudFormation succeeded.
   */
  provision(records: EndpointRecord[], context?: ProvisionContext): Promise<void>;
  /**
   * The id of an endpoint deployed for the first time. Default: readable `name-xxxxxxxx`
   * (core/deployment.ts). AWS needs ids IAM can scope by prefix (letters and digits only).
   */
  newEndpointId?(app: string, env: string, name: string): string;
  /** Removes endpoints one by one and says which could not be removed (never all-or-nothing silence). */
  destroy(records: EndpointRecord[]): Promise<DestroyResult>;
  /** Removes what an environment left behind besides its endpoints (AWS: its stack). */
  destroyEnvironment?(app: string, env: string): Promise<void>;
  /**
   * The `secrets=` names that have a value in an app environment (`ferry env delete` names the ones
   * it keeps). Absent where there is nothing to ask (AWS's recording fake toolkit). AWS lists them
   * (secretsmanager:ListSecrets), which may lag five minutes behind a change: not for `missingSecrets`.
   */
  secretNames?(scope: { app: string; env: string }): Promise<string[]>;
  /**
   * Which of `names` have no value in an app environment now, so a deploy can say which ones its
   * endpoints still miss. Absent where there is nothing to ask (AWS's recording fake toolkit). AWS
   * asks Secrets Manager for each name (secretsmanager:DescribeSecret; a secret scheduled for deletion
   * has no value); a refusal is a warning of the deploy, not a failure (cli/deploy/run.ts
   * warnOfMissingSecrets).
   */
  missingSecrets?(scope: { app: string; env: string }, names: readonly string[]): Promise<string[]>;
  /** Base URL of an endpoint: `/v2/<id>` for queue-based ones, the route prefix for load-balanced ones. */
  endpointUrl(record: EndpointRecord): string;
  /**
   * The DNS record the endpoint's URL needs and the deploy could not create, for the user to make at
   * their DNS provider. AWS: a load-balanced endpoint under a domain without a hosted zone. Absent: never any.
   */
  dnsRecord?(record: EndpointRecord): DnsRecord | undefined;
  /** Makes sure something serves the endpoints (may start it). */
  ensureServing(reporter: Reporter): Promise<ServingState>;
  /**
   * Refuses now what ensureServing would refuse after the build and upload (a local FERRY_PORT that
   * is taken), so a deploy fails before its slow stages. Absent: nothing to check early.
   */
  checkServable?(): Promise<void>;
  /** Whether the endpoints are served right now, and where. */
  serving(): Promise<string | undefined>;
  /**
   * After the records of `changed` (created or updated) endpoints are written and served: returns
   * once every job taken from then on is taken by a worker of this deployment (local: the running
   * `ferry serve` rolls its workers now, not at its next pass), saying on `reporter` what it waits
   * for and what it could not do. Absent: the platform rolls on its own (AWS: docs/aws.md).
   */
  awaitRollout?(changed: readonly EndpointRecord[], reporter: Reporter): Promise<void>;
  /**
   * Has the running platform read the records and secrets of `endpoints` now, not at its next pass,
   * saying on `reporter` what it waits for in `wording`. Answers what the pass made of each endpoint;
   * undefined when nothing needed asking (no endpoint, no platform running) or it could not be asked
   * (said in `wording.unasked`). Absent: nothing to ask (AWS).
   */
  passNow?(
    endpoints: readonly EndpointRecord[],
    reporter: Reporter,
    wording: PassWording,
  ): Promise<RolloutReport | undefined>;
  /** A client API key that the served endpoints accept, and where it came from. */
  apiKey(): Promise<{ key: string; source: string }>;
  /**
   * The shell word for that key in a printed curl line (config.ts apiKeyInShell): one that works
   * where the line is pasted, without the key itself.
   */
  apiKeyInShell(): Promise<string>;
  /**
   * After `ferry keys revoke`: a file that holds the revoked key, removed so nothing registers it
   * again, and its path. Local: FERRY_HOME/api-key, which the next serve or deploy would otherwise
   * accept anew (localApiKey). Absent, or undefined: no file held it.
   */
  forgetKeyFile?(hash: string): string | undefined;
  close(): Promise<void>;
}
