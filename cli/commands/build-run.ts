/** What `ferry build` runs (cli/commands/build.ts defines the command): loaded when it runs. */
import { checkRecordName } from '../../core/deployment.js';
import { buildProject } from '../build/index.js';
import type { CliContext } from '../context.js';
import { buildEventPrinter } from '../deploy/run.js';
import { formatBytes, table } from '../io.js';
import { projectAppName } from '../project-config.js';
import { type BuildArgv, buildOptionsFrom } from './shared.js';

export async function runBuild(
  ctx: CliContext,
  argv: BuildArgv & { app?: string | undefined; json: boolean },
) {
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
}
