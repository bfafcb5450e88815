/**
 * A lean JSON POST client for the throughput loops: node:http on kept-alive sockets. The bench
 * client shares the 2 cores with the platform and the workers it measures; fetch (undici) cost the
 * client about as much CPU per /run as the platform spent on the whole job, so that part of the
 * measurement was the client, not Ferry. BullMQ's producer talks to Redis in-process, Celery's is
 * Python; this keeps Ferry's own client from weighing more than it must.
 */
import { Agent, request } from 'node:http';

export interface JsonPoster {
  post(path: string, body: unknown): Promise<{ status: number; body: unknown }>;
  close(): void;
}

export function jsonPoster(baseUrl: string, headers: Record<string, string>, sockets: number): JsonPoster {
  const url = new URL(baseUrl);
  const agent = new Agent({ keepAlive: true, maxSockets: sockets });
  return {
    post(path, body) {
      const payload = Buffer.from(JSON.stringify(body));
      return new Promise((resolve, reject) => {
        const req = request(
          {
            agent,
            host: url.hostname,
            port: url.port,
            method: 'POST',
            path,
            headers: { ...headers, 'content-type': 'application/json', 'content-length': payload.length },
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (chunk: Buffer) => chunks.push(chunk));
            res.on('end', () => {
              const text = Buffer.concat(chunks).toString('utf8');
              resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined });
            });
            res.on('error', reject);
          },
        );
        req.on('error', reject);
        req.end(payload);
      });
    },
    close() {
      agent.destroy();
    },
  };
}
