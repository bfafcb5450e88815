/**
 * One owner for the endpoint-declaration rules (core/endpoint-spec.ts): the JSON Schema the Python side
 * is tested against is generated from the zod schema and committed (this test says when it is stale),
 * and the shared table of declarations is accepted and refused by the zod schema exactly as it says.
 * worker-image/python/test_endpoint_spec.py runs the same table through the scanner and the package.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { endpointSpecJsonSchema, endpointSpecSchema } from '../../core/endpoint-spec.js';
import { resourcesSchema } from '../../core/manifest.js';
import { sampleResources } from '../infra/fixtures.js';

const repo = path.resolve(import.meta.dirname, '../..');
const schemaFile = path.join(repo, 'core/endpoint-spec.schema.json');
const table = JSON.parse(
  readFileSync(path.join(repo, 'test/fixtures/endpoint-declarations.json'), 'utf8'),
) as {
  declarations: { why: string; valid: boolean; declaration: Record<string, unknown> }[];
};

describe('EndpointSpec', () => {
  it('has its JSON Schema committed and up to date', () => {
    const generated = `${JSON.stringify(endpointSpecJsonSchema(), null, 2)}\n`;
    if (process.env.FERRY_UPDATE_SCHEMA === '1') writeFileSync(schemaFile, generated);
    expect(
      readFileSync(schemaFile, 'utf8'),
      'core/endpoint-spec.schema.json is stale: run FERRY_UPDATE_SCHEMA=1 npx vitest run test/unit/endpoint-spec.test.ts',
    ).toBe(generated);
  });

  it('covers both answers in the shared table', () => {
    expect(table.declarations.filter((d) => d.valid).length).toBeGreaterThan(5);
    expect(table.declarations.filter((d) => !d.valid).length).toBeGreaterThan(5);
  });

  it.each(table.declarations.map((d) => [d.valid ? 'accepts' : 'refuses', d.why, d] as const))(
    '%s %s',
    (_verb, _why, { valid, declaration }) => {
      expect(endpointSpecSchema.safeParse(declaration).success).toBe(valid);
    },
  );

  it('refuses workers min above max in the manifest too', () => {
    const resources = { ...sampleResources, gpu: ['any'], workersMin: 3, workersMax: 2 };
    expect(resourcesSchema.safeParse(resources).success).toBe(false);
    expect(resourcesSchema.safeParse({ ...resources, workersMin: 2 }).success).toBe(true);
    expect(resourcesSchema.safeParse({ ...resources, gpu: undefined, cpu: '01-8' }).success).toBe(false);
  });
});
