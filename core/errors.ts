/**
 * Errors that reach the user as one line: {@link InputError} for bad input (shapes, values,
 * flags, files), {@link GpuError} for failures of the GPU (validation, out-of-memory, device loss).
 * Command-line scripts print `error: <message>` and exit non-zero, without a stack trace.
 * @module
 */

/** Bad input from the user: the message names the problem and the offending value. */
export class InputError extends Error {
  override name = "InputError";
}

/** What went wrong on the GPU. */
export type GpuErrorKind = "validation" | "out-of-memory" | "device-lost" | "internal" | "limits";

/** A GPU failure (validation error, out-of-memory, device loss, a size past the adapter's limits). */
export class GpuError extends Error {
  override name = "GpuError";
  /** Which kind of failure this is. */
  readonly kind: GpuErrorKind;
  constructor(kind: GpuErrorKind, message: string) {
    super(message);
    this.kind = kind;
  }
}

/** Throws an {@link InputError} with `message` unless `cond` holds. */
export function check(cond: unknown, message: string): asserts cond {
  if (!cond) throw new InputError(message);
}

/** One line for the user: the message of an expected error, or the first line of anything else. */
export function oneLine(err: unknown): string {
  if (err instanceof InputError || err instanceof GpuError) return err.message.split("\n")[0];
  if (err instanceof Error) return `${err.name}: ${err.message.split("\n")[0]}`;
  return String(err);
}
