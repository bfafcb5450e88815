/**
 * The nesting limit on request bodies (core/json.ts assertJsonDepth): brackets inside strings never
 * count, however the string escapes its quotes and backslashes; real nesting is counted exactly.
 */
import { describe, expect, it } from 'vitest';
import { assertJsonDepth, maxJsonDepth } from '../../core/json.js';

const nested = (levels: number, inner = '1') => `${'['.repeat(levels)}${inner}${']'.repeat(levels)}`;
const ok = (text: string) => expect(() => assertJsonDepth(Buffer.from(text))).not.toThrow();
const refused = (text: string) =>
  expect(() => assertJsonDepth(Buffer.from(text))).toThrow(/nested \d+ levels deep/);

describe('assertJsonDepth', () => {
  it('counts real nesting exactly: the limit passes, one more is refused', () => {
    ok(nested(maxJsonDepth));
    refused(nested(maxJsonDepth + 1));
    ok(`{"input":${nested(maxJsonDepth - 1)}}`);
    refused(`{"input":${nested(maxJsonDepth)}}`);
  });

  it('skips brackets inside strings, escaped quotes included', () => {
    ok(JSON.stringify({ input: { text: '['.repeat(5_000) } }));
    ok(JSON.stringify({ input: { text: `"${'{'.repeat(5_000)}\\"` } }));
    ok(JSON.stringify({ input: { text: 'x'.repeat(65_536), more: '['.repeat(1_000) } }));
  });

  it('a string ending in escaped backslashes ends there: what follows counts', () => {
    // "a\\" is a complete string (the backslash is escaped); the brackets after it are real.
    refused(`["a\\\\",${nested(maxJsonDepth)}]`);
    // "a\"…" is not: the quote is escaped, so the brackets are still inside the string.
    ok(`["a\\"${'['.repeat(maxJsonDepth + 5)}"]`);
  });

  it('an unterminated string does not throw here (the parse refuses it)', () => {
    ok(`{"input":"${'['.repeat(1_000)}`);
  });
});
