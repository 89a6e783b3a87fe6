/**
 * The options of a fused backward (kernels/fused/backward.ts) validated and completed with their
 * defaults: the tile, the filter and its kernel, splits and row slices, the gathered dE, the
 * order decision, the dC order and the dense dE path.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { GpuError } from "../../core/errors.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import type { GemmTile } from "../gemm_codegen.ts";
import type { Dtype16 } from "../cast16.ts";
import {
  defaultDERowSlices,
  defaultDESplits,
  defaultFilteredDESplits,
  dESlabsFitDC,
  gradOut16,
} from "./backward_plan.ts";
import {
  backwardSharedBytes,
  type BackwardTile,
  defaultBackwardTile,
  dESliceTile,
} from "./backward_tiles.ts";
import { defaultFilterTile, type FilterPassKernelOptions, filterPassWgsl } from "./filter.ts";
import type { TileMapTile } from "./tile_map.ts";
import type { MapRefineMode } from "./map_refine.ts";
import type { GatheredDETuning } from "./gathered_de.ts";
import type { DenseDEMode } from "./dense_de.ts";
import type { DenseMode } from "./dense_decision.ts";
import type { DenseDCMode, DenseDCPath, DenseDCTuning } from "./dense_dc.ts";
import type { DCSplitTuning, FusedBackwardOptions } from "./backward_types.ts";

/** The problem, options and defaults a backward is prepared for. */
export interface BackwardOptionsPlan {
  spec: Shape & { dtype: Dtype };
  opts: LceOptions;
  sort: boolean;
  tile: BackwardTile;
  eps: number | null;
  /** The 16-bit gradient dtype, or undefined for f32 gradients. */
  out16?: Dtype16;
  /** dC accumulated in place in 16 bits (d even), else an f32 scratch and a cast. */
  dCInPlace?: Dtype16;
  splits: number;
  slices: number;
  /** Tokens per row slice of the dE pass. */
  sliceRows: number;
  filterTile: GemmTile | null;
  /** The filter pass's generator (the FMA one, or FusedBackwardOptions.filterKernel's). */
  filterWgsl: (o: FilterPassKernelOptions) => string;
  /** Another kernel family's filter binds `scales` after the pass's own bindings. */
  filterScales: boolean;
  /** The forward's tile the map filter reads the map at (the map filter replaces the filter). */
  mapTile?: TileMapTile;
  /**
   * With it, the exact filter's refine of its mask, where recorded, and that filter's tile; `full`:
   * the generator of FusedBackwardOptions.mapRefineFilter, run over every tile.
   */
  mapRefine?: {
    mode: Exclude<MapRefineMode, "never">;
    filterTile: GemmTile;
    minTiles?: number;
    full?: (o: FilterPassKernelOptions) => string;
  };
  /** The order decision runs (sorting with the filter, decideOrder). */
  decide: boolean;
  /** With it, the sorted order's work only where its bound may win (sortBound). */
  sortBound: boolean;
  /** With the filter, splits cut the kept tiles of each token tile into equal counts. */
  balanced: boolean;
  /** dE gathered (then one split), with its tuning. */
  gather?: GatheredDETuning;
  /** The dC pass takes its vocab tiles most kept first (kernels/fused/dc_order.ts). */
  dCOrder: boolean;
  /** The dense dE path's mode, where it is recorded (kernels/fused/dense_de.ts). */
  denseDE?: Exclude<DenseDEMode, "never">;
  /** Its product tile, where given. */
  denseDETile?: GemmTile;
  /** Another kernel family's dense dE path, where given (FusedBackwardOptions.denseDEPath). */
  denseDEPath?: FusedBackwardOptions["denseDEPath"];
  /** The dense dC path's mode, where it is recorded (kernels/fused/dense_dc.ts). */
  denseDC?: Exclude<DenseDCMode, "never">;
  /** Its tiles, where given. */
  denseDCTuning?: DenseDCTuning;
  /** Another kernel family's dense dC path, where given (FusedBackwardOptions.denseDCPath). */
  denseDCPath?: DenseDCPath;
  /** The filter's sample where it may be recorded (both dense paths recorded; filter_sample.ts). */
  filterSample?: Exclude<DenseMode, "never">;
  /** The dense backward sharing G may be recorded (both dense paths recorded, the GEMM core's). */
  denseShared: boolean;
  /** The dC split's tuning, where it is recorded (with the dC order). */
  dCSplit?: DCSplitTuning;
  /** The dC pass's gradient product where given (FusedBackwardOptions.dCProduct), else the default. */
  dCProduct?: "staged" | "direct";
  /** FusedBackwardOptions.dCStage2d, its default resolved. */
  dCStage2d?: boolean;
}

/** Validates the options and fills in the defaults. */
export function planBackward(ctx: GpuContext, o: FusedBackwardOptions): BackwardOptionsPlan {
  const { spec } = o;
  const tile = o.tile ?? defaultBackwardTile(ctx);
  const shared = backwardSharedBytes(tile);
  if (shared > ctx.device.limits.maxComputeWorkgroupStorageSize) {
    throw new GpuError(
      "limits",
      `fused backward: tile ${JSON.stringify(tile)} needs ${shared} bytes of workgroup memory`,
    );
  }
  const eps = o.filterEps;
  if (eps !== null && !(eps > 0 && Number.isFinite(eps))) {
    throw new RangeError(`fused backward: filterEps must be > 0 or null, got ${eps}`);
  }
  const out16 = gradOut16(spec.dtype, o.gradDtype);
  const fits = (k: number) => dESlabsFitDC(spec, k, out16 !== undefined, ctx.maxBindingBytes);
  const gather = eps !== null && o.dEGather !== false && o.dESplits === undefined &&
      o.dERowSlices === undefined && tile.vocab % 4 === 0
    ? o.dEGather ?? {}
    : undefined;
  const splits = gather ? 1 : o.dESplits ??
    (eps !== null ? defaultFilteredDESplits(spec, tile, fits) : defaultDESplits(spec, tile));
  if (!Number.isInteger(splits) || splits < 1) {
    throw new RangeError(`fused backward: dESplits must be a positive integer, got ${splits}`);
  }
  const slices = o.dERowSlices ?? defaultDERowSlices(spec, tile, splits);
  const sliceRows = dESliceTile(tile, slices).tokens;
  if (o.mapFilter && (eps === null || o.sort)) {
    throw new RangeError("fused backward: the map filter needs the filter and no sorting");
  }
  const mapTile = o.mapFilter?.tile;
  const decide = o.sort && eps !== null && (o.decideOrder ?? true);
  const mapRefine = _mapRefine(ctx, o, mapTile !== undefined, tile);
  const denseDE = _denseMode(ctx, o.denseDE, o, o.denseDEPath !== undefined, gather !== undefined);
  const denseDC = _denseMode(ctx, o.denseDC, o, o.denseDCPath !== undefined, eps !== null);
  return {
    spec,
    opts: o.opts,
    sort: o.sort,
    tile,
    eps,
    out16,
    dCInPlace: out16 !== undefined && spec.d % 2 === 0 ? out16 : undefined,
    splits,
    slices,
    sliceRows,
    filterTile: eps !== null && !mapTile
      ? o.filterKernel?.tile ?? o.filterTile ?? defaultFilterTile(ctx, tile)
      : null,
    filterWgsl: o.filterKernel?.wgsl ?? filterPassWgsl,
    filterScales: o.filterKernel !== undefined,
    mapTile,
    mapRefine,
    decide,
    sortBound: decide && (o.sortBound ?? !ctx.report.isFallbackAdapter),
    balanced: eps !== null && splits > 1,
    gather,
    dCOrder: eps !== null && (o.dCOrder ?? true),
    denseDE,
    denseDETile: o.denseDETile,
    denseDEPath: o.denseDEPath,
    denseDC,
    denseDCTuning: o.denseDCTuning,
    denseDCPath: o.denseDCPath,
    // the plain filter's, or a refine's by another family's filter over every tile
    filterSample: eps !== null && (!mapTile || mapRefine?.full) && o.filterSample !== "never"
      ? o.filterSample ?? "auto"
      : undefined,
    denseShared: o.denseShared !== "never" && denseDE !== undefined && denseDC !== undefined &&
      o.denseDEPath === undefined && o.denseDCPath === undefined,
    dCSplit: _dCSplit(ctx, o, eps !== null && (o.dCOrder ?? true)),
    dCProduct: o.dCProduct,
    dCStage2d: o.dCStage2d ?? (ctx.report.engine === "deno" && !ctx.report.isFallbackAdapter),
  };
}

/** The map filter's refine where it is recorded: by default on hardware adapters only. */
function _mapRefine(ctx: GpuContext, o: FusedBackwardOptions, map: boolean, tile: BackwardTile) {
  const mode = o.mapRefine ?? (ctx.report.isFallbackAdapter ? "never" : "auto");
  if (!map || mode === "never") return undefined;
  const minTiles = o.mapRefineMinTiles;
  if (minTiles !== undefined && !(Number.isInteger(minTiles) && minTiles >= 0)) {
    throw new RangeError(
      `fused backward: mapRefineMinTiles must be a non-negative integer, got ${minTiles}`,
    );
  }
  const full = o.mapRefineFilter;
  const filterTile = full?.tile ?? o.filterTile ?? defaultFilterTile(ctx, tile);
  return { mode, filterTile, minTiles, full: full?.wgsl };
}

/** The dC split's tuning where it is recorded: with the dC order, by default on hardware only. */
function _dCSplit(ctx: GpuContext, o: FusedBackwardOptions, ordered: boolean) {
  const t = o.dCSplit ?? (ctx.report.isFallbackAdapter ? false : {});
  if (t === false || !ordered) return undefined;
  for (const [k, v] of Object.entries(t)) {
    if (v !== undefined && !(Number.isInteger(v) && v >= 1)) {
      throw new RangeError(`fused backward: dCSplit.${k} must be a positive integer, got ${v}`);
    }
  }
  return t;
}

/**
 * A dense path's mode (`given`; `path`: another kernel family's path is given; `applies`: the
 * gathered dE for the dense dE, the filter for the dense dC): where it applies, unless `never`,
 * the default with filterKernel but no other family's path (its dense products would be the FMA
 * core's) and on software adapters (a dispatch costs tens of microseconds there: with the gated
 * passes the CI gate's fused rows ran 0.85–0.91× as fast).
 */
function _denseMode(
  ctx: GpuContext,
  given: DenseMode | undefined,
  o: FusedBackwardOptions,
  path: boolean,
  applies: boolean,
) {
  const off = (o.filterKernel !== undefined && !path) || ctx.report.isFallbackAdapter;
  const mode = given ?? (off ? "never" : "auto");
  return applies && mode !== "never" ? mode : undefined;
}
