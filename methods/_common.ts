/**
 * Pieces several methods share: allocating per-token vectors and the loss, and choosing the GEMM
 * tile for a context.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { createTensor, type DeviceTensor } from "../gpu/tensor.ts";
import type { BufferRole } from "../gpu/context.ts";
import type { LceOptions } from "../core/options.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { ForwardOutput } from "./types.ts";
import type { prepareRowSoftmaxStats } from "../kernels/row_softmax_stats.ts";
import type { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { type GemmTile, TILE_HW, TILE_HW_TT, TILE_SMALL } from "../kernels/gemm_codegen.ts";

/** An n×1 f32 vector. */
export function vector(ctx: GpuContext, n: number, role: BufferRole, label: string): DeviceTensor {
  return createTensor(ctx, { dtype: "f32", rows: n, cols: 1, role, label });
}

/** The loss output: 1×1 for mean/sum, n×1 for none. */
export function lossTensor(ctx: GpuContext, n: number, o: LceOptions): DeviceTensor {
  return vector(ctx, o.reduction === "none" ? n : 1, "output", "loss");
}

/** The GEMM tile for plain products: 128×128 on hardware adapters, 64×64 on software ones. */
export function defaultTile(ctx: GpuContext): GemmTile {
  return ctx.report.isFallbackAdapter ? TILE_SMALL : TILE_HW;
}

/**
 * The GEMM tile for a product whose operands are both held transposed, with an f32 A and a long K
 * (dC = Gᵀ·E over all tokens with an f32 G: the baseline, the no-filter rows):
 * {@link TILE_HW_TT} (K-step 32) on hardware adapters, 64×64 on software ones.
 */
export function transposedTile(ctx: GpuContext): GemmTile {
  return ctx.report.isFallbackAdapter ? TILE_SMALL : TILE_HW_TT;
}

/**
 * The tail of a materialised forward: per-row LSE and loss from the logits, the reduced loss and
 * the valid count; the logits, LSE and count are kept for the backward.
 */
export function recordLossFromLogits(
  ctx: GpuContext,
  rec: Recorder,
  o: {
    stats: Awaited<ReturnType<typeof prepareRowSoftmaxStats>>;
    reduce: Awaited<ReturnType<typeof prepareLossReduce>>;
    logits: DeviceTensor;
    targets: DeviceTensor;
    opts: LceOptions;
  },
): ForwardOutput {
  const n = o.logits.rows;
  const lse = vector(ctx, n, "workspace", "lse");
  const lossRows = vector(ctx, n, "workspace", "loss rows");
  const count = vector(ctx, 1, "workspace", "count");
  o.stats.record(rec, { logits: o.logits, targets: o.targets, lse, lossRows });
  const loss = lossTensor(ctx, n, o.opts);
  o.reduce.record(rec, { lossRows, targets: o.targets, loss, count });
  rec.release(lossRows.shards[0].buffer);
  return { loss, saved: { tensors: [o.logits, lse, count], logits: o.logits, lse, count } };
}
