/**
 * The Python versions workers run, on their own so the CLI's flag definitions (`--python-version`
 * choices) load without zod: core/endpoint-spec.ts, the owner of what a declaration may say, takes
 * them from here.
 */
export const pythonVersions = ['3.10', '3.11', '3.12', '3.13'] as const;
