/**
 * The rows of scripts/bench_tc.ts: E·Cᵀ timed at each shape for a tensor-core variant or the FMA
 * core, and the tensor-core fused forward of each forward tile, each step raced against the run's
 * time budget (BenchDeadline); one line per row on stdout.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import { timeRecorder, timeRepetitions } from "./timing.ts";
import { makeDeviceInputs } from "./inputs.ts";
import { IDLE_GPU_BUSY_MS, IDLE_GPU_WARMUP_MS } from "./measure.ts";
import { prepareBusyLoad } from "../gpu/busy_load.ts";
import { tcTileName } from "../kernels/tc/tc_tiles.ts";
import {
  type BenchDeadline,
  fmaProductRecorder,
  TC_FORWARD_BENCH_TILES,
  type TcBenchVariant,
  tcForwardRecorder,
  type tcInputCache,
  tcProductRecorder,
} from "../kernels/tc/tc_bench.ts";

/** An M×N×K product shape. */
export type Shape = { m: number; n: number; k: number };

/** Row of the results. */
export interface Row {
  variant: string;
  tile?: string;
  check?: string;
  times: ({ timeMs: number; minMs: number; maxMs: number; tflops: number } | { error: string })[];
}

export const err1 = (e: unknown) => (e as Error).message.split("\n")[0];

/** Times one product at every shape (tensor cores when `k`, else the FMA core's E·Cᵀ). */
export async function timeShapes(
  ctx: GpuContext,
  inputs: ReturnType<typeof tcInputCache>,
  o: { shapes: Shape[]; reps: number },
  k: TcBenchVariant | null,
) {
  const times: Row["times"] = [];
  for (const s of o.shapes) {
    const x = () =>
      inputs.get(
        s,
        k?.aDtype === "f16" || k?.aDtype === "f32" ? k.aDtype : "bf16",
        k?.bDtype === "f16" ? "f16" : "bf16",
        k ?? undefined,
      );
    const flop = 2 * s.m * s.n * s.k;
    times.push(
      await _timed(
        ctx,
        o.reps,
        flop,
        () => k ? tcProductRecorder(ctx, k, x()) : fmaProductRecorder(ctx, x()),
      ),
    );
  }
  return times;
}

/**
 * The median GPU time of a prepared recorder, or the error: the GPU held at full load first
 * (IDLE_GPU_BUSY_MS, as table3 does after its inputs and compilations idled it: each variant's
 * float64 check leaves it idle for seconds) and IDLE_GPU_WARMUP_MS of the recorder's own calls.
 */
async function _timed(
  ctx: GpuContext,
  reps: number,
  flop: number,
  prepare: () => Promise<{ record(rec: Recorder): void; done(): void }>,
): Promise<Row["times"][number]> {
  try {
    const p = await prepare();
    await (await prepareBusyLoad(ctx)).run(IDLE_GPU_BUSY_MS);
    const r = await timeRepetitions(
      { warmup: 1, warmupMs: IDLE_GPU_WARMUP_MS, reps },
      () => ctx.scoped(() => timeRecorder(ctx, p.record)),
    );
    p.done();
    const sorted = [...r.times].sort((a, b) => a - b);
    const t = { timeMs: r.median, minMs: sorted[0], maxMs: sorted[sorted.length - 1] };
    return { ...t, tflops: flop / t.timeMs / 1e9 };
  } catch (e) {
    return { error: err1(e) };
  }
}

/** Times the tensor-core fused forward of every forward tile (cce inputs, bf16, β = 0.1). */
export async function timeForwards(ctx: GpuContext, s: Shape, reps: number, dl: BenchDeadline) {
  const mk = makeDeviceInputs(ctx, { fixture: "cce", n: s.m, v: s.n, d: s.k, dtype: "bf16" });
  const x = await dl.race(mk, "forward inputs");
  const rows: Row[] = [];
  for (const [name, tile] of Object.entries(TC_FORWARD_BENCH_TILES)) {
    const flop = 2 * s.m * s.n * s.k;
    const t = dl.stop ? { error: dl.stop } : await dl
      .race(_timed(ctx, reps, flop, () => tcForwardRecorder(ctx, tile, x.inputs)), name)
      .catch((e) => ({ error: err1(e) }));
    rows.push({ variant: `forward ${name}`, tile: tcTileName(tile), times: [t] });
    printRow(rows[rows.length - 1], [s]);
  }
  x.destroy();
  return rows;
}

/** One row on stdout. */
export function printRow(r: Row, shapes: Shape[]): void {
  const cells = r.times.map((t, i) => {
    const s = shapes[i];
    return "error" in t
      ? `${s.m}×${s.n}×${s.k}: ${t.error}`
      : `${s.m}×${s.n}×${s.k} ${t.timeMs.toFixed(3)} ms ${t.tflops.toPrecision(4)} TFLOP/s`;
  });
  console.log(`${r.variant.padEnd(28)} ${(r.check ?? "").padEnd(24)} ${cells.join(" | ")}`);
}
