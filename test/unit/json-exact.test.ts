/**
 * JSON in and out exactly (core/json.ts): integers beyond 2^53 keep their digits, and whole floats
 * (1.0, 1e2, -0.0) their fraction or exponent, from a request body to every answer, through the
 * stores' own JSON; nothing else changes, and the marker text is refused.
 */
import { describe, expect, it } from 'vitest';
import { FerryError } from '../../core/errors.js';
import { JsonText, parseJsonExact, stringifyJsonExact } from '../../core/json.js';
import { parseOr400, policySchema } from '../../core/schemas.js';

const parse = (text: string) => parseJsonExact(Buffer.from(text), 'Request body');
/** In, through a store's JSON.stringify / JSON.parse, and out again. */
const roundTrip = (text: string) => stringifyJsonExact(JSON.parse(JSON.stringify(parse(text))));
const refused = (text: string, message: RegExp) => {
  let error: unknown;
  try {
    parse(text);
  } catch (caught) {
    error = caught;
  }
  expect(error).toBeInstanceOf(FerryError);
  expect((error as FerryError).code).toBe('bad_request');
  expect((error as Error).message).toMatch(message);
};

describe('integers beyond 2^53', () => {
  it('keep every digit from the body to the text that goes out', () => {
    for (const text of [
      '{"seed":18446744073709551615}',
      '{"seed":-9223372036854775808}',
      '{"a":[9007199254740993,1,{"b":12345678901234567890123}]}',
      '[18446744073709551615]',
      '18446744073709551615',
      '{"workflow":{"3":{"inputs":{"seed":156680208700286999,"steps":20}}}}',
      // Right after a fraction and an exponent (whose digits never count as an integer's).
      '[0.12345678901234568,18446744073709551615,1e-7,-18446744073709551615]',
    ]) {
      expect(roundTrip(text)).toBe(text);
    }
    // JSON.parse alone loses them: this is what the markers prevent.
    expect(JSON.stringify(JSON.parse('{"seed":18446744073709551615}'))).toBe('{"seed":18446744073709552000}');
  });

  it('leave safe integers, fractions, exponents and digits inside strings as they were', () => {
    const value = parse(
      '{"small":9007199254740991,"f":1.2345678901234567890,"e":1e300,"s":"12345678901234567890","q":"a\\"12345678901234567890"}',
    );
    expect(value).toEqual({
      small: 9007199254740991,
      f: 1.2345678901234567,
      e: 1e300,
      s: '12345678901234567890',
      q: 'a"12345678901234567890',
    });
  });

  it('do not turn text that is not JSON into JSON', () => {
    refused('{"a":012345678901234567890}', /not valid JSON/);
    refused('{12345678901234567890:1}', /reserved/);
    refused('[1 12345678901234567890]', /not valid JSON/);
  });

  it('refuse bytes that are not UTF-8 rather than store U+FFFD in their place', () => {
    expect(() =>
      parseJsonExact(
        Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]),
        'Request body',
      ),
    ).toThrow(/Request body is not valid UTF-8/);
    expect(parse('{"a":"é☃ 😀"}')).toEqual({ a: 'é☃ 😀' });
  });

  it('still refuse a number beyond double range', () => {
    refused(`{"n":${'9'.repeat(400)}}`, /too large to store/);
  });
});

describe('floats whose value is whole', () => {
  it('keep the literal they came as, so Python reads a float again (JSON.stringify wrote 1.0 as 1)', () => {
    for (const text of [
      '{"scale":1.0,"weights":[1.0,0.0,-0.0,2.5,1],"e":[1e2,1E2,3.2e10,-4.0e+3,1.5e-400]}',
      '{"big":12345678901234567890.0,"nines":0.99999999999999999999,"tiny":1.0000000000000001}',
      '[1.0]',
      '-0.0',
      // After text of two, three and four bytes a character: the way out counts bytes, not characters.
      '{"s":"é☃ 😀","f":1.0,"t":"\\"1.0","g":[2.0]}',
    ]) {
      expect(roundTrip(text)).toBe(text);
    }
    // JSON.parse and JSON.stringify alone: what a Python handler then read as ints.
    expect(JSON.stringify(JSON.parse('[1.0,-0.0,1e2]'))).toBe('[1,0,100]');
  });

  it('leave every other number a number: fractions, exponents that are not whole, 1e21 and up', () => {
    expect(parse('{"v":[0.5,2.5,0.12345678901234568,123456789012.5,0.9,1e-7,1e300,1e21,-7]}')).toEqual({
      v: [0.5, 2.5, 0.12345678901234568, 123456789012.5, 0.9, 1e-7, 1e300, 1e21, -7],
    });
    expect(roundTrip('{"v":[0.5,0.9,1e-7,1e+300,1e21]}')).toBe('{"v":[0.5,0.9,1e-7,1e+300,1e+21]}');
  });

  it('still read as the number they are where the API takes a number (a policy)', () => {
    const body = parse('{"policy":{"ttl":60000.0,"executionTimeout":1e5}}') as { policy: unknown };
    expect(parseOr400(policySchema, body.policy, 'policy')).toEqual({ ttl: 60000, executionTimeout: 100000 });
  });

  it('do not turn text that is not JSON into JSON, and are refused as marker text', () => {
    refused('{"a":01.0}', /not valid JSON/);
    refused('{"a":1.}', /not valid JSON/);
    refused('{"a":-}', /not valid JSON/);
    refused('{"s":"\\u0000ferry-int:1.0"}', /reserved/);
  });
});

describe('the marker text', () => {
  it('is refused where JSON comes in, as a whole string, inside one, or in a key', () => {
    refused('{"s":"\\u0000ferry-int:5"}', /reserved/);
    refused('{"s":"x\\"\\u0000ferry-int:5"}', /reserved/);
    refused('{"\\u0000ferry-int:5":1}', /reserved/);
    // Spelled with other escapes, it is the same string once parsed.
    refused('{"s":"\\u0000\\u0066erry-int:5"}', /reserved/);
    // Beside a real unsafe integer: one marker made, two seen.
    refused('{"n":18446744073709551615,"s":"\\u0000ferry-int:7"}', /reserved/);
  });

  it('other strings with a NUL pass through', () => {
    expect(roundTrip('{"s":"a\\u0000b","t":"\\u0000ferry"}')).toBe('{"s":"a\\u0000b","t":"\\u0000ferry"}');
  });

  it('is written back only where a whole string value stands, so the text stays JSON', () => {
    // A log line (worker output, never parsed on the way in) holding the text inside a string.
    const text = stringifyJsonExact({ line: 'x"\u0000ferry-int:5', n: 1 });
    expect(JSON.parse(text)).toEqual({ line: 'x"\u0000ferry-int:5', n: 1 });
    // Nor as a key (a body cannot hold one; an object built inside the platform could).
    const keyed = stringifyJsonExact({ '\u0000ferry-int:5': 1, n: '\u0000ferry-int:2.0' });
    expect(keyed).toBe('{"\\u0000ferry-int:5":1,"n":2.0}');
  });
});

describe('JsonText (a stored input on its way to a worker)', () => {
  it('is put in as the text it holds, and the marker strings in that text go out as digits', () => {
    const stored = JSON.stringify(parse('{"seed":18446744073709551615,"text":"a \\"quoted\\" é"}'));
    const answer = stringifyJsonExact([
      { id: 'a', input: new JsonText(stored) },
      { id: 'b', input: new JsonText('"plain"'), webhook: 'https://example.com/h' },
    ]);
    expect(answer).toBe(
      '[{"id":"a","input":{"seed":18446744073709551615,"text":"a \\"quoted\\" é"}},' +
        '{"id":"b","input":"plain","webhook":"https://example.com/h"}]',
    );
    // What the text held, exactly as parsing and writing it again would have given.
    expect(answer).toBe(
      stringifyJsonExact([
        { id: 'a', input: JSON.parse(stored) },
        { id: 'b', input: 'plain', webhook: 'https://example.com/h' },
      ]),
    );
  });

  it('is not parsed and written again: the text goes out as it is', () => {
    // No store writes such text; it shows that the text is put in, not its value written again.
    expect(stringifyJsonExact({ input: new JsonText('{ "a" : 1.0 }') })).toBe('{"input":{ "a" : 1.0 }}');
  });

  it('reads as its parsed value anywhere else, and a failed write leaves no state behind', () => {
    expect(JSON.stringify({ input: new JsonText('{"a":[1,2]}') })).toBe('{"input":{"a":[1,2]}}');
    expect(() => stringifyJsonExact({ input: new JsonText('1'), bad: 1n })).toThrow(TypeError);
    expect(JSON.stringify(new JsonText('[true]'))).toBe('[true]');
    expect(stringifyJsonExact({ n: new JsonText('2') })).toBe('{"n":2}');
  });

  it('cannot be imitated by a body: its place-holder is marker text, refused where JSON comes in', () => {
    refused('{"input":"\\u0000ferry-int:t0"}', /reserved/);
  });
});
