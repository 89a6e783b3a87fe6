/**
 * The problem every method solves: shapes, dtypes and the loss options, with their validation.
 *
 * The loss options are described once ({@link LossOptions}: β, softcap, ignore_index,
 * reduction) and resolved once by {@link resolveOptions} into an {@link LceOptions}: validated,
 * defaults filled in, and what they decide for every method and kernel (whether the β/|V|
 * smoothing terms exist, whether the target terms exist, whether logits are capped), so that no
 * method or kernel decides it again. The storage dtype of E and C is the other half of a problem
 * ({@link Dtype}, parsed once by {@link parseDtype}; methods read it from their ProblemSpec).
 * @module
 */
import { check } from "./errors.ts";

/** Storage dtype of E and C on the GPU. bf16 is stored packed two per u32 and widened in WGSL. */
export type Dtype = "f32" | "f16" | "bf16";
/** All dtypes, in the order reports list them. */
export const DTYPES: readonly Dtype[] = ["bf16", "f16", "f32"];
/** Bytes per element of each dtype. */
export const DTYPE_BYTES: Record<Dtype, number> = { f32: 4, f16: 2, bf16: 2 };

/** Reduction of the per-token losses, as in torch.nn.functional.cross_entropy. */
export type Reduction = "mean" | "sum" | "none";
/** All reductions. */
export const REDUCTIONS: readonly Reduction[] = ["mean", "sum", "none"];

/** The default ignore_index of PyTorch: rows with this target are skipped. */
export const IGNORE_INDEX = -100;

/** Shape of a linear cross-entropy problem: E is n×d, C is v×d, targets has n entries. */
export interface Shape {
  /** Tokens (rows of E). */
  n: number;
  /** Vocabulary size (rows of C). */
  v: number;
  /** Hidden size (columns of E and C). */
  d: number;
}

/** Options of the label-smoothed loss, as a user gives them. */
export interface LossOptions {
  /** Label smoothing β ∈ [0, 1]. */
  beta: number;
  /** Softcap s > 0 (z ← s·tanh(z/s)), or undefined for none. */
  softcap?: number;
  /** Targets equal to this are ignored (default −100). */
  ignoreIndex: number;
  /** How per-token losses are reduced. */
  reduction: Reduction;
}

/**
 * The loss options resolved once ({@link resolveOptions}): validated, with the defaults filled in
 * and what they decide. Methods and kernels read the decisions here instead of testing β or the
 * softcap themselves. Make a changed copy with `resolveOptions({ ...o, softcap })`, never by
 * spreading alone (the decisions would not follow).
 */
export interface LceOptions extends LossOptions {
  /** The smoothing terms −(β/|V|)·Σ_v z_v of the loss and −β/|V| of ∂L/∂z exist: β > 0. */
  readonly smoothing: boolean;
  /** The target terms −(1 − β)·z_t of the loss and −(1 − β) of ∂L/∂z_t exist: β < 1. */
  readonly targetTerm: boolean;
  /** Logits are capped (z ← s·tanh(z/s)): a softcap is set. */
  readonly capped: boolean;
}

/** Defaults: β = 0, no softcap, ignore_index −100, mean. */
export const DEFAULT_OPTIONS: Readonly<LossOptions> = {
  beta: 0,
  softcap: undefined,
  ignoreIndex: IGNORE_INDEX,
  reduction: "mean",
};

/**
 * Fills in defaults, validates and resolves what the options decide ({@link LceOptions}); throws
 * InputError naming the bad value. Decisions present in `opts` (a resolved copy) are recomputed.
 */
export function resolveOptions(opts: Partial<LossOptions> = {}): LceOptions {
  const { beta, softcap, ignoreIndex, reduction } = opts;
  const given = Object.fromEntries(
    Object.entries({ beta, softcap, ignoreIndex, reduction }).filter(([, x]) => x !== undefined),
  );
  const o: LossOptions = { ...DEFAULT_OPTIONS, ...given };
  check(
    typeof o.beta === "number" && Number.isFinite(o.beta) && o.beta >= 0 && o.beta <= 1,
    `beta must be in [0, 1], got ${o.beta}`,
  );
  check(
    o.softcap === undefined || (Number.isFinite(o.softcap) && o.softcap > 0),
    `softcap must be > 0, got ${o.softcap}`,
  );
  check(Number.isInteger(o.ignoreIndex), `ignore-index must be an integer, got ${o.ignoreIndex}`);
  check(
    (REDUCTIONS as readonly string[]).includes(o.reduction),
    `unknown reduction '${o.reduction}' (expected mean, sum or none)`,
  );
  return { ...o, smoothing: o.beta > 0, targetTerm: o.beta < 1, capped: o.softcap !== undefined };
}

/** Validates a shape: positive integers. */
export function checkShape(s: Shape): void {
  for (const k of ["n", "v", "d"] as const) {
    check(Number.isInteger(s[k]) && s[k] >= 1, `${k} must be a positive integer, got ${s[k]}`);
  }
}

/** Parses a dtype name; throws InputError for an unknown one. */
export function parseDtype(name: string): Dtype {
  check(
    (DTYPES as readonly string[]).includes(name),
    `unknown dtype '${name}' (expected bf16, f16 or f32)`,
  );
  return name as Dtype;
}

/**
 * Host-side inputs of a problem. E and C are row-major float arrays (n×d, v×d); values are those
 * the GPU will see (already rounded to the dtype when built by {@link roundToDtype}).
 */
export interface HostInputs extends Shape {
  e: Float32Array;
  c: Float32Array;
  targets: Int32Array;
}

/**
 * Validates host inputs against the options: sizes, finite values, targets in [0, v) or
 * ignore_index, and at least one non-ignored target. Throws InputError naming the first problem.
 */
export function checkInputs(x: HostInputs, o: LossOptions): void {
  checkShape(x);
  check(x.e.length === x.n * x.d, `E has ${x.e.length} values, expected n·d = ${x.n}·${x.d}`);
  check(x.c.length === x.v * x.d, `C has ${x.c.length} values, expected v·d = ${x.v}·${x.d}`);
  check(x.targets.length === x.n, `targets has ${x.targets.length} entries, expected n = ${x.n}`);
  for (const [name, a] of [["E", x.e], ["C", x.c]] as const) {
    for (let i = 0; i < a.length; i++) {
      check(
        Number.isFinite(a[i]),
        `${name} has a non-finite value ${a[i]} at row ${Math.floor(i / x.d)}, column ${i % x.d}`,
      );
    }
  }
  let valid = 0;
  for (let i = 0; i < x.n; i++) {
    const t = x.targets[i];
    if (t === o.ignoreIndex) continue;
    check(
      t >= 0 && t < x.v,
      `target ${t} at row ${i} is outside [0, ${x.v}) and not ignore_index ${o.ignoreIndex}`,
    );
    valid++;
  }
  check(
    valid > 0 || o.reduction !== "mean",
    `all ${x.n} targets are ignore_index ${o.ignoreIndex}: the mean loss is undefined`,
  );
}
