/** What `ferry env|app|undeploy|keys` run (cli/commands/records.ts defines them): loaded when they run. */
import { randomBytes } from 'node:crypto';
import { describeScope, hashKey, newSecret, scopeOf } from '../../core/auth.js';
import { checkRecordName } from '../../core/deployment.js';
import { conflict, FerryError, notFound, usage } from '../../core/errors.js';
import type { EndpointRecord } from '../../core/ports.js';
import { looksLikeProject } from '../config.js';
import type { CliContext } from '../context.js';
import { ask, confirm, countOf, table } from '../io.js';
import { inScope, notInScope } from '../manage-client.js';
import { projectAppName } from '../project-config.js';
import { withProvider } from '../providers/index.js';
import type { Provider } from '../providers/types.js';

/** Where a name that names nothing (or is taken) can be checked: the lists of what there is. */
const appListHint = 'See the apps with `ferry app list`.';
const envListHint = (app: string) => `See its environments with \`ferry env list --app ${app}\`.`;

const iso = (ms: number | undefined) => (ms === undefined ? '-' : new Date(ms).toISOString());

function endpointView(provider: Provider, record: EndpointRecord) {
  return {
    id: record.id,
    name: record.name,
    app: record.app,
    env: record.env,
    kind: record.kind,
    url: provider.endpointUrl(record),
    fingerprint: record.fingerprint,
    updatedAt: iso(record.updatedAt),
  };
}

/** Removes endpoints; throws (exit 1) naming every one that stayed. */
async function removeEndpoints(ctx: CliContext, provider: Provider, records: EndpointRecord[], what: string) {
  const result = await provider.destroy(records);
  for (const record of result.deleted) ctx.reporter.line(`  - removed ${record.name} (${record.id})`);
  if (result.failed.length > 0) {
    // The failures' own hints say how to fix them; without one, trying again is the way.
    const hints = [...new Set(result.failed.flatMap((f) => (f.hint ? [f.hint] : [])))];
    throw new FerryError(
      'failed',
      `${what}: ${result.failed.length} of ${countOf(records.length, 'endpoint')} could not be removed: ${result.failed
        .map((f) => `${f.record.name} (${f.record.id}): ${f.error}`)
        .join('; ')}`,
      { hint: `Nothing else was deleted. ${hints.length > 0 ? hints.join(' ') : 'Run the command again.'}` },
    );
  }
  return result.deleted;
}

/** What the environment has besides endpoints (AWS: its stack); the record stays when that fails. */
async function destroyEnvironment(provider: Provider, app: string, env: string, what: string) {
  if (!provider.destroyEnvironment) return;
  try {
    await provider.destroyEnvironment(app, env);
  } catch (error) {
    throw new FerryError(
      'failed',
      `${what}: removing environment '${env}' failed: ${(error as Error).message}`,
      {
        hint: 'Its endpoint records are gone; run the command again to retry the rest.',
      },
    );
  }
}

/**
 * Secrets belong to the user, not to the environment's records, so deleting an environment keeps
 * them: a later environment of the same name gets them again, and on AWS each costs a monthly fee.
 * Says which were kept and how to remove them. Only a note: a store that cannot be listed (AWS
 * without secretsmanager:ListSecrets) says nothing.
 */
async function noteKeptSecrets(ctx: CliContext, provider: Provider, app: string, env: string): Promise<void> {
  let names: string[];
  try {
    names = (await provider.secretNames?.({ app, env })) ?? [];
  } catch {
    return;
  }
  if (names.length === 0) return;
  const where = provider.name === 'local' ? '' : ` --provider ${provider.name}`;
  ctx.reporter.line(
    `  kept ${countOf(names.length, 'secret')} of ${app}/${env} (${names.join(', ')}): a new '${env}' environment gets them; remove one with \`ferry secrets delete NAME --app ${app} --env ${env}${where}\``,
  );
}

async function confirmOrForce(ctx: CliContext, force: boolean, question: string): Promise<void> {
  if (force) return;
  if (!(await confirm(ctx.io, question))) {
    throw new FerryError('failed', 'Cancelled: nothing was deleted', {
      hint: 'Pass --force (-f) to skip the question.',
    });
  }
}

/**
 * The app `ferry undeploy NAME` looks for NAME in: --app; else, run in a project folder (or one whose
 * app is deployed), the folder's app (projectAppName), so a name never removes another app's endpoint
 * of that name; else none: every app, where a name in several is refused as ambiguous.
 */
async function undeployApp(ctx: CliContext, provider: Provider, flag: unknown): Promise<string | undefined> {
  if (typeof flag === 'string') return flag;
  const folderApp = projectAppName(ctx.io.cwd);
  if (looksLikeProject(ctx.io.cwd) || (await provider.control.getApp(folderApp))) return folderApp;
  return undefined;
}

/**
 * The most characters a key's label may have: as many as an app or environment name
 * (core/deployment.ts recordNameRules), enough for a label and short enough for `keys list`'s table.
 */
const keyLabelMaxLength = 63;

/**
 * `--name` as a key's label: any text, trimmed, that is not blank, fits the table (at most
 * keyLabelMaxLength characters) and keeps it on one line (no control characters); else a usage error
 * (exit 2). Absent: `cli`.
 */
function keyLabel(given: string | undefined): string {
  if (given === undefined) return 'cli';
  const label = given.trim();
  const hint = `Give a label of 1 to ${keyLabelMaxLength} characters, e.g. --name ci.`;
  if (label === '') throw usage('--name needs a label: it was empty', hint);
  if ([...label].length > keyLabelMaxLength)
    throw usage(`--name is ${[...label].length} characters long: at most ${keyLabelMaxLength}`, hint);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
  if (/[\u0000-\u001f\u007f]/.test(label))
    throw usage(`--name ${JSON.stringify(label)} holds a tab, newline or other control character`, hint);
  return label;
}

export function envList(
  ctx: CliContext,
  argv: { app?: string | undefined; json?: boolean | undefined; provider?: string | undefined },
) {
  return withProvider(ctx, argv.provider, async (provider) => {
    const app = projectAppName(ctx.io.cwd, argv.app);
    if (!(await provider.control.getApp(app))) {
      // Named by --app: where the apps are; else the folder's app, not deployed yet.
      throw new FerryError('not_found', `No app named '${app}'`, {
        hint: typeof argv.app === 'string' ? appListHint : 'Run `ferry deploy` to create it, or pass --app.',
      });
    }
    const envs = await provider.control.listEnvironments(app);
    const endpoints = await provider.control.listEndpoints({ app });
    const rows = envs.map((e) => ({
      name: e.name,
      app: e.app,
      endpoints: endpoints.filter((x) => x.env === e.name).length,
      fingerprint: e.fingerprint ?? null,
      deployedAt: e.deployedAt === undefined ? null : iso(e.deployedAt),
      createdAt: iso(e.createdAt),
    }));
    if (argv.json) return ctx.reporter.json(rows);
    if (rows.length === 0) return ctx.reporter.out(`App '${app}' has no environments.`);
    for (const line of table([
      ['NAME', 'ENDPOINTS', 'BUILD', 'DEPLOYED'],
      ...rows.map((r) => [
        r.name,
        String(r.endpoints),
        (r.fingerprint ?? '-').slice(0, 12),
        r.deployedAt ?? '-',
      ]),
    ]))
      ctx.reporter.out(line);
  });
}

export function envCreate(
  ctx: CliContext,
  argv: { app?: string | undefined; name: string; provider?: string | undefined },
) {
  return withProvider(ctx, argv.provider, async (provider) => {
    const app = checkRecordName('app', projectAppName(ctx.io.cwd, argv.app));
    const name = checkRecordName('environment', argv.name);
    if (!(await provider.control.getApp(app))) {
      await provider.control.putApp({ name: app, createdAt: Date.now() });
      ctx.reporter.line(`Created app '${app}'`);
    }
    if (await provider.control.getEnvironment(app, name)) {
      throw conflict(`Environment '${name}' already exists in app '${app}'`, envListHint(app));
    }
    await provider.control.putEnvironment({ app, name, createdAt: Date.now() });
    ctx.reporter.out(`✓ Created environment '${name}' in app '${app}'`);
  });
}

export function envGet(
  ctx: CliContext,
  argv: { app?: string | undefined; json?: boolean | undefined; name: string; provider?: string | undefined },
) {
  return withProvider(ctx, argv.provider, async (provider) => {
    const app = projectAppName(ctx.io.cwd, argv.app);
    const env = await provider.control.getEnvironment(app, argv.name);
    if (!env) throw notFound(`No environment '${argv.name}' in app '${app}'`, envListHint(app));
    const endpoints = (await provider.control.listEndpoints({ app, env: env.name })).map((r) =>
      endpointView(provider, r),
    );
    const view = {
      app,
      name: env.name,
      fingerprint: env.fingerprint ?? null,
      artifactKey: env.artifactKey ?? null,
      deployedAt: env.deployedAt === undefined ? null : iso(env.deployedAt),
      createdAt: iso(env.createdAt),
      endpoints,
    };
    if (argv.json) return ctx.reporter.json(view);
    ctx.reporter.out(`Environment ${env.name} of app ${app}`);
    const lines = table([
      ['build', view.fingerprint ?? '-'],
      ['deployed', view.deployedAt ?? '-'],
    ]);
    if (endpoints.length > 0)
      lines.push(...table([['ENDPOINT', 'KIND', 'URL'], ...endpoints.map((e) => [e.name, e.kind, e.url])]));
    else lines.push(`no endpoints: run \`ferry deploy --env ${env.name}\``);
    for (const line of lines) ctx.reporter.out(`  ${line}`);
  });
}

export function envDelete(
  ctx: CliContext,
  argv: {
    app?: string | undefined;
    force?: boolean | undefined;
    name: string;
    provider?: string | undefined;
  },
) {
  return withProvider(ctx, argv.provider, async (provider) => {
    const app = projectAppName(ctx.io.cwd, argv.app);
    const name = argv.name;
    if (!(await provider.control.getEnvironment(app, name)))
      throw notFound(`No environment '${name}' in app '${app}'`, envListHint(app));
    const endpoints = await provider.control.listEndpoints({ app, env: name });
    await confirmOrForce(
      ctx,
      Boolean(argv.force),
      `Delete environment '${name}' of '${app}' and its ${countOf(endpoints.length, 'endpoint')}?`,
    );
    await removeEndpoints(ctx, provider, endpoints, `Environment '${name}' was kept`);
    await destroyEnvironment(provider, app, name, `Environment '${name}' was kept`);
    await provider.control.deleteEnvironment(app, name);
    await noteKeptSecrets(ctx, provider, app, name);
    ctx.reporter.out(
      `✓ Deleted environment '${name}' of app '${app}' (${countOf(endpoints.length, 'endpoint')} removed)`,
    );
  });
}

export function appList(
  ctx: CliContext,
  argv: { json?: boolean | undefined; provider?: string | undefined },
) {
  return withProvider(ctx, argv.provider, async (provider) => {
    const apps = await provider.control.listApps();
    const rows = [];
    for (const app of apps) {
      const envs = await provider.control.listEnvironments(app.name);
      const endpoints = await provider.control.listEndpoints({ app: app.name });
      rows.push({
        name: app.name,
        environments: envs.map((e) => e.name),
        endpoints: endpoints.length,
        createdAt: iso(app.createdAt),
      });
    }
    if (argv.json) return ctx.reporter.json(rows);
    if (rows.length === 0) return ctx.reporter.out('No apps yet: run `ferry deploy` in a project.');
    for (const line of table([
      ['NAME', 'ENVIRONMENTS', 'ENDPOINTS', 'CREATED'],
      ...rows.map((r) => [r.name, r.environments.join(',') || '-', String(r.endpoints), r.createdAt]),
    ]))
      ctx.reporter.out(line);
  });
}

export function appCreate(ctx: CliContext, argv: { name: string; provider?: string | undefined }) {
  return withProvider(ctx, argv.provider, async (provider) => {
    const name = checkRecordName('app', argv.name);
    if (await provider.control.getApp(name)) throw conflict(`App '${name}' already exists`, appListHint);
    await provider.control.putApp({ name, createdAt: Date.now() });
    ctx.reporter.out(`✓ Created app '${name}'`);
  });
}

export function appGet(
  ctx: CliContext,
  argv: { json?: boolean | undefined; name: string; provider?: string | undefined },
) {
  return withProvider(ctx, argv.provider, async (provider) => {
    const name = argv.name;
    const app = await provider.control.getApp(name);
    if (!app) throw notFound(`No app named '${name}'`, appListHint);
    const envs = await provider.control.listEnvironments(name);
    const endpoints = await provider.control.listEndpoints({ app: name });
    const view = {
      name,
      createdAt: iso(app.createdAt),
      environments: envs.map((e) => ({
        name: e.name,
        fingerprint: e.fingerprint ?? null,
        deployedAt: e.deployedAt === undefined ? null : iso(e.deployedAt),
        endpoints: endpoints.filter((x) => x.env === e.name).map((r) => endpointView(provider, r)),
      })),
    };
    if (argv.json) return ctx.reporter.json(view);
    ctx.reporter.out(`App ${name} (created ${view.createdAt})`);
    const environments = view.environments.map((env) => [
      env.name,
      (env.fingerprint ?? '-').slice(0, 12),
      env.deployedAt ?? '-',
    ]);
    const deployed = view.environments.flatMap((env) =>
      env.endpoints.map((e) => [e.name, env.name, e.kind, e.url]),
    );
    const lines = [
      ...(environments.length > 0 ? table([['ENVIRONMENT', 'BUILD', 'DEPLOYED'], ...environments]) : []),
      ...(deployed.length > 0 ? table([['ENDPOINT', 'ENVIRONMENT', 'KIND', 'URL'], ...deployed]) : []),
    ];
    for (const line of lines) ctx.reporter.out(`  ${line}`);
  });
}

export function appDelete(
  ctx: CliContext,
  argv: { force?: boolean | undefined; name: string; provider?: string | undefined },
) {
  return withProvider(ctx, argv.provider, async (provider) => {
    const name = argv.name;
    if (!(await provider.control.getApp(name))) throw notFound(`No app named '${name}'`, appListHint);
    const endpoints = await provider.control.listEndpoints({ app: name });
    await confirmOrForce(
      ctx,
      Boolean(argv.force),
      `Delete app '${name}', its environments and ${countOf(endpoints.length, 'endpoint')}?`,
    );
    await removeEndpoints(ctx, provider, endpoints, `App '${name}' was kept`);
    for (const env of await provider.control.listEnvironments(name)) {
      await destroyEnvironment(provider, name, env.name, `App '${name}' was kept`);
      await provider.control.deleteEnvironment(name, env.name);
      await noteKeptSecrets(ctx, provider, name, env.name);
    }
    await provider.control.deleteApp(name);
    ctx.reporter.out(`✓ Deleted app '${name}' (${countOf(endpoints.length, 'endpoint')} removed)`);
  });
}

export function undeploy(
  ctx: CliContext,
  argv: {
    all?: boolean | undefined;
    app?: string | undefined;
    env?: string | undefined;
    everywhere?: boolean | undefined;
    force?: boolean | undefined;
    json?: boolean | undefined;
    name?: string | undefined;
    provider?: string | undefined;
    yes?: boolean | undefined;
  },
) {
  return withProvider(
    ctx,
    argv.provider,
    async (provider) => {
      const name = argv.name;
      const filter = {
        ...(typeof argv.app === 'string' ? { app: argv.app } : {}),
        ...(typeof argv.env === 'string' ? { env: argv.env } : {}),
      };
      if (name === 'list') {
        const endpoints = (await provider.control.listEndpoints(filter)).map((r) =>
          endpointView(provider, r),
        );
        if (argv.json) return ctx.reporter.json(endpoints);
        if (endpoints.length === 0) return ctx.reporter.out('No endpoints deployed.');
        for (const line of table([
          ['NAME', 'ID', 'APP', 'ENV', 'KIND', 'URL'],
          ...endpoints.map((e) => [e.name, e.id, e.app, e.env, e.kind, e.url]),
        ]))
          ctx.reporter.out(line);
        return;
      }
      if (argv.all) {
        if (name)
          throw usage(
            'Give an endpoint name or --all, not both',
            `\`ferry undeploy ${name}\` removes that endpoint; \`ferry undeploy --all\` removes every endpoint of the app.`,
          );
        // Run inside a project, --all means that project's app; every app only when asked.
        const everywhere = argv.everywhere && typeof argv.app !== 'string';
        const scope = everywhere ? filter : { ...filter, app: projectAppName(ctx.io.cwd, argv.app) };
        const endpoints = await provider.control.listEndpoints(scope);
        if (endpoints.length === 0) {
          // stdout is data: a script asking for JSON gets the empty list of what was removed.
          if (argv.json) return ctx.reporter.json([]);
          return ctx.reporter.out(
            everywhere ? 'No endpoints to remove.' : `No endpoints of app '${scope.app}' to remove.`,
          );
        }
        if (!argv.force) {
          const where = everywhere ? 'in every app' : `of app '${scope.app}'`;
          ctx.reporter.line(
            `This removes ${countOf(endpoints.length, 'endpoint')} ${where}: ${endpoints.map((e) => `${e.name} (${e.env})`).join(', ')}`,
          );
          const typed = await ask(ctx.io, 'Type DELETE ALL to confirm: ');
          if (typed !== 'DELETE ALL') {
            throw new FerryError('failed', 'Cancelled: nothing was deleted', {
              hint: 'Type DELETE ALL exactly, or pass --force.',
            });
          }
        }
        const deleted = await removeEndpoints(ctx, provider, endpoints, 'Undeploy incomplete');
        if (argv.json) return ctx.reporter.json(deleted.map((r) => ({ id: r.id, name: r.name })));
        return ctx.reporter.out(`✓ Removed ${countOf(deleted.length, 'endpoint')}`);
      }
      if (!name)
        throw usage(
          'Which endpoint?',
          'Run `ferry undeploy list`, then `ferry undeploy <name>`, or use --all.',
        );
      // An id addresses any endpoint. A name is looked up in --app, else in the folder's app when
      // run in a project (as --help says), else across apps; never in another app by default.
      const byId = await provider.control.getEndpoint(name);
      const app = byId ? undefined : await undeployApp(ctx, provider, argv.app);
      const scope = { ...filter, ...(app !== undefined ? { app } : {}) };
      const named = byId ? [] : (await provider.control.listEndpoints()).filter((e) => e.name === name);
      const matches = byId ? [byId] : named.filter((e) => inScope(e, scope));
      if (matches.length === 0) {
        if (named.length > 0) throw notInScope(name, scope, named);
        throw new FerryError('not_found', `No deployed endpoint named '${name}'`, {
          hint: 'See `ferry undeploy list`.',
        });
      }
      if (matches.length > 1) {
        const apps = new Set(matches.map((m) => m.app));
        throw usage(
          `'${name}' is deployed in several places: ${matches.map((m) => `${m.app}/${m.env} (${m.id})`).join(', ')}`,
          apps.size > 1
            ? 'Choose with --app (and --env), or give an id.'
            : 'Choose with --env, or give an id.',
        );
      }
      const target = matches[0]!;
      await confirmOrForce(
        ctx,
        Boolean(argv.force),
        `Remove endpoint '${target.name}' (${target.id}) of ${target.app}/${target.env}?`,
      );
      await removeEndpoints(ctx, provider, [target], 'Undeploy failed');
      if (argv.json) return ctx.reporter.json({ id: target.id, name: target.name });
      ctx.reporter.out(`✓ Removed ${target.name} (${target.id})`);
    },
    { yes: Boolean(argv.yes) },
  );
}

export function keysCreate(
  ctx: CliContext,
  argv: {
    app?: string | undefined;
    env?: string | undefined;
    json?: boolean | undefined;
    name?: string | undefined;
    provider?: string | undefined;
  },
) {
  return withProvider(ctx, argv.provider, async (provider) => {
    // A scope no app or environment can have would make a key that reaches nothing.
    const app = argv.app === undefined ? undefined : checkRecordName('app', argv.app);
    const env = argv.env === undefined ? undefined : checkRecordName('environment', argv.env);
    if (env !== undefined && app === undefined) {
      throw usage('--env needs --app', 'Example: ferry keys create --app my-app --env prod');
    }
    const name = keyLabel(argv.name);
    const key = newSecret('fy');
    const record = {
      id: `key-${randomBytes(4).toString('hex')}`,
      name,
      hash: hashKey(key),
      createdAt: Date.now(),
      ...(app !== undefined ? { app } : {}),
      ...(env !== undefined ? { env } : {}),
    };
    await provider.control.putApiKey(record);
    const scope = describeScope(scopeOf(record));
    if (!argv.json) {
      ctx.reporter.line(
        `Created key ${record.id} (${record.name}, ${scope}). It is shown once: store it now.`,
      );
    }
    // Made in a project folder, a key of every app is often more than its user meant to hand
    // out (a CI job, a client of this app): say so, with the narrower line. Every app stays the
    // default, since the console and `ferry serve`'s management routes need such a key.
    if (app === undefined && looksLikeProject(ctx.io.cwd)) {
      const folderApp = projectAppName(ctx.io.cwd);
      ctx.reporter.line(
        `  This key reaches the endpoints of every app. A key for app '${folderApp}' only: ferry keys create --app ${folderApp}`,
      );
    }
    if (argv.json) return ctx.reporter.json({ id: record.id, name: record.name, scope: { app, env }, key });
    ctx.reporter.out(key);
  });
}

export function keysList(
  ctx: CliContext,
  argv: { json?: boolean | undefined; provider?: string | undefined },
) {
  return withProvider(ctx, argv.provider, async (provider) => {
    const keys = (await provider.control.listApiKeys()).map((k) => ({
      id: k.id,
      name: k.name,
      scope: describeScope(scopeOf(k)),
      createdAt: iso(k.createdAt),
    }));
    if (argv.json) return ctx.reporter.json(keys);
    if (keys.length === 0) return ctx.reporter.out('No keys: `ferry keys create`.');
    for (const line of table([
      ['ID', 'NAME', 'SCOPE', 'CREATED'],
      ...keys.map((k) => [k.id, k.name, k.scope, k.createdAt]),
    ]))
      ctx.reporter.out(line);
  });
}

export function keysRevoke(
  ctx: CliContext,
  argv: { id: string; json?: boolean | undefined; provider?: string | undefined },
) {
  return withProvider(ctx, argv.provider, async (provider) => {
    const id = argv.id;
    const record = (await provider.control.listApiKeys()).find((k) => k.id === id);
    if (!record) {
      throw new FerryError('not_found', `No API key with id '${id}'`, {
        hint: 'See `ferry keys list`.',
      });
    }
    await provider.control.deleteApiKey(id);
    const removedFile = provider.forgetKeyFile?.(record.hash);
    if (argv.json) return ctx.reporter.json({ id, revoked: true, ...(removedFile ? { removedFile } : {}) });
    ctx.reporter.out(`✓ Revoked ${id}`);
    if (removedFile) {
      ctx.reporter.line(
        `  removed ${removedFile}, which held it; the next \`ferry serve\` or \`ferry deploy\` makes a new one`,
      );
    }
  });
}
