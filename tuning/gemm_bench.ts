/**
 * Timing one GEMM bench product (scripts/bench_gemm.ts): a tile and split-K count on a case of
 * tuning/gemm_cases.ts, warmed up, then the median GPU time of a few repetitions.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
import type { GemmTile } from "../kernels/gemm_codegen.ts";
import type { GemmCase } from "./gemm_cases.ts";

/** Wall-clock milliseconds of warm-up per product and tile before the timed repetitions. */
export const WARMUP_MS = 500;

/** One timed product. */
export interface GemmTiming {
  /** Median, fastest and slowest GPU ms of one product. */
  timeMs: number;
  minMs: number;
  maxMs: number;
  tflops: number;
  /** What the last dispatch used: vector loads per operand, K slices. */
  variant: { vecA: boolean; vecB: boolean; splitK: number };
}

/**
 * Times `cs` on `tile` with `splitK` slices: `inner` products recorded back to back per
 * repetition (the time per product is their total / inner, as a method's chunk loop runs them),
 * repetitions for {@link WARMUP_MS} of wall time first (at least one), so that a short product
 * measured first does not run at an idle GPU's clocks (a 4 ms product then took 5× longer).
 */
export async function timeGemmCase(
  ctx: GpuContext,
  o: {
    cs: GemmCase;
    out: DeviceTensor;
    tile: GemmTile;
    splitK: number | "auto";
    reps: number;
    inner: number;
  },
): Promise<GemmTiming> {
  const { cs, out, splitK, inner } = o;
  const mm = await prepareMatmul(ctx, {
    tile: o.tile,
    aDtype: cs.aDtype,
    bDtype: cs.bDtype,
    aTrans: cs.a.trans,
    bTrans: cs.b.trans,
    outDtype: cs.outDtype,
  });
  const once = () =>
    ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      for (let j = 0; j < inner; j++) {
        mm.record(rec, { a: cs.a, b: cs.b, out, accumulate: cs.accumulate, splitK });
      }
      return (await rec.finish()).gpuMs / inner;
    });
  const t0 = performance.now();
  do await once(); while (performance.now() - t0 < WARMUP_MS);
  const times: number[] = [];
  for (let i = 0; i < o.reps; i++) times.push(await once());
  times.sort((x, y) => x - y);
  const ms = times[Math.floor(times.length / 2)];
  return {
    timeMs: ms,
    minMs: times[0],
    maxMs: times[times.length - 1],
    tflops: cs.flop / ms / 1e9,
    variant: mm.lastVariant,
  };
}
