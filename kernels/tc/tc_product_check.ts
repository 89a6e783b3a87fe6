/**
 * A check of one tensor-core product kernel against a float64 product on the CPU, at a small
 * shape, for the bench and the GPU check commands (scripts/bench_tc.ts, scripts/tc_check.ts) and
 * the tests: fresh random inputs (exact in f16 after scaling for bf16 and f16; f32 inputs are
 * split or rounded), a poisoned output, and a bound per element from the f32 accumulation.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { createTensor, download, fromHost, poison, upload } from "../../gpu/tensor.ts";
import { roundArray } from "../../core/dtype.ts";
import { uniformArray } from "../../fixtures/rng.ts";
import { prepareTcMatmul, type TcMatmulKernel } from "./tc_matmul.ts";
import { prepareTcScales } from "./tc_scale.ts";

/** A product to check: its kernel and shape, and what the record uses. */
export interface ProductCheck {
  kernel: TcMatmulKernel;
  m: number;
  n: number;
  k: number;
  splitK?: number;
  accumulate?: boolean;
  alpha?: number;
  /** Magnitudes of A's and B's entries (default 1). */
  sa?: number;
  sb?: number;
  seed?: number;
}

/** What a check found. */
export interface ProductCheckResult {
  /** Largest |got − want| over its bound (≤ 1 passes). */
  worst: number;
  /** Where, and the values. */
  at: { i: number; j: number; got: number; want: number };
  ok: boolean;
  variant: { vecA: boolean; vecB: boolean; splitK: number };
}

/**
 * Bound on one element: c·K·2⁻²³·Σ_k|a_k·b_k| (f32 accumulation, which tensor cores may truncate
 * rather than round), plus 2⁻¹⁰·Σ|ab| for unsplit f32 inputs (rounded to f16) and 2⁻²⁰·Σ|ab|
 * for split ones, and 2⁻²⁰·|want| for the accumulated and scaled parts; a 16-bit output's
 * rounding, 2⁻⁸·|want| (bf16) or 2⁻¹¹·|want| (f16), on top.
 */
export function productBound(
  c: { kernel: TcMatmulKernel; k: number },
  mag: number,
  want: number,
): number {
  const f32in = c.kernel.aDtype === "f32" || c.kernel.bDtype === "f32";
  const conv = f32in ? (c.kernel.split && c.kernel.bDtype !== "f32" ? 2 ** -20 : 2 ** -10) : 0;
  const out = c.kernel.outDtype === "bf16" ? 2 ** -8 : c.kernel.outDtype === "f16" ? 2 ** -11 : 0;
  return (2 * c.k * 2 ** -23 + conv) * mag + (2 ** -20 + out) * Math.abs(want) + 1e-30;
}

/** Runs the product once on fresh inputs and compares every element with its bound. */
export async function checkProduct(ctx: GpuContext, c: ProductCheck): Promise<ProductCheckResult> {
  const k = c.kernel, seed = c.seed ?? 1;
  const a = roundArray(uniformArray(c.m * c.k, seed, c.sa ?? 1), k.aDtype);
  const b = roundArray(uniformArray(c.n * c.k, seed + 1, c.sb ?? 1), k.bDtype);
  const A = fromHost(ctx, {
    dtype: k.aDtype,
    rows: k.aTrans ? c.k : c.m,
    cols: k.aTrans ? c.m : c.k,
    role: "input",
    label: "A",
  }, a);
  const B = fromHost(ctx, {
    dtype: k.bDtype,
    rows: k.bTrans ? c.k : c.n,
    cols: k.bTrans ? c.n : c.k,
    role: "input",
    label: "B",
  }, b);
  const out = createTensor(ctx, {
    dtype: k.outDtype ?? "f32",
    rows: c.m,
    cols: c.n,
    role: "output",
    label: "C",
  });
  const init = uniformArray(c.m * c.n, seed + 2, 1);
  if (c.accumulate) upload(ctx, out, init);
  else poison(ctx, out);
  const mm = await prepareTcMatmul(ctx, k);
  const scales = await prepareTcScales(ctx);
  const bufs = scales.allocate(ctx);
  try {
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      scales.record(rec, { tensors: [A, B], into: bufs });
      mm.record(rec, {
        a: { tensor: A, trans: k.aTrans },
        b: { tensor: B, trans: k.bTrans },
        out,
        accumulate: c.accumulate,
        alpha: c.alpha,
        splitK: c.splitK,
        scales: { buffer: bufs.scales, a: 0, b: 1 },
      });
      await rec.finish();
    });
    const got = await download(ctx, out);
    const alpha = c.alpha ?? 1;
    let worst = -1, at = { i: 0, j: 0, got: 0, want: 0 };
    for (let i = 0; i < c.m; i++) {
      for (let j = 0; j < c.n; j++) {
        let s = 0, mag = 0;
        for (let q = 0; q < c.k; q++) {
          const x = k.aTrans ? a[q * c.m + i] : a[i * c.k + q];
          const y = k.bTrans ? b[q * c.n + j] : b[j * c.k + q];
          s += x * y;
          mag += Math.abs(x * y);
        }
        const want = alpha * s + (c.accumulate ? init[i * c.n + j] : 0);
        const g = got[i * c.n + j];
        const r = Number.isNaN(g)
          ? Infinity
          : Math.abs(g - want) / productBound(c, Math.abs(alpha) * mag, want);
        if (r > worst) {
          worst = r;
          at = { i, j, got: g, want };
        }
      }
    }
    return { worst, at, ok: worst <= 1, variant: mm.lastVariant };
  } finally {
    for (const t of [A, B, out]) t.destroy();
    bufs.scales.destroy();
    bufs.maxBits.destroy();
    mm.release();
  }
}

/**
 * A variant's check for the bench: at two odd shapes (scalar loads, then vector loads with
 * partial tiles), `ok <worst>` or `FAIL …` for each; `diagnostic` for the diagnostics.
 */
export async function checkVariant(
  ctx: GpuContext,
  k: TcMatmulKernel & { accumulate?: boolean },
): Promise<string> {
  if (k.diag) return "diagnostic";
  const { accumulate, ...kernel } = k;
  const parts: string[] = [];
  for (const [m, n, kk] of [[197, 133, 77], [264, 200, 136]]) {
    const r = await checkProduct(ctx, { kernel, m, n, k: kk, seed: m, accumulate });
    parts.push(
      r.ok
        ? `ok ${r.worst.toFixed(3)}`
        : `FAIL ${r.worst.toExponential(1)} at ${JSON.stringify(r.at)}`,
    );
  }
  return parts.join("; ");
}
