/**
 * The project's own settings, `<project>/.ferry/config.json` (provider, app), and the app a command
 * acts on. Apart from cli/config.ts because it validates with zod, which `ferry --help` and the other
 * command definitions do not load (cli/commands/index.ts).
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { usage } from '../core/errors.js';
import { appNameOf, providerNames } from './config.js';

const projectConfigSchema = z
  .object({
    provider: z.enum(providerNames).optional(),
    app: z.string().optional(),
  })
  .strict();
export type ProjectConfig = z.infer<typeof projectConfigSchema>;

export function readProjectConfig(projectDir: string): ProjectConfig {
  const file = path.join(projectDir, '.ferry', 'config.json');
  if (!existsSync(file)) return {};
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    throw usage(`${file} is not valid JSON`, 'Fix or delete the file.');
  }
  const parsed = projectConfigSchema.safeParse(raw);
  if (!parsed.success) {
    throw usage(
      `${file}: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'} ${i.message}`).join('; ')}`,
      `Allowed keys: provider (${providerNames.join(' | ')}), app.`,
    );
  }
  return parsed.data;
}

/**
 * The app a command run in `projectDir` acts on: `--app`, else `.ferry/config.json`'s app, else the
 * folder's (appNameOf). Every command and `ferry dev` take it from here, in the order the `ferry`
 * Python package looks (FERRY_APP aside: client.py Platform.from_environ). Commands that create the
 * app check the name (checkRecordName); the others look up whatever was given.
 */
export function projectAppName(projectDir: string, flag?: unknown): string {
  return typeof flag === 'string' ? flag : (readProjectConfig(projectDir).app ?? appNameOf(projectDir));
}
