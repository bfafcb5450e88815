/**
 * The spec's worked cases end to end on the local provider: examples/image-workflow (§2.1, §2.5) and
 * examples/text-stream (§2.1, §2.2), each run by real Python workers through run, runsync and stream.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { inflateSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { recordFor } from '../support/endpoints.js';
import { call, startTestPlatform, type TestPlatform } from '../support/platform.js';

let platform: TestPlatform;
let base: string;
const sample = JSON.parse(readFileSync('examples/image-workflow/workflow_api.json', 'utf8'));

beforeAll(async () => {
  platform = await startTestPlatform({
    workers: { ferryPythonPath: resolve('worker-image/python'), tickMs: 100, drainMs: 2_000 },
  });
  base = platform.baseUrl;
  for (const dir of ['examples/image-workflow', 'examples/text-stream']) {
    const codeDir = resolve(dir);
    const { endpoints } = await scanProject({ projectDir: codeDir });
    for (const endpoint of endpoints) await platform.db.control.putEndpoint(recordFor(endpoint, codeDir));
  }
  await platform.workers!.reconcile();
});
afterAll(async () => {
  await platform?.stop();
});

/** Decodes a PNG enough to check it: signature, IHDR size, and that the pixel data inflates fully. */
function decodePng(dataUri: string) {
  const comma = dataUri.indexOf(',');
  const png = Buffer.from(comma >= 0 ? dataUri.slice(comma + 1) : dataUri, 'base64');
  expect(png.subarray(0, 8)).toEqual(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]));
  const width = png.readUInt32BE(16);
  const height = png.readUInt32BE(20);
  const channels = png[25] === 6 ? 4 : 3;
  const idat: Buffer[] = [];
  for (let at = 8; at < png.length; ) {
    const length = png.readUInt32BE(at);
    if (png.toString('latin1', at + 4, at + 8) === 'IDAT') idat.push(png.subarray(at + 8, at + 8 + length));
    at += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  expect(raw.length).toBe(height * (1 + width * channels));
  return { width, height, png };
}

function workflow(patch: { width?: number; height?: number; batch?: number; seed?: number }) {
  const w = structuredClone(sample);
  if (patch.width) w['5'].inputs.width = patch.width;
  if (patch.height) w['5'].inputs.height = patch.height;
  if (patch.batch) w['5'].inputs.batch_size = patch.batch;
  if (patch.seed !== undefined) w['3'].inputs.seed = patch.seed;
  return w;
}

describe('image workflow', () => {
  it('runsync returns PNGs of the requested size and count', async () => {
    const r = await call(base, 'POST', '/image-workflow/runsync', {
      input: { workflow: workflow({ width: 320, height: 192, batch: 2 }) },
    });
    expect(r.body.status).toBe('COMPLETED');
    expect(r.body.output.images).toHaveLength(2);
    for (const image of r.body.output.images) {
      expect(image.data).toMatch(/^data:image\/png;base64,/);
      expect(decodePng(image.data)).toMatchObject({ width: 320, height: 192 });
    }
  });

  it('the same seed gives the same image; another seed another', async () => {
    const png = async (seed: number) => {
      const { body } = await call(base, 'POST', '/image-workflow/run', {
        input: { workflow: workflow({ seed }) },
      });
      let status = body.status;
      let result: any;
      while (status !== 'COMPLETED' && status !== 'FAILED') {
        result = (await call(base, 'POST', `/image-workflow/status-sync/${body.id}?wait=5000`)).body;
        status = result.status;
      }
      return decodePng(result.output.images[0].data).png;
    };
    const a = await png(7);
    const b = await png(7);
    const c = await png(8);
    expect(a.equals(b)).toBe(true);
    expect(a.equals(c)).toBe(false);
  });

  it('answers the message shape of §2.1 on request', async () => {
    const r = await call(base, 'POST', '/image-workflow/runsync', {
      input: { workflow: workflow({ width: 64, height: 64 }), output_format: 'message' },
    });
    expect(r.body.output.status).toBe('success');
    expect(decodePng(r.body.output.message)).toMatchObject({ width: 64, height: 64 });
  });

  it.each([
    ['an unknown node type', (w: any) => (w['3'].class_type = 'Upscale9000'), /node '3'.*Upscale9000/],
    ['a link to a missing node', (w: any) => (w['8'].inputs.samples = ['42', 0]), /node '8'.*'42'/],
    ['a missing input', (w: any) => delete w['5'].inputs.width, /node '5'.*width/],
  ])('a workflow with %s fails naming the node', async (_name, spoil, message) => {
    const w = workflow({});
    spoil(w);
    const r = await call(base, 'POST', '/image-workflow/runsync', { input: { workflow: w } });
    expect(r.body.status).toBe('FAILED');
    expect(r.body.error).toMatch(message);
  });
});

describe('text stream', () => {
  it('streams §2.2 chunks and ends with the §2.1 text shape', async () => {
    const { body } = await call(base, 'POST', '/text-stream/run', {
      input: { prompt: 'tell me about rivers', max_tokens: 12, chunk_size: 4, token_delay_ms: 1 },
    });
    const chunks: any[] = [];
    let status = '';
    while (status !== 'COMPLETED' && status !== 'FAILED') {
      const r = await call(base, 'GET', `/text-stream/stream/${body.id}`);
      status = r.body.status;
      chunks.push(...r.body.stream);
    }
    expect(chunks.length).toBe(3);
    for (const [i, chunk] of chunks.entries()) {
      expect(Object.keys(chunk).sort()).toEqual(['metrics', 'output']);
      expect(chunk.output).toMatchObject({
        input_tokens: expect.any(Number),
        output_tokens: expect.any(Number),
        text: expect.any(Array),
      });
      expect(chunk.metrics.stream_index).toBe(i);
      expect(typeof chunk.metrics.scenario).toBe('string');
    }
    const done = await call(base, 'GET', `/text-stream/status/${body.id}`);
    expect(done.body.output).toMatchObject({ input_tokens: expect.any(Number), output_tokens: 12 });
    expect(done.body.output.text.join('')).toBe(chunks.map((c) => c.output.text.join('')).join(''));
  });

  it('runsync returns the final text object', async () => {
    const r = await call(base, 'POST', '/text-stream/runsync', {
      input: { prompt: 'hi', max_tokens: 5, token_delay_ms: 1 },
    });
    expect(r.body).toMatchObject({ status: 'COMPLETED', output: { output_tokens: 5 } });
    expect(Array.isArray(r.body.output.text)).toBe(true);
  });
});
