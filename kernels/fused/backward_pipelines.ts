/**
 * The compile step of the fused backward (kernels/fused/backward.ts): every pipeline a plan
 * (backward_options.ts) records, compiled once per problem.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { vecLoadsFit } from "../gemm_codegen.ts";
import { vecWidth } from "../wgsl_common.ts";
import { prepareVocabSort } from "./vocab_order.ts";
import { prepareCast16 } from "../cast16.ts";
import { prepareGradCorrections } from "./corrections.ts";
import { backwardGemmTiles, type BackwardTile, dESliceTile } from "./backward_tiles.ts";
import { filterPassSignature, KEPT_BOUNDS_SIG, keptBoundsWgsl } from "./filter.ts";
import {
  ORDER_SELECT_SIG,
  orderSelectWgsl,
  prepareSortBound,
  SORTED_MASK_SIG,
  sortedMaskWgsl,
} from "./order_decision.ts";
import { type TilePassKernelOptions, tilePassSignature, tilePassWgsl } from "./kept_tiles.ts";
import { slabReduceSignature, slabReduceWgsl } from "./slab_reduce.ts";
import { compileKernel } from "../../gpu/signature.ts";
import { prepareMapFilter } from "./tile_map.ts";
import { gatheredDETile, prepareGatheredDE } from "./gathered_de.ts";
import { prepareDCOrder } from "./dc_order.ts";
import { prepareDCSplit } from "./dc_split.ts";
import { prepareDenseDE } from "./dense_de.ts";
import { prepareMapRefine } from "./map_refine.ts";
import { type DenseDCPlan, prepareDenseDC } from "./dense_dc.ts";
import type { DenseSharedPlan } from "./dense_shared.ts";
import type { BackwardOptionsPlan } from "./backward_options.ts";
import { prepareFilterSample } from "./filter_sample.ts";

/** The compiled pieces of a backward (undefined where the plan does not use them). */
export type BackwardPipelines = Awaited<ReturnType<typeof compileBackward>>;

/** The filter and order-decision pipelines of a plan. */
async function _filterPipelines(ctx: GpuContext, p: BackwardOptionsPlan) {
  const { spec, eps, filterTile, decide, tile } = p;
  const fo = eps !== null && filterTile
    ? {
      tile,
      dtype: spec.dtype,
      opts: p.opts,
      v: spec.v,
      eps,
      filterTile,
      vecLoads: vecLoadsFit(filterTile, spec.dtype, spec.d),
      sort: decide ? false : p.sort,
      entryBits: decide,
      scales: p.filterScales,
    }
    : undefined;
  const filterPass = fo
    ? await compileKernel(
      ctx,
      filterPassSignature(fo),
      p.filterWgsl(fo),
      "fused_backward_filter",
    )
    : undefined;
  const keptBounds = p.balanced
    ? await compileKernel(ctx, KEPT_BOUNDS_SIG, keptBoundsWgsl(p.splits), "kept_bounds")
    : undefined;
  const sortedMask = decide
    ? await compileKernel(ctx, SORTED_MASK_SIG, sortedMaskWgsl(tile), "sorted_mask")
    : undefined;
  const orderSelect = decide
    ? await compileKernel(ctx, ORDER_SELECT_SIG, orderSelectWgsl(), "order_select")
    : undefined;
  const mapFilter = eps !== null && p.mapTile
    ? await prepareMapFilter(ctx, { tile, mapTile: p.mapTile, opts: p.opts, v: spec.v, eps })
    : undefined;
  const sortBound = p.sortBound ? await prepareSortBound(ctx, tile) : undefined;
  // the map's refine: the FMA filter the plain rows take, in the own order (map_refine.ts)
  const r = p.mapRefine;
  const mapRefine = eps !== null && r
    ? await prepareMapRefine(ctx, {
      filter: {
        tile,
        dtype: spec.dtype,
        opts: p.opts,
        v: spec.v,
        eps,
        filterTile: r.filterTile,
        vecLoads: vecLoadsFit(r.filterTile, spec.dtype, spec.d),
        sort: false,
      },
      filterTile: r.filterTile,
      mode: r.mode,
      minTiles: r.minTiles,
      full: r.full,
    })
    : undefined;
  return { filterPass, keptBounds, sortedMask, orderSelect, mapFilter, sortBound, mapRefine };
}

/**
 * Compiles every pipeline of a plan; `denseDC` is the dense dC path's plan where it can apply
 * (backward_plan.ts denseDCPlanFor), `shared` the dense backward sharing G's (denseSharedPlanFor).
 */
export async function compileBackward(
  ctx: GpuContext,
  p: BackwardOptionsPlan,
  denseDC?: DenseDCPlan,
  shared?: DenseSharedPlan,
) {
  const { spec, opts, tile, eps, out16, splits } = p;
  const filter = await _filterPipelines(ctx, p);
  const problem = { dtype: spec.dtype, opts, v: spec.v };
  const base = { ...problem, tile, eps, sort: p.sort };
  // 16-byte loads of bf16 E and C in the tile passes' logits products where d allows
  const tileVec = (k: "dE" | "dC", bt: BackwardTile) =>
    spec.dtype === "bf16" &&
    vecLoadsFit({ ...backwardGemmTiles(bt)[k], vec: true }, "bf16", spec.d);
  const tilePass = (o: TilePassKernelOptions, label: string) =>
    compileKernel(ctx, tilePassSignature(o), tilePassWgsl(o), label);
  const dCVec = tileVec("dC", tile);
  const dCPass = await tilePass({
    ...base,
    kind: "dC",
    out16: p.dCInPlace,
    vecLoads: dCVec,
    ordered: p.dCOrder,
    split: p.dCSplit !== undefined,
    foldTargets: opts.targetTerm,
    // the direct product where E is read 16 bytes at a time (FusedBackwardOptions.dCProduct)
    dCDirect: (p.dCProduct ?? (dCVec ? "direct" : "staged")) === "direct",
    dCStage2d: p.dCStage2d,
  }, "fused_backward_dC");
  const dCOrder = p.dCOrder ? await prepareDCOrder(ctx) : undefined;
  const dCSplit = p.dCSplit
    ? await prepareDCSplit(ctx, { out16: p.dCInPlace, vocab: tile.vocab, sort: p.sort, opts })
    : undefined;
  const cast = out16 ? await prepareCast16(ctx, out16) : undefined;
  const dEPass = await tilePass({
    ...base,
    kind: "dE",
    rowSlices: p.slices,
    vecLoads: tileVec("dE", dESliceTile(tile, p.slices)),
    splits,
    balanced: p.balanced,
  }, "fused_backward_dE");
  // the split partials are added in place (16-bit output: slab parts 1…S−1 into part 0) or into
  // the f32 output (slab parts 0…S−1)
  const reduce = splits > 1
    ? await compileKernel(
      ctx,
      slabReduceSignature(out16 !== undefined),
      slabReduceWgsl(out16 !== undefined ? splits - 1 : splits, out16 !== undefined),
      "fused_backward_split_reduce",
    )
    : undefined;
  const sorter = p.sort ? await prepareVocabSort(ctx, { dtype: spec.dtype, opts }) : undefined;
  const corrections = await prepareGradCorrections(ctx, {
    ...problem,
    dC16: p.dCInPlace,
    foldTargets: opts.targetTerm,
  });
  const gathered = p.gather
    ? await prepareGatheredDE(ctx, {
      ...base,
      accShared: out16 !== undefined,
      vecLoads: tileVec("dE", tile),
      cVec: spec.d % vecWidth(spec.dtype) === 0,
      ...p.gather,
      n: spec.n,
      gemmTile: p.gather.productTile ?? gatheredDETile(tile, {
        hardware: !ctx.report.isFallbackAdapter,
        engine: ctx.engine,
      }),
    })
    : undefined;
  const dense = p.denseDE && p.denseDEPath
    ? await p.denseDEPath(ctx, { spec, opts, mode: p.denseDE })
    : p.denseDE
    ? await prepareDenseDE(ctx, {
      spec,
      opts,
      mode: p.denseDE,
      out16: out16 !== undefined,
      productTile: p.denseDETile,
    })
    : undefined;
  const dc = p.denseDC && denseDC
    ? { spec, opts, mode: p.denseDC, outDtype: p.dCInPlace ?? "f32", plan: denseDC } as const
    : undefined;
  const denseDCPath = dc && p.denseDCPath
    ? await p.denseDCPath.prepare(ctx, dc)
    : dc
    ? await prepareDenseDC(ctx, {
      ...dc,
      tuning: p.denseDCTuning,
      // both dense paths the GEMM core's: the one sharing G where it fits (dense_shared.ts)
      shared,
    })
    : undefined;
  // the filter's sample where both dense paths are recorded, at the larger of their thresholds
  const filterSample = p.filterSample && (filter.filterPass || p.mapRefine?.full) && dense &&
      denseDCPath
    ? await prepareFilterSample(ctx, {
      mode: p.filterSample,
      above: Math.max(dense.above, denseDCPath.above),
    })
    : undefined;
  return {
    ...filter,
    filterSample,
    dCPass,
    dCOrder,
    dCSplit,
    cast,
    dEPass,
    reduce,
    sorter,
    corrections,
    gathered,
    dense,
    denseDC: denseDCPath,
  };
}
