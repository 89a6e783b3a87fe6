/**
 * Correctness before timing: table3 and the sweep check every cell's outputs at the measured
 * shape, β and inputs, read from the cell's first repetition (a warm-up one when there is one:
 * no extra run), against kernels/reference_check.ts.
 *
 * What is compared, and why this much: a method's mean or sum loss is one number, so the whole
 * loss is checked (the reference has every row's log-sum-exp over the full vocabulary: one pass
 * of N×|V|×D, which every per-token loss needs anyway), and with reduction none every token's
 * loss. The gradients are too large to recompute (that is the backward's whole cost), so dE is
 * checked on {@link CHECK_TOKENS} sampled tokens (all |V| terms of each: S_t×|V|×D) and dC on
 * {@link CHECK_VOCAB} sampled vocabulary entries with the contribution of every token (N×S_v×D).
 * Half of the vocabulary sample are the most frequent targets, whose rows are dC's largest (the
 * −(1−β) target terms add up there), so the sample's scale is the array's; the rest are drawn
 * across the vocabulary. The reference is computed once per inputs and serves every method and β
 * section; a cell's check reads a few sampled rows and compares them on the host.
 *
 * The error of an output is normwise: max |got − want| / max |want| over what was compared, so
 * it is relative to the output's scale, an all-zero or NaN output has error 1 or Infinity, and
 * nothing passes by being small. The tolerance is relative too ({@link CHECK_TOL}), by the
 * problem's dtype, plus the roundings to 16 bits a method reports for its gradients (its stats
 * `gradDtype` and `dERoundings`/`dCRoundings`, as the parity tests count them).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { type DeviceTensor, download, readRows } from "../gpu/tensor.ts";
import type { Dtype, LceOptions } from "../core/options.ts";
import { oneLine } from "../core/errors.ts";
import { Rng } from "../fixtures/rng.ts";
import {
  type ExpectedSamples,
  expectedSamples,
  type ReferenceInputs,
  type ReferenceSamples,
  referenceSamples,
} from "../kernels/reference_check.ts";
import type { MethodStats } from "../methods/types.ts";

/** Tokens whose dE rows are checked. */
export const CHECK_TOKENS = 32;
/** Vocabulary entries whose dC rows are checked. */
export const CHECK_VOCAB = 32;

/**
 * Tolerance of the normwise relative error of every output, by the problem's dtype. f32: 1e-3,
 * five times the parity tests' bound (2e-4 of each element plus 2e-5 of the scale, at depths of a
 * few hundred), for the longer sums of benchmark shapes and what a gradient filter may drop.
 * bf16 and f16: 8 unit roundoffs of the dtype (bf16 3.1%, f16 0.39%): a method may round its
 * logits, their gradient and its outputs to the input dtype; on the software shape the built-in
 * methods that do measure up to 2.4 (chunked and compiled: 16-bit logits) and 5.7 (fused: 16-bit
 * dC accumulated in place, which its stats add) roundoffs. So a 16-bit check catches zeros,
 * missing or doubled terms and wrong scales beyond that, not a 1% drift.
 */
export const CHECK_TOL: Readonly<Record<Dtype, number>> = {
  f32: 1e-3,
  bf16: 8 * 2 ** -8,
  f16: 8 * 2 ** -11,
};

/** Unit roundoff of the 16-bit gradient outputs a method may report (stats.gradDtype). */
const UNIT_ROUNDOFF: Record<string, number> = { bf16: 2 ** -8, f16: 2 ** -11 };

/** An output the check compares. */
export type CheckedOutput = "loss" | "dE" | "dC";

/** The check of one cell (a row of a report). */
export interface CellCheck {
  /** Every compared output within its tolerance. */
  ok: boolean;
  /** Normwise relative error of each compared output (max |got − want| / max |want|). */
  errors: Partial<Record<CheckedOutput, number>>;
  /** Tolerance of each compared output. */
  tol: Partial<Record<CheckedOutput, number>>;
  /** The output furthest from its tolerance (largest error / tolerance). */
  worst: CheckedOutput;
  /** Its error. */
  error: number;
  /** Why an output could not be compared (wrong shape or dtype), when one could not. */
  note?: string;
  /** Wall time of reading the sampled outputs and comparing them, ms (never timed). */
  ms: number;
}

/** The samples of a check: tokens for dE rows, vocabulary entries for dC rows. */
export interface CheckSamples {
  tokens: Int32Array;
  vocab: Int32Array;
}

/**
 * The samples (see the module doc): min(`tokens`, valid rows) tokens, one drawn from each of as
 * many equal slices of the non-ignored rows; half of `vocab` the most frequent targets (ties:
 * lower index), the rest drawn one from each of as many slices of the remaining entries.
 */
export function chooseSamples(
  targets: Int32Array,
  v: number,
  ignoreIndex: number,
  o: { tokens?: number; vocab?: number; seed?: number } = {},
): CheckSamples {
  const rng = new Rng(o.seed ?? 0, 31);
  const valid: number[] = [];
  const counts = new Map<number, number>();
  targets.forEach((t, i) => {
    if (t === ignoreIndex) return;
    valid.push(i);
    counts.set(t, (counts.get(t) ?? 0) + 1);
  });
  const strata = (from: number[], k: number) => {
    const out: number[] = [];
    for (let s = 0; s < k; s++) {
      const lo = Math.floor((s * from.length) / k), hi = Math.floor(((s + 1) * from.length) / k);
      if (hi > lo) out.push(from[lo + rng.int(hi - lo)]);
    }
    return out;
  };
  const tokens = strata(valid, Math.min(o.tokens ?? CHECK_TOKENS, valid.length));
  const want = Math.min(o.vocab ?? CHECK_VOCAB, v);
  const top = [...counts].sort((a, b) => b[1] - a[1] || a[0] - b[0])
    .slice(0, Math.ceil(want / 2)).map(([t]) => t);
  const chosen = new Set(top);
  const rest: number[] = [];
  for (let j = 0; j < v; j++) if (!chosen.has(j)) rest.push(j);
  const vocab = [...top, ...strata(rest, Math.min(want - top.length, rest.length))];
  return { tokens: Int32Array.from(tokens), vocab: Int32Array.from(vocab) };
}

/** Options of {@link CorrectnessCheck.prepare}. */
export interface CheckOptions {
  /** Dtype of E and C (it picks the tolerance). */
  dtype: Dtype;
  /** Softcap of every section (β and the reduction may vary, not these). */
  softcap?: number;
  ignoreIndex: number;
  /** The upstream gradient the cells use: one value, or n for reduction none. */
  gradOut: ArrayLike<number>;
  /** Sample sizes and seed (default {@link CHECK_TOKENS}, {@link CHECK_VOCAB}, 0). */
  tokens?: number;
  vocab?: number;
  seed?: number;
}

/** The reference of one set of inputs, and the check of every cell measured on them. */
export class CorrectnessCheck {
  readonly #ref: ReferenceSamples;
  readonly #expected = new Map<string, ExpectedSamples>();
  /** The dtype of the problem. */
  readonly dtype: Dtype;
  private constructor(ref: ReferenceSamples, dtype: Dtype) {
    this.#ref = ref;
    this.dtype = dtype;
  }

  /** Computes the reference of `inputs` (kernels/reference_check.ts) for the samples chosen. */
  static async prepare(
    ctx: GpuContext,
    inputs: ReferenceInputs,
    o: CheckOptions,
  ): Promise<CorrectnessCheck> {
    const targets = Int32Array.from(await download(ctx, inputs.targets));
    const s = chooseSamples(targets, inputs.c.rows, o.ignoreIndex, o);
    const ref = await referenceSamples(ctx, inputs, { ...o, ...s });
    return new CorrectnessCheck(ref, o.dtype);
  }

  /** Wall time of the reference, ms. */
  get referenceMs(): number {
    return this.#ref.ms;
  }

  /** The sampled tokens and vocabulary entries. */
  get samples(): CheckSamples {
    return { tokens: this.#ref.tokens, vocab: this.#ref.vocab };
  }

  /** The expected loss and sampled rows for a section's options (β, reduction). */
  expected(opts: LceOptions): ExpectedSamples {
    const key = `${opts.beta}|${opts.reduction}`;
    let e = this.#expected.get(key);
    if (!e) this.#expected.set(key, e = expectedSamples(this.#ref, opts));
    return e;
  }

  /**
   * Compares whatever of loss, dE and dC a cell produced with the reference (the tensors are
   * read, not consumed); `stats` are the method's after its backward, for 16-bit gradients.
   */
  async check(
    ctx: GpuContext,
    opts: LceOptions,
    out: { loss?: DeviceTensor; dE?: DeviceTensor; dC?: DeviceTensor },
    stats?: MethodStats | null,
  ): Promise<CellCheck> {
    const t0 = performance.now();
    const want = this.expected(opts);
    const r = this.#ref;
    const errors: CellCheck["errors"] = {}, tol: CellCheck["tol"] = {};
    const notes: string[] = [];
    const compare = async (
      name: CheckedOutput,
      t: DeviceTensor | undefined,
      rows: Int32Array | undefined,
      shape: [number, number],
      expected: Float64Array,
    ) => {
      if (!t) return;
      tol[name] = CHECK_TOL[this.dtype] + gradientRoundingTol(stats, name);
      if (t.rows !== shape[0] || t.cols !== shape[1]) {
        notes.push(`${name} is ${t.rows}×${t.cols}, expected ${shape[0]}×${shape[1]}`);
        errors[name] = Infinity;
        return;
      }
      const got = rows ? await readRows(ctx, t, rows) : await download(ctx, t);
      errors[name] = normwiseError(got, expected);
    };
    await compare("loss", out.loss, undefined, [want.loss.length, 1], want.loss);
    await compare("dE", out.dE, r.tokens, [r.n, r.d], want.dE);
    await compare("dC", out.dC, r.vocab, [r.v, r.d], want.dC);
    const names = Object.keys(errors) as CheckedOutput[];
    const ratio = (k: CheckedOutput) => errors[k]! / tol[k]!;
    const worst = names.reduce((a, b) => (ratio(b) > ratio(a) ? b : a), names[0] ?? "loss");
    const c: CellCheck = {
      ok: names.every((k) => errors[k]! <= tol[k]!),
      errors,
      tol,
      worst,
      error: errors[worst] ?? 0,
      ms: performance.now() - t0,
    };
    if (notes.length) c.note = notes.join("; ");
    return c;
  }
}

/** max |got − want| / max |want|: 0 when both are all zeros, Infinity for NaN or ±Inf. */
export function normwiseError(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let diff = 0, scale = 0;
  for (let i = 0; i < want.length; i++) {
    const d = Math.abs(got[i] - want[i]);
    if (!Number.isFinite(d)) return Infinity;
    diff = Math.max(diff, d);
    scale = Math.max(scale, Math.abs(want[i]));
  }
  return diff === 0 ? 0 : scale === 0 ? Infinity : diff / scale;
}

/**
 * What 16-bit gradient outputs add to an output's tolerance: R·u, with u the unit roundoff of the
 * dtype the method reports (`gradDtype`) and R its roundings of one element (`dERoundings`,
 * `dCRoundings`; 1 when not said); 0 for f32 gradients and for the loss.
 */
export function gradientRoundingTol(
  stats: MethodStats | null | undefined,
  name: CheckedOutput,
): number {
  const u = UNIT_ROUNDOFF[String(stats?.gradDtype)];
  if (u === undefined || name === "loss") return 0;
  const r = Number(stats?.[`${name}Roundings`] ?? 1);
  return (Number.isFinite(r) && r > 0 ? r : 1) * u;
}

/** An error or tolerance for a report: `3.6e-6`, `0.031`, `1.0`, `0`, `Infinity`. */
export function formatError(x: number): string {
  if (x === 0 || !Number.isFinite(x)) return String(x);
  return Math.abs(x) >= 0.01 && Math.abs(x) < 1e4 ? x.toPrecision(2) : x.toExponential(1);
}

/**
 * A check in words: `err 3.6e-6` when correct, `incorrect: dC err 1.0 > tol 0.031` when not
 * (with the note when an output had the wrong shape).
 */
export function describeCheck(c: CellCheck): string {
  if (c.ok) return `err ${formatError(c.error)}`;
  return `incorrect: ${c.worst} err ${formatError(c.error)} > tol ${
    formatError(c.tol[c.worst] ?? NaN)
  }${c.note ? ` (${c.note})` : ""}`;
}

/** What a run's checks covered and cost: a report's `check` object. */
export interface CheckSummary {
  /** Tokens whose dE rows each set of inputs checks. */
  tokens: number;
  /** Vocabulary entries whose dC rows each set of inputs checks. */
  vocab: number;
  /** The tolerance of the problem's dtype (a method's reported 16-bit roundings add to it). */
  tol: number;
  /** Wall time of the references, summed over the sets of inputs, ms (never timed). */
  referenceMs: number;
  /** Wall time of every cell's check (reading and comparing its samples), ms (never timed). */
  checkMs: number;
  /** Why a reference could not be computed, when one could not (those cells carry no check). */
  unavailable?: string;
}

/** The checks of one run: one reference per set of inputs, and what they cost. */
export class CheckRun {
  readonly #summary: CheckSummary;
  readonly #dtype: Dtype;
  readonly #sizes: { tokens: number; vocab: number; seed: number };

  constructor(dtype: Dtype, o: { tokens?: number; vocab?: number; seed?: number } = {}) {
    this.#dtype = dtype;
    this.#sizes = {
      tokens: o.tokens ?? CHECK_TOKENS,
      vocab: o.vocab ?? CHECK_VOCAB,
      seed: o.seed ?? 0,
    };
    const { tokens, vocab } = this.#sizes;
    this.#summary = { tokens, vocab, tol: CHECK_TOL[dtype], referenceMs: 0, checkMs: 0 };
  }

  /**
   * The check of a set of inputs, or undefined when its reference fails (out of memory, a
   * binding too small): the reason goes into the summary and the run goes on unchecked there.
   */
  async prepare(
    ctx: GpuContext,
    inputs: ReferenceInputs,
    o: { softcap?: number; ignoreIndex: number; gradOut: ArrayLike<number> },
  ): Promise<CorrectnessCheck | undefined> {
    const t0 = performance.now();
    try {
      return await CorrectnessCheck.prepare(ctx, inputs, {
        ...o,
        ...this.#sizes,
        dtype: this.#dtype,
      });
    } catch (e) {
      if (ctx.lostReason) throw e;
      this.#summary.unavailable ??= `the reference could not be computed: ${oneLine(e)}`;
      return undefined;
    } finally {
      this.#summary.referenceMs += performance.now() - t0;
    }
  }

  /** The summary, with the check time of `rows` (those that carry a check). */
  summary(rows: readonly { check?: CellCheck }[]): CheckSummary {
    const checkMs = rows.reduce((s, r) => s + (r.check?.ms ?? 0), 0);
    return { ...this.#summary, checkMs };
  }
}
