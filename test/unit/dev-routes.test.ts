/**
 * The dev server's route table (devRoutes, cli/dev/server.ts) from files the real scanner read
 * (scan.py through real python3): queue routes named as Flash's dev server names them, by the
 * file's callables (docs/python.md, "The ferry dev loop"), and the class kept in the route only
 * where two callables of a file share a name.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { type DevRoute, devRoutes } from '../../cli/dev/server.js';

const root = mkdtempSync(path.join(tmpdir(), 'wb-dev-routes-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const files: Record<string, string> = {
  'single.py': `from ferry import Endpoint


@Endpoint(name="single", cpu="1-2")
def single(x: int):
    return x
`,
  'lone.py': `from ferry import Endpoint


@Endpoint(name="lone", cpu="1-2")
class Lone:
    def only(self, x: int):
        """The one method."""
        return x
`,
  'model.py': `from ferry import Endpoint


@Endpoint(name="model", cpu="1-2")
class Model:
    def predict(self, x: int):
        return x

    def embed(self, text: str):
        return text
`,
  'app.py': `from ferry import Endpoint


@Endpoint(name="hello", cpu="1-2")
def hello(name: str):
    return name


@Endpoint(name="model2", cpu="1-2")
class Model:
    def predict(self, x: int):
        return x

    def embed(self, text: str):
        return text


@Endpoint(name="one", cpu="1-2")
class One:
    def run(self):
        return 1
`,
  'clash.py': `from ferry import Endpoint


@Endpoint(name="clash_a", cpu="1-2")
class A:
    def predict(self, x: int):
        return x

    def embed(self, text: str):
        return text


@Endpoint(name="clash_b", cpu="1-2")
class B:
    def predict(self, x: int):
        return x

    def score(self):
        return 0


@Endpoint(name="clash_fn", cpu="1-2")
def embed(text: str):
    return text
`,
};
let table: DevRoute[] = [];
beforeAll(async () => {
  for (const [name, text] of Object.entries(files)) writeFileSync(path.join(root, name), text);
  table = devRoutes((await scanProject({ projectDir: root })).endpoints);
});
const byPath = () =>
  Object.fromEntries(
    table.map((r) => [r.path, { endpoint: r.endpoint, classMethod: r.classMethod, note: r.note }]),
  );

describe('devRoutes: queue routes', () => {
  it("a file with one callable gets /<module>/runsync; several, /<module>/<function or method>/runsync, as Flash's", async () => {
    const routes = byPath();
    expect(routes['/single/runsync']).toEqual({ endpoint: 'single' });
    // A class with one method is one callable: it dispatches to it without "method".
    expect(routes['/lone/runsync']).toEqual({ endpoint: 'lone' });
    expect(routes['/model/predict/runsync']).toEqual({ endpoint: 'model', classMethod: 'predict' });
    expect(routes['/model/embed/runsync']).toEqual({ endpoint: 'model', classMethod: 'embed' });
    // Functions and class methods of one file side by side, the class not in the route.
    expect(routes['/app/hello/runsync']).toEqual({ endpoint: 'hello' });
    expect(routes['/app/predict/runsync']).toEqual({ endpoint: 'model2', classMethod: 'predict' });
    expect(routes['/app/embed/runsync']).toEqual({ endpoint: 'model2', classMethod: 'embed' });
    expect(routes['/app/run/runsync']).toEqual({ endpoint: 'one' });
    expect(Object.keys(routes).filter((p) => p.startsWith('/app/'))).toHaveLength(4);
  });

  it('keeps the class in the route of the methods whose name another callable of the file has, and says why', async () => {
    const routes = byPath();
    const note = (method: string) =>
      `more than one callable of clash.py is named ${method.split('.')[1]}: ${method} keeps its class in the route`;
    expect(Object.fromEntries(Object.entries(routes).filter(([p]) => p.startsWith('/clash/')))).toEqual({
      '/clash/A/predict/runsync': { endpoint: 'clash_a', classMethod: 'predict', note: note('A.predict') },
      '/clash/A/embed/runsync': { endpoint: 'clash_a', classMethod: 'embed', note: note('A.embed') },
      '/clash/B/predict/runsync': { endpoint: 'clash_b', classMethod: 'predict', note: note('B.predict') },
      // Its name is the file's only score: named as Flash names it.
      '/clash/score/runsync': { endpoint: 'clash_b', classMethod: 'score' },
      // A function has no class to keep: it has the plain route.
      '/clash/embed/runsync': { endpoint: 'clash_fn' },
    });
  });

  it("documents a method's own summary and parameters", async () => {
    const lone = table.find((r) => r.path === '/lone/runsync')!;
    expect(lone.summary).toBe('The one method.');
    expect(lone.params).toEqual(['x']);
  });
});
