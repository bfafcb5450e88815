/**
 * Every deploy through toolkit-lib names its own change set (cli/providers/toolkit.ts
 * uniqueChangeSetName): with toolkit-lib's one default name, `cdk-deploy-change-set`, a deploy first
 * deletes any change set of that name on the stack, so two deploys touching FerryPlatform at once
 * could delete or execute each other's. toolkit-lib is replaced by a stand-in that records the
 * options its deploy is called with.
 */
import { describe, expect, it, vi } from 'vitest';

const deployCalls = vi.hoisted(() => [] as Array<{ options: Record<string, unknown> }>);
const destroyCalls = vi.hoisted(() => [] as Array<{ options: Record<string, unknown> }>);

vi.mock('@aws-cdk/toolkit-lib', () => ({
  StackSelectionStrategy: { PATTERN_MUST_MATCH: 'pattern-must-match' },
  ExpandStackSelection: { NONE: 'none' },
  Toolkit: class {
    async deploy(_source: unknown, options: Record<string, unknown>) {
      deployCalls.push({ options });
      return { stacks: [] };
    }
    async fromAssemblyBuilder() {
      return {};
    }
    async destroy(_source: unknown, options: Record<string, unknown>) {
      destroyCalls.push({ options });
    }
  },
}));

const { LibToolkit } = await import('../../cli/providers/toolkit.js');

/** An assembly as LibToolkit.synth returns it (the deploy only hands its `cached` on). */
const assembly = {
  directory: '/nowhere',
  stackNames: ['FerryPlatform'],
  template: () => ({}),
  dispose: async () => {},
  cached: {},
};

describe('LibToolkit.deploy change sets', () => {
  it('names a change set of its own on every deploy, never the shared default', async () => {
    const toolkit = new LibToolkit({ approve: async () => true });
    await toolkit.deploy(assembly, ['FerryPlatform'], () => {});
    await toolkit.deploy(assembly, ['FerryPlatform', 'Ferry-shop-production-12345678'], () => {});
    const methods = deployCalls.map(
      (c) => c.options.deploymentMethod as { method?: string; changeSetName?: string } | undefined,
    );
    expect(methods.map((m) => m?.method)).toEqual(['change-set', 'change-set']);
    const names = methods.map((m) => m?.changeSetName ?? '');
    for (const name of names) {
      // CreateChangeSet: letters, digits and hyphens, starting with a letter, at most 128
      // (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateChangeSet.html).
      expect(name).toMatch(/^ferry-[A-Za-z0-9-]+$/);
      expect(name.length).toBeLessThanOrEqual(128);
      expect(name).not.toBe('cdk-deploy-change-set');
    }
    expect(new Set(names).size).toBe(2);
    // Still exactly the stacks asked for.
    expect(deployCalls[1]!.options.stacks).toEqual({
      strategy: 'pattern-must-match',
      patterns: ['FerryPlatform', 'Ferry-shop-production-12345678'],
      expand: 'none',
    });
  });
});

describe('LibToolkit polling', () => {
  it('reads stack events every 5 s, not toolkit-lib’s 2 s, on deploy and destroy (fewer throttled reads: aws/throttled.ts)', async () => {
    const toolkit = new LibToolkit({ approve: async () => true });
    deployCalls.length = 0;
    await toolkit.deploy(assembly, ['FerryPlatform'], () => {}, { changeSetName: 'ferry-given' });
    expect(deployCalls[0]!.options.stackEventPollingInterval).toBe(5_000);
    // A change set name the caller gives is the one toolkit-lib gets.
    expect(deployCalls[0]!.options.deploymentMethod).toEqual({
      method: 'change-set',
      changeSetName: 'ferry-given',
    });
    await toolkit.destroy(['Ferry-shop-production-12345678'], () => {});
    expect(destroyCalls[0]!.options.stackEventPollingInterval).toBe(5_000);
  });
});
