/** `ferry build`: buildProject with its progress on stderr, the result on stdout. */
import { checkRecordName } from '../../core/deployment.js';
import { buildProject } from '../build/index.js';
import { projectAppName } from '../config.js';
import type { CliContext } from '../context.js';
import { buildEventPrinter } from '../deploy/run.js';
import { formatBytes, table } from '../io.js';
import { buildFlags, buildOptionsFrom, defineCommand, examples, jsonFlag } from './shared.js';

export const buildCommand = (ctx: CliContext) =>
  defineCommand({
    command: 'build',
    describe: 'Build the deployment artifact (no upload)',
    builder: (y) =>
      buildFlags(y)
        .option('app', {
          alias: 'a',
          type: 'string',
          describe: 'App name',
          defaultDescription: 'the folder name',
        })
        .option('json', jsonFlag)
        .epilogue(
          examples([
            ['$0 build --exclude scipy,pandas', 'Leave two packages out of the artifact'],
            ['$0 build --python-version 3.12 --json', 'Build for Python 3.12 and print the manifest'],
          ]),
        ),
    handler: async (argv) => {
      const projectDir = ctx.io.cwd;
      // The name goes into the manifest that deploy records: refused here as deploy would refuse it.
      const app = checkRecordName('app', projectAppName(projectDir, argv.app));
      ctx.reporter.line(`Building ${app}`);
      const result = await buildProject({
        ...buildOptionsFrom(argv, ctx.io.env),
        projectDir,
        app,
        onProgress: buildEventPrinter(ctx.reporter),
      });
      if (argv.json) {
        ctx.reporter.json({
          artifactPath: result.artifactPath,
          artifactBytes: result.artifactBytes,
          files: result.files,
          manifest: result.manifest,
        });
        return;
      }
      ctx.reporter.out(`✓ Built ${result.artifactPath} (${formatBytes(result.artifactBytes)})`);
      const endpoints = result.manifest.endpoints.map((e) => [e.name, `(${e.kind}, ${e.file})`]);
      for (const line of table(endpoints)) ctx.reporter.out(`  ${line}`);
      for (const excluded of result.manifest.dependencies.excluded)
        ctx.reporter.out(`  excluded ${excluded.name}: ${excluded.reason}`);
    },
  });
