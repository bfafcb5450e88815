/**
 * ferry dev's check of a queue route's input against the scanned signature (cli/dev/inputs.ts), on
 * bodies read by the platform's own JSON reader, so 3.0 and integers beyond 2^53 arrive as they do in
 * the server. The e2e test (test/e2e/cli-dev-inputs.test.ts) holds the 422 through the real binary.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { inputMismatch, inputSchema, type Signature } from '../../cli/dev/inputs.js';
import { parseJsonExact } from '../../core/json.js';
import { manifestEndpointSchema } from '../../core/manifest.js';

const typed: Signature = {
  params: ['a', 'b', 'c', 'flag', 'xs', 'anything'],
  inputs: [
    { name: 'a', required: true, type: 'integer' },
    { name: 'b', required: false, type: 'number', default: 1 },
    { name: 'c', required: false, type: 'string', nullable: true, default: null },
    { name: 'flag', required: false, type: 'boolean', default: false },
    { name: 'xs', required: false, type: 'array', nullable: true, default: null },
    { name: 'anything', required: false, default: null },
  ],
};

const check = (signature: Signature, json: string) =>
  inputMismatch(
    signature,
    parseJsonExact(Buffer.from(json), 'Request body') as Record<string, unknown>,
    'typed',
  );

describe('inputMismatch', () => {
  it('drops a "method" naming a one-method class\'s method before the check, as its worker does (invoke.py _pick_method), and checks any other', () => {
    const sole: Signature = {
      params: ['method'],
      inputs: [{ name: 'method', required: true, type: 'string' }],
      soleMethod: 'predict',
    };
    // The worker drops it, so the method's own argument named method is then missing.
    expect(check(sole, '{"method": "predict"}')).toBe(
      "The input does not fit typed: missing required argument 'method' (str)",
    );
    expect(check(sole, '{"method": "fast"}')).toBeUndefined();
    expect(check({ ...sole, inputs: [], params: [] }, '{"method": "predict"}')).toBeUndefined();
    expect(check({ ...sole, inputs: [], params: [] }, '{"method": "fast"}')).toBe(
      "The input does not fit typed: unexpected argument 'method' (it takes: none)",
    );
  });

  it('passes values Python reads as the hinted type, an int for a float, None where allowed, anything unhinted', () => {
    for (const json of [
      '{"a": 3}',
      '{"a": -0, "b": 2}',
      '{"a": 18446744073709551615, "b": 2.5e3}',
      '{"a": 1, "b": 1.0, "c": "x", "flag": true, "xs": [1, "mixed"]}',
      '{"a": 1, "c": null, "xs": null}',
      '{"a": 1, "anything": {"k": [1]}}',
    ]) {
      expect(check(typed, json), json).toBeUndefined();
    }
  });

  it('names each wrong argument with what its hint expects and what came: no conversion, bool is not an int', () => {
    expect(check(typed, '{"a": "x"}')).toBe('The input does not fit typed: \'a\' must be int, got str "x"');
    expect(check(typed, '{"a": "3"}')).toBe('The input does not fit typed: \'a\' must be int, got str "3"');
    expect(check(typed, '{"a": 3.0}')).toBe("The input does not fit typed: 'a' must be int, got float 3.0");
    expect(check(typed, '{"a": true}')).toBe("The input does not fit typed: 'a' must be int, got bool true");
    expect(check(typed, '{"a": 1, "b": false}')).toBe(
      "The input does not fit typed: 'b' must be float, got bool false",
    );
    expect(check(typed, '{"a": null}')).toBe("The input does not fit typed: 'a' must be int, got None");
    expect(check(typed, '{"a": 1, "xs": {"k": 1}}')).toBe(
      'The input does not fit typed: \'xs\' must be list or None, got dict {"k":1}',
    );
    // What came is cut short.
    expect(check(typed, `{"a": 1, "c": ["${'y'.repeat(100)}"]}`)).toBe(
      `The input does not fit typed: 'c' must be str or None, got list ["${'y'.repeat(55)}...`,
    );
  });

  it('names every missing and unexpected argument at once, with the ones it takes', () => {
    expect(check(typed, '{}')).toBe("The input does not fit typed: missing required argument 'a' (int)");
    expect(check(typed, '{"flag": 1, "zz": 2, "job": 3}')).toBe(
      "The input does not fit typed: missing required argument 'a' (int); 'flag' must be bool, got int 1; " +
        "unexpected arguments 'zz', 'job' (it takes: a, b, c, flag, xs, anything)",
    );
    const none: Signature = { params: [], inputs: [] };
    expect(check(none, '{}')).toBeUndefined();
    expect(check(none, '{"x": 1}')).toBe(
      "The input does not fit typed: unexpected argument 'x' (it takes: none)",
    );
  });

  it('takes any other key with **kwargs, and checks nothing without a scanned signature', () => {
    expect(check({ ...typed, varKeywords: true }, '{"a": 1, "zz": 2}')).toBeUndefined();
    expect(check({ ...typed, varKeywords: true }, '{"a": "x"}')).toContain("'a' must be int");
    expect(check({ params: ['a'] }, '{"a": "x", "zz": 1}')).toBeUndefined();
  });
});

describe('inputMismatch on a scanned signature, beside the worker', () => {
  it("calls a positional-only parameter's key unknown, as the worker's own check does (ferry/inputs.py)", async () => {
    const root = mkdtempSync(path.join(tmpdir(), 'dev-inputs-'));
    try {
      writeFileSync(
        path.join(root, 'pos.py'),
        'from ferry import Endpoint\n\n@Endpoint(name="pos", cpu="1-2")\ndef pos(a=1, /, b: int = 2):\n    return a\n',
      );
      const { endpoints } = await scanProject({ projectDir: root });
      const target = manifestEndpointSchema.parse(endpoints[0]).target!;
      const input = { a: 5, b: 3 };
      // The worker binds a job's input by keyword only: `a` is no key of its input.
      const worker = execFileSync(
        'python3',
        [
          '-c',
          'import inspect, json, sys; sys.path[:0] = sys.argv[1:3]; from ferry.inputs import input_problems; ' +
            'from pos import pos; print("; ".join(input_problems(inspect.signature(pos), json.loads(sys.argv[3]))))',
          path.resolve('worker-image/python'),
          root,
          JSON.stringify(input),
        ],
        { encoding: 'utf8', env: { ...process.env, FERRY_ENDPOINT_NAME: 'pos' } },
      ).trim();
      expect(worker).toBe("unexpected argument 'a' (it takes: b)");
      expect(inputMismatch(target, input, 'pos')).toBe(`The input does not fit pos: ${worker}`);
      expect(inputSchema(target, true)).toEqual({
        type: 'object',
        properties: { b: { type: 'integer', default: 2 } },
        additionalProperties: false,
      });
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('inputSchema', () => {
  it('shows in OpenAPI what is checked: types, None, required, and no other key unless **kwargs', () => {
    expect(inputSchema(typed, true)).toEqual({
      type: 'object',
      properties: {
        a: { type: 'integer' },
        b: { type: 'number', default: 1 },
        c: { type: 'string', nullable: true, default: null },
        flag: { type: 'boolean', default: false },
        xs: { type: 'array', nullable: true, default: null },
        anything: { default: null },
      },
      required: ['a'],
      additionalProperties: false,
    });
    expect(inputSchema({ ...typed, varKeywords: true }, true)).not.toHaveProperty('additionalProperties');
    // A load-balanced route's body is the runtime's to check (worker-image/python/ferry/lb.py).
    expect(inputSchema(typed, false)).not.toHaveProperty('additionalProperties');
  });

  it('shows the "method" a one-method class takes, optional and naming only its method, as inputMismatch takes it', () => {
    const sole: Signature = {
      params: ['x'],
      inputs: [{ name: 'x', required: true, type: 'integer' }],
      soleMethod: 'predict',
    };
    const method = {
      type: 'string',
      enum: ['predict'],
      description: "Optional: predict, the class's only method, which is called with or without this key",
    };
    expect(inputSchema(sole, true)).toEqual({
      type: 'object',
      properties: { x: { type: 'integer' }, method },
      required: ['x'],
      additionalProperties: false,
    });
    // An older scan without types: the names, and the key all the same.
    expect(inputSchema({ params: ['x'], soleMethod: 'predict' }, true)).toEqual({
      type: 'object',
      properties: { x: {}, method },
    });
    // What the schema offers passes the check, with the key and without; another method does not.
    expect(check(sole, '{"x": 1, "method": "predict"}')).toBeUndefined();
    expect(check(sole, '{"x": 1}')).toBeUndefined();
    expect(check(sole, '{"x": 1, "method": "embed"}')).toBe(
      "The input does not fit typed: unexpected argument 'method' (it takes: x)",
    );
    // A method whose own argument is named method: the schema is the argument's.
    const own: Signature = {
      ...sole,
      params: ['method'],
      inputs: [{ name: 'method', required: true, type: 'string' }],
    };
    expect(inputSchema(own, true)).toMatchObject({ properties: { method: { type: 'string' } } });
    expect((inputSchema(own, true).properties as Record<string, object>).method).not.toHaveProperty('enum');
  });
});
