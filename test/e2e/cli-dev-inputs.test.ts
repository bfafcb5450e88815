/**
 * `ferry dev` through the real binary and real Python workers, on what a Flash user sends a queue
 * route: an input that does not fit the function's signature (a wrong type, a missing or unknown
 * argument, an empty input) is a 422 {"error"} naming the argument, before any job is made, as Flash's
 * dev server answers it. A load-balanced route passes its body on to the worker's runtime, which checks
 * it by the same rule (worker-image/python/ferry/lb.py), there as on a deployed endpoint.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliSandbox, postJson as post } from './cli-support.js';

const sandbox = new CliSandbox();
let project = '';
let base = '';
let output: () => { stdout: string; stderr: string };

const typed = `from typing import Optional
from ferry import Endpoint


@Endpoint(name="typed", cpu="1-2")
def typed(a: int, b: float = 1.0, c: Optional[str] = None, flag: bool = False, xs: list[int] | None = None):
    return {"a": a, "b": b, "c": c, "flag": flag, "xs": xs}
`;

const loose = `from ferry import Endpoint


@Endpoint(name="loose", cpu="1-2")
def loose(n: int, **extra):
    return {"n": n, "extra": sorted(extra)}
`;

const single = `from ferry import Endpoint


@Endpoint(name="single", cpu="1-2")
class Single:
    def predict(self, x: int):
        return x * 2
`;

const adder = `from ferry import Endpoint

api = Endpoint(name="adder", cpu="1-2")


@api.post("/add")
def add(x: int, y: float = 0.0):
    return {"sum": x + y}
`;

beforeAll(async () => {
  project = path.join(sandbox.root, 'inputs');
  mkdirSync(project);
  writeFileSync(path.join(project, 'typed.py'), typed);
  writeFileSync(path.join(project, 'loose.py'), loose);
  writeFileSync(path.join(project, 'single.py'), single);
  writeFileSync(path.join(project, 'adder.py'), adder);
  writeFileSync(path.join(project, '.env'), 'FERRY_API_KEY=fy_dev_inputs\n');
  const started = await sandbox.start(
    ['dev', '--host', '127.0.0.1', '--port', '0', '--no-deps'],
    /Ferry dev server at (http:\/\/\S+)/,
    { cwd: project },
  );
  output = started.output;
  base = started.match[1]!;
});
afterAll(() => sandbox.cleanup());

/** The jobs of a live endpoint, through the management API the dev server passes on. */
async function jobsOf(endpoint: string): Promise<unknown[]> {
  const resources = JSON.parse(readFileSync(path.join(project, '.ferry', 'resources.json'), 'utf8'));
  const response = await fetch(`${base}/manage/v1/endpoints/${resources[endpoint].id}/jobs`);
  expect(response.status).toBe(200);
  return ((await response.json()) as { jobs: unknown[] }).jobs;
}

describe('ferry dev: a queue route checks its input against the signature', { timeout: 120_000 }, () => {
  it('answers 422 naming the argument, what it expects and what came, and makes no job', async () => {
    const good = await post(`${base}/typed/runsync`, '{"input": {"a": 3, "b": 2, "c": null, "xs": [1]}}');
    expect(good.status).toBe(200);
    expect(good.body).toMatchObject({
      status: 'COMPLETED',
      output: { a: 3, b: 2, c: null, flag: false, xs: [1] },
    });
    expect(await jobsOf('typed')).toHaveLength(1);

    for (const [input, error] of [
      ['{"a": "x"}', `'a' must be int, got str "x"`],
      ['{"a": "3"}', `'a' must be int, got str "3"`],
      ['{"a": true}', `'a' must be int, got bool true`],
      ['{"a": 1, "b": "2.5"}', `'b' must be float, got str "2.5"`],
      ['{"a": 1, "xs": "1,2"}', `'xs' must be list or None, got str "1,2"`],
      ['{"b": 2}', `missing required argument 'a' (int)`],
      ['{}', `missing required argument 'a' (int)`],
      ['{"a": 1, "zzz": 2}', `unexpected argument 'zzz' (it takes: a, b, c, flag, xs)`],
    ]) {
      const result = await post(`${base}/typed/runsync`, `{"input": ${input}}`);
      expect(result.status, input).toBe(422);
      expect(result.body, input).toEqual({ error: `The input does not fit typed: ${error}` });
    }
    // A key is the caller's words: on the terminal its control characters are written out.
    const hostile = await post(`${base}/typed/runsync`, '{"input": {"a": 1, "\\u001b[2Jred\\u009b": 2}}');
    expect(hostile.body.error).toContain("unexpected argument '\u001b[2Jred\u009b'");
    // Before any job was made: the one from the first call is all there is.
    expect(await jobsOf('typed')).toHaveLength(1);
    expect(output().stderr).toContain(
      `POST /typed/runsync → 422 The input does not fit typed: 'a' must be int, got str "x"`,
    );
    expect(output().stderr).toContain(
      "→ 422 The input does not fit typed: unexpected argument '\\x1b[2Jred\\x9b'",
    );
  });

  it('takes any other argument where the function has **kwargs, and still checks the typed ones', async () => {
    const result = await post(`${base}/loose/runsync`, '{"input": {"n": 1, "extra_one": true}}');
    expect(result.body).toMatchObject({ status: 'COMPLETED', output: { n: 1, extra: ['extra_one'] } });
    const wrong = await post(`${base}/loose/runsync`, '{"input": {"n": 1.5}}');
    expect(wrong).toEqual({
      status: 422,
      body: { error: "The input does not fit loose: 'n' must be int, got float 1.5" },
    });
  });

  it("checks a class with one public method against that method's arguments", async () => {
    const result = await post(`${base}/single/runsync`, '{"input": {"x": 21}}');
    expect(result.body).toMatchObject({ status: 'COMPLETED', output: 42 });
    const wrong = await post(`${base}/single/runsync`, '{"input": {"x": "21", "self": 1}}');
    expect(wrong).toEqual({
      status: 422,
      body: {
        error: `The input does not fit single: 'x' must be int, got str "21"; unexpected argument 'self' (it takes: x)`,
      },
    });
  });

  it('takes a "method" naming the one method of a class, as its worker does, and refuses one naming another', async () => {
    const named = await post(`${base}/single/runsync`, { input: { x: 21, method: 'predict' } });
    expect(named.body).toMatchObject({ status: 'COMPLETED', output: 42 });
    const other = await post(`${base}/single/runsync`, { input: { x: 21, method: 'embed' } });
    expect(other).toEqual({
      status: 422,
      body: { error: "The input does not fit single: unexpected argument 'method' (it takes: x)" },
    });
  });

  it('shows in /docs what it checks: the types, None where allowed, no other argument', async () => {
    const spec = (await (await fetch(`${base}/openapi.json`)).json()) as any;
    const input =
      spec.paths['/typed/runsync'].post.requestBody.content['application/json'].schema.properties.input;
    expect(input).toMatchObject({
      required: ['a'],
      additionalProperties: false,
      properties: { a: { type: 'integer' }, c: { type: 'string', nullable: true, default: null } },
    });
  });

  it('shows in /docs the "method" a one-method class takes, optional, naming only its method', async () => {
    const spec = (await (await fetch(`${base}/openapi.json`)).json()) as any;
    const input =
      spec.paths['/single/runsync'].post.requestBody.content['application/json'].schema.properties.input;
    expect(input.properties.method).toEqual({
      type: 'string',
      enum: ['predict'],
      description: "Optional: predict, the class's only method, which is called with or without this key",
    });
    expect(input.required).toEqual(['x']);
    expect(input.additionalProperties).toBe(false);
  });
});

describe("ferry dev: a load-balanced route's worker checks its body against the signature", {
  timeout: 120_000,
}, () => {
  it('answers 400 naming each value of another type than its hint, where the handler would have failed', async () => {
    expect(await post(`${base}/adder/add`, '{"x": 2, "y": 1}')).toMatchObject({
      status: 200,
      body: { sum: 3 },
    });
    const wrong = await post(`${base}/adder/add`, '{"x": "abc", "y": true}');
    expect(wrong).toMatchObject({
      status: 400,
      body: {
        error: `bad parameters for POST /add: 'x' must be int, got str "abc"; 'y' must be float, got bool true`,
      },
    });
  });

  it("names every missing and unknown key of a body in one 400, in the words of a queue route's check", async () => {
    // Not Python's first bind() problem ("missing a required argument: 'x'") alone.
    expect(await post(`${base}/adder/add`, '{"y": "1", "z": 1, "w": 2}')).toMatchObject({
      status: 400,
      body: {
        error:
          "bad parameters for POST /add: missing required argument 'x' (int); " +
          `'y' must be float, got str "1"; unexpected arguments 'z', 'w' (it takes: x, y)`,
      },
    });
    expect(await post(`${base}/adder/add`, '{"x": 2}')).toMatchObject({ status: 200, body: { sum: 2 } });
  });
});
