/**
 * `ferry deploy --provider aws --bootstrap` bootstraps the account/region once. The assembly holds
 * two environment-agnostic stacks (FerryPlatform and the app environment's), and toolkit-lib's
 * `BootstrapEnvironments.fromCloudAssemblySource` hands over one environment per stack, which
 * `Toolkit.bootstrap` bootstraps concurrently: two creates of CDKToolkit, and "AlreadyExistsException:
 * Stack [CDKToolkit] already exists" (https://github.com/aws/aws-cdk/issues/65). toolkit-lib is real
 * here (the synth is), except that its bootstrap records the environments it was handed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';

const bootstrapped = vi.hoisted(() => [] as Array<Array<{ name: string; account: string; region: string }>>);

vi.mock('@aws-cdk/toolkit-lib', async (importOriginal) => {
  const real = await importOriginal<typeof import('@aws-cdk/toolkit-lib')>();
  class BootstrapRecordingToolkit extends real.Toolkit {
    override async bootstrap(environments: import('@aws-cdk/toolkit-lib').BootstrapEnvironments) {
      // What Toolkit.bootstrap itself does first (toolkit.js): the environments it would bootstrap.
      const resolve = (
        environments as unknown as {
          getEnvironments(ioHost: unknown): Promise<Array<{ name: string; account: string; region: string }>>;
        }
      ).getEnvironments.bind(environments);
      bootstrapped.push(await resolve(this.ioHost));
      return { environments: [], duration: 0 };
    }
  }
  return { ...real, Toolkit: BootstrapRecordingToolkit };
});

const { LibToolkit, bootstrapEnvironmentNames } = await import('../../cli/providers/toolkit.js');
const { synthesize } = await import('../../infra/app.js');
const { appStackName, platformStackName } = await import('../../infra/names.js');
const { sampleImages, sampleManifest, stubFunctionsDir } = await import('../infra/fixtures.js');

const cleanups: Array<() => void> = [];
afterAll(() => {
  for (const cleanup of cleanups) cleanup();
});

describe('LibToolkit.bootstrap', () => {
  it('hands toolkit-lib the one environment of the two-stack assembly, once', async () => {
    const fns = stubFunctionsDir();
    const outdir = mkdtempSync(join(tmpdir(), 'ferry-bootstrap-'));
    cleanups.push(fns.cleanup, () => rmSync(outdir, { recursive: true, force: true }));
    const toolkit = new LibToolkit({ approve: async () => true });
    const assembly = await toolkit.synth(
      ({ outdir: builderOutdir, context }) =>
        synthesize({
          manifest: sampleManifest,
          env: 'dev',
          functionsCodeDir: fns.dir,
          artifact: { key: 'artifacts/demo/dev/fff.tar.gz' },
          images: sampleImages,
          cfnValidate: false,
          ...(builderOutdir ? { outdir: builderOutdir } : {}),
          ...(context ? { context } : {}),
        }),
      { outdir },
    );
    try {
      // The real assembly: both stacks, environment-agnostic.
      expect([...assembly.stackNames].sort()).toEqual(
        [appStackName('demo', 'dev'), platformStackName].sort(),
      );
      await toolkit.bootstrap(assembly, () => {});
      expect(bootstrapped).toHaveLength(1);
      expect(bootstrapped[0]).toEqual([
        expect.objectContaining({
          name: 'aws://unknown-account/unknown-region',
          account: 'unknown-account',
          region: 'unknown-region',
        }),
      ]);
    } finally {
      await assembly.dispose();
    }
  }, 240_000);

  it('keeps each distinct environment once, in order', () => {
    const env = (name: string) => ({ environment: { name } });
    expect(
      bootstrapEnvironmentNames([
        env('aws://unknown-account/unknown-region'),
        env('aws://111111111111/eu-west-1'),
        env('aws://unknown-account/unknown-region'),
      ]),
    ).toEqual(['aws://unknown-account/unknown-region', 'aws://111111111111/eu-west-1']);
  });
});
