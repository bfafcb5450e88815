/**
 * The arguments a dev route takes, from what the scanner read of the function's signature
 * (cli/build/scan.py inputs_of): the route's OpenAPI schema (inputSchema), and the check of a queue
 * route's input before any job is made (inputMismatch), both from the same inputs, so Swagger at
 * /docs shows what is checked. Flash's dev server does the same with a Pydantic model made from the
 * signature: a wrong type, a missing argument or one the function does not take is a 422 there too.
 *
 * Nothing is converted: the handler gets the input as it was sent, as it does on a deployed endpoint.
 * So a value passes when Python's json module reads it as the hinted type already, and an int passes
 * where a float is hinted (Python code takes one as the other, and Pydantic's lax mode does too).
 * "3" or 3.0 for an int, and true for an int, are refused: the handler would get a str, a float, a
 * bool. Which hints are checked is the scanner's rule (annotation_schema); the rest pass unchecked.
 */
import { markedLiteral, stringifyJsonExact } from '../../core/json.js';
import type { Route } from '../../core/manifest.js';

export type CallableInput = NonNullable<Route['inputs']>[number];
type InputType = NonNullable<CallableInput['type']>;

/** What the scanner knows of a callable's arguments; without `inputs` (an older scan), nothing. */
export interface Signature {
  inputs?: readonly CallableInput[];
  /** Names only, for a scan without `inputs`. */
  params: readonly string[];
  varKeywords?: true;
  /**
   * A one-method class's method. Its worker drops an input["method"] that names it before binding
   * the rest (worker-image/python/ferry/invoke.py Handler._pick_method), as one that names the
   * method of a class with several: so that key is no argument here either. Another value is.
   */
  soleMethod?: string;
}

/** The input as the worker binds it to the function's arguments (Signature.soleMethod). */
function argumentsOf(signature: Signature, input: Record<string, unknown>): Record<string, unknown> {
  if (signature.soleMethod === undefined || input.method !== signature.soleMethod) return input;
  const { method: _named, ...rest } = input;
  return rest;
}

/**
 * The "method" key a one-method class's input may have (Signature.soleMethod), optional: named in
 * the schema so Swagger UI's form offers it and the OpenAPI document says it is taken. An argument
 * of the method named "method" is the argument instead.
 */
function soleMethodProperty(signature: Signature): Record<string, unknown> {
  const named = signature.inputs?.some((i) => i.name === 'method') ?? signature.params.includes('method');
  if (signature.soleMethod === undefined || named) return {};
  return {
    method: {
      type: 'string',
      enum: [signature.soleMethod],
      description: `Optional: ${signature.soleMethod}, the class's only method, which is called with or without this key`,
    },
  };
}

/** JSON Schema of a call's arguments: types from the hints, None where allowed, defaults, required. */
export function inputSchema(signature: Signature, closed: boolean): Record<string, unknown> {
  if (!signature.inputs) {
    return {
      type: 'object',
      properties: {
        ...Object.fromEntries(signature.params.map((p) => [p, {}])),
        ...soleMethodProperty(signature),
      },
    };
  }
  const properties = Object.fromEntries(
    signature.inputs.map((input) => [
      input.name,
      {
        ...(input.type ? { type: input.type } : {}),
        ...(input.type && input.nullable ? { nullable: true } : {}),
        ...(input.default !== undefined ? { default: input.default } : {}),
      },
    ]),
  );
  const required = signature.inputs.filter((i) => i.required).map((i) => i.name);
  return {
    type: 'object',
    properties: { ...properties, ...soleMethodProperty(signature) },
    ...(required.length > 0 ? { required } : {}),
    // An argument the function does not take is refused (inputMismatch), unless it takes **kwargs.
    ...(closed && !signature.varKeywords ? { additionalProperties: false } : {}),
  };
}

/** The hint each JSON type came from (the scanner's JSON_TYPES), and what a value of it may be. */
const hinted: Record<InputType, { name: string; takes: readonly string[] }> = {
  integer: { name: 'int', takes: ['int'] },
  number: { name: 'float', takes: ['float', 'int'] },
  string: { name: 'str', takes: ['str'] },
  boolean: { name: 'bool', takes: ['bool'] },
  object: { name: 'dict', takes: ['dict'] },
  array: { name: 'list', takes: ['list'] },
};

/** The Python type json.loads makes of a value as parseJsonExact read it (its markers included). */
function pythonTypeOf(value: unknown): string {
  if (value === null) return 'None';
  if (typeof value === 'boolean') return 'bool';
  if (typeof value === 'number') return Number.isInteger(value) ? 'int' : 'float';
  if (typeof value === 'string') {
    const literal = markedLiteral(value);
    return literal === undefined ? 'str' : /[.eE]/.test(literal) ? 'float' : 'int';
  }
  return Array.isArray(value) ? 'list' : 'dict';
}

const expected = (type: InputType, nullable: boolean | undefined) =>
  `${hinted[type].name}${nullable ? ' or None' : ''}`;

/** A value as it came, in JSON, cut short: the caller sees what was sent. */
function shown(value: unknown): string {
  const text = stringifyJsonExact(value);
  return text.length <= 60 ? text : `${text.slice(0, 57)}...`;
}

/**
 * What is wrong with a job's input for the signature, else undefined: every missing required
 * argument, every argument the function does not take, every value of another type than its hint,
 * named, with what was expected and what came.
 */
export function inputMismatch(
  signature: Signature,
  input: Record<string, unknown>,
  callable: string,
): string | undefined {
  const inputs = signature.inputs;
  if (!inputs) return undefined;
  const args = argumentsOf(signature, input);
  const problems: string[] = [];
  for (const param of inputs) {
    if (!Object.hasOwn(args, param.name)) {
      if (param.required)
        problems.push(
          `missing required argument '${param.name}'${param.type ? ` (${expected(param.type, param.nullable)})` : ''}`,
        );
      continue;
    }
    if (!param.type) continue;
    const value = args[param.name];
    const got = pythonTypeOf(value);
    if (hinted[param.type].takes.includes(got) || (got === 'None' && param.nullable)) continue;
    problems.push(
      `'${param.name}' must be ${expected(param.type, param.nullable)}, got ${got}${got === 'None' ? '' : ` ${shown(value)}`}`,
    );
  }
  if (!signature.varKeywords) {
    const known = new Set(inputs.map((i) => i.name));
    const unknown = Object.keys(args).filter((key) => !known.has(key));
    if (unknown.length > 0) {
      const takes = inputs.length > 0 ? inputs.map((i) => i.name).join(', ') : 'none';
      problems.push(
        `unexpected argument${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => `'${k}'`).join(', ')} (it takes: ${takes})`,
      );
    }
  }
  return problems.length > 0 ? `The input does not fit ${callable}: ${problems.join('; ')}` : undefined;
}
