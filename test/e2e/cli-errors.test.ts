/** The CLI error cases (docs/architecture.md#the-cli), through the real binary: message, hint, exit code. */
import { copyFileSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closedPort } from '../support/closed-port.js';
import { CliSandbox } from './cli-support.js';

const sandbox = new CliSandbox();
let project = '';

beforeAll(async () => {
  const init = await sandbox.run(['init', 'errs']);
  expect(init.code).toBe(0);
  project = path.join(sandbox.root, 'errs');
});
afterAll(() => sandbox.cleanup());

const noStack = (stderr: string) => expect(stderr).not.toMatch(/\n\s+at .+:\d+:\d+/);

/**
 * No region and no credentials from any source of the AWS SDK's chains (environment, ~/.aws files,
 * instance metadata): --provider aws stops at once.
 */
const offlineAws = {
  AWS_REGION: undefined,
  AWS_DEFAULT_REGION: undefined,
  AWS_PROFILE: undefined,
  AWS_ACCESS_KEY_ID: undefined,
  AWS_SECRET_ACCESS_KEY: undefined,
  AWS_SESSION_TOKEN: undefined,
  AWS_CONFIG_FILE: '/nonexistent/ferry-aws-config',
  AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/ferry-aws-credentials',
  AWS_EC2_METADATA_DISABLED: 'true',
};

/**
 * The forms already run by a test of this file: several hints give the same one (`ferry env list
 * --json`), and whether its words read does not change between tests. Each run of ferry costs a
 * second or more on a busy machine.
 */
const formsRead = new Set<string>();

/**
 * Each form a hint gives is a command line the CLI reads: no usage error of its words, for each of an
 * option's choices (`local|aws`). Offline: --provider aws stops at the missing region.
 */
async function expectFormsRead(hint: string): Promise<void> {
  for (const [, line] of hint.matchAll(/`ferry ([^`]+)`/g)) {
    if (line!.endsWith('--help')) continue;
    if (formsRead.has(line!)) continue;
    formsRead.add(line!);
    const words = line!.match(/'[^']*'|\S+/g)!.map((w) => w.replace(/^'(.*)'$/, '$1'));
    const choices = words.find((w) => /^\w+(\|\w+)+$/.test(w));
    for (const choice of choices ? choices.split('|') : [undefined]) {
      const suggested = await sandbox.run(
        words.map((w) => (w === choices ? choice! : w)),
        { cwd: project, env: offlineAws },
      );
      expect(suggested.stderr, `${line} (${choice})`).not.toMatch(
        /read as (the value|an argument)|came before the command|Unknown (command|argument)|needs /,
      );
    }
  }
}

/** `args` exits 2 with exactly this message and hint on stderr, nothing on stdout, and the hint's forms read. */
async function expectRefused(args: readonly string[], message: string, hint: string): Promise<void> {
  const result = await sandbox.run([...args], { cwd: project });
  expect(result.code, args.join(' ')).toBe(2);
  expect(result.stderr).toBe(`Error: ${message}\n  hint: ${hint}\n`);
  expect(result.stdout).toBe('');
  await expectFormsRead(hint);
}

describe('ferry errors', () => {
  it('deploy with several environments and no --env: "Error: Multiple environments found: a, b", exit 2, before the build', async () => {
    expect((await sandbox.run(['env', 'create', 'staging', '--app', 'errs'])).code).toBe(0);
    expect((await sandbox.run(['env', 'create', 'dev', '--app', 'errs'])).code).toBe(0);
    const result = await sandbox.run(['deploy', '--no-serve'], { cwd: project });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('Error: Multiple environments found: dev, staging\n');
    expect(result.stderr).toContain('hint: Choose one with --env <name>');
    expect(result.stdout).not.toContain('Deployed');
    // Refused before the build, which can take minutes: no build stage, no artifact.
    expect(result.stderr).not.toContain('[1/5] Build');
    expect(existsSync(path.join(project, '.ferry', 'artifact.tar.gz'))).toBe(false);
    noStack(result.stderr);
  });

  it('a deployment over the size limit fails with the --exclude <packages> hint', async () => {
    const result = await sandbox.run(['build'], { cwd: project, env: { FERRY_MAX_ARTIFACT_BYTES: '200' } });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/Error: The deployment is too large/);
    expect(result.stderr).toContain('--exclude <packages>');
    const hidden = await sandbox.run(['build', '--max-artifact-bytes', '200'], { cwd: project });
    expect(hidden.code).toBe(1);
    expect(hidden.stderr).toContain('--exclude <packages>');
  });

  it('init over existing files without --force shows the confirmation prompt', async () => {
    const result = await sandbox.run(['init', 'errs'], { input: '\n' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('Overwrite them? [y/N]');
  });

  it('dev without FERRY_API_KEY (environment or .env) fails clearly, exit 2', async () => {
    const result = await sandbox.run(['dev', '--port', '0'], { cwd: project });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('Error: FERRY_API_KEY is not set');
    expect(result.stderr).toContain('hint: Copy .env.example to .env');
    noStack(result.stderr);
    // .env.example copied as it is: the line is there, holding the template's placeholder.
    copyFileSync(path.join(project, '.env.example'), path.join(project, '.env'));
    const copied = await sandbox.run(['dev', '--port', '0'], { cwd: project });
    rmSync(path.join(project, '.env'));
    expect(copied.code).toBe(2);
    expect(copied.stderr).toContain("Error: FERRY_API_KEY in .env is still the placeholder '...'");
    expect(copied.stderr).toContain('hint: Set it to a key of your own in .env');
    // In a folder that is no project, that comes first: the key would not help.
    const empty = path.join(sandbox.root, 'no-project');
    mkdirSync(empty);
    const elsewhere = await sandbox.run(['dev', '--port', '0'], { cwd: empty });
    expect(elsewhere.code).toBe(2);
    expect(elsewhere.stderr).toContain('Error: No endpoints found in this folder');
  });

  it("dev in a project written for Flash (from runpod_flash import Endpoint) says to import ferry's, exit 2", async () => {
    const flash = path.join(sandbox.root, 'flash-project');
    mkdirSync(flash);
    writeFileSync(
      path.join(flash, 'gpu_worker.py'),
      'from runpod_flash import Endpoint\n\n@Endpoint(name="w")\ndef f(x):\n    return x\n',
    );
    const result = await sandbox.run(['dev', '--port', '0'], { cwd: flash });
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      'Error: No endpoints found in this folder: gpu_worker.py imports from runpod_flash, not ferry\n' +
        "  hint: Change the import to `from ferry import Endpoint`: Ferry finds the endpoints that ferry's Endpoint declares.\n",
    );
  });

  it("dev in a project whose two files come out at one route (app.py's hello beside app/hello.py) names both and the route, exit 2", async () => {
    const clash = path.join(sandbox.root, 'clash-project');
    mkdirSync(path.join(clash, 'app'), { recursive: true });
    const fn = (endpoint: string, name: string) =>
      `\n\n@Endpoint(name="${endpoint}", cpu="1-2")\ndef ${name}(x: int):\n    return x\n`;
    const file = (...fns: string[]) => `from ferry import Endpoint\n${fns.join('\n')}`;
    writeFileSync(path.join(clash, 'app.py'), file(fn('hello', 'hello'), fn('bye', 'bye')));
    writeFileSync(path.join(clash, 'app', 'hello.py'), file(fn('other', 'greet')));
    writeFileSync(path.join(clash, '.env'), 'FERRY_API_KEY=fy_dev_clash\n');
    const result = await sandbox.run(['dev', '--port', '0', '--no-deps'], { cwd: clash });
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      'Error: Two routes are POST /app/hello/runsync: hello of app.py and greet of app/hello.py. ' +
        "Rename one of them or its file: a file's one callable is at /<module>/runsync, several at /<module>/<function or method>/runsync, a load-balanced route at /<module><path>\n" +
        '  hint: Rename one, then run ferry dev again.\n',
    );
    expect(result.stdout).toBe('');
  });

  it("a bad flag or value names the flag as typed and the failing command's own help", async () => {
    const bogus = await sandbox.run(['deploy', '--bogus'], { cwd: project });
    expect(bogus.code).toBe(2);
    expect(bogus.stderr).toBe('Error: Unknown argument: --bogus\n  hint: Run `ferry deploy --help`.\n');
    const nested = await sandbox.run(['env', 'create', 'x', '--nope=1', '-z'], { cwd: project });
    expect(nested.code).toBe(2);
    expect(nested.stderr).toBe(
      'Error: Unknown arguments: --nope, -z\n  hint: Run `ferry env create --help`.\n',
    );
    const value = await sandbox.run(['build', '--python-version', '2.7'], { cwd: project });
    expect(value.code).toBe(2);
    expect(value.stderr).toBe(
      'Error: Invalid values:\n  Argument: python-version, Given: "2.7", Choices: "3.10", "3.11", "3.12", "3.13"\n' +
        '  hint: Run `ferry build --help`.\n',
    );
  });

  it('unknown flags, commands and bad values are usage errors: exit 2, message and hint', async () => {
    for (const args of [
      ['deploy', '--bogus'],
      ['frobnicate'],
      ['build', '--python-version', '2.7'],
      ['--provider', 'gcp', 'app', 'list'],
      ['serve', '--worker-uids', '5-10'],
      ['serve', '--worker-uids', 'lots'],
      ['serve', '--worker-user', 'nobody', '--worker-uids', '200000-200099'],
      // No such user: the error alone, without id(1)'s own line before it.
      ['serve', '--worker-user', 'no-such-user-of-ferry'],
      // Ports: refused where the flag is read, not by listen() as if Ferry had a bug.
      ['serve', '--port', '99999'],
      ['serve', '--port', '8000', '--port', '8001'],
      ['dev', '--port', 'abc'],
      ['console', '--port', '-1'],
      ['dev', '--port'],
    ]) {
      const result = await sandbox.run(args, { cwd: project });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toMatch(/^Error: /);
      expect(result.stderr).toContain('hint:');
      expect(result.stderr).not.toContain('looks like a bug');
      noStack(result.stderr);
    }
  });

  it('a FERRY_HOME that cannot be a folder, a FERRY_PORT that is no port, or a --host not on this machine: exit 2, not "a bug in Ferry"', async () => {
    const file = path.join(project, 'not-a-folder');
    writeFileSync(file, 'x');
    for (const home of [file, path.join(file, 'below')]) {
      const result = await sandbox.run(['app', 'list'], { cwd: project, env: { FERRY_HOME: home } });
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toContain(`Error: Cannot use ${home} as Ferry's folder`);
      expect(result.stderr).toContain('hint: Set FERRY_HOME to a folder you can write');
    }
    // FERRY_PORT is read wherever a platform would listen: a value that is no port is said, not
    // swapped for 8888 behind the user's back.
    for (const args of [['serve'], ['deploy', '--env', 'dev']]) {
      const result = await sandbox.run(args, { cwd: project, env: { FERRY_PORT: '88a8' } });
      expect(result.code, `${args.join(' ')}: ${result.stderr}`).toBe(2);
      expect(result.stderr).toContain('Error: FERRY_PORT="88a8" is not a port');
      expect(result.stderr).toContain('hint: Set it to a whole number from 1 to 65535');
      noStack(result.stderr);
    }
    const serve = await sandbox.run(['serve', '--host', '203.0.113.1', '--port', '0'], { cwd: project });
    expect(serve.code, serve.stderr).toBe(2);
    expect(serve.stderr).toContain(
      'Error: Cannot listen on 203.0.113.1: it is not an address of this machine',
    );
  });

  it('a malformed requirements.txt line stops build and dev at requirements.txt:LINE, exit 2, before pip', async () => {
    expect((await sandbox.run(['init', 'reqs'])).code).toBe(0);
    const reqs = path.join(sandbox.root, 'reqs');
    writeFileSync(
      path.join(reqs, 'requirements.txt'),
      '# deps\n--index-url https://pypi.org/simple\nrequests ;;\n',
    );
    for (const args of [['build'], ['dev', '--no-reload']]) {
      const result = await sandbox.run(args, { cwd: reqs, timeoutMs: 30_000 });
      expect(result.code, `${args.join(' ')}: ${result.stderr}`).toBe(2);
      expect(result.stderr).toContain(
        `requirements.txt:3: 'requests ;;' is not a valid requirement (';' is not an environment marker`,
      );
      expect(result.stderr).toContain('write a pip requirement such as "torch>=2.1" or "pillow"');
      expect(result.stderr).toContain('hint: ');
      expect(result.stderr).not.toContain('Traceback');
      expect(result.stderr).not.toContain('pip could not install');
      noStack(result.stderr);
    }
  });

  it('a reader that closes stdout early (`ferry app list | head -1`) ends ferry quietly, exit 0, no stack trace', async () => {
    for (const args of [
      ['sdk', 'path'],
      ['app', 'list'],
    ]) {
      // Closed before the child can write anything (starting node takes far longer): its first
      // write to stdout meets a pipe with no reader, which is what `| head -1` leaves once head is done.
      const result = await sandbox.run(args, { cwd: project, onSpawn: (child) => child.stdout!.destroy() });
      expect(result.stderr, args.join(' ')).not.toContain('EPIPE');
      noStack(result.stderr);
      expect(result.code, args.join(' ')).toBe(0);
    }
  });

  it('logs checks --since before it looks for a server', async () => {
    const result = await sandbox.run(['logs', 'cpu_worker', '--since', 'garbage'], { cwd: project });
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(
      "Error: --since takes a duration like 10m, 2h or 1d, or a date; got 'garbage'",
    );
  });

  it("an unknown command names the word that is unknown and the group it was typed in, with that group's --help", async () => {
    for (const [args, message, hint] of [
      [['deplyo'], "Unknown command 'deplyo'", 'Did you mean deploy? Run `ferry --help`.'],
      [['env', 'lst'], "Unknown command 'lst' for `ferry env`", 'Did you mean list? Run `ferry env --help`.'],
      [
        ['env', 'delet', 'staging'],
        "Unknown command 'delet' for `ferry env`",
        'Did you mean delete? Run `ferry env --help`.',
      ],
      [
        ['--provider', 'local', 'app', 'lst'],
        "Unknown command 'lst' for `ferry app`",
        'Did you mean list? Run `ferry app --help`.',
      ],
      [['app', 'zzzqq'], "Unknown command 'zzzqq' for `ferry app`", 'Run `ferry app --help`.'],
      [
        ['keys', 'lst'],
        "Unknown command 'lst' for `ferry keys`",
        'Did you mean list? Run `ferry keys --help`.',
      ],
      // An option's value before the command is not the unknown word.
      [
        ['env', '--app', 'myapp', 'lst'],
        "Unknown command 'lst' for `ferry env`",
        'Did you mean list? Run `ferry env --help`.',
      ],
      [
        ['env', '-a', 'myapp', '--provider', 'local', 'lst'],
        "Unknown command 'lst' for `ferry env`",
        'Did you mean list? Run `ferry env --help`.',
      ],
      // An option that takes no value (the group's commands declare --json a boolean) takes no word.
      [
        ['env', '--json', 'lst'],
        "Unknown command 'lst' for `ferry env`",
        'Did you mean list? Run `ferry env --help`.',
      ],
      [
        ['app', '--json', 'lst'],
        "Unknown command 'lst' for `ferry app`",
        'Did you mean list? Run `ferry app --help`.',
      ],
      [['app', '--force', 'zzzqq'], "Unknown command 'zzzqq' for `ferry app`", 'Run `ferry app --help`.'],
      // --app takes a value, even a command's name: the word left after it is the command.
      [
        ['env', '--app', 'list', 'lst'],
        "Unknown command 'lst' for `ferry env`",
        'Did you mean list? Run `ferry env --help`.',
      ],
      [
        ['env', '-a', 'list', '--json', 'lst'],
        "Unknown command 'lst' for `ferry env`",
        'Did you mean list? Run `ferry env --help`.',
      ],
    ] as const) {
      const result = await sandbox.run([...args], { cwd: project });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toBe(`Error: ${message}\n  hint: ${hint}\n`);
    }
  });

  it("an option before a group's command: its value stays its own, and a command it took as its value is refused naming the form that works", async () => {
    // --app takes a value: the next free word is the command.
    const valued = await sandbox.run(['env', '--app', 'myapp', 'get', 'nope'], { cwd: project });
    expect(valued.code).toBe(2);
    expect(valued.stderr).toBe(
      "Error: No environment 'nope' in app 'myapp'\n  hint: See its environments with `ferry env list --app myapp`.\n",
    );
    // ...even when the value is a command's name, when another word is left for the command.
    const named = await sandbox.run(['env', '--app', 'list', 'get', 'prod'], { cwd: project });
    expect(named.code).toBe(2);
    expect(named.stderr).toBe(
      "Error: No environment 'prod' in app 'list'\n  hint: See its environments with `ferry env list --app list`.\n",
    );
    // yargs, where the group fails, does not know that its commands' --json or --force take none: it
    // took the command, and the error says where the option goes, not that the command was its value.
    for (const [args, message, hint] of [
      [
        ['app', '--json', 'list'],
        "--json came before the command 'list' of `ferry app`",
        'Give the command before its options: `ferry app list --json`. Run `ferry app --help`.',
      ],
      [
        ['env', '--json', 'list'],
        "--json came before the command 'list' of `ferry env`",
        'Give the command before its options: `ferry env list --json`. Run `ferry env --help`.',
      ],
      // A positional the command demands and no word gives gets a value to fill in.
      [
        ['app', '--json', 'get'],
        "--json came before the command 'get' of `ferry app`",
        'Give the command before its options: `ferry app get NAME --json`. Run `ferry app --help`.',
      ],
      // No word is left for the command: the option that takes a value took it, and gets one to fill in.
      [
        ['env', '--app', 'list'],
        "'list' after --app was read as the value of --app, not as the command of `ferry env`",
        'Give the command before its options: `ferry env list --app APP`. Run `ferry env --help`.',
      ],
      [
        ['env', '-a', 'list', '--json'],
        "'list' after -a was read as the value of -a, not as the command of `ferry env`",
        'Give the command before its options: `ferry env list -a APP --json`. Run `ferry env --help`.',
      ],
      [
        ['env', '--app', 'my app', '--force', 'delete', 'staging'],
        "--force came before the command 'delete' of `ferry env`",
        "Give the command before its options: `ferry env delete staging --app 'my app' --force`. Run `ferry env --help`.",
      ],
      [
        ['--json', 'keys', 'list'],
        "--json came before the command 'keys'",
        'Give the command before its options: `ferry keys list --json`. Run `ferry --help`.',
      ],
      // The command taken is a group and the word after it no command of it: the form that works
      // has the command that word is close to, as the group's own unknown-command error says.
      [
        ['--json', 'env', 'lst'],
        "Unknown command 'lst' for `ferry env`",
        'Did you mean list? Give the command before its options: `ferry env list --json`. Run `ferry env --help`.',
      ],
      [
        ['--json', 'app', 'gt'],
        "Unknown command 'gt' for `ferry app`",
        'Did you mean get? Give the command before its options: `ferry app get NAME --json`. Run `ferry app --help`.',
      ],
      // ...unless that command takes no such option: env delete takes no --json, and the error names it.
      [
        ['--json', 'env', 'delet', 'staging'],
        "Unknown command 'delet' for `ferry env`, and unknown argument --json",
        'Did you mean delete? Run `ferry env --help`.',
      ],
      // No word after the group: its commands, as `ferry keys` alone names them, and the form of
      // each that takes the options typed.
      [
        ['--json', 'keys'],
        '`ferry keys` needs a command: create, list, revoke',
        'Give the command before its options: `ferry keys create --json`, `ferry keys list --json` or `ferry keys revoke ID --json`. Run `ferry keys --help`.',
      ],
      [
        ['--json', 'env'],
        '`ferry env` needs a command: list, create, get, delete',
        'Give the command before its options: `ferry env list --json` or `ferry env get NAME --json`. Run `ferry env --help`.',
      ],
      // The value to fill in for an option with choices names them.
      [
        ['env', '--provider', 'list'],
        "'list' after --provider was read as the value of --provider, not as the command of `ferry env`",
        'Give the command before its options: `ferry env list --provider local|aws`. Run `ferry env --help`.',
      ],
    ] as const) {
      await expectRefused(args, message, hint);
    }
  }, 120_000); // dozens of runs of the binary (each refusal, the lines its hints give): room for a loaded machine

  it('a command after -- is refused, not skipped: words after -- are arguments, and the hint gives the line without it', async () => {
    for (const [args, message, hint] of [
      [
        ['--', 'env', 'list'],
        "'env' after -- was read as an argument, not as a command",
        'Leave out --: `ferry env list`. Run `ferry --help`.',
      ],
      [
        ['--json', '--', 'keys', 'list'],
        "'keys' after -- was read as an argument, not as a command",
        'Leave out --: `ferry keys list --json`. Run `ferry --help`.',
      ],
      [
        ['env', '--app', 'errs', '--', 'get', 'staging'],
        "'get' after -- was read as an argument, not as a command of `ferry env`",
        'Leave out --: `ferry env get staging --app errs`. Run `ferry env --help`.',
      ],
      [
        ['--', 'frobnicate'],
        "'frobnicate' after -- was read as an argument, not as a command",
        'Run `ferry --help`.',
      ],
    ] as const) {
      await expectRefused(args, message, hint);
    }
  });

  it('words after -- on a command without commands are refused, never taken or dropped: nothing is created', async () => {
    for (const [args, message, hint] of [
      [
        ['env', 'get', '--app', 'errs', '--', 'staging'],
        "'staging' after -- was read as an argument, not as the <name> of `ferry env get`",
        'Leave out --: `ferry env get staging --app errs`. Run `ferry env get --help`.',
      ],
      [
        ['env', 'create', '--app', 'errs', '--', '-x'],
        "'-x' after -- was read as an argument, not as the <name> of `ferry env create`",
        "No <name> starts with '-'. Run `ferry env create --help`.",
      ],
      [
        ['app', 'create', '--', '-x'],
        "'-x' after -- was read as an argument, not as the <name> of `ferry app create`",
        "No <name> starts with '-'. Run `ferry app create --help`.",
      ],
      [
        ['env', 'create', 'dropped', '--app', 'errs', '--', 'prod'],
        "'prod' after -- was read as an argument, and `ferry env create` takes no more than <name>",
        'Run `ferry env create --help`.',
      ],
      [
        ['keys', 'revoke', '--', 'k1', 'k2'],
        "'k1' after -- was read as an argument, not as the <id> of `ferry keys revoke`",
        'Run `ferry keys revoke --help`.',
      ],
      [
        ['dev', '--', 'x'],
        "'x' after -- was read as an argument, and `ferry dev` takes no arguments",
        'Run `ferry dev --help`.',
      ],
    ] as const) {
      await expectRefused(args, message, hint);
    }
    const apps = JSON.parse((await sandbox.run(['app', 'list', '--json'], { cwd: project })).stdout) as {
      name: string;
      environments: string[];
    }[];
    expect(apps.map((a) => a.name)).not.toContain('-x');
    expect(apps.find((a) => a.name === 'errs')?.environments ?? []).not.toContain('dropped');
  });

  it('an option no command declares is named wherever it was typed, with the unknown command beside it', async () => {
    for (const [lines, message, hint] of [
      [
        [
          ['env', '--bogus', 'lst'],
          ['env', 'lst', '--bogus'],
        ],
        "Unknown command 'lst' for `ferry env`, and unknown argument --bogus",
        'Did you mean list? Run `ferry env --help`.',
      ],
      [
        [
          ['env', '--bogus', 'list'],
          ['env', 'list', '--bogus'],
        ],
        'Unknown argument: --bogus',
        'Run `ferry env list --help`.',
      ],
      [
        [
          ['--bogus', '-z', 'env'],
          ['env', '--bogus', '-z'],
        ],
        'Unknown arguments: --bogus, -z',
        'Run `ferry env --help`.',
      ],
      // A mistyped command is read as the one it is close to: env list takes no --force (env delete does).
      [
        [
          ['--force', 'env', 'lst'],
          ['env', '--force', 'lst'],
          ['env', 'lst', '--force'],
        ],
        "Unknown command 'lst' for `ferry env`, and unknown argument --force",
        'Did you mean list? Run `ferry env --help`.',
      ],
      // --force is app delete's: app list takes none, before its name as after it.
      [
        [
          ['app', '--force', 'list'],
          ['app', 'list', '--force'],
        ],
        'Unknown argument: --force',
        'Run `ferry app list --help`.',
      ],
    ] as const) {
      for (const args of lines) {
        const result = await sandbox.run([...args], { cwd: project });
        expect(result.code, args.join(' ')).toBe(2);
        expect(result.stderr, args.join(' ')).toBe(`Error: ${message}\n  hint: ${hint}\n`);
      }
    }
  });

  it('an option the command does not declare is named before the positional it lacks: exit 2', async () => {
    for (const [args, message, hint] of [
      [['images', '--bogus'], 'Unknown argument: --bogus', 'Run `ferry images --help`.'],
      [['sdk', '--bogus'], 'Unknown argument: --bogus', 'Run `ferry sdk --help`.'],
      // yargs took `build` as the value of --bogus, and said `ferry images` needs <action>.
      [['images', '--bogus', 'build'], 'Unknown argument: --bogus', 'Run `ferry images --help`.'],
      [['logs', '--bogus', '-z'], 'Unknown arguments: --bogus, -z', 'Run `ferry logs --help`.'],
      // keys revoke takes no --app (a key is revoked by id): giving the id would not help.
      [['keys', 'revoke', '--app', 'errs'], 'Unknown argument: --app', 'Run `ferry keys revoke --help`.'],
    ] as const) {
      const result = await sandbox.run([...args], { cwd: project });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr, args.join(' ')).toBe(`Error: ${message}\n  hint: ${hint}\n`);
    }
  });

  it("a missing positional names the command and what it needs: exit 2, with the command's --help", async () => {
    for (const [args, command, needs] of [
      [['env', 'create'], 'env create', 'needs <name>'],
      [['keys', 'revoke', '--json'], 'keys revoke', 'needs <id>'],
      [['logs'], 'logs', 'needs <endpoint>'],
      [['env'], 'env', 'needs a command: list, create, get, delete'],
      [['env', '--json'], 'env', 'needs a command: list, create, get, delete'],
      // --app takes a value: 'lst' is the app's name, not a command.
      [['env', '--app', 'lst'], 'env', 'needs a command: list, create, get, delete'],
    ] as const) {
      const result = await sandbox.run([...args], { cwd: project });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toBe(
        `Error: \`ferry ${command}\` ${needs}\n  hint: Run \`ferry ${command} --help\`.\n`,
      );
    }
    // Other yargs messages stay as they were.
    const extra = await sandbox.run(['env', 'create', 'a', 'b'], { cwd: project });
    expect(extra.code).toBe(2);
    expect(extra.stderr).toContain('Error: Unknown argument: b\n');
  });

  it('ferry with no command, or options alone, names its commands; an unknown option alone is named: exit 2', async () => {
    for (const args of [[], ['--json'], ['--provider', 'local']]) {
      const result = await sandbox.run(args, { cwd: project });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr, args.join(' ')).toMatch(
        /^Error: `ferry` needs a command: init, dev, build, deploy, env, app, [a-z, ]+\n {2}hint: Run `ferry --help`\.\n$/,
      );
    }
    const bogus = await sandbox.run(['--bogus'], { cwd: project });
    expect(bogus.code).toBe(2);
    expect(bogus.stderr).toBe('Error: Unknown argument: --bogus\n  hint: Run `ferry --help`.\n');
  });

  it('an app or environment name no record may have is refused before anything is built or written: exit 2', async () => {
    for (const args of [
      ['deploy', '--no-serve', '--env', ''],
      ['deploy', '--no-serve', '--env', 'bad env'],
      ['deploy', '--no-serve', '--env', 'a/b'],
      ['deploy', '--no-serve', '--app', 'shop.v2'],
      ['deploy', '--preview', '--env', 'bad env'],
      ['env', 'create', 'bad env', '--app', 'errs'],
      ['app', 'create', 'x'.repeat(64)],
      ['secrets', 'set', 'TOKEN', '--env', 'bad env'],
      ['keys', 'create', '--app', 'bad app'],
      ['build', '--app', 'Bad App'],
    ]) {
      const result = await sandbox.run(args, { cwd: project, input: 'value\n' });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toMatch(/^Error: ".*" is not a valid (app|environment) name\n/);
      expect(result.stderr).toContain('hint: Use 1 to 63 letters, digits');
      expect(result.stderr, args.join(' ')).not.toContain('[1/5] Build');
      noStack(result.stderr);
    }
    const names = async (args: string[]) =>
      (JSON.parse((await sandbox.run([...args, '--json'])).stdout) as Array<{ name: string }>).map(
        (r) => r.name,
      );
    expect(await names(['env', 'list', '--app', 'errs'])).toEqual(['dev', 'staging']);
    expect(await names(['app', 'list'])).toEqual(['errs']);
  });

  it('--provider aws without a region or credentials: exit 2 with the way to set them, before anything is built', async () => {
    const noAws = offlineAws;
    const list = await sandbox.run(['app', 'list', '--provider', 'aws'], { env: noAws });
    expect(list.code).toBe(2);
    expect(list.stderr).toContain('Error: No AWS region is configured\n');
    expect(list.stderr).toContain('export AWS_REGION=');
    noStack(list.stderr);

    const deploy = await sandbox.run(['deploy', '--provider', 'aws'], { cwd: project, env: noAws });
    expect(deploy.code).toBe(2);
    expect(deploy.stderr).toContain('Error: No AWS region is configured\n');
    expect(deploy.stderr).not.toContain('[1/5]');

    // A region the SDK cannot use is a typo to fix, not a missing setting.
    const typo = await sandbox.run(['app', 'list', '--provider', 'aws'], {
      env: { ...noAws, AWS_REGION: 'us east' },
    });
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain('Error: The AWS region "us east" is not a region name\n');
    expect(typo.stderr).toContain('fix AWS_REGION');
    noStack(typo.stderr);

    // Region and credentials set, AWS out of reach (here a closed loopback port; offline, a name
    // that does not resolve): the hint is the network, not the credentials that are there.
    const unreachable = await sandbox.run(['app', 'list', '--provider', 'aws'], {
      env: {
        ...noAws,
        AWS_REGION: 'eu-west-1',
        AWS_ACCESS_KEY_ID: 'AKIAEXAMPLE',
        AWS_SECRET_ACCESS_KEY: 'example',
        AWS_ENDPOINT_URL: `http://127.0.0.1:${await closedPort()}`,
        AWS_MAX_ATTEMPTS: '1',
      },
    });
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toContain('ECONNREFUSED');
    expect(unreachable.stderr).toContain("hint: AWS did not answer: check this machine's network");
    expect(unreachable.stderr).not.toContain('Set AWS credentials');
    noStack(unreachable.stderr);

    for (const args of [
      ['deploy', '--provider', 'aws'],
      ['secrets', 'list', '--provider', 'aws'],
    ]) {
      const result = await sandbox.run(args, { cwd: project, env: { ...noAws, AWS_REGION: 'eu-west-1' } });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toContain(
        'Error: No usable AWS credentials: Could not load credentials from any providers',
      );
      expect(result.stderr).toContain('aws configure');
      expect(result.stderr).not.toContain('[1/5]');
      noStack(result.stderr);
    }
  });
});

describe('--help', () => {
  it('fits an 80-column terminal, and each example is its description above a command line of its own', async () => {
    const commands = [
      [],
      ['init'],
      ['dev'],
      ['build'],
      ['deploy'],
      ['serve'],
      ['logs'],
      ['sdk'],
      ['console'],
      ['images'],
      ['env'],
      ['app'],
      ['undeploy'],
      ['keys'],
      ['secrets'],
    ];
    for (const command of commands) {
      const help = await sandbox.run([...command, '--help'], { cwd: project, env: { COLUMNS: '80' } });
      const name = ['ferry', ...command].join(' ');
      expect(help.code, name).toBe(0);
      const lines = help.stdout.split('\n');
      for (const line of lines) expect(line.length, `${name}: ${line}`).toBeLessThanOrEqual(80);
      const start = lines.indexOf('Examples:');
      expect(start, name).toBeGreaterThan(0);
      const section = lines.slice(start + 1, lines.indexOf('', start));
      expect(section.length, name).toBeGreaterThan(0);
      // yargs' side-by-side layout wrapped a long command into the description column, where its last
      // word ("scipy") read as a command of its own.
      section.forEach((line, i) => {
        if (i % 2 === 0) expect(line, name).toMatch(/^ {2}# \S/);
        else expect(line, name).toMatch(/^ {2}(sudo |printf .* \| )?ferry /);
      });
    }
  });
});
