/**
 * Endpoint records for tests, built the way `ferry deploy` and `ferry dev` build them: from a real
 * static scan of a Python project (cli/build/scan.ts), with `codeDir` pointing at the project.
 */
import type { EndpointConfig } from '../../core/deployment.js';
import type { ManifestEndpoint } from '../../core/manifest.js';
import type { EndpointRecord } from '../../core/ports.js';

export function recordFor(endpoint: ManifestEndpoint, codeDir: string, id = endpoint.name): EndpointRecord {
  const config: EndpointConfig = { endpoint, pythonVersion: '3.11', codeDir };
  return {
    id,
    app: 'test',
    env: 'production',
    name: endpoint.name,
    kind: endpoint.kind,
    config,
    fingerprint: 'dev',
    createdAt: Date.now(),
    updatedAt: Date.now(),
  };
}
