/**
 * The counting behind the synthesized-template quotas of infra/template-limits.ts: CloudFormation
 * resolves at most 60 dynamic references in one template
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/dynamic-references.html) and reads
 * at most 1 MB of template from S3
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html). The
 * templates here are hand-made in the shapes CDK writes; test/infra/template-limits.test.ts counts
 * the real synthesized stacks.
 */
import { describe, expect, it } from 'vitest';
import {
  checkSynthesizedTemplate,
  checkTaskDefinitionSizes,
  dynamicReferenceCount,
  maxDynamicReferences,
  maxTaskDefinitionBytes,
  maxTemplateBytes,
  resolvedJsonBytes,
} from '../../infra/template-limits.js';

/** CDK's `secret.secretValue.unsafeUnwrap()`: the reference cut around the secret's Ref. */
const secretJoin = (id: string) => ({
  'Fn::Join': ['', ['{{resolve:secretsmanager:', { Ref: id }, ':SecretString:::}}']],
});

/** A template whose `n` references sit in every place one can: Join, Sub, plain, deep in arrays. */
function templateWith(n: number): Record<string, unknown> {
  const resources: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) {
    const value =
      i % 4 === 0
        ? secretJoin(`Secret${i}`)
        : i % 4 === 1
          ? { 'Fn::Sub': [`token=\${Name}:{{resolve:ssm-secure:/p/${i}}}`, { Name: { Ref: `Secret${i}` } }] }
          : i % 4 === 2
            ? `{{resolve:ssm:/plain/${i}}}`
            : [{ Conditions: [{ HttpHeaderConfig: { Values: [secretJoin(`Secret${i}`)] } }] }];
    resources[`Thing${i}`] = { Type: 'AWS::Test::Thing', Properties: { Value: value } };
  }
  return { Resources: resources };
}

const environment = { app: 'demo', env: 'dev', endpoints: 21 };

describe('dynamic references in a template', () => {
  it('counts each {{resolve:…}} wherever it is nested: Fn::Join parts, Fn::Sub strings, plain, arrays', () => {
    expect(dynamicReferenceCount(templateWith(7))).toBe(7);
    expect(dynamicReferenceCount({ Resources: {} })).toBe(0);
    // Two in one string, and the same secret twice: each occurrence is one.
    expect(dynamicReferenceCount({ a: '{{resolve:ssm:/a}}-{{resolve:ssm:/a}}' })).toBe(2);
  });

  it('counts a reference cut across the literal parts of an Fn::Join once, and what its other parts hold', () => {
    const cut = { 'Fn::Join': ['', ['{{res', 'olve:ssm:/x}}', { 'Fn::Sub': '{{resolve:ssm:/y}}' }]] };
    expect(dynamicReferenceCount(cut)).toBe(2);
    // A non-literal part between the halves is no reference.
    expect(dynamicReferenceCount({ 'Fn::Join': ['', ['{{res', { Ref: 'X' }, 'olve:ssm:/x}}']] })).toBe(0);
    // Not a reference: other braces and names.
    expect(dynamicReferenceCount({ a: '{{resolve', b: 'resolve:ssm', c: '{ {resolve:x}}' })).toBe(0);
  });

  it(`${maxDynamicReferences} pass; ${maxDynamicReferences + 1} are refused (exit 2) with the count, the excess and the way out`, () => {
    expect(() =>
      checkSynthesizedTemplate({ template: templateWith(maxDynamicReferences), bytes: 1 }, environment),
    ).not.toThrow();
    let error: unknown;
    try {
      checkSynthesizedTemplate({ template: templateWith(maxDynamicReferences + 1), bytes: 1 }, environment);
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({
      name: 'FerryError',
      code: 'usage',
      message:
        'The template of demo/dev (21 endpoints) holds 61 dynamic references ({{resolve:…}}), 1 over the 60 CloudFormation resolves in one template',
      hint: expect.stringContaining('ferry deploy -e <env>'),
    });
  });
});

describe('template bytes', () => {
  it('1,000,000 bytes pass; one more is refused with the size and the excess', () => {
    const template = templateWith(0);
    expect(() => checkSynthesizedTemplate({ template, bytes: maxTemplateBytes }, environment)).not.toThrow();
    expect(() => checkSynthesizedTemplate({ template, bytes: maxTemplateBytes + 1 }, environment)).toThrow(
      /demo\/dev \(21 endpoints\) holds 1,000,001 bytes, 1 over the 1,000,000 \(1 MB\)/,
    );
  });

  it('names both quotas when both are over', () => {
    expect(() =>
      checkSynthesizedTemplate({ template: templateWith(65), bytes: 1_250_000 }, environment),
    ).toThrow(/65 dynamic references .*, 5 over the 60 .*, and 1,250,000 bytes, 250,000 over/);
  });
});

/** A template with one endpoint's task definition, its worker holding `env` (as CDK writes it). */
const taskTemplate = (env: Record<string, string>) => ({
  Resources: {
    TaskDef: {
      Type: 'AWS::ECS::TaskDefinition',
      Properties: {
        ContainerDefinitions: [
          {
            Name: 'worker',
            Environment: [
              { Name: 'FERRY_ENDPOINT', Value: 'embedder' },
              ...Object.entries(env).map(([Name, Value]) => ({ Name, Value })),
            ],
            Secrets: [
              {
                Name: 'HF_TOKEN',
                ValueFrom: { 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':x']] },
              },
            ],
          },
        ],
      },
    },
  },
});

// ECS: "Task definition size", 64 KiB, not adjustable
// (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/service-quotas.html).
describe('task definition size', () => {
  it('weighs plain JSON as written, each token as a resolved ARN (256 bytes), a Join as its parts', () => {
    expect(resolvedJsonBytes({ a: 'bc', d: [1, true] })).toBe(
      JSON.stringify({ a: 'bc', d: [1, true] }).length,
    );
    expect(resolvedJsonBytes({ Ref: 'X' })).toBe(256);
    expect(resolvedJsonBytes({ 'Fn::GetAtt': ['Q', 'Arn'] })).toBe(256);
    // "arn:" + token + ":x" resolves to one string: its quotes, 6 literal bytes and one token.
    expect(resolvedJsonBytes({ 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':x']] })).toBe(
      2 + 6 + 256,
    );
    expect(resolvedJsonBytes({ 'Fn::Join': ['-', ['a', 'b', 'c']] })).toBe(JSON.stringify('a-b-c').length);
  });

  it('passes a task definition up to 64 KiB; refuses one over it (exit 2), naming the endpoint and its biggest env values', () => {
    expect(maxTaskDefinitionBytes).toBe(65_536);
    expect(() =>
      checkTaskDefinitionSizes(taskTemplate({ CONFIG: 'x'.repeat(60_000) }), environment),
    ).not.toThrow();
    let caught: unknown;
    try {
      checkTaskDefinitionSizes(
        taskTemplate({ A: 'x'.repeat(40_000), B: 'y'.repeat(30_000), C: 'z', D: 'zz' }),
        environment,
      );
    } catch (error) {
      caught = error;
    }
    expect(caught).toMatchObject({ name: 'FerryError', code: 'usage' });
    const message = (caught as Error).message;
    expect(message).toMatch(
      /^demo\/dev: 'embedder' needs a task definition of about [\d,]+ bytes, over the 65,536 \(64 KiB\)/,
    );
    expect(message).toContain('its biggest env values: A (40,000 bytes), B (30,000 bytes), D (2 bytes)');
  });
});
