/** infra/names.ts: the names the CLI, the Lambdas and the stacks agree on. */
import { describe, expect, it } from 'vitest';
import { endpointIdFor } from '../../infra/app-stack.js';
import { appStackName, checkAppEnvNames, queueName } from '../../infra/names.js';

describe('stack and queue names', () => {
  it('never collide for app/env pairs that read the same once joined (ml-api+prod vs ml+api-prod)', () => {
    expect(appStackName('ml-api', 'prod')).not.toBe(appStackName('ml', 'api-prod'));
    expect(appStackName('ml-api', 'prod')).toMatch(/^Ferry-ml-api-prod-[0-9a-f]{8}$/);
    expect(appStackName('ml', 'api-prod')).toMatch(/^Ferry-ml-api-prod-[0-9a-f]{8}$/);
    const a = queueName(endpointIdFor('ml-api', 'prod', 'gen'), 'urgent');
    const b = queueName(endpointIdFor('ml', 'api-prod', 'gen'), 'urgent');
    expect(a).not.toBe(b);
  });

  it('are stable: the same app/env gets the same stack on every deploy', () => {
    expect(appStackName('shop', 'production')).toBe(appStackName('shop', 'production'));
  });

  it('fit CloudFormation (128 chars, letters/digits/dashes) and SQS (80 chars) for the longest names', () => {
    const app = `a${'b'.repeat(62)}`;
    const env = `e${'.'.repeat(62)}`;
    const stack = appStackName(app, env);
    expect(stack.length).toBeLessThanOrEqual(128);
    expect(stack).toMatch(/^[A-Za-z][A-Za-z0-9-]*$/);
    for (const role of ['urgent', 'urgent-dlq', 'low', 'low-dlq'] as const) {
      expect(queueName(endpointIdFor(app, env, 'x'), role).length).toBeLessThanOrEqual(80);
    }
  });

  it('refuse app and env names the AWS provider cannot deploy (exit 2)', () => {
    for (const [app, env] of [
      ['', 'prod'],
      ['-x', 'prod'],
      ['a b', 'prod'],
      ['a'.repeat(64), 'prod'],
      ['shop', ''],
      ['shop', 'prod/1'],
      ['shop', '.hidden'],
    ] as const) {
      expect(() => checkAppEnvNames(app, env), `${app}/${env}`).toThrow(
        expect.objectContaining({ code: 'usage' }),
      );
    }
    expect(() => checkAppEnvNames('my_app', 'prod.1')).not.toThrow();
  });
});
