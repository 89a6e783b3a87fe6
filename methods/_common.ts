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
import {
  type GemmTile,
  TILE_HW,
  TILE_HW_512,
  TILE_HW_8X16,
  TILE_HW_8X16_TM,
  TILE_HW_TM,
  TILE_HW_TT,
  TILE_HW_WIDE,
  TILE_SMALL,
} from "../kernels/gemm_codegen.ts";
import { type PreparedMatmul, prepareMatmul, SPLITK_MAX_BYTES } from "../kernels/matmul.ts";
import type { TensorDtype } from "../gpu/tensor.ts";

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

/** The three products of a method that materialises logits and their gradient G. */
export interface LceProducts {
  /** logits = E·Cᵀ (E and C as held). */
  logits: PreparedMatmul;
  /**
   * dE = G·C (C held, read transposed), or where prepared with `dE: "transposed"` dEᵀ = Cᵀ·Gᵀ
   * (C read transposed, G as held) into a d×n scratch that the caller transposes into dE.
   */
  dE: PreparedMatmul;
  /** dC = Gᵀ·E (G and E held, both read transposed). */
  dC: PreparedMatmul;
}

/**
 * Compiles a method's three products on the GEMM core. Tiles on hardware adapters: TILE_HW,
 * except
 * - dC with an f32 G over a long K (`dC: "long-k"`): TILE_HW_TT (K-step 32: 209.7 against 219.6
 *   ms for the paper's dC on an H100; slower with a bf16 G);
 * - dC with a 16-bit G: TILE_HW_8X16_TM (8×16 a thread, thread-major staging: 199.0–200.5 against
 *   209.3–210.8 ms for the paper's dC, 24.99 against 26.24 for the chunked method's 1,024-row
 *   chunks);
 * - dE over a long K (`dE: "long-k"`): TILE_HW_8X16 (Liger's skinny 128-row chunks, f32 G split
 *   14 ways: 3.51 and 3.62 ms a chunk against 3.63 and 3.71 for TILE_HW in two runs, which ran
 *   3.63 against 4.12 for a 128×64 tile split 7 ways; 3.59 against 3.68 in a third; the chunked
 *   method's 1,024-row chunks, bf16 G split 5 ways: 28.56 against 30.61 ms);
 * - dE with an f32 G of all rows (`dE: "all-rows"`, the baseline's, the caller asking for the
 *   slices: see methods/baseline.ts): TILE_HW_512 (220.9 ms split 12 ways against 229.9 for
 *   TILE_HW_8X16 split 6 ways, which beat TILE_HW's 234.1);
 * - `dE: "transposed"`: the dE product is dEᵀ = Cᵀ·Gᵀ on TILE_HW (a 16-bit G over the whole
 *   vocabulary, the compiled method's: 212.9 against 227.3 ms for G·C on an H100, both split 2
 *   ways; with an f32 G, 247.5 against 230.3 for the baseline's);
 * - f32 logits of many rows (`logits: "wide"`): TILE_HW_WIDE (128×256: 211.3 against 223.2 ms for
 *   the paper's E·Cᵀ on an H100; no faster with 16-bit logits, slower for every gradient
 *   product); Liger's 128-row chunks ask for it too (3.39 and 3.41 ms a chunk back to back
 *   against 3.55 and 3.57 for TILE_HW);
 * - 16-bit logits: TILE_HW_TM (thread-major staging: 215.4 against 220.3 ms for the paper's E·Cᵀ,
 *   26.71 against 27.20 for the chunked method's 1,024-row chunks);
 *
 * and 64×64 on software adapters. The measurements and the commits that hold them:
 * docs/performance.md (the GEMM core).
 */
export async function prepareLceProducts(
  ctx: GpuContext,
  o: {
    /** Dtype of E and C. */
    dtype: TensorDtype;
    /** Dtype of the logits written (default f32). */
    logitsDtype?: TensorDtype;
    /** Dtype of G as the gradient products read it. */
    gradDtype: TensorDtype;
    /** dC's K is all tokens (not a chunk's): the K-step-32 tile where G is f32. */
    dC?: "long-k";
    /**
     * `long-k`: dE's K is the whole vocabulary (a chunk of rows at most: not the whole n×|V| G
     * in 16 bits, where TILE_HW is faster): the 8×16-per-thread tile; `all-rows`: the same for
     * an f32 G of all n rows (the baseline's), on TILE_HW_512; `transposed`: the product is
     * dEᵀ = Cᵀ·Gᵀ (see {@link LceProducts.dE}).
     */
    dE?: "long-k" | "all-rows" | "transposed";
    /**
     * The logits have many rows (all tokens), or are Liger's chunks: the 128×256 tile where they
     * are f32.
     */
    logits?: "wide";
  },
): Promise<LceProducts> {
  const tile = defaultTile(ctx);
  const hw = !ctx.report.isFallbackAdapter;
  const dCTile = !hw
    ? tile
    : o.gradDtype !== "f32"
    ? TILE_HW_8X16_TM
    : o.dC === "long-k"
    ? TILE_HW_TT
    : tile;
  const dETile = !hw
    ? tile
    : o.dE === "all-rows" && o.gradDtype === "f32"
    ? TILE_HW_512
    : o.dE === "long-k" || o.dE === "all-rows"
    ? TILE_HW_8X16
    : tile;
  const logits16 = (o.logitsDtype ?? "f32") !== "f32";
  const logitsTile = !hw ? tile : logits16 ? TILE_HW_TM : o.logits === "wide" ? TILE_HW_WIDE : tile;
  const mm = (
    k: { tile: GemmTile; a: TensorDtype; aTrans: boolean; bTrans: boolean; out?: TensorDtype },
  ) =>
    prepareMatmul(ctx, {
      tile: k.tile,
      aDtype: k.a,
      bDtype: o.dtype,
      aTrans: k.aTrans,
      bTrans: k.bTrans,
      outDtype: k.out,
    });
  // one after the other: each compilation holds an error scope of the device until it is done
  const logits = await mm({
    tile: logitsTile,
    a: o.dtype,
    aTrans: false,
    bTrans: false,
    out: o.logitsDtype,
  });
  const dE = o.dE === "transposed"
    ? await prepareMatmul(ctx, {
      tile,
      aDtype: o.dtype,
      bDtype: o.gradDtype,
      aTrans: true,
      bTrans: false,
    })
    : await mm({ tile: dETile, a: o.gradDtype, aTrans: false, bTrans: true });
  const dC = await mm({ tile: dCTile, a: o.gradDtype, aTrans: true, bTrans: true });
  return { logits, dE, dC };
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

/** The part of a memory estimate its formula leaves out besides split-K partials. */
export const ESTIMATE_SLACK_BYTES = 256 * 1024;

/**
 * What a materialising method's memory formula leaves out, as bytes to add to it: the uniform
 * parameter blocks and the rounding of each shard to 16 bytes ({@link ESTIMATE_SLACK_BYTES}),
 * and on a GPU the split-K partials of its products (kernels/matmul.ts autoSplitK: a product
 * splits only while its partials stay within SPLITK_MAX_BYTES and one output more, so at most
 * twice that; `upTo` slices of an `upToBytes` output where a product may take more); none on a
 * software adapter, where products do not split.
 */
export function estimateSlack(
  ctx: GpuContext,
  o: { upTo?: number; upToBytes?: number } = {},
): number {
  if (ctx.report.isFallbackAdapter) return ESTIMATE_SLACK_BYTES;
  const partials = Math.max(2 * SPLITK_MAX_BYTES, (o.upTo ?? 0) * (o.upToBytes ?? 0));
  return ESTIMATE_SLACK_BYTES + partials;
}

/** A vector of `k` f32 values as a buffer: rounded up to 16 bytes. */
export function vectorBytes(k: number): number {
  return Math.ceil(Math.max(k, 1) * 4 / 16) * 16;
}
