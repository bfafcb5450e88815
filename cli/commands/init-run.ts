/** What `ferry init` runs (cli/commands/init.ts defines the command): loaded when it runs. */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { unusableFolderReason } from '../../core/adapters/local/home.js';
import { FerryError, usage } from '../../core/errors.js';
import { appNameOf, ferryPythonPath, templatesDir } from '../config.js';
import type { CliContext } from '../context.js';
import { confirm } from '../io.js';

/** Template file name → project file name (dotfiles are stored without the dot so packagers keep them). */
const renames: Record<string, string> = { 'env.example': '.env.example', gitignore: '.gitignore' };

export function templateFiles(): Array<{ source: string; target: string }> {
  const dir = templatesDir();
  return readdirSync(dir)
    .filter((name) => !name.startsWith('.'))
    .sort()
    .map((name) => ({ source: path.join(dir, name), target: renames[name] ?? name }));
}

/** Why the folder could not be made or written, as the user's to fix (exit 2); other errors as they are. */
function cannotCreate(name: string, error: unknown): unknown {
  const reason = unusableFolderReason(error);
  return reason ? usage(`Cannot create ${name}: ${reason}`, 'Choose a folder you can write to.') : error;
}

export async function initProject(ctx: CliContext, name: string | undefined, force: boolean): Promise<void> {
  if (!name)
    throw usage(
      'ferry init needs a project name',
      'Run `ferry init my-project`, or `ferry init .` for this folder.',
    );
  const target = path.resolve(ctx.io.cwd, name);
  if (existsSync(target) && !statSync(target).isDirectory()) {
    throw usage(
      `${name} is not a folder`,
      'Name a new folder (or an existing one) for the project: ferry init my-project.',
    );
  }
  const projectName = path.basename(target);
  // What the project is called in its files: the folder's app name (appNameOf, which every command
  // uses too), so pyproject.toml's name is one pip accepts (PEP 508); "My Project" wrote itself there as is.
  const appName = appNameOf(target);
  const files = templateFiles();
  const conflicts = files.filter((f) => existsSync(path.join(target, f.target))).map((f) => f.target);
  if (conflicts.length > 0 && !force) {
    ctx.reporter.line(`These files exist in ${target} and would be overwritten:`);
    for (const file of conflicts) ctx.reporter.line(`  ${file}`);
    if (!(await confirm(ctx.io, 'Overwrite them?'))) {
      throw new FerryError('failed', 'Nothing written: existing files were kept', {
        hint: 'Answer y, or pass --force (-f) to overwrite without asking.',
      });
    }
  }
  try {
    mkdirSync(target, { recursive: true });
    for (const file of files) {
      const content = readFileSync(file.source, 'utf8').replaceAll('{{project_name}}', appName);
      writeFileSync(path.join(target, file.target), content);
    }
  } catch (error) {
    throw cannotCreate(name, error);
  }
  ctx.reporter.line(`✓ Created ${projectName} in ${target}`);
  if (appName !== projectName)
    ctx.reporter.line(`  named ${appName} in its files (a name holds letters, digits, _ and -)`);
  for (const file of files)
    ctx.reporter.line(`  ${file.target}${conflicts.includes(file.target) ? '  (overwritten)' : ''}`);
  ctx.reporter.line('');
  ctx.reporter.line('Next steps:');
  if (target !== path.resolve(ctx.io.cwd))
    ctx.reporter.line(`  cd ${path.relative(ctx.io.cwd, target) || '.'}`);
  // One column for the comments, so the lines read as a list of commands to copy.
  const steps: Array<[command: string, why: string]> = [
    ['cp .env.example .env', 'then set FERRY_API_KEY (any value works for `ferry dev`)'],
    ['ferry sdk install', `or: pip install ${ferryPythonPath()}`],
    ['ferry dev', 'http://localhost:8888/docs'],
    ['ferry deploy', 'serve it with `ferry serve`, or on AWS with --provider aws'],
  ];
  const width = Math.max(...steps.map(([command]) => command.length)) + 2;
  for (const [command, why] of steps) ctx.reporter.line(`  ${command.padEnd(width)}# ${why}`);
}
