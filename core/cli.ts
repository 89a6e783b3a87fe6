/**
 * Entry-point wrapper of the command-line scripts: runs `fn`, and turns an expected failure into
 * one line on stderr (`error: <message>`) and a non-zero exit, with no stack trace: exit 2 for bad
 * input (InputError, unknown flags), 1 for anything else (GPU failures, bugs).
 * @module
 */
import { GpuError, InputError, oneLine } from "./errors.ts";

/** Runs a script's main function with one-line error reporting. */
export async function runCli(fn: () => Promise<void> | void): Promise<void> {
  try {
    await fn();
  } catch (e) {
    const input = e instanceof InputError || (e instanceof TypeError &&
      /^(Unknown option|Option '|Unexpected argument)/.test(e.message));
    const msg = input && !(e instanceof InputError)
      ? (e as Error).message.split("\n")[0]
      : oneLine(e);
    console.error(`error: ${msg}`);
    if (
      !(e instanceof InputError) && !(e instanceof GpuError) && !input && Deno.env.get("LCE_DEBUG")
    ) {
      console.error(e);
    }
    Deno.exit(input ? 2 : 1);
  }
}

/** Parses a number flag; InputError naming the flag otherwise. */
export function numberFlag(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const x = Number(value);
  if (value.trim() === "" || !Number.isFinite(x)) {
    throw new InputError(`--${name} must be a number, got '${value}'`);
  }
  return x;
}

/** Parses a positive integer flag. */
export function intFlag(name: string, value: string | undefined, fallback: number): number {
  const x = numberFlag(name, value, fallback);
  if (!Number.isInteger(x) || x < 1) {
    throw new InputError(`--${name} must be a positive integer, got '${value}'`);
  }
  return x;
}
