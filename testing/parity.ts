/**
 * Parity of a method with the float64 reference: builds inputs already rounded to the dtype, runs
 * the method on a poisoned context, and compares loss, dE and dC with {@link lceReference}.
 * Throws one line naming the worst element on failure.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { roundArray } from "../core/dtype.ts";
import {
  type Dtype,
  type HostInputs,
  IGNORE_INDEX,
  type LceOptions,
  type Reduction,
  resolveOptions,
} from "../core/options.ts";
import { lceReference } from "../reference/lce_reference.ts";
import { assertClose } from "../reference/compare.ts";
import type { LceMethod, MethodStats } from "../methods/types.ts";
import { runMethod, type RunResult } from "../methods/run.ts";
import { randomArray } from "./gpu.ts";

/**
 * Tolerances per dtype, relative to the largest |value| of each compared array. Inputs are rounded
 * to the dtype before the reference sees them, so the only differences left are f32 arithmetic on
 * the GPU (accumulation order, exp/log) — the same for every storage dtype: about 1e-5 of the
 * array's scale for products of depth d ≤ a few hundred. 16-bit rows get the same bound; methods
 * that round intermediates (16-bit logits) pass their own; 16-bit gradient outputs get their
 * roundings on top ({@link gradRoundingTol}).
 */
export const PARITY_TOL: Record<Dtype, { atol: number; rtol: number }> = {
  f32: { atol: 2e-5, rtol: 2e-4 },
  bf16: { atol: 2e-5, rtol: 2e-4 },
  f16: { atol: 2e-5, rtol: 2e-4 },
};

/** Unit roundoff of the 16-bit gradient outputs (half the spacing of [1, 2)). */
export const UNIT_ROUNDOFF = { bf16: 2 ** -8, f16: 2 ** -11 } as const;

/**
 * What a 16-bit gradient output adds to the tolerance of `name`, relative to the array's scale:
 * R·u, with u the dtype's unit roundoff and R the roundings of one element the method reports
 * (`gradDtype` and `dERoundings`/`dCRoundings` in its stats: the fused methods); 0 for f32
 * gradients. Each rounding of a partial sum bounded by the scale costs at most u·scale.
 */
export function gradRoundingTol(stats: MethodStats | undefined, name: string): number {
  const dt = stats?.gradDtype;
  if ((dt !== "bf16" && dt !== "f16") || (name !== "dE" && name !== "dC")) return 0;
  const r = Number(stats?.[`${name}Roundings`] ?? 1);
  return r * UNIT_ROUNDOFF[dt];
}

/** One parity case. */
export interface ParityCase {
  n: number;
  v: number;
  d: number;
  dtype: Dtype;
  beta: number;
  softcap?: number;
  reduction?: Reduction;
  /** Fraction of rows whose target is ignore_index. */
  ignoreFraction?: number;
  /** Upstream gradient (default 1.7, or a vector for none). */
  gradOutput?: number | "vector";
  seed?: number;
  /** Scale of E and C entries (logits of order scale²·d). */
  scale?: number;
  /** Inputs instead of random ones. */
  inputs?: HostInputs;
  /** Tolerance override (relative to each array's max |value|). */
  tol?: { atol: number; rtol: number };
}

/** Random inputs for a case, rounded to its dtype. */
export function caseInputs(c: ParityCase): HostInputs {
  if (c.inputs) return c.inputs;
  const seed = c.seed ?? 7;
  const scale = c.scale ?? 1 / Math.sqrt(Math.sqrt(c.d));
  const e = roundArray(randomArray(c.n * c.d, seed * 3 + 1, 2 * scale), c.dtype);
  const cc = roundArray(randomArray(c.v * c.d, seed * 3 + 2, 2 * scale), c.dtype);
  const u = randomArray(c.n, seed * 3 + 3);
  const ig = randomArray(c.n, seed * 3 + 4);
  const targets = new Int32Array(c.n);
  for (let i = 0; i < c.n; i++) {
    targets[i] = Math.min(c.v - 1, Math.floor(((u[i] + 1) / 2) * c.v));
    if ((ig[i] + 1) / 2 < (c.ignoreFraction ?? 0)) targets[i] = IGNORE_INDEX;
  }
  if (c.ignoreFraction && targets.every((t) => t === IGNORE_INDEX)) targets[0] = 0;
  return { n: c.n, v: c.v, d: c.d, e, c: cc, targets };
}

const maxAbs = (a: ArrayLike<number>) => {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]));
  return m;
};

/** Runs the case and asserts parity; returns the method's result. */
export async function assertParity(
  ctx: GpuContext,
  method: LceMethod,
  c: ParityCase,
): Promise<RunResult> {
  const x = caseInputs(c);
  const opts: LceOptions = resolveOptions({
    beta: c.beta,
    softcap: c.softcap,
    reduction: c.reduction ?? "mean",
  });
  const gradOutput = c.gradOutput === "vector"
    ? Array.from(randomArray(c.n, 99), (g) => g + 0.5)
    : c.gradOutput ?? 1.7;
  const got = await runMethod(ctx, method, x, opts, { dtype: c.dtype, gradOutput });
  const want = lceReference(x, opts, gradOutput);
  const tol = c.tol ?? PARITY_TOL[c.dtype];
  const tag = `${method.name} ${JSON.stringify({ ...c, inputs: undefined, tol: undefined })}`;
  for (
    const [name, g, w, cols] of [["loss", got.loss, want.loss, 0], ["dE", got.dE, want.dE, c.d], [
      "dC",
      got.dC,
      want.dC,
      c.d,
    ]] as const
  ) {
    const s = maxAbs(w) || 1;
    try {
      const atol = (tol.atol + gradRoundingTol(got.stats, name)) * s;
      assertClose(g, w, { atol, rtol: tol.rtol, name, cols: cols || undefined });
    } catch (e) {
      throw new Error(`${tag}: ${(e as Error).message}`);
    }
  }
  return got;
}

/**
 * The standard parity sweep of a method: 37×131×29 (no dimension a multiple of any tile), every
 * dtype the context has × β ∈ {0, 0.1, 1}, reductions mean/sum/none in rotation, 20% ignored rows,
 * an upstream gradient ≠ 1 (a vector for none), a different seed per case.
 */
export function standardCases(ctx: { hasF16: boolean }): ParityCase[] {
  const dtypes: Dtype[] = ctx.hasF16 ? ["f32", "bf16", "f16"] : ["f32", "bf16"];
  const cases: ParityCase[] = [];
  for (const dtype of dtypes) {
    for (const beta of [0, 0.1, 1]) {
      const reduction = (["mean", "sum", "none"] as const)[cases.length % 3];
      cases.push({
        n: 37,
        v: 131,
        d: 29,
        dtype,
        beta,
        reduction,
        ignoreFraction: 0.2,
        gradOutput: reduction === "none" ? "vector" : 1.7,
        seed: cases.length + 1,
      });
    }
  }
  return cases;
}
