/**
 * ECS task scale-in protection for the agent's task, one owner for both agents: the queue agent
 * protects its task while the worker holds a job (agent.ts), the load-balanced agent while requests
 * are in flight (lb.ts). On while busy, renewed at half its term, off once idle for `offAfterMs`.
 * Failures are logged and retried on the next tick, never fatal.
 *
 * A service that lowers its desiredCount lets ECS pick the tasks to stop, and it never picks a
 * protected one; protection is set through the ECS agent's endpoint in the task
 * (`PUT $ECS_AGENT_URI/task-protection/v1/state`, `ExpiresInMinutes` 1–2880; Ferry asks for 60),
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html and
 * https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection-endpoint.html.
 */
import { z } from 'zod';
import { messageOf } from '../../core/errors.js';
import type { Logger } from '../../core/log.js';
import type { Clock } from '../../core/ports.js';

/**
 * What the ECS agent's endpoint answers a PUT: `{"protection": {"ProtectionEnabled", "ExpirationDate",
 * "TaskArn"}}` when UpdateTaskProtection took it, `{"failure": {"Arn", "Detail", "Reason"}}` when
 * the call came back with a failure (TASK_NOT_VALID for a task outside a service, among others) —
 * with HTTP 200 all the same — and `{"error": {"Arn", "Code", "Message"}}` with a 4xx or 5xx
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection-endpoint.html,
 * https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_UpdateTaskProtection.html).
 * Not `.strict()`: the agent adds a RequestID beside them, and only these three decide.
 */
const protectionAnswerSchema = z.object({
  protection: z.object({ ProtectionEnabled: z.boolean().optional() }).nullish(),
  failure: z.object({ Reason: z.string().nullish(), Detail: z.string().nullish() }).nullish(),
  error: z.object({ Code: z.string().nullish(), Message: z.string().nullish() }).nullish(),
});

/**
 * Why an answer of HTTP 200 is not the state asked for (with the failure's Reason when ECS gave
 * one); undefined when it is.
 */
function protectionRefusal(
  text: string,
  enabled: boolean,
): { message: string; failureReason?: string | undefined } | undefined {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { message: `an answer that is not JSON: ${text.slice(0, 200)}` };
  }
  const parsed = protectionAnswerSchema.safeParse(json);
  if (!parsed.success) return { message: `an answer of an unknown shape: ${text.slice(0, 200)}` };
  const { protection, failure, error } = parsed.data;
  if (protection?.ProtectionEnabled === enabled) return undefined;
  // The reason and detail only: the ARN names the task, which the log stream already does.
  if (failure) {
    return {
      message: `failure ${failure.Reason ?? 'without a reason'}${failure.Detail ? ` (${failure.Detail})` : ''}`,
      failureReason: failure.Reason ?? undefined,
    };
  }
  if (error)
    return { message: `error ${error.Code ?? 'without a code'}${error.Message ? `: ${error.Message}` : ''}` };
  return { message: `an answer without ProtectionEnabled=${enabled}: ${text.slice(0, 200)}` };
}

export interface EcsProtectionOptions {
  agentUri: string;
  fetch?: typeof fetch;
  /** ExpiresInMinutes of each protection (1–2880; default 60, renewed at half). */
  protectionMinutes?: number;
  /** How long the task must be idle before protection is turned off (default 2 s). */
  protectionOffAfterMs?: number;
}

/**
 * How long the agent waits after UpdateTaskProtection answers DEPLOYMENT_BLOCKED: "the service has
 * more protected tasks than the desired count of tasks for the service", and the listed ways out
 * are to wait for a protection to expire, release one, or raise the desired count
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html). None
 * of them happens within a second, and every try is an ECS API call of the account, so the agent
 * tries again this much later instead of at every tick, and says so once.
 */
export const deploymentBlockedRetryMs = 30_000;

export class TaskProtection {
  private readonly state = { on: false, renewAt: 0, idleSince: 0, blockedUntil: 0, blockedSaid: false };
  private protecting: Promise<void> | undefined;

  constructor(
    private readonly ecs: EcsProtectionOptions,
    private readonly clock: Clock,
    private readonly log: Logger,
    /** Whether the task has work now (held jobs, requests in flight). */
    private readonly busy: () => boolean,
  ) {}

  /** One tick: note whether the task is busy, then update protection if none is in flight. */
  tick(): void {
    if (this.busy()) this.state.idleSince = 0;
    else if (this.state.idleSince === 0) this.state.idleSince = this.clock.now();
    this.kick();
  }

  /** Waits for the update in flight, if any. */
  async settled(): Promise<void> {
    await this.protecting;
  }

  /** Drain: wait for the update in flight, then turn protection off if it is on. */
  async release(): Promise<void> {
    await this.protecting;
    if (this.state.on && (await this.put({ ProtectionEnabled: false }))) {
      this.state.on = false;
    }
  }

  /** Runs one protection update at a time; a kick while one runs is picked up by the next tick. */
  private kick(): void {
    if (this.protecting) return;
    this.protecting = this.update().finally(() => {
      this.protecting = undefined;
    });
  }

  private async update(): Promise<void> {
    const ecs = this.ecs;
    const now = this.clock.now();
    const idleMs = now - (this.state.idleSince || now);
    const offAfterMs = ecs.protectionOffAfterMs ?? 2_000;
    // Still inside the idle window after a job: keep renewing, or a long idle_timeout could outlast
    // the protection's own term.
    const keep = this.busy() || (this.state.on && idleMs < offAfterMs);
    if (keep && now < this.state.blockedUntil) return;
    const minutes = Math.min(2_880, Math.max(1, Math.round(ecs.protectionMinutes ?? 60)));
    if (keep && (!this.state.on || now >= this.state.renewAt)) {
      if (await this.put({ ProtectionEnabled: true, ExpiresInMinutes: minutes })) {
        this.state.on = true;
        // Renew at half the term, so a slow or failed renewal still has time before it lapses.
        this.state.renewAt = now + (minutes * 60_000) / 2;
      }
    } else if (!keep && this.state.on) {
      if (await this.put({ ProtectionEnabled: false })) this.state.on = false;
    }
  }

  private async put(body: { ProtectionEnabled: boolean; ExpiresInMinutes?: number }): Promise<boolean> {
    const ecs = this.ecs;
    try {
      const response = await (ecs.fetch ?? fetch)(`${ecs.agentUri}/task-protection/v1/state`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(5_000),
      });
      const text = await response.text();
      if (!response.ok) {
        this.log.warn(
          `task protection ${body.ProtectionEnabled ? 'on' : 'off'}: HTTP ${response.status} ${text.slice(0, 200)}`,
        );
        return false;
      }
      // HTTP 200 is not enough: a failure of UpdateTaskProtection comes back as 200 too. Only the
      // state asked for counts; anything else is retried on the next tick like a non-ok answer.
      const refusal = protectionRefusal(text, body.ProtectionEnabled);
      if (refusal?.failureReason === 'DEPLOYMENT_BLOCKED') {
        this.state.blockedUntil = this.clock.now() + deploymentBlockedRetryMs;
        if (!this.state.blockedSaid) {
          this.state.blockedSaid = true;
          this.log.warn(
            `task protection on: HTTP 200 with ${refusal.message}: the service has more protected tasks than its desired count; trying again every ${deploymentBlockedRetryMs / 1000} s`,
          );
        }
        return false;
      }
      if (refusal) {
        this.log.warn(
          `task protection ${body.ProtectionEnabled ? 'on' : 'off'}: HTTP 200 with ${refusal.message}`,
        );
        return false;
      }
      this.state.blockedSaid = false;
      return true;
    } catch (error) {
      const text = messageOf(error);
      this.log.warn(`task protection ${body.ProtectionEnabled ? 'on' : 'off'}: ${text}`);
      return false;
    }
  }
}
