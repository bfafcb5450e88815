/**
 * JSON in and out of the platform, exactly (docs/security.md, "Correctness rows that were security
 * bugs"): a body is stored as received or refused with 400, an integer beyond 2^53 keeps every
 * digit, and a number written with a fraction or an exponent stays a float for Python.
 *
 * JSON.parse turns 18446744073709551615 (a 64-bit seed, common in image workflows) into
 * 18446744073709552000, and JSON.stringify writes 1.0, 1e2 and -0.0 as 1, 100 and 0, which Python's
 * json module then reads as ints: a handler's `torch.tensor([1.0, 0.0])` became a tensor of int64.
 * Node 20 cannot write a number back from its own text (JSON.rawJSON comes with V8 11.4, Node 21).
 * So where JSON comes in (request bodies, worker results, uploaded inputs: parseJsonExact), each such
 * number literal becomes a marker string, "\u0000ferry-int:" and the literal, which the stores and the
 * engine carry like any string; where JSON goes out (API answers, the agent's answers to workers,
 * webhooks, published outputs: stringifyJsonExact), each marker string in the text is replaced by
 * its literal. A string holding the marker text itself is refused where JSON comes in, so a marker
 * found on the way out is always one of these. Python's json module (the worker side and RunPod's
 * clients) reads the literal back as the same integer, or the same float.
 */
import { isUtf8 } from 'node:buffer';
import { badRequest, FerryError } from './errors.js';

/** What a marker string starts with: a NUL, which JSON text can only carry escaped, then a name. */
const intMarker = '\u0000ferry-int:';
/** A character of a number literal: a digit, a sign, a point or an e (what a marker holds after its name). */
const isLiteralCode = (code: number) =>
  (code >= 0x30 && code <= 0x39) ||
  code === 0x2e ||
  code === 0x65 ||
  code === 0x45 ||
  code === 0x2b ||
  code === 0x2d;
/**
 * Whether `text` is a whole marker string: the marker, then a number literal's characters only. Only
 * parseJsonExact makes them, from literals it read; one a body spelled out itself is refused there by
 * count, whatever it holds.
 */
function isWholeMarker(text: string): boolean {
  if (text.length === intMarker.length || !text.startsWith(intMarker)) return false;
  for (let i = intMarker.length; i < text.length; i++) if (!isLiteralCode(text.charCodeAt(i))) return false;
  return true;
}
/** A marker string's start as JSON.stringify writes it (stringifyJsonExact looks for it). */
const writtenMarkerStart = '"\\u0000ferry-int:';
/** Its bytes, as markChangingNumbers writes it and writeMarkersBack finds it (ASCII). */
const markerStartBytes = Buffer.from(writtenMarkerStart, 'latin1');
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
 * The JSON `bytes` hold, parsed, with the number literals JSON.stringify would not write back as
 * they read (an integer beyond 2^53, a whole float) as marker strings. 400 (naming `what`,
 * e.g. "Request body") for bytes that are not UTF-8, text that is not JSON, nesting deeper than
 * maxJsonDepth, or a value not storable as received.
 */
export function parseJsonExact(bytes: Buffer, what: string): unknown {
  // JSON travels as UTF-8 (RFC 8259, section 8.1); decoding other bytes would store U+FFFD in their place.
  if (!isUtf8(bytes)) throw badRequest(`${what} is not valid UTF-8`);
  const shape = jsonShape(bytes);
  if (shape.depth > maxJsonDepth) throw tooDeep(shape.depth);
  const text = markChangingNumbers(bytes, shape.changing);
  const marked = shape.changing.length / 2;
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
 * milliseconds): an integer beyond 2^53 is out of any range the API takes, and says so as a number;
 * a whole float (`"ttl": 60000.0`) is that number. Any other value comes back as it is.
 */
export function roundedIfMarker(value: unknown): unknown {
  const literal = markedLiteral(value);
  return literal === undefined ? value : Number(literal);
}

/**
 * The number literal a marker string stands for (`3.0`, `18446744073709551615`), else undefined: what
 * Python's json module reads it as (a float when it has a point or an exponent, else an int).
 */
export const markedLiteral = (value: unknown): string | undefined =>
  typeof value === 'string' && isWholeMarker(value) ? value.slice(intMarker.length) : undefined;

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
  return text === undefined ? text : writeMarkersBack(text);
}

/**
 * `text` with each marker string that stands where a value starts (after `[`, `{`, `,`, `:` or at
 * the start of the text; never inside another string, where a quote is written `\"`, nor as a key)
 * replaced by the literal it holds. From the first marker on, a loop over the UTF-8 bytes into a
 * buffer of the same size: a regular expression, or a native search per marker, over a body of
 * 250 000 markers took a tenth to a third of a second.
 */
function writeMarkersBack(text: string): string {
  const first = text.indexOf(writtenMarkerStart);
  if (first === -1) return text;
  const bytes = Buffer.from(text, 'utf8');
  const out = Buffer.allocUnsafe(bytes.length);
  const markerLength = markerStartBytes.length;
  let at = 0;
  let from = 0;
  candidates: for (let i = Buffer.byteLength(text.slice(0, first)); i + markerLength < bytes.length; i++) {
    if (bytes[i] !== 0x22 || bytes[i + 1] !== 0x5c) continue;
    for (let k = 2; k < markerLength; k++) if (bytes[i + k] !== markerStartBytes[k]) continue candidates;
    const literalStart = i + markerLength;
    let end = literalStart;
    while (end < bytes.length && isLiteralCode(bytes[end]!)) end++;
    const before = i === 0 ? 0x5b : bytes[i - 1];
    const startsValue = before === 0x5b || before === 0x7b || before === 0x2c || before === 0x3a;
    if (end > literalStart && bytes[end] === 0x22 && bytes[end + 1] !== 0x3a && startsValue) {
      at = copyBytes(bytes, from, i, out, at);
      at = copyBytes(bytes, literalStart, end, out, at);
      from = end + 1;
      i = end;
    }
  }
  if (from === 0) return text;
  at = copyBytes(bytes, from, bytes.length, out, at);
  return out.toString('utf8', 0, at);
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
 * literal outside its strings would not come back from JSON.parse and JSON.stringify as Python reads
 * it (scanNumber), so it travels as a marker: as start, end pairs, flat (a pair array per literal
 * was most of a big body's garbage). One pass over the bytes, no parse.
 */
function jsonShape(body: Buffer): { depth: number; changing: number[] } {
  let depth = 0;
  let deepest = 0;
  const changing: number[] = [];
  for (let i = 0; i < body.length; i++) {
    const byte = body[i]!;
    if (byte === 0x22) {
      // A string: jump from quote to quote with the native search (a byte loop over a 64 KB input
      // showed up in profiles) until one that an odd run of backslashes does not escape.
      for (;;) {
        const end = body.indexOf(0x22, i + 1);
        if (end === -1) return { depth: deepest, changing }; // unterminated: the parse refuses it
        let backslashes = 0;
        for (let j = end - 1; body[j] === 0x5c; j--) backslashes++;
        i = end;
        if (backslashes % 2 === 0) break;
      }
    } else if (byte === 0x5b || byte === 0x7b) {
      depth++;
      if (depth > deepest) deepest = depth;
    } else if (byte === 0x5d || byte === 0x7d) {
      depth--;
    } else if (byte === 0x2d || isDigit(byte)) {
      i = scanNumber(body, i, changing) - 1;
    }
  }
  return { depth: deepest, changing };
}

const isDigit = (byte: number | undefined) => byte !== undefined && byte >= 0x30 && byte <= 0x39;

/**
 * Where the number literal at `start` ends; notes it in `changing` when JSON.parse then
 * JSON.stringify would give Python something else: an integer beyond 2^53 loses digits, and a whole
 * value written with a fraction or an exponent (1.0, 1e2, -0.0, an underflow to 0) comes back with
 * neither while it is under 1e21 (above, V8 writes an exponent), which Python reads as an int. Most
 * literals are decided from their digits: a short integer, or a fraction with a digit other than 0
 * and one other than 9 early enough (fractionIsWhole), never changes; a fraction of zeros always
 * does. The rest (an exponent, a long integer, a fraction of zeros and nines) are read as a number.
 * Text that is not a number literal is never noted: the parse refuses it as it is.
 */
function scanNumber(body: Buffer, start: number, changing: number[]): number {
  let i = start;
  if (body[i] === 0x2d) i++;
  const integerStart = i;
  while (isDigit(body[i])) i++;
  const integerDigits = i - integerStart;
  let valid = integerDigits === 1 || (integerDigits > 1 && body[integerStart] !== 0x30);
  let fraction: 'none' | 'zeros' | 'not whole' | 'maybe whole' = 'none';
  if (body[i] === 0x2e) {
    const fractionStart = ++i;
    while (isDigit(body[i])) i++;
    if (i === fractionStart) valid = false;
    fraction = fractionIsWhole(body, fractionStart, i, integerDigits);
  }
  let exponent = false;
  if (body[i] === 0x65 || body[i] === 0x45) {
    exponent = true;
    i++;
    if (body[i] === 0x2b || body[i] === 0x2d) i++;
    const digitsStart = i;
    while (isDigit(body[i])) i++;
    if (i === digitsStart) valid = false;
  }
  if (!valid) return i;
  let changes: boolean;
  if (exponent || fraction === 'maybe whole') changes = wholeUnder1e21(body.toString('latin1', start, i));
  else if (fraction === 'zeros') changes = integerDigits <= 21;
  else if (fraction === 'not whole') changes = false;
  else changes = integerDigits >= unsafeDigits && unsafeInteger(body.toString('latin1', start, i));
  if (changes) changing.push(start, i);
  return i;
}

/**
 * Whether a fraction (the digits from `start` to `end`) after `integerDigits` digits makes a whole
 * double: 'zeros' when it has only zeros; 'not whole' when a digit other than 0 and one other than 9
 * come among its first 15 - integerDigits digits, which keep the value at least
 * 10^-(15 - integerDigits) from any integer, more than a double's rounding (2^-53 of it, under
 * 10^(integerDigits - 15) / 9) can cross; else 'maybe whole', for the number itself to say.
 */
function fractionIsWhole(
  body: Buffer,
  start: number,
  end: number,
  integerDigits: number,
): 'zeros' | 'not whole' | 'maybe whole' {
  const window = Math.min(end, start + 15 - integerDigits);
  let notZero = false;
  let notNine = false;
  for (let i = start; i < window; i++) {
    const byte = body[i]!;
    if (byte !== 0x30) notZero = true;
    if (byte !== 0x39) notNine = true;
    if (notZero && notNine) return 'not whole';
  }
  for (let i = window; i < end && !notZero; i++) if (body[i] !== 0x30) notZero = true;
  return notZero ? 'maybe whole' : 'zeros';
}

/** An integer literal a double cannot hold exactly (and that is not beyond double range). */
function unsafeInteger(token: string): boolean {
  const value = Number(token);
  return Number.isFinite(value) && !Number.isSafeInteger(value);
}

/** A literal with a fraction or an exponent whose double is whole and under 1e21. */
function wholeUnder1e21(token: string): boolean {
  const value = Number(token);
  return Number.isInteger(value) && Math.abs(value) < 1e21;
}

/**
 * The text of `bytes` with each changing literal (jsonShape) written as a marker string instead: the
 * bytes are copied once into a buffer of the final size and decoded once (a string built piece by
 * piece cost a second per megabyte of `[0.0,1.0,...]`).
 */
function markChangingNumbers(bytes: Buffer, changing: number[]): string {
  if (changing.length === 0) return bytes.toString('utf8');
  const out = Buffer.allocUnsafe(bytes.length + (changing.length / 2) * (markerStartBytes.length + 1));
  let at = 0;
  let from = 0;
  for (let k = 0; k < changing.length; k += 2) {
    const start = changing[k]!;
    const end = changing[k + 1]!;
    at = copyBytes(bytes, from, start, out, at);
    at += markerStartBytes.copy(out, at);
    // Digits, signs, a point and an e: nothing to escape inside the marker string.
    at = copyBytes(bytes, start, end, out, at);
    out[at++] = 0x22;
    from = end;
  }
  at = copyBytes(bytes, from, bytes.length, out, at);
  return out.toString('utf8', 0, at);
}

/** Copies bytes[from, to) into `out` at `at`; where the copy ends. Byte by byte when short: Buffer.copy costs more per call than a few bytes do. */
function copyBytes(bytes: Buffer, from: number, to: number, out: Buffer, at: number): number {
  if (to - from > 32) return at + bytes.copy(out, at, from, to);
  for (let i = from; i < to; i++) out[at++] = bytes[i]!;
  return at;
}
