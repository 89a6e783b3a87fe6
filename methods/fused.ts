/**
 * The fused rows of Table 3: the loss and its gradients without the n×|V| logits.
 *
 * - `fused` ("Ours"): fused forward (kernels/fused/forward.ts) saving the LSE and the count; the
 *   backward sorts the vocabulary by mean logit, then runs the tiled backward with the gradient
 *   filter (ε = eps(dtype)/32) and the exact sparse and rank-one terms (kernels/fused/backward.ts).
 *   The sorted order is used only where it keeps 5% fewer tiles than the vocabulary's own order
 *   (counted exactly from the filter pass on the GPU: the order decision), so sorting never costs
 *   more than the sort itself and the decision (a few ms at the paper's shape).
 * - `fused-nosort`, `fused-nofilter`: the same without the sort / without the filter.
 * - `fused-tilemap` ("Ours + tile map"): `fused-nosort` whose forward also keeps each 128×128
 *   tile's largest capped logit (a u32 per tile, 500 KiB at the paper's shape, counted in the
 *   forward's memory and saved for the backward), and whose backward sets the filter mask from
 *   those maxima and the LSE (kernels/fused/tile_map.ts) instead of recomputing every tile: it
 *   keeps every tile the exact filter keeps, in the vocabulary's own order (the forward's).
 * - `fused-fb`, `fused-fb-nofilter` ("Fused Version"): the forward computes the loss and, after a
 *   dispatch boundary, both gradients for a unit upstream gradient (w_n = 1/count for mean, 1 for
 *   sum); the backward only scales them in place by the upstream gradient and hands the
 *   forward's tensors over as its result (a second backward on the same saved state is refused;
 *   the measurement layer runs a fresh forward per backward in that case). Reduction `none` is
 *   unsupported there: a per-token upstream gradient cannot be applied to dC after the fact.
 *
 * Gradient dtype: with bf16/f16 inputs, fused, fused-nosort and fused-fb return dE and dC in the
 * input dtype (gradDtype "input", kernels/fused/backward.ts: dC accumulated in place in 16 bits,
 * dE in f32 inside dC's storage (formed before dC) and cast at the end: the lower bound + 1.75 MiB); `fused-f32grad` is "Ours"
 * with f32 gradients. The no-filter rows keep f32 gradients: every token tile would add one more
 * rounding to dC (64 at the paper's shape). Their stats report gradDtype and the roundings per
 * element (dERoundings, dCRoundings; fused-fb adds one for the scaling by the upstream gradient).
 *
 * The sort's time counts in the backward (it is computed there, per the paper).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { LceOptions } from "../core/options.ts";
import { prepareFusedForward } from "../kernels/fused/forward.ts";
import { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { prepareRowWeights } from "../kernels/row_weights.ts";
import { prepareUnitRowWeights } from "../kernels/unit_row_weights.ts";
import { prepareScaleByScalar } from "../kernels/scale_by_scalar.ts";
import {
  defaultFilterEps,
  type GradDtype,
  gradRowsPerBinding,
} from "../kernels/fused/backward_plan.ts";
import {
  type FusedBackwardOptions,
  type PreparedFusedBackward,
  prepareFusedBackward,
} from "../kernels/fused/backward.ts";
import type { Gradients, LceMethod, MethodStats, PreparedMethod, ProblemSpec } from "./types.ts";
import { type PreparedDenseBackward, prepareDenseBackward } from "./_dense_backward.ts";
import { ESTIMATE_SLACK_BYTES, lossTensor, vector } from "./_common.ts";
import {
  createTileMap,
  tileMapBytes,
  tileMapLayout,
  type TileMapTile,
} from "../kernels/fused/tile_map.ts";
import { rowsPerBinding, shardRows } from "../gpu/tensor.ts";

/** Variant switches of a fused method. */
export interface FusedVariant {
  name: string;
  label: string;
  description: string;
  /** Gradient filter on. */
  filter: boolean;
  /** Vocabulary sorting on (with the filter: without it the backward is dense, in no order). */
  sort?: boolean;
  /** Gradients computed in the forward (the "Fused Version"). */
  fusedForwardBackward: boolean;
  /**
   * The forward keeps the tile map and the backward's filter reads it instead of recomputing the
   * tiles (kernels/fused/tile_map.ts); needs the filter, no sorting, not the Fused Version.
   */
  tileMap?: boolean;
  /**
   * Dtype of the gradients (kernels/fused/backward.ts): "input" (bf16/f16 gradients for 16-bit
   * inputs, f32 for f32 inputs) or "f32" (f32 accumulation and output whatever the input).
   */
  gradDtype: GradDtype;
}

/**
 * Kernel options no shipped row sets, for tests and the tuning tools (tuning/): the filtered
 * backward's (kernels/fused/backward.ts: its tile, the filter pass's tile, the dE splits and row
 * slices, the gathered dE, the dC order and its split, the order decision, the dense dE and dC), and the vocabulary rows per chunk of
 * the no-filter rows' dense backward (methods/_dense_backward.ts).
 */
export interface FusedKernelOptions {
  backward?: Pick<
    FusedBackwardOptions,
    | "tile"
    | "filterTile"
    | "dESplits"
    | "dERowSlices"
    | "dEGather"
    | "dCOrder"
    | "decideOrder"
    | "sortBound"
    | "denseDE"
    | "denseDETile"
    | "denseDC"
    | "denseDCTuning"
    | "denseDCTailRows"
    | "filterSample"
    | "denseShared"
    | "dCSplit"
    | "dCProduct"
    | "dCStage2d"
    | "mapRefine"
    | "mapRefineMinTiles"
  >;
  denseChunkRows?: number;
}

/** Builds an {@link LceMethod} for a fused variant (with kernel options: tests, tuning). */
export function fusedMethod(f: FusedVariant, k: FusedKernelOptions = {}): LceMethod {
  if (f.tileMap && (!f.filter || f.sort || f.fusedForwardBackward)) {
    throw new RangeError(`${f.name}: the tile map needs the filter, no sorting, no Fused Version`);
  }
  if (f.sort && !f.filter) throw new RangeError(`${f.name}: sorting serves the filter only`);
  return {
    name: f.name,
    label: f.label,
    description: f.description,
    unsupported(_ctx: GpuContext, _spec: ProblemSpec, opts: LceOptions) {
      if (f.fusedForwardBackward && opts.reduction === "none") {
        return "reduction none: the gradients are formed in the forward, before the per-token " +
          "upstream gradient is known";
      }
      return undefined;
    },
    prepare: (ctx, spec, opts) => _prepare(ctx, spec, opts, f, k),
  };
}

/** The filtered backward, or without the filter the dense one (methods/_dense_backward.ts). */
function _prepareBackward(
  ctx: GpuContext,
  spec: ProblemSpec,
  opts: LceOptions,
  f: FusedVariant,
  k: FusedKernelOptions,
  mapTile: TileMapTile,
): Promise<PreparedFusedBackward | PreparedDenseBackward> {
  if (!f.filter) return prepareDenseBackward(ctx, { spec, opts, chunkRows: k.denseChunkRows });
  return prepareFusedBackward(ctx, {
    ...k.backward,
    spec,
    opts,
    filterEps: defaultFilterEps(spec.dtype),
    sort: f.sort ?? false,
    gradDtype: f.gradDtype,
    mapFilter: f.tileMap ? { tile: mapTile } : undefined,
  });
}

async function _prepare(
  ctx: GpuContext,
  spec: ProblemSpec,
  opts: LceOptions,
  f: FusedVariant,
  k: FusedKernelOptions,
): Promise<PreparedMethod> {
  const fwd = await prepareFusedForward(ctx, { spec, opts, tileMax: f.tileMap });
  const reduce = await prepareLossReduce(ctx, opts);
  const bwd = await _prepareBackward(ctx, spec, opts, f, k, fwd.mapTile);
  // Roundings of a gradient element to its 16-bit output (0 for f32): the backward's, plus the
  // fused forward-backward's scaling by the upstream gradient.
  const extra = f.fusedForwardBackward && bwd.gradDtype !== "f32" ? 1 : 0;
  const stats = async (): Promise<MethodStats> => ({
    ...(await bwd.stats()),
    gradDtype: bwd.gradDtype,
    dERoundings: bwd.roundings.dE + extra,
    dCRoundings: bwd.roundings.dC + extra,
  });
  // Σ_v C_v: summed once by the forward (identity smoothing) and read by the filtered backward's
  // smoothing correction, instead of summed again there (0.92 ms at the paper's shape)
  const keepColsum = f.filter && fwd.smoothing === "identity";
  const estimateBytes = () =>
    fusedEstimate(ctx, spec, opts, f, {
      fwdWorkspace: fwd.workspaceBytes(),
      bwdWorkspace: f.filter
        ? (bwd as PreparedFusedBackward).workspaceBytes({ colsum: keepColsum })
        : (bwd as PreparedDenseBackward).workspaceBytes(),
      keepColsum,
      gradDtype: bwd.gradDtype,
      mapTile: fwd.mapTile,
    });
  if (!f.fusedForwardBackward) {
    const weights = await prepareRowWeights(ctx, opts);
    return {
      forward(rec, x) {
        // the tile map (fused-tilemap) lives from the forward to the backward, like the LSE
        const tileMax = f.tileMap ? createTileMap(ctx, x.e, x.c, fwd.mapTile) : undefined;
        const lse = vector(ctx, spec.n, "workspace", "lse");
        const lossRows = vector(ctx, spec.n, "workspace", "loss rows");
        const count = vector(ctx, 1, "workspace", "count");
        const colsum = keepColsum ? vector(ctx, spec.d, "workspace", "Σ_v C_v") : undefined;
        fwd.record(rec, { e: x.e, c: x.c, targets: x.targets, lse, lossRows, tileMax, colsum });
        const loss = lossTensor(ctx, spec.n, opts);
        reduce.record(rec, { lossRows, targets: x.targets, loss, count });
        rec.release(lossRows.shards[0].buffer);
        const tensors = [lse, count, tileMax, colsum].filter((t) => t !== undefined);
        return Promise.resolve({ loss, saved: { tensors, lse, count, tileMap: tileMax, colsum } });
      },
      backward(rec, x, saved, gradOut) {
        const w = vector(ctx, spec.n, "workspace", "row weights");
        weights.record(rec, { gradOut, targets: x.targets, count: saved.count, w });
        const { tileMap, colsum } = saved;
        const g = bwd.record(rec, { ...x, lse: saved.lse, w, count: saved.count, tileMap, colsum });
        rec.release(w.shards[0].buffer);
        return Promise.resolve(g);
      },
      dispose(saved) {
        for (const t of saved.tensors) t.destroy();
      },
      stats,
      release: () => bwd.release(),
      estimateBytes,
    };
  }
  const unit = await prepareUnitRowWeights(ctx, opts);
  const scale = await prepareScaleByScalar(
    ctx,
    bwd.gradDtype === "f32" ? [] : [bwd.gradDtype],
  );
  return {
    forward(rec, x) {
      const lse = vector(ctx, spec.n, "workspace", "lse");
      const lossRows = vector(ctx, spec.n, "workspace", "loss rows");
      const count = vector(ctx, 1, "workspace", "count");
      const w = vector(ctx, spec.n, "workspace", "unit row weights");
      const colsum = keepColsum ? vector(ctx, spec.d, "workspace", "Σ_v C_v") : undefined;
      fwd.record(rec, { e: x.e, c: x.c, targets: x.targets, lse, lossRows, colsum });
      const loss = lossTensor(ctx, spec.n, opts);
      reduce.record(rec, { lossRows, targets: x.targets, loss, count });
      // Gradient phase: passes recorded after the LSE passes (a dispatch boundary).
      const unitCount = vector(ctx, 1, "workspace", "unit count");
      unit.record(rec, { targets: x.targets, w, count: unitCount });
      const g: Gradients = bwd.record(rec, { ...x, lse, w, count, colsum });
      rec.release(lossRows.shards[0].buffer, w.shards[0].buffer, unitCount.shards[0].buffer);
      if (colsum) rec.release(colsum.shards[0].buffer);
      return Promise.resolve({
        loss,
        saved: { tensors: [lse, count, g.dE, g.dC], grads: g },
      });
    },
    backward(rec, _x, saved, gradOut) {
      if (saved.scaled) {
        return Promise.reject(
          new Error(`${f.name}: the backward of a fused-forward state can run only once`),
        );
      }
      saved.scaled = true;
      const g = saved.grads as Gradients;
      scale.record(rec, { x: g.dE, scalar: gradOut });
      scale.record(rec, { x: g.dC, scalar: gradOut });
      return Promise.resolve(g);
    },
    dispose(saved) {
      for (const t of saved.tensors) t.destroy();
    },
    stats,
    release: () => bwd.release(),
    estimateBytes,
  };
}

/** Bytes of a tensor of `rows`×`cols` elements of `bytes` each, sharded every `per` rows. */
function _tensorBytes(rows: number, cols: number, bytes: number, per: number): number {
  let sum = 0;
  for (let r = 0; r < Math.max(rows, 1); r += per) {
    sum += Math.ceil((Math.max(Math.min(per, rows - r), 1) * cols * bytes) / 16) * 16;
  }
  return sum;
}

/**
 * The bytes a fused method's calls allocate, per mode, from its prepared plan: the forward's
 * vectors, loss, Σ_v C_v and tile map and the fused forward's workspace; the backward's row
 * weights, gradients (sharded as the backward makes them) and workspace; the Fused Version's
 * forward holds both.
 */
/**
 * A fused row's estimate (PreparedMethod.estimateBytes) from its forward's and backward's
 * workspaces; also the tensor-core fused rows' (methods/fused_tc.ts).
 */
export function fusedEstimate(
  ctx: GpuContext,
  spec: ProblemSpec,
  opts: LceOptions,
  f: Pick<FusedVariant, "tileMap" | "fusedForwardBackward">,
  k: {
    fwdWorkspace: number;
    bwdWorkspace: number;
    keepColsum: boolean;
    /** The gradients' dtype: f32, or a 16-bit dtype. */
    gradDtype: string;
    /** The tile map's entries (kernels/fused/tile_map.ts forwardMapTile). */
    mapTile: TileMapTile;
  },
): { fwd: number; bwd: number; "fwd+bwd": number } {
  const vec = (x: number) => Math.ceil(Math.max(x, 1) * 4 / 16) * 16;
  const out16 = k.gradDtype !== "f32" && spec.dtype !== "f32";
  const per = gradRowsPerBinding(ctx.maxBindingBytes, spec.d, out16);
  const grads = _tensorBytes(spec.n, spec.d, out16 ? 2 : 4, per) +
    _tensorBytes(spec.v, spec.d, out16 ? 2 : 4, per);
  const loss = vec(opts.reduction === "none" ? spec.n : 1);
  const inPer = rowsPerBinding(ctx, spec.dtype, spec.d);
  const tileMap = f.tileMap
    ? tileMapBytes(tileMapLayout(shardRows(spec.n, inPer), shardRows(spec.v, inPer), k.mapTile))
    : 0;
  // uniform parameter blocks are left out of the kernels' workspace: ESTIMATE_SLACK_BYTES each call
  const fwd = 2 * vec(spec.n) + vec(1) + (k.keepColsum ? vec(spec.d) : 0) + tileMap + loss +
    k.fwdWorkspace + ESTIMATE_SLACK_BYTES;
  if (f.fusedForwardBackward) {
    const both = fwd + vec(spec.n) + vec(1) + grads + k.bwdWorkspace;
    return { fwd: both, bwd: grads + ESTIMATE_SLACK_BYTES, "fwd+bwd": both };
  }
  const bwd = vec(spec.n) + grads + k.bwdWorkspace + ESTIMATE_SLACK_BYTES;
  return { fwd, bwd, "fwd+bwd": fwd + bwd };
}

/** "Ours": fused forward and backward with gradient filter and vocabulary sorting. */
export const fused: LceMethod = fusedMethod({
  name: "fused",
  label: "Ours",
  description: "fused LSE forward; tiled backward with gradient filter, vocab sorting where it " +
    "keeps fewer tiles, exact sparse and rank-one terms",
  filter: true,
  sort: true,
  fusedForwardBackward: false,
  gradDtype: "input",
});

/** "+ (No Vocab Sorting)". */
export const fusedNoSort: LceMethod = fusedMethod({
  name: "fused-nosort",
  label: "+ (No Vocab Sorting)",
  description: "Ours without sorting the vocabulary by mean logit",
  filter: true,
  sort: false,
  fusedForwardBackward: false,
  gradDtype: "input",
});

/** "+ (No Grad. Filter)". */
export const fusedNoFilter: LceMethod = fusedMethod({
  name: "fused-nofilter",
  label: "+ (No Grad. Filter)",
  description: "Ours without the gradient filter: every tile's products, as dense products per " +
    "vocabulary chunk (logits recomputed, dE, dC)",
  filter: false,
  fusedForwardBackward: false,
  gradDtype: "f32",
});

/** "Fused Version": loss and both gradients in the forward; the backward scales them. */
export const fusedFb: LceMethod = fusedMethod({
  name: "fused-fb",
  label: "Fused Version",
  description: "forward computes the loss and both gradients (filter, sorting); the backward " +
    "scales them by the upstream gradient",
  filter: true,
  sort: true,
  fusedForwardBackward: true,
  gradDtype: "input",
});

/** "Fused Version" without the gradient filter. */
export const fusedFbNoFilter: LceMethod = fusedMethod({
  name: "fused-fb-nofilter",
  label: "Fused Version (No Grad. Filter)",
  description: "Fused Version without the gradient filter",
  filter: false,
  fusedForwardBackward: true,
  gradDtype: "f32",
});

/** "Ours" with f32 gradients whatever the input dtype (f32 accumulation and output). */
export const fusedF32Grad: LceMethod = fusedMethod({
  name: "fused-f32grad",
  label: "Ours (f32 gradients)",
  description: "Ours with dE and dC accumulated and returned in f32 for 16-bit inputs",
  filter: true,
  sort: true,
  fusedForwardBackward: false,
  gradDtype: "f32",
});

/**
 * "Ours + tile map": the no-sorting row whose forward keeps each tile's largest logit and whose
 * backward filters from those maxima instead of recomputing every tile.
 */
export const fusedTileMap: LceMethod = fusedMethod({
  name: "fused-tilemap",
  label: "Ours + tile map",
  description: "Ours without sorting; the forward keeps each tile's largest logit, and the " +
    "backward's gradient filter reads those maxima instead of recomputing every tile (then " +
    "recomputes only the tiles they keep, where they keep at most 75%)",
  filter: true,
  sort: false,
  fusedForwardBackward: false,
  gradDtype: "input",
  tileMap: true,
});
