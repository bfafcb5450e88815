/**
 * Endpoint records for a Python project, built as `ferry dev` builds them: a real static scan
 * (cli/build/scan.ts) with `codeDir` pointing at the project, plus resource overrides so a benchmark
 * can set workers and max_concurrency to match its peer.
 */
import { scanProject } from '../../cli/build/scan.js';
import type { EndpointConfig } from '../../core/deployment.js';
import type { EndpointRecord } from '../../core/ports.js';

export async function projectRecords(
  dir: string,
  resources: Record<string, Record<string, number>> = {},
): Promise<EndpointRecord[]> {
  const { endpoints } = await scanProject({ projectDir: dir });
  return endpoints.map((scanned) => {
    const endpoint = {
      ...scanned,
      resources: { ...scanned.resources, ...(resources[scanned.name] ?? {}) },
    };
    const config: EndpointConfig = { endpoint, pythonVersion: '3.11', codeDir: dir };
    return {
      id: endpoint.name,
      app: 'bench',
      env: 'production',
      name: endpoint.name,
      kind: endpoint.kind,
      config,
      fingerprint: 'bench',
      createdAt: Date.now(),
      updatedAt: Date.now(),
    };
  });
}
