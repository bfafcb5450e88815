/**
 * JSON in and out of the platform, exactly (docs/security.md, "Correctness rows that were security
 * bugs"): a body is stored as received or refused with 400, and an integer beyond 2^53 keeps every
 * digit.
 *
 * JSON.parse turns 18446744073709551615 (a 64-bit seed, common in image workflows) into
 * 18446744073709552000, and Node 20 cannot write a number back from its digits (JSON.rawJSON comes
 * with V8 11.4, Node 21). So where JSON comes in (request bodies, uploaded inputs: parseJsonExact),
 * each such integer literal becomes a marker string, "\u0000ferry-int:" and its digits, which the
 * stores and the engine carry like any string; where JSON goes out (API answers, the agent's answers
 * to workers, webhooks, published outputs: stringifyJsonExact), each marker string in the text is
 * replaced by its digits. A string holding the marker text itself is refused where JSON comes in, so
 * a marker found on the way out is always one of these. Python's json module (the worker side and
 * RunPod's clients) reads the digits back as the same integer.
 */
import { badRequest, FerryError } from './errors.js';

/** What a marker string starts with: a NUL, which JSON text can only carry escaped, then a name. */
const intMarker = '\u0000ferry-int:';
/** Whether `text` is a whole marker string: the marker and an integer's digits, nothing else. */
const isWholeMarker = (text: string) =>
  text.startsWith(intMarker) && /^-?\d+$/.test(text.slice(intMarker.length));
/**
 * A marker string as JSON.stringify writes it, where a value starts (after `[`, `{`, `,`, `:` or at
 * the start of the text): never inside another string, where a quote is written `\"`.
 */
const writtenMarker = /(^|[[{,:])"\\u0000ferry-int:(-?\d+)"/g;
const writtenMarkerStart = '"\\u0000ferry-int:';
/** An integer literal JSON allows: no leading zero. */
const integerLiteral = /^-?(?:0|[1-9]\d*)$/;
/** 2^53 has 16 digits: a shorter integer is always exact in a double. */
const unsafeDigits = 16;

/**
 * Deepest nesting a body may have. Python's json module (the worker side) gives up near 1000 levels
 * (its recursion limit), and V8's JSON.stringify, which stores every job, overflows its stack at a
 * few thousand: a deeper body would be a 500 here or a crash in the worker, so it is a 400 up front.
 */
export const maxJsonDepth = 512;

/** 400 for a body nested deeper than maxJsonDepth (also checked on /lb routes before forwarding). */
export function assertJsonDepth(body: Buffer): void {
  const { depth } = jsonShape(body);
  if (depth > maxJsonDepth) throw tooDeep(depth);
}

const tooDeep = (depth: number) =>
  badRequest(`Request body is nested ${depth} levels deep; at most ${maxJsonDepth} levels are accepted`);

/**
 * The JSON `bytes` hold, parsed, with integers beyond 2^53 as marker strings. 400 (naming `what`,
 * e.g. "Request body") for text that is not JSON, nested deeper than maxJsonDepth, or not storable
 * as received.
 */
export function parseJsonExact(bytes: Buffer, what: string): unknown {
  const shape = jsonShape(bytes);
  if (shape.depth > maxJsonDepth) throw tooDeep(shape.depth);
  const { text, marked } = markUnsafeIntegers(bytes, shape.longIntegers);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new FerryError('bad_request', `${what} is not valid JSON: ${(error as Error).message}`);
  }
  const markers = { seen: 0 };
  assertFaithful(value, markers);
  // More whole markers than this parse made: the text spelled one out itself.
  if (markers.seen > marked) throw reservedText();
  return value;
}

/**
 * The number a marker string stands for, rounded to a double, for a check of its range (a policy's
 * milliseconds): an integer beyond 2^53 is out of any range the API takes, and says so as a number.
 * Any other value comes back as it is.
 */
export function roundedIfMarker(value: unknown): unknown {
  return typeof value === 'string' && isWholeMarker(value) ? Number(value.slice(intMarker.length)) : value;
}

/**
 * A value as the JSON text a store already holds (written by JSON.stringify, marker strings and all),
 * for a caller that only writes it out again: stringifyJsonExact puts the text in as it is. A job's
 * input on its way to a worker is one (the take answer): parsing it and writing it again cost as much
 * as the rest of a 64 KB job's take, since V8's JSON.stringify spends about 2 ns on each character of
 * a long string. A plain JSON.stringify writes its parsed value instead.
 */
export class JsonText {
  constructor(readonly text: string) {}

  toJSON(): unknown {
    if (!splicing) return JSON.parse(this.text);
    splicing.push(this.text);
    return `${splicedMarker}${splicing.length - 1}`;
  }
}

/** The texts of the JsonText values met by the stringifyJsonExact under way, if one is. */
let splicing: string[] | undefined;
/** Where each of them goes: a string no body can hold (the marker text, then a letter). */
const splicedMarker = `${intMarker}t`;
const writtenSpliced = /"\\u0000ferry-int:t(\d+)"/g;

/**
 * JSON.stringify, with each JsonText put in as its text and each marker string written back as the
 * integer it stands for.
 */
export function stringifyJsonExact(value: unknown): string {
  const texts: string[] = [];
  splicing = texts;
  let text: string;
  try {
    text = JSON.stringify(value);
  } finally {
    splicing = undefined;
  }
  if (texts.length > 0) text = text.replace(writtenSpliced, (_, i: string) => texts[Number(i)]!);
  return text?.includes(writtenMarkerStart) ? text.replace(writtenMarker, '$1$2') : text;
}

const reservedText = () =>
  new FerryError('bad_request', 'JSON text holding U+0000 followed by "ferry-int:" is reserved', {
    hint: 'Ferry uses that text to keep integers beyond 2^53 exact; send such data another way',
  });

/**
 * JSON is stored exactly as received or refused (issue 13): a `__proto__` key would be dropped or turn
 * into a prototype on the way through validation, and a number beyond double range (`1e999`) would
 * be stored as null. Both are found by walking the parsed value (keys arrive decoded, so an escaped
 * `\u005f_proto__` is seen too): the walk costs one step per value, where a scan of the text for
 * either cost one step per byte (a 64 KB string input spent more there than in the parse). The walk
 * also counts whole marker strings and refuses the marker text anywhere else.
 */
function assertFaithful(value: unknown, markers: { seen: number }): void {
  if (typeof value === 'string') {
    // indexOf of one character first: a NUL is rare, and the search is a fast scan.
    if (value.indexOf('\u0000') !== -1 && value.includes(intMarker)) {
      if (!isWholeMarker(value)) throw reservedText();
      markers.seen++;
    }
  } else if (typeof value === 'number') {
    if (!Number.isFinite(value)) {
      throw new FerryError('bad_request', 'A number in the JSON is too large to store (beyond 1.8e308)');
    }
  } else if (Array.isArray(value)) {
    for (const item of value) assertFaithful(item, markers);
  } else if (value !== null && typeof value === 'object') {
    for (const key in value) {
      if (key === '__proto__')
        throw new FerryError('bad_request', 'JSON keys named "__proto__" are not accepted');
      if (key.indexOf('\u0000') !== -1 && key.includes(intMarker)) throw reservedText();
      assertFaithful((value as Record<string, unknown>)[key], markers);
    }
  }
}

/**
 * The deepest bracket nesting of JSON text, and where (byte offsets, sign included) each number
 * outside its strings has an integer part of 16 or more digits with no fraction or exponent after it:
 * only such an integer can lose digits. A fraction's or an exponent's digits never count, so a body
 * of doubles, such as an embedding, has none. One pass over the bytes, no parse.
 */
function jsonShape(body: Buffer): { depth: number; longIntegers: [number, number][] } {
  let depth = 0;
  let deepest = 0;
  let digits = 0;
  /** After a `.`, `e` or `E`: the digits that follow are a fraction's or an exponent's. */
  let notInteger = false;
  const longIntegers: [number, number][] = [];
  // One step past the last byte (-1 there), so a number at the very end is noted like any other.
  for (let i = 0; i <= body.length; i++) {
    const byte = i < body.length ? body[i]! : -1;
    if (byte >= 0x30 && byte <= 0x39) {
      digits++;
      continue;
    }
    if (digits > 0) {
      if (digits >= unsafeDigits && !notInteger && byte !== 0x2e && byte !== 0x65 && byte !== 0x45) {
        const start = i - digits;
        longIntegers.push([body[start - 1] === 0x2d ? start - 1 : start, i]);
      }
      digits = 0;
    }
    if (byte === 0x2e || byte === 0x65 || byte === 0x45) {
      notInteger = true;
      continue;
    }
    // An exponent's sign keeps its digits out; any other byte ends the number.
    if (byte !== 0x2b && byte !== 0x2d) notInteger = false;
    if (byte === 0x22) {
      // A string: jump from quote to quote with the native search (a byte loop over a 64 KB input
      // showed up in profiles) until one that an odd run of backslashes does not escape.
      for (;;) {
        const end = body.indexOf(0x22, i + 1);
        if (end === -1) return { depth: deepest, longIntegers }; // unterminated: the parse refuses it
        let backslashes = 0;
        for (let j = end - 1; body[j] === 0x5c; j--) backslashes++;
        i = end;
        if (backslashes % 2 === 0) break;
      }
    } else if (byte === 0x5b || byte === 0x7b) {
      depth++;
      if (depth > deepest) deepest = depth;
    } else if (byte === 0x5d || byte === 0x7d) depth--;
  }
  return { depth: deepest, longIntegers };
}

/**
 * The text of `bytes` with each long integer (jsonShape) that a double cannot hold exactly written
 * as a marker string instead. A literal beyond double range stays (the walk refuses it as before);
 * text that is not JSON stays not JSON (a marker only stands where a number stood).
 */
function markUnsafeIntegers(
  bytes: Buffer,
  longIntegers: [number, number][],
): { text: string; marked: number } {
  let text = '';
  let from = 0;
  let marked = 0;
  for (const [start, end] of longIntegers) {
    // Digits and a sign only: ASCII, so the offsets are character boundaries too.
    const token = bytes.toString('latin1', start, end);
    if (!isUnsafeInteger(token)) continue;
    text += bytes.toString('utf8', from, start) + JSON.stringify(intMarker + token);
    from = end;
    marked++;
  }
  return { text: text + bytes.toString('utf8', from), marked };
}

function isUnsafeInteger(token: string): boolean {
  if (!integerLiteral.test(token)) return false;
  const value = Number(token);
  return Number.isFinite(value) && !Number.isSafeInteger(value);
}
