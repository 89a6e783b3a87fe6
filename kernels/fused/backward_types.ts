/**
 * The public types of the fused backward (kernels/fused/backward.ts): its options, the tensors of a
 * record and their check, the filter statistics and the prepared backward.
 * @module
 */
import type { DeviceTensor } from "../../gpu/tensor.ts";
import type { TrackedBuffer } from "../../gpu/context.ts";
import type { FilterPassKernelOptions } from "./filter.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import type { GemmTile } from "../gemm_codegen.ts";
import type { Dtype16 } from "../cast16.ts";
import type { GradDtype, WorkspaceLayout } from "./backward_plan.ts";
import type { BackwardTile } from "./backward_tiles.ts";
import type { MapRefineMode } from "./map_refine.ts";
import type { TileMapTile } from "./tile_map.ts";
import type { GatheredDETuning } from "./gathered_de.ts";
import type { DenseDEMode, DenseDEPath, PreparedDenseDE } from "./dense_de.ts";
import type { GpuContext } from "../../gpu/context.ts";
import type { DenseDCMode, DenseDCPath, DenseDCTuning } from "./dense_dc.ts";
import type { DenseMode } from "./dense_decision.ts";

/** Options of `prepareFusedBackward`. */
export interface FusedBackwardOptions {
  spec: Shape & { dtype: Dtype };
  opts: LceOptions;
  /** Filter threshold ε (see `defaultFilterEps`), or null for no gradient filter. */
  filterEps: number | null;
  /** Sort the vocabulary by mean logit. */
  sort: boolean;
  /**
   * With sorting and the filter: use the sorted order only where it keeps fewer tiles than the
   * vocabulary's own order (default true; see "Order decision" in kernels/fused/filter.ts);
   * false: always the sorted order (the paper's rule).
   */
  decideOrder?: boolean;
  /**
   * With the order decision: the sort waits for the filter, and Ē, the sort keys and the sorted
   * mask do their work only where a lower bound of the sorted order's kept tiles, from the
   * filter's entry bits, leaves it a chance to win (decided on the GPU per call, those passes
   * gated; the choice is the full decision's either way: kernels/fused/order_decision.ts).
   * Default on hardware adapters; off on software adapters, where the gated passes' dispatches
   * cost tens of microseconds each.
   */
  sortBound?: boolean;
  /** Tile (default `defaultBackwardTile`). */
  tile?: BackwardTile;
  /**
   * Splits S of the dE pass (n×d f32 partials, in dC's storage where it holds them;
   * default `defaultFilteredDESplits` with the filter, `defaultDESplits` without).
   */
  dESplits?: number;
  /** Row slices of the dE pass (default `defaultDERowSlices`). */
  dERowSlices?: number;
  /**
   * dE of the kept tiles as gathered dense products (kernels/fused/gathered_de.ts; default with the
   * filter unless dESplits or dERowSlices are given: those configure the per-tile pass, which
   * also runs where the gathered form does not apply), with its tuning.
   */
  dEGather?: false | GatheredDETuning;
  /**
   * With the filter: the dC pass takes its vocab tiles most kept token tiles first (default true;
   * kernels/fused/dc_order.ts), else in the vocabulary's (sorted) order.
   */
  dCOrder?: boolean;
  /** GEMM tile of the filter pass (default `defaultFilterTile`). */
  filterTile?: GemmTile;
  /**
   * Dtype of the returned gradients (default "f32"): "input" returns them in the input dtype
   * when that is bf16/f16 (dC accumulated in place in 16 bits where d is even, dE in f32 inside
   * dC's storage and cast at the end; see the module doc), f32 otherwise.
   */
  gradDtype?: GradDtype;
  /**
   * Replace the `filter` pass by the `map filter` pass (kernels/fused/tile_map.ts): the mask is
   * set from the forward's tile map (kept at this forward tile; record then needs `tileMap`)
   * instead of recomputing every tile. Needs the filter and the vocabulary's own order (no sort).
   */
  mapFilter?: { tile: TileMapTile };
  /**
   * With the map filter: refine its mask by the exact filter over the tiles it keeps where it
   * keeps at most 75% of them and at least `mapRefineMinTiles` (`auto`), always, or never
   * (kernels/fused/map_refine.ts). Default: `auto` on hardware adapters, `never` on software ones
   * (a filter pass more).
   */
  mapRefine?: MapRefineMode;
  /** The least kept count of the map at which `auto` refines (default MAP_REFINE_MIN_TILES, 256). */
  mapRefineMinTiles?: number;
  /**
   * The filter pass of another kernel family (the tensor-core one, kernels/tc/tc_filter.ts): its
   * WGSL from the filter's own options, with the same parameters and bindings (and
   * a `scales` binding after them: FilterPassKernelOptions.scales, FusedBackwardArgs.filterScales),
   * and its tile (bm × bn: the grid).
   */
  filterKernel?: { tile: GemmTile; wgsl(o: FilterPassKernelOptions): string };
  /**
   * With the map's refine: the refine as this filter pass (a filterKernel, e.g. the tensor-core
   * one) over every tile in the own order, the mask and the count cleared before it, instead of
   * the FMA filter over the tiles the map keeps (kernels/fused/map_refine.ts). Its `scales`
   * binding is FusedBackwardArgs.filterScales.
   */
  mapRefineFilter?: { tile: GemmTile; wgsl(o: FilterPassKernelOptions): string };
  /**
   * With the filter and the gathered dE: dE's tiled part as dense products where the filter keeps
   * most tiles, decided on the GPU per call (`auto`), always, or `never` (no dense path recorded;
   * kernels/fused/dense_de.ts). Default `auto` on hardware adapters; `never` with `filterKernel`
   * but no `denseDEPath` (its dense products would be the FMA core's) and on software adapters,
   * where a dispatch costs tens of microseconds and the gated passes would slow small backwards.
   */
  denseDE?: DenseDEMode;
  /**
   * Where both dense paths are recorded and the filter pass runs (or the tile map's refine by
   * another family's filter over every tile, `mapRefineFilter`): the filter over a sample of the
   * token tiles first, the rest skipped where the sample keeps enough tiles for both dense paths
   * (`auto`), always skipped (tests), or `never` (the whole filter always; no sample pass).
   * Default `auto` (kernels/fused/filter_sample.ts).
   */
  filterSample?: DenseMode;
  /**
   * Where both dense paths are the GEMM core's (no `denseDEPath` or `denseDCPath`) and both are
   * taken: one G a vocabulary chunk for both products (`auto`, kernels/fused/dense_shared.ts), or
   * `never` (each path recomputes its own). Default `auto`.
   */
  denseShared?: "auto" | "never";
  /** The dense dE path's product tile (tuning; default `denseDETile` of dense_de.ts). */
  denseDETile?: GemmTile;
  /**
   * The dense dE path of another kernel family (the tensor-core one, kernels/tc/tc_dense_de.ts)
   * instead of the GEMM core's: with it `denseDE` defaults to `auto` on hardware adapters even
   * with `filterKernel`.
   */
  denseDEPath?: (ctx: GpuContext, o: DenseDEPath) => Promise<PreparedDenseDE>;
  /**
   * With the filter: dC as dense products where the filter keeps most tiles, decided on the GPU
   * per call (`auto`), always, or `never` (kernels/fused/dense_dc.ts). Recorded only where E, C
   * and dC each fit one binding and the workspace leaves room for its tail. Default as
   * {@link denseDE}'s.
   */
  denseDC?: DenseDCMode;
  /** The dense dC path's tiles (tuning; defaults in dense_dc.ts). */
  denseDCTuning?: DenseDCTuning;
  /** The dense dC's tail at most this many rows (tests: several chunks at small shapes). */
  denseDCTailRows?: number;
  /**
   * The dense dC path of another kernel family (the tensor-core one, kernels/tc/tc_dense_dc.ts)
   * instead of the GEMM core's, its chunks planned for its G's bytes: with it `denseDC` defaults
   * to `auto` on hardware adapters even with `filterKernel`.
   */
  denseDCPath?: DenseDCPath;
  /**
   * With the filter and the dC order: the dC pass's long walks cut into segments of about
   * max(lMin, ⌈kept tiles / slots⌉) kept token tiles, each its own workgroup, the partials in the
   * rows of vocab tiles no token tile keeps (kernels/fused/dc_split.ts), or `false`. Default on
   * hardware adapters with the defaults of dc_split.ts; `false` on software adapters, where the
   * two passes' dispatches would cost more than the walks they cut.
   */
  dCSplit?: DCSplitTuning | false;
  /**
   * The dC pass's gradient product: `staged` (the GEMM generator's mainloop, E and P staged a
   * K-step at a time) or `direct` (E read from storage, P from where the epilogue left it, no
   * barrier: kernels/fused/dc_product.ts). The same dC bit for bit. Default: `direct` where E is
   * read 16 bytes at a time (bf16, d a multiple of 8), `staged` otherwise (its 8 scalar loads a
   * token made the pass 22% slower on lavapipe in f32).
   */
  dCProduct?: "staged" | "direct";
  /**
   * The direct dC pass's logits product on [k][row] staging (GemmTile.stage2d), the same dC bit
   * for bit. Default: on hardware adapters under Deno's WebGPU, where it ran the dC pass 2.5–3.2%
   * faster on the H200; off under Dawn, where it did not (docs/performance.md).
   */
  dCStage2d?: boolean;
}

/** The dC split's tuning (kernels/fused/dc_split.ts): both default there. */
export interface DCSplitTuning {
  /** Workgroups the segments are sized for. */
  slots?: number;
  /** The shortest segment, in kept token tiles. */
  lMin?: number;
}

/** Tensors of {@link PreparedFusedBackward.record}. */
export interface FusedBackwardArgs {
  e: DeviceTensor;
  c: DeviceTensor;
  /** n×1 i32, one shard. */
  targets: DeviceTensor;
  /** Log-sum-exp per token from the forward (n×1 f32, one shard). */
  lse: DeviceTensor;
  /** Per-token weights w_n (n×1 f32, one shard; see kernels/row_weights.ts). */
  w: DeviceTensor;
  /** Count of non-ignored tokens (1×1 f32): needed by the sort (Ē). */
  count: DeviceTensor;
  /** The forward's tile map (with {@link FusedBackwardOptions.mapFilter} only). */
  tileMap?: DeviceTensor;
  /** Σ_v C_v from the forward (d×1 f32; FusedForwardArgs.colsum): read, not summed again. */
  colsum?: DeviceTensor;
  /** The `scales` binding of FusedBackwardOptions.filterKernel's filter pass. */
  filterScales?: TrackedBuffer;
}

/** Filter statistics of the last recorded backward. */
export interface FusedBackwardStats {
  tilesSkipped: number;
  tilesTotal: number;
  /**
   * 1 where the last record's dE took the dense path, 0 where the kept tiles' (with one that
   * applied: none where its chunks did not fit, as denseDC).
   */
  denseDE?: number;
  /** 1 where the last record's dC took the dense path, 0 where the kept tiles' (with one). */
  denseDC?: number;
  /**
   * Where the last record recorded the dense backward sharing G (FusedBackwardOptions.denseShared):
   * 1 where both gradients came from it (kernels/fused/dense_shared.ts; denseDE and denseDC are
   * then 1), 0 where not.
   */
  denseShared?: number;
  /** 1 where the last record refined the tile map's mask, 0 where not (with a refine). */
  mapRefined?: number;
  /**
   * The tiles the tile map's mask kept before its refine in the last record (with a refine):
   * tilesTotal − tilesSkipped where it was not refined, at least that where it was.
   */
  mapKeptTiles?: number;
  /** The extra dC walk segments of the last record, where the dC split is recorded. */
  dCSplits?: number;
  /**
   * Where the order decision's bound is recorded (FusedBackwardOptions.sortBound): 1 where it
   * skipped the sort and the sorted mask in the last record, 0 where they ran.
   */
  sortSkipped?: number;
  /**
   * Where the last record recorded the filter's sample (FusedBackwardOptions.filterSample; both
   * dense paths applied): 1 where its filter stopped after its sample, both gradients dense;
   * tilesSkipped is then the sample's estimate (kernels/fused/filter_sample.ts). 0 where the
   * whole filter ran.
   */
  filterSampled?: number;
}

/** A compiled fused backward. */
export interface PreparedFusedBackward {
  readonly tile: BackwardTile;
  /** GEMM tile of the filter pass (null without filter). */
  readonly filterTile: GemmTile | null;
  readonly dESplits: number;
  readonly dERowSlices: number;
  readonly filterEps: number | null;
  /** Dtype of the returned gradients. */
  readonly gradDtype: "f32" | Dtype16;
  /**
   * Upper bound on the roundings of one element to the 16-bit output in the last record (0 with
   * f32 output): dE 1 (the final cast); dC 1 + the walked token tiles when accumulated in place
   * (d even; every kept tile is one read-modify-write), 1 with the f32 scratch (d odd). Where
   * {@link stats} finds that dC took the dense path it sets dC to that path's: 2 in place (G in
   * 16 bits, then the output), 1 with the f32 scratch.
   */
  readonly roundings: { dE: number; dC: number };
  /**
   * Rounds the gathered dE recorded in the last record (the worst case), 0 where the per-tile
   * pass ran.
   */
  readonly lastDERounds: number;
  /**
   * Vocabulary rows a chunk of the dense dE path held in the last record (0 where that path was
   * not recorded: kernels/fused/dense_de.ts).
   */
  readonly lastDenseDEChunkRows: number;
  /** Chunks of the dense dC path in the last record (0 where it was not recorded). */
  readonly lastDenseDCChunks: number;
  /** Of those, the rounds that held token tiles (reads the plan on the GPU). */
  usedDERounds(): Promise<number>;
  /**
   * Records the backward; returns new dE (n×d) and dC (v×d), valid after submission: f32, or in
   * the input dtype with gradDtype "input" ({@link PreparedFusedBackward.gradDtype}).
   */
  record(rec: Recorder, a: FusedBackwardArgs): { dE: DeviceTensor; dC: DeviceTensor };
  /** Tiles skipped by the filter in the last record (reads a counter on the GPU). */
  stats(): Promise<FusedBackwardStats>;
  /** Frees the buffers made at prepare time (the kept-tile counter, the gathered dE's plan). */
  release(): void;
  /**
   * Bytes one record allocates besides dE and dC (uniform blocks aside), exactly, for the shards
   * of `layout` (default: as createTensor makes them on this context).
   */
  workspaceBytes(layout?: WorkspaceLayout): number;
}

/**
 * Checks a record's tensors against the prepared problem (`mapFilter`: the backward reads the
 * forward's tile map).
 */
export function checkBackwardArgs(
  spec: Shape & { dtype: Dtype },
  mapFilter: boolean,
  a: FusedBackwardArgs,
): void {
  const { e, c } = a;
  const { n, v, d } = spec;
  if (
    e.rows !== n || e.cols !== d || c.rows !== v || c.cols !== d || e.dtype !== spec.dtype ||
    c.dtype !== spec.dtype
  ) {
    throw new RangeError(
      `fused backward: E ${e.rows}×${e.cols} ${e.dtype}, C ${c.rows}×${c.cols} ${c.dtype}, prepared for ${
        JSON.stringify(spec)
      }`,
    );
  }
  for (const [name, t] of [["targets", a.targets], ["lse", a.lse], ["w", a.w]] as const) {
    if (t.rows !== n || t.shards.length !== 1) {
      throw new RangeError(`fused backward: ${name} must be n×1 in one shard`);
    }
  }
  if (mapFilter && !a.tileMap) {
    throw new RangeError("fused backward: the map filter needs the forward's tile map");
  }
}
