/**
 * The command-line layer of every script: one place that declares a command's flags (type,
 * default, help), parses them (`node:util` parseArgs is called here and nowhere else), validates
 * them exactly, and prints `--help`; and {@link runCli}, the entry-point wrapper that turns a
 * failure into one line on stderr and an exit code.
 *
 * Flag types and what they accept:
 * - `int`: optional sign and decimal digits only (`12`, `-100`); `2.5`, `3e3`, `0x10`, `1_000`
 *   are refused, as is anything past 2^53.
 * - `number`: a plain decimal number, optionally with a decimal exponent (`0.1`, `-2`, `.5`,
 *   `1e-5`); hex, trailing junk (`0.1abc`), `NaN`, `Infinity` and values that overflow to
 *   Infinity (`1e999`) are refused.
 * - `string`: any non-empty text, or one of `choices`.
 * - `boolean`: present or absent (no value).
 * A flag may name an environment variable read when the flag is absent (same rules, the message
 * names the variable).
 *
 * Exit codes of {@link runCli}: 2 for bad input ({@link InputError}: flags, files, values), 1 for
 * anything else (GPU failures, bugs); one line `error: …` in both cases, with the stack trace
 * only when `LCE_DEBUG=1`.
 * @module
 */
import { parseArgs } from "node:util";
import { InputError, oneLine } from "./errors.ts";

/** The type of a flag's value. */
export type FlagType = "string" | "int" | "number" | "boolean";

/** One flag of a command. */
export interface FlagDef {
  /** What the flag's value is (see the module doc for what each accepts). */
  type: FlagType;
  /** One line for `--help`. */
  help: string;
  /** Value when the flag is absent (booleans: false). */
  default?: string | number;
  /** Shown as the default in `--help` when it is not a constant (e.g. `8192 on hardware`). */
  defaultText?: string;
  /** Placeholder of the value in `--help` (default: N, X or VALUE by type). */
  arg?: string;
  /** Smallest allowed value (int, number). */
  min?: number;
  /** Largest allowed value (int, number). */
  max?: number;
  /** The allowed values (string). */
  choices?: readonly string[];
  /** Environment variable read when the flag is absent. */
  env?: string;
  /** One-letter alias. */
  short?: string;
  /** The flag must be given (no default). */
  required?: boolean;
  /** A string flag that may be given several times: its value is the list (empty when absent). */
  multiple?: boolean;
}

/** A command: its name (as typed), what it does, and its flags. */
export interface CommandDef<F extends Record<string, FlagDef>> {
  /** How the command is invoked, e.g. `./dev task table3` (see {@link commandName}). */
  name: string;
  /** One or more lines on what the command does (shown by `--help`). */
  summary: string;
  flags: F;
  /** Usage text of positional arguments, when the command takes any (e.g. `FILE...`). */
  positionals?: string;
}

type _Value<D extends FlagDef> = D["type"] extends "boolean" ? boolean
  : D["type"] extends "int" | "number" ? number
  : string;

/** The parsed values of a command's flags, keyed by flag name. */
export type FlagValues<F extends Record<string, FlagDef>> = {
  [K in keyof F]: F[K] extends { multiple: true } ? string[]
    : F[K] extends { type: "boolean" } ? boolean
    : F[K] extends { default: string | number } ? _Value<F[K]>
    : F[K] extends { required: true } ? _Value<F[K]>
    : _Value<F[K]> | undefined;
};

/** The result of {@link Command.parse}. */
export interface ParsedArgs<F extends Record<string, FlagDef>> {
  /** Every flag's validated value (or default, or undefined). */
  values: FlagValues<F>;
  /** Positional arguments (only for commands that declare `positionals`). */
  positionals: string[];
  /** The flags given on the command line (or through their environment variable). */
  given: Set<keyof F & string>;
}

const _INT = /^[+-]?\d+$/;
const _DECIMAL = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

function _range(what: string, min?: number, max?: number): string {
  if (min !== undefined && max !== undefined) return `${what} in [${min}, ${max}]`;
  if (min !== undefined) return `${what} ≥ ${min}`;
  if (max !== undefined) return `${what} ≤ ${max}`;
  return what;
}

function _intWhat(min?: number, max?: number): string {
  if (max === undefined && min === 1) return "a positive integer";
  if (max === undefined && min === 0) return "a non-negative integer";
  return _range("an integer", min, max);
}

/**
 * Parses an integer flag value: decimal digits with an optional sign, a safe integer, within
 * [min, max]; InputError `<label> must be a positive integer, got '<value>'` otherwise. `label`
 * is `--name` or the environment variable's name.
 */
export function parseIntValue(
  label: string,
  value: string,
  o: { min?: number; max?: number } = {},
): number {
  const x = Number(value);
  if (
    !_INT.test(value) || !Number.isSafeInteger(x) || (o.min !== undefined && x < o.min) ||
    (o.max !== undefined && x > o.max)
  ) {
    throw new InputError(`${label} must be ${_intWhat(o.min, o.max)}, got '${value}'`);
  }
  return x;
}

/**
 * Parses a number flag value: a plain decimal number (optional sign, digits, point, decimal
 * exponent), finite, within [min, max]; InputError naming `label` otherwise.
 */
export function parseNumberValue(
  label: string,
  value: string,
  o: { min?: number; max?: number } = {},
): number {
  const x = Number(value);
  if (!_DECIMAL.test(value) || !Number.isFinite(x)) {
    throw new InputError(`${label} must be a plain decimal number, got '${value}'`);
  }
  if ((o.min !== undefined && x < o.min) || (o.max !== undefined && x > o.max)) {
    throw new InputError(`${label} must be ${_range("a number", o.min, o.max)}, got '${value}'`);
  }
  return x;
}

/** Parses a comma-separated list: no empty entries, no repeats; InputError naming `label`. */
export function parseList(label: string, value: string): string[] {
  const items = value.split(",").map((s) => s.trim());
  if (!items.every((s) => s !== "")) {
    throw new InputError(`${label} has an empty entry in '${value}'`);
  }
  if (new Set(items).size !== items.length) {
    throw new InputError(`${label} lists an entry twice in '${value}'`);
  }
  return items;
}

/** Choices as usage lines and errors list them: `a`, `a or b`, `a, b or c`. */
export function choiceList(xs: readonly string[]): string {
  return xs.length === 1 ? xs[0] : `${xs.slice(0, -1).join(", ")} or ${xs[xs.length - 1]}`;
}

function _placeholder(d: FlagDef): string {
  if (d.arg) return d.arg;
  if (d.choices) return d.choices.join("|");
  return d.type === "int" ? "N" : d.type === "number" ? "X" : "VALUE";
}

/**
 * A command's name as the README runs it: through `./dev` (the pinned Deno, which need not be on
 * PATH), so `deno task x` and `deno run …` are shown as `./dev task x` and `./dev run …`.
 */
export function commandName(name: string): string {
  return name.replace(/^deno (?=task |run )/, "./dev ");
}

/** A command's flag parser and help text; made by {@link defineCommand}. */
export class Command<F extends Record<string, FlagDef>> {
  /** The definition it was made from. */
  readonly def: CommandDef<F>;
  constructor(def: CommandDef<F>) {
    for (const [name, d] of Object.entries(def.flags)) {
      if (name === "help") throw new Error("flag 'help' is reserved");
      if (d.type === "boolean" && d.default !== undefined) {
        throw new Error(`boolean flag --${name} cannot have a default`);
      }
      if (d.multiple && (d.type !== "string" || d.default !== undefined || d.env || d.required)) {
        throw new Error(`repeatable flag --${name}: a string without default, env or required`);
      }
    }
    this.def = def;
  }

  /** One line: `usage: <name> [--flag X] ...`. */
  usage(): string {
    const parts = Object.entries(this.def.flags).map(([name, d]) =>
      d.type === "boolean"
        ? `[--${name}]`
        : d.multiple
        ? `[--${name} ${_placeholder(d)}]...`
        : d.required
        ? `--${name} ${_placeholder(d)}`
        : `[--${name} ${_placeholder(d)}]`
    );
    if (this.def.positionals) parts.push(this.def.positionals);
    return `usage: ${commandName(this.def.name)} ${parts.join(" ")}`.trimEnd();
  }

  /** The `--help` text: usage, summary, and every flag with its default. */
  help(): string {
    const rows: [string, string][] = Object.entries(this.def.flags).map(([name, d]) => {
      const left = `${d.short ? `-${d.short}, ` : ""}--${name}${
        d.type === "boolean" ? "" : ` ${_placeholder(d)}`
      }`;
      const dflt = d.defaultText ??
        (d.type === "boolean"
          ? "off"
          : d.default === undefined
          ? "none"
          : typeof d.default === "string"
          ? `'${d.default}'`
          : String(d.default));
      const notes = [
        d.required ? "required" : dflt === undefined ? undefined : `default: ${dflt}`,
        d.env ? `env ${d.env}` : undefined,
      ].filter((x) => x !== undefined);
      return [left, `${d.help}${notes.length ? ` (${notes.join("; ")})` : ""}`];
    });
    rows.push(["-h, --help", "print this help and exit"]);
    const width = Math.min(32, Math.max(...rows.map(([l]) => l.length)) + 2);
    const lines = rows.map(([l, r]) =>
      l.length + 2 > width ? `  ${l}\n  ${" ".repeat(width)}${r}` : `  ${l.padEnd(width)}${r}`
    );
    return [this.usage(), "", this.def.summary.trim(), "", "flags:", ...lines].join("\n");
  }

  /**
   * Parses `args`: unknown flags, missing values, positionals (unless declared) and every value
   * that does not match its type are InputErrors of one line. Returns undefined after printing
   * the help to stdout when `--help`/`-h` is given.
   */
  parse(args: readonly string[]): ParsedArgs<F> | undefined {
    const options: Record<
      string,
      { type: "string" | "boolean"; short?: string; multiple?: boolean }
    > = { help: { type: "boolean", short: "h" } };
    for (const [name, d] of Object.entries(this.def.flags)) {
      options[name] = { type: d.type === "boolean" ? "boolean" : "string" };
      if (d.multiple) options[name].multiple = true;
      if (d.short) options[name].short = d.short;
    }
    // `--ignore-index -100`: a negative number as a flag's value, not a flag
    const joined: string[] = [];
    for (let i = 0; i < args.length; i++) {
      const name = /^--([^=]+)$/.exec(args[i])?.[1];
      const d = name === undefined ? undefined : this.def.flags[name];
      if (d && d.type !== "boolean" && /^-[\d.]/.test(args[i + 1] ?? "")) {
        joined.push(`${args[i]}=${args[++i]}`);
      } else joined.push(args[i]);
    }
    let parsed;
    try {
      parsed = parseArgs({
        args: joined,
        options,
        strict: true,
        allowPositionals: this.def.positionals !== undefined,
      });
    } catch (e) {
      const msg = (e as Error).message.split("\n")[0].replace(/\.?\s*To specify.*$/, "");
      throw new InputError(`${msg} (see --help)`);
    }
    if (parsed.values.help) {
      console.log(this.help());
      return undefined;
    }
    const values: Record<string, unknown> = {};
    const given = new Set<string>();
    for (const [name, d] of Object.entries(this.def.flags)) {
      if (d.multiple) {
        const list = (parsed.values[name] ?? []) as string[];
        for (const s of list) if (s === "") throw new InputError(`--${name} must not be empty`);
        if (list.length > 0) given.add(name);
        values[name] = list;
        continue;
      }
      let raw = parsed.values[name] as string | boolean | undefined;
      let label = `--${name}`;
      if (raw === undefined && d.env) {
        let env: string | undefined;
        try {
          env = Deno.env.get(d.env);
        } catch {
          env = undefined; // no --allow-env: the flag's default
        }
        if (env !== undefined && env !== "") {
          raw = d.type === "boolean" ? !["0", "false", "no"].includes(env.toLowerCase()) : env;
          label = d.env;
        }
      }
      if (raw === undefined) {
        if (d.required) throw new InputError(`missing --${name} (see --help)`);
        values[name] = d.type === "boolean" ? false : d.default;
        continue;
      }
      given.add(name);
      if (d.type === "boolean") {
        values[name] = raw;
        continue;
      }
      const s = raw as string;
      if (d.type === "int") values[name] = parseIntValue(label, s, d);
      else if (d.type === "number") values[name] = parseNumberValue(label, s, d);
      else {
        if (d.choices && !d.choices.includes(s)) {
          throw new InputError(`${label} must be ${choiceList(d.choices)}, got '${s}'`);
        }
        if (s === "") throw new InputError(`${label} must not be empty`);
        values[name] = s;
      }
    }
    return {
      values: values as FlagValues<F>,
      positionals: parsed.positionals,
      given: given as Set<keyof F & string>,
    };
  }
}

/** Declares a command (see {@link Command}); flag names are the keys of `def.flags`. */
export function defineCommand<const F extends Record<string, FlagDef>>(
  def: CommandDef<F>,
): Command<F> {
  return new Command(def);
}

/** The `--adapter` flag every GPU command takes (environment fallback LCE_ADAPTER). */
export const ADAPTER_FLAG = {
  type: "string",
  help: "which adapter to open",
  choices: ["auto", "software", "hardware"],
  env: "LCE_ADAPTER",
  default: "auto",
} as const satisfies FlagDef;

/**
 * The `--webgpu` flag every GPU command takes (environment fallback LCE_WEBGPU): `deno`, Deno's
 * built-in WebGPU (wgpu), `dawn`, Chrome's (npm:webgpu, loaded only when chosen), or
 * `dawn-unchecked`, Dawn with its robustness off (gpu/engine.ts).
 */
export const WEBGPU_FLAG = {
  type: "string",
  help: "which WebGPU implementation to run on",
  choices: ["deno", "dawn", "dawn-unchecked"],
  env: "LCE_WEBGPU",
  default: "deno",
} as const satisfies FlagDef;

/** Whether `LCE_DEBUG=1` asks for stack traces. */
function _debug(): boolean {
  try {
    return Deno.env.get("LCE_DEBUG") === "1";
  } catch {
    return false;
  }
}

/** Exit code of an error: 2 for bad input, 1 for anything else. */
export function exitCodeOf(e: unknown): number {
  return e instanceof InputError ? 2 : 1;
}

function _report(e: unknown): never {
  console.error(`error: ${oneLine(e)}`);
  if (_debug()) console.error(e);
  Deno.exit(exitCodeOf(e));
}

/**
 * Runs a script's main function with one-line error reporting: exit 2 for an InputError, 1 for
 * anything else (an unhandled rejection or error event included), 0 or `fn`'s return value on
 * success. The stack trace is printed only with `LCE_DEBUG=1`.
 */
export async function runCli(fn: () => Promise<void | number> | void | number): Promise<void> {
  const onRejection = (ev: PromiseRejectionEvent) => {
    ev.preventDefault();
    _report(ev.reason);
  };
  const onError = (ev: ErrorEvent) => {
    ev.preventDefault();
    _report(ev.error ?? ev.message);
  };
  globalThis.addEventListener("unhandledrejection", onRejection);
  globalThis.addEventListener("error", onError);
  let code: void | number;
  try {
    code = await fn();
  } catch (e) {
    _report(e);
  }
  if (typeof code === "number" && code !== 0) Deno.exit(code);
}
