/**
 * `ferry init NAME|. [--force]`: copies cli/templates/ into the folder, with `{{project_name}}`
 * substituted. Existing files are listed and need a `[y/N]`; no answer (no TTY, CI) is No and
 * nothing is written. Only local files are created.
 */
import type { CommandModule } from 'yargs';
import type { CliContext } from '../context.js';
import { examples } from './shared.js';

export const initCommand = (ctx: CliContext): CommandModule => ({
  command: 'init [project_name]',
  describe: 'Create a project with example endpoints (only local files)',
  builder: (y) =>
    y
      .positional('project_name', {
        type: 'string',
        describe: 'Folder to create; `.` for the current folder',
      })
      .option('force', {
        alias: 'f',
        type: 'boolean',
        default: false,
        describe: 'Overwrite existing files without asking',
      })
      .epilogue(
        examples([
          ['$0 init my-project', 'Create ./my-project'],
          ['$0 init . --force', 'Write the template into this folder, overwriting'],
        ]),
      ),
  handler: async (argv) =>
    (await import('./init-run.js')).initProject(
      ctx,
      argv.project_name as string | undefined,
      Boolean(argv.force),
    ),
});
