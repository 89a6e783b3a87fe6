/**
 * The end of a fused forward tuning run (scripts/tune_forward.ts): the best configuration checked
 * against the materialised path (plain logits + row_softmax_stats), and the report as JSON and
 * Markdown.
 * @module
 */
import { IDLE_GPU_BUSY_MS } from "../measure/measure.ts";
import type { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { createTensor, download } from "../gpu/tensor.ts";
import type { LceOptions } from "../core/options.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
import { prepareRowSoftmaxStats } from "../kernels/row_softmax_stats.ts";
import { type FusedForwardSpec, prepareFusedForward } from "../kernels/fused/forward.ts";
import { describeTile } from "./gemm_layouts.ts";
import { jsonRows, type TuneRow, type TuneTensors } from "./forward_tuner.ts";

/** How far the best configuration's lse and loss rows are from the materialised path's. */
export interface TuneCheck {
  maxAbsDiffLse: number;
  maxAbsLse: number;
  maxAbsDiffLoss: number;
  maxAbsLoss: number;
  [k: string]: number;
}

/** Runs the best configuration and the materialised path on the same inputs and compares. */
export async function checkBest(
  ctx: GpuContext,
  o: { spec: FusedForwardSpec; opts: LceOptions; best: TuneRow; tensors: TuneTensors },
): Promise<TuneCheck> {
  const { spec, opts, best } = o;
  const { e, c, targets, lse, lossRows, logits } = o.tensors;
  const ff = await prepareFusedForward(ctx, {
    spec,
    opts,
    tile: best.tile,
    vocabSplits: best.vocabSplits,
    // rows of runs from before the stream split have none: theirs was the split grid
    streamWorkgroups: best.streamWorkgroups ?? 0,
    tileState: best.tileState,
    roundRows: best.roundRows,
  });
  const mm = await prepareMatmul(ctx, {
    tile: best.tile,
    aDtype: spec.dtype,
    bDtype: spec.dtype,
    aTrans: false,
    bTrans: false,
  });
  const rs = await prepareRowSoftmaxStats(ctx, { logitsDtype: "f32", opts, v: spec.v });
  const vec = (label: string) =>
    createTensor(ctx, { dtype: "f32", rows: spec.n, cols: 1, role: "output", label });
  const lse2 = vec("lse ref"), loss2 = vec("loss ref");
  await ctx.scoped(async () => {
    const rec = new Recorder(ctx);
    ff.record(rec, { e, c, targets, lse, lossRows });
    const ab = { a: { tensor: e, trans: false }, b: { tensor: c, trans: false } };
    mm.record(rec, { ...ab, out: logits!, tile: best.tile });
    rs.record(rec, { logits: logits!, targets, lse: lse2, lossRows: loss2 });
    await rec.finish();
  });
  const [a, b, la, lb] = await Promise.all(
    [lse, lse2, lossRows, loss2].map((t) => download(ctx, t)),
  );
  const diff = (x: Float32Array, y: Float32Array) => {
    let m = 0, s = 0;
    for (let i = 0; i < x.length; i++) {
      m = Math.max(m, Math.abs(x[i] - y[i]));
      s = Math.max(s, Math.abs(y[i]));
    }
    return { max: m, scale: s };
  };
  const dl = diff(a, b), dloss = diff(la, lb);
  console.log(
    `\ncheck vs materialised logits + row_softmax_stats: max |Δlse| ${dl.max.toExponential(2)} ` +
      `(max |lse| ${dl.scale.toFixed(2)}), max |Δloss| ${dloss.max.toExponential(2)}`,
  );
  return {
    maxAbsDiffLse: dl.max,
    maxAbsLse: dl.scale,
    maxAbsDiffLoss: dloss.max,
    maxAbsLoss: dloss.scale,
  };
}

/** What the report's header says: adapter, shape, options, repetitions. */
export interface TuneHeader {
  adapter: {
    description: string;
    vendor: string;
    architecture: string;
    isFallbackAdapter: boolean;
  };
  date: string;
  shape: FusedForwardSpec;
  options: { beta: number; softcap: number | null };
  warmup: number;
  reps: number;
}

/** The report's JSON: the header, the best configuration, the check and every row. */
export function tuneJson(
  h: TuneHeader,
  rows: TuneRow[],
  best: TuneRow | null,
  check: TuneCheck | null,
): Record<string, unknown> {
  return {
    ...h,
    complete: best !== null,
    best: best && {
      tile: describeTile(best.tile),
      vocabSplits: best.vocabSplits,
      streamWorkgroups: best.streamWorkgroups ?? 0,
      tileState: best.tileState,
      roundRows: best.roundRows ?? null,
      ms: best.ms,
      tilesMs: best.tilesMs,
      tflops: best.tflops,
      plainMs: best.plainMs ?? null,
      plainTflops: best.plainTflops ?? null,
      fusedOverPlain: best.fusedOverPlain ?? null,
    },
    check,
    results: jsonRows(rows),
  };
}

/** The report's Markdown: what was timed how, the best configuration, every row, the check. */
export function tuneMarkdown(
  h: TuneHeader,
  o: { opts: LceOptions; softcap?: number; rows: TuneRow[]; best: TuneRow; check?: TuneCheck },
): string {
  const { best, check } = o;
  const { n, v, d, dtype } = h.shape;
  const r = h.adapter;
  const fmtRow = (x: TuneRow) =>
    `| ${x.config} | ${x.variant} | ${x.ms.toFixed(3)} | ${x.tilesMs.toFixed(3)} | ${
      x.tflops.toPrecision(3)
    } | ${x.plainMs?.toFixed(3) ?? "-"} | ${x.plainTflops?.toPrecision(3) ?? "-"} | ${
      x.fusedOverPlain?.toFixed(3) ?? "-"
    } |${x.error ? ` ${x.error}` : ""}`;
  const vs = best.fusedOverPlain !== undefined
    ? `; plain ${best.plainMs!.toFixed(3)} ms (${best.plainTflops!.toFixed(2)} TFLOP/s); ` +
      `fused/plain ${best.fusedOverPlain.toFixed(3)}`
    : "";
  const passes = Object.entries(best.passes ?? {}).map(([k, x]) => `${k} ${x.toFixed(3)}`);
  return [
    `# Fused forward tuning: ${r.description}`,
    "",
    `${h.date}; adapter ${r.description} (vendor ${r.vendor}${
      r.architecture ? `, ${r.architecture}` : ""
    }, fallback ${r.isFallbackAdapter}).`,
    `Shape n=${n}, |V|=${v}, d=${d}, ${dtype}; β=${o.opts.beta}${
      o.softcap ? `, softcap ${o.softcap}` : ""
    }. GPU time from timestamp queries, median of ${h.reps} after ${h.warmup} warm-up${
      r.isFallbackAdapter ? "" : ` and ${IDLE_GPU_BUSY_MS} ms of full load`
    }; ` +
    "TFLOP/s = 2·n·|V|·d / time. The fused time is the whole forward (column sum, tiles, " +
    "merge); plain = kernels/matmul.ts with the same tile (f32 logits materialised); " +
    "fused/plain = fused time / plain time.",
    "",
    `**Best:** ${best.config} — ${best.ms.toFixed(3)} ms, ${best.tflops.toPrecision(3)} ` +
    `TFLOP/s${vs}.`,
    "",
    `Passes of the best (median ms): ${passes.join(", ")}.`,
    "",
    "| config | variant | fused ms | tiles ms | TFLOP/s | plain ms | plain TFLOP/s | fused/plain |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ...o.rows.map(fmtRow),
    "",
    check
      ? `Check against materialised logits + row_softmax_stats: max |Δlse| ${
        check.maxAbsDiffLse.toExponential(2)
      } (max |lse| ${check.maxAbsLse.toFixed(2)}), max |Δloss| ${
        check.maxAbsDiffLoss.toExponential(2)
      }.`
      : "No check (plain matmul skipped).",
    "",
  ].join("\n");
}
