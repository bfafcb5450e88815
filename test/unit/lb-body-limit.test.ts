/**
 * The front door's limit for load-balanced bodies (core/limits.ts lbBodyBytes) is the limit of Ferry's
 * Python LB runtime (worker-image/python/ferry/lb.py MAX_BODY_BYTES): were the front door's higher, a
 * body between the two would reach a worker that refuses it unread, and the client would get a 502
 * for a broken upload instead of the front door's 413. The constant is read from the real module.
 */
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { limits } from '../../core/limits.js';

describe('the load-balanced body limit', () => {
  it('is the Python LB runtime limit', () => {
    const python = execFileSync('python3', ['-c', 'import ferry.lb as lb; print(lb.MAX_BODY_BYTES)'], {
      env: { ...process.env, PYTHONPATH: resolve('worker-image/python') },
      encoding: 'utf8',
    });
    expect(limits.lbBodyBytes).toBe(Number(python.trim()));
  });
});
