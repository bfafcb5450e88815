/**
 * The curl line `ferry deploy` prints: its body (sampleInput, from what the real scanner records of
 * each handler's parameters) and the shell word that sends the key (apiKeyInShell), run through a
 * real shell.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { scanProject } from '../../cli/build/scan.js';
import { apiKeyInShell } from '../../cli/config.js';
import { sampleInput } from '../../cli/deploy/plan.js';

const tempDirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(path.join(tmpdir(), "deploy-curl-it's "));
  tempDirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

describe('sampleInput: a placeholder for each required parameter only', () => {
  it('leaves out defaults and the keyword-only job, and sends {} when nothing is required', async () => {
    const root = tempDir();
    writeFileSync(
      path.join(root, 'fns.py'),
      `from ferry import Endpoint

@Endpoint(name="sleepy", cpu="2-8")
def sleepy(sleep=0):
    return sleep

@Endpoint(name="jobonly", cpu="2-8")
async def jobonly(*, job):
    return job["id"]

@Endpoint(name="mixed", cpu="2-8")
def mixed(prompt, steps=20, *, seed=None, job):
    return prompt

@Endpoint(name="three", cpu="2-8")
def three(a, b, c):
    return a

@Endpoint(name="data", cpu="2-8")
def data(input_data: dict, verbose=False):
    return input_data

@Endpoint(name="Many", cpu="2-8")
class Many:
    def first(self, text, n=1):
        return text

    def second(self):
        return 1

@Endpoint(name="One", cpu="2-8")
class One:
    def only(self, limit=3):
        return limit

api = Endpoint(name="api", cpu="2-8")

@api.post("/go")
def go(item, count: int = 1):
    return item
`,
    );
    const manifest = await scanProject({ projectDir: root });
    const byName = Object.fromEntries(manifest.endpoints.map((e) => [e.name, e]));
    const sample = (name: string) => sampleInput(byName[name]!.target);
    expect(sample('sleepy')).toEqual({});
    expect(sample('jobonly')).toEqual({});
    expect(sample('mixed')).toEqual({ prompt: 'world' });
    expect(sample('three')).toEqual({ a: 'world', b: 'world', c: 'world' });
    expect(sample('data')).toEqual({ input_data: { message: 'hello' } });
    expect(sample('Many')).toEqual({ method: 'first', text: 'world' });
    expect(sample('One')).toEqual({});
    expect(sampleInput(byName.api!.routes![0])).toEqual({ item: 'world' });
  });

  it('gives each placeholder its type hint\'s JSON type: add(a: int, b: int) is sent numbers, not "world"', async () => {
    const root = tempDir();
    writeFileSync(
      path.join(root, 'fns.py'),
      `from typing import Optional
from ferry import Endpoint

@Endpoint(name="add", cpu="2-8")
def add(a: int, b: int) -> dict:
    return {"sum": a + b}

@Endpoint(name="typed", cpu="2-8")
def typed(x: float, flag: bool, opts: dict, items: list[str], text: str, label: Optional[str], other):
    return x
`,
    );
    const manifest = await scanProject({ projectDir: root });
    const byName = Object.fromEntries(manifest.endpoints.map((e) => [e.name, e]));
    expect(sampleInput(byName.add!.target)).toEqual({ a: 1, b: 1 });
    expect(sampleInput(byName.typed!.target)).toEqual({
      x: 1,
      flag: true,
      opts: {},
      items: [],
      text: 'world',
      label: 'world',
      other: 'world',
    });
  });

  it('a manifest without inputs (older scanner) still never sends job', () => {
    expect(sampleInput({ name: 'f', params: ['self', 'prompt', 'job'] })).toEqual({ prompt: 'world' });
    expect(sampleInput(undefined)).toEqual({});
  });
});

describe('apiKeyInShell: the printed line sends the key the CLI uses, without printing it', () => {
  // Runs `printf %s <word>` the way a pasted line would, with only PATH in the environment.
  const expand = (word: string, env: Record<string, string> = {}) =>
    execFileSync('sh', ['-c', `printf %s "${word}"`], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env },
      encoding: 'utf8',
    });

  it('$FERRY_API_KEY when the environment has it', () => {
    expect(apiKeyInShell({ FERRY_API_KEY: 'fy_env' }, tempDir(), '/nowhere/api-key')).toBe('$FERRY_API_KEY');
  });

  it('FERRY_HOME/api-key read where it is pasted, from a path with spaces and a quote', () => {
    const home = tempDir();
    const keyFile = path.join(home, 'api-key');
    writeFileSync(keyFile, 'fy_from_file\n');
    const word = apiKeyInShell({}, tempDir(), keyFile);
    expect(word).not.toContain('fy_from_file');
    expect(expand(word)).toBe('fy_from_file');
  });

  it("the project's .env when only it has the key", () => {
    const project = tempDir();
    mkdirSync(project, { recursive: true });
    // A line that is not valid shell: sourcing the file would run `touch` here.
    writeFileSync(
      path.join(project, '.env'),
      `# keys\nOTHER=two touch ${path.join(project, 'ran')}\nexport FERRY_API_KEY="fy_from_dotenv"\n`,
    );
    const word = apiKeyInShell({}, project, '/nowhere/api-key');
    expect(word).not.toContain('fy_from_dotenv');
    expect(expand(word)).toBe('fy_from_dotenv');
    expect(existsSync(path.join(project, 'ran'))).toBe(false);
  });

  it('$FERRY_API_KEY where there is no key at all (AWS before `ferry keys create`)', () => {
    expect(apiKeyInShell({}, tempDir())).toBe('$FERRY_API_KEY');
  });
});
