import { endpointConfigOf } from '../../../core/deployment.js';
import { FerryError } from '../../../core/errors.js';
import { type Manifest, manifestSchema } from '../../../core/manifest.js';
import type { EndpointRecord } from '../../../core/ports.js';

/** The manifest an environment's stack is built from, put back together from its endpoint records. */
export function manifestFromRecords(app: string, records: readonly EndpointRecord[]): Manifest {
  const first = records[0];
  if (!first) throw new FerryError('failed', 'No endpoints to build a stack from');
  for (const record of records) {
    if (record.fingerprint !== first.fingerprint || record.artifactKey !== first.artifactKey) {
      throw new FerryError(
        'failed',
        `Endpoints of ${app}/${first.env} run different builds (${first.name}: ${first.fingerprint.slice(0, 12)}, ${record.name}: ${record.fingerprint.slice(0, 12)})`,
        { hint: `Deploy the environment again: \`ferry deploy --provider aws --env ${first.env}\`.` },
      );
    }
  }
  const configs = records.map((record) => endpointConfigOf(record));
  return manifestSchema.parse({
    version: 1,
    app,
    pythonVersion: configs[0]!.pythonVersion,
    generatedAt: new Date(first.updatedAt).toISOString(),
    sourceFingerprint: first.fingerprint,
    // The record's name (`live-x` in dev) names the stack's constructs, so two copies never clash.
    endpoints: records
      .map((record, i) => ({ ...configs[i]!.endpoint, name: record.name }))
      .sort((a, b) => a.name.localeCompare(b.name)),
    dependencies: { installed: [], excluded: [] },
  });
}
