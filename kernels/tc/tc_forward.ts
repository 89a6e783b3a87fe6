/**
 * The fused forward on tensor cores: the FMA fused forward (kernels/fused/forward.ts) with its
 * tiles pass replaced by tc_forward_wgsl.ts. The rest is the FMA forward's: the same split
 * workspace of log-sum-exp partials, the same merge pass (kernels/fused/forward_merge.ts) and
 * column sum (kernels/column_sum.ts) for the smoothing term, the same tile map layout
 * (kernels/fused/tile_map.ts) at this forward's tile. Before the tiles pass, the scales of E and
 * C (tc_scale.ts) are computed into the caller's scale buffer, which the backward reads again.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor, rowsPerBinding, shardRows } from "../../gpu/tensor.ts";
import { GpuError } from "../../core/errors.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import { vecWidth } from "../wgsl_common.ts";
import { GPU_SMS } from "../gemm_tiles.ts";
import { columnSumPlan, prepareColumnSum, type PreparedColumnSum } from "../column_sum.ts";
import { splitPlan } from "../fused/forward.ts";
import { splitGridParams } from "../fused/forward_tiles_record.ts";
import {
  fusedMergeSignature,
  fusedMergeWgsl,
  recordMergePass,
  type SmoothingPlan,
} from "../fused/forward_merge.ts";
import { compileKernel, type KernelOf } from "../../gpu/signature.ts";
import { checkTileMap, type TileMapLayout, type TileMapTile } from "../fused/tile_map.ts";
import { type TcMode, tcSharedBytes } from "./tc_codegen.ts";
import { tcEpilogueShape, tcForwardSignature, tcForwardWgsl } from "./tc_forward_wgsl.ts";
import { tcResidency } from "./tc_matmul.ts";
import { type PreparedTcScales, prepareTcScales, type TcScaleBuffers } from "./tc_scale.ts";
import {
  TC_TILE_128X256_K32,
  tcSupport,
  type TcTile,
  tcTileName,
  tileCols,
  tileRows,
  tileSubgroups,
} from "./tc_tiles.ts";

/**
 * The forward's tile on hardware: 128×128, 4 subgroups of 4×4 matrices, K-step 32, one copy, one
 * epilogue scratch matrix a subgroup (TcTile.singleScratch): 24 KiB of workgroup memory, under
 * the limit past which an H200 runs these kernels a third slower. The fastest of
 * TC_FORWARD_BENCH_TILES at the paper's shape on an H200 with Dawn's robustness: 47.4 ms against
 * the 128×256 tile's 48.4, and keeping the tile map 45.1 against 48.7 (docs/tensor_cores.md).
 */
export const TC_FORWARD_TILE: TcTile = {
  sgRows: 2,
  sgCols: 2,
  mt: 4,
  nt: 4,
  bk: 32,
  singleScratch: true,
};
/**
 * The forward's tile on hardware where it sums z itself (softcap with smoothing): 128×256, 8
 * subgroups of 4×4 matrices, K-step 32, one copy. The 128×128 tile would need 26 KiB there, past
 * the limit, where it ran 69 ms against this one's 48.4 (without Σz, on an H200).
 */
export const TC_FORWARD_TILE_SUMZ: TcTile = TC_TILE_128X256_K32;
/** The emulation's tile (tests on software adapters: 32 KiB of workgroup memory). */
export const TC_FORWARD_TILE_EMULATED: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };

/** Options of {@link prepareTcForward}. */
export interface TcForwardOptions {
  spec: Shape & { dtype: Dtype };
  opts: LceOptions;
  tile?: TcTile;
  /** Keep the tile map (record then needs `tileMax`). */
  tileMax?: boolean;
  /** Vocab splits (default {@link tcVocabSplits}). */
  vocabSplits?: number;
  mode?: TcMode;
}

/** Tensors of a record. */
export interface TcForwardArgs {
  e: DeviceTensor;
  c: DeviceTensor;
  targets: DeviceTensor;
  lse: DeviceTensor;
  lossRows: DeviceTensor;
  /** Where E's and C's scales go (slots 0 and 1), read again by the backward. */
  scales: TcScaleBuffers;
  tileMax?: DeviceTensor;
  /** Σ_v C_v kept for the backward (identity smoothing only), as in the FMA forward. */
  colsum?: DeviceTensor;
}

/** A compiled tensor-core forward. */
export interface PreparedTcForward {
  /** The tile, as the tile map and the backward's map filter see it. */
  readonly tile: TileMapTile;
  readonly tcTile: TcTile;
  readonly smoothing: SmoothingPlan;
  readonly vocabSplits: number;
  /** The scale passes (the backward computes G's scales with them too). */
  readonly scales: PreparedTcScales;
  record(rec: Recorder, a: TcForwardArgs): void;
  /** Workspace bytes one record allocates and releases (C sharded as createTensor shards it). */
  workspaceBytes(): number;
}

/**
 * Vocab splits: the fewest whose workgroups (token blocks × splits) run the tiles in waves of
 * the GPU's slots within 1% of the best, with the split workspace (n·S·4 bytes) at most 1 MiB.
 */
export function tcVocabSplits(
  spec: Shape,
  t: TcTile,
  o: { software: boolean; residency: number },
): number {
  const blocks = Math.ceil(spec.n / tileRows(t)), tiles = Math.ceil(spec.v / tileCols(t));
  const most = Math.max(1, Math.min(tiles, Math.floor((1 << 20) / (spec.n * 4))));
  if (o.software) return Math.min(most, Math.max(1, Math.ceil(16 / blocks)));
  const slots = GPU_SMS * o.residency;
  const cost = (s: number) => Math.ceil((blocks * s) / slots) * Math.ceil(tiles / s);
  let best = Infinity;
  for (let s = 1; s <= most; s++) best = Math.min(best, cost(s));
  let s = 1;
  while (cost(s) > best * 1.01) s++;
  return s;
}

/** The mode, subgroup size, tile, smoothing and workgroup memory of a forward; throws where it cannot run. */
function _plan(ctx: GpuContext, o: TcForwardOptions) {
  const mode = o.mode ?? "native";
  const sup = tcSupport(ctx);
  if (mode === "native" && sup.reason) throw new GpuError("limits", `tc forward: ${sup.reason}`);
  const sgSize = mode === "native" ? sup.sgSize : 32;
  const smoothing: SmoothingPlan = !o.opts.smoothing
    ? "none"
    : o.opts.capped
    ? "in-kernel"
    : "identity";
  const native = smoothing === "in-kernel" ? TC_FORWARD_TILE_SUMZ : TC_FORWARD_TILE;
  const tile = o.tile ?? (mode === "native" ? native : TC_FORWARD_TILE_EMULATED);
  const ep = tcEpilogueShape(tile, sgSize);
  const shared = tcSharedBytes(tile, { aContig: "k", bContig: "k" }) +
    4 * Math.max(ep.scratch, tileRows(tile) * ep.parts * 3) +
    (mode === "emulated" ? 4 * tileSubgroups(tile) * ep.half * tile.mt * tile.nt : 0);
  const limit = ctx.device.limits.maxComputeWorkgroupStorageSize;
  if (shared > limit) {
    const t = tcTileName(tile);
    throw new GpuError(
      "limits",
      `tc forward: tile ${t} needs ${shared} bytes of workgroup memory (limit ${limit})`,
    );
  }
  return { mode, sgSize, tile, smoothing, sumZ: smoothing === "in-kernel", shared };
}

/** Compiles the tensor-core forward for a problem. */
export async function prepareTcForward(
  ctx: GpuContext,
  o: TcForwardOptions,
): Promise<PreparedTcForward> {
  const { spec, opts } = o;
  const { mode, sgSize, tile, smoothing, sumZ, shared } = _plan(ctx, o);
  const vecLoads = spec.d % vecWidth(spec.dtype) === 0;
  const ko = {
    tile,
    sgSize,
    dtype: spec.dtype,
    softcap: opts.softcap,
    sumZ,
    vecLoads,
    tileMax: o.tileMax ?? false,
    mode,
  };
  const tiles = await compileKernel(
    ctx,
    tcForwardSignature(ko),
    tcForwardWgsl(ko),
    "tc_forward_tiles",
  );
  const mo = { dtype: spec.dtype, opts, v: spec.v, smoothing, stats: false };
  const merge = await compileKernel(
    ctx,
    fusedMergeSignature(mo),
    fusedMergeWgsl(mo),
    "fused_forward_merge",
  );
  const colsum: PreparedColumnSum | undefined = smoothing === "identity"
    ? await prepareColumnSum(ctx, { dtype: spec.dtype })
    : undefined;
  const scales = await prepareTcScales(ctx);
  const splits = o.vocabSplits ??
    tcVocabSplits(spec, tile, {
      software: ctx.report.isFallbackAdapter || mode === "emulated",
      residency: tcResidency(tile, sgSize, shared),
    });
  const bm = tileRows(tile), bn = tileCols(tile);
  const cRowsOf = () => shardRows(spec.v, rowsPerBinding(ctx, spec.dtype, spec.d));
  return {
    tile: { bm, bn },
    tcTile: tile,
    smoothing,
    vocabSplits: splits,
    scales,
    workspaceBytes() {
      const cRows = cRowsOf();
      const sTotal = splitPlan(cRows, bn, splits).total;
      let bytes = Math.max(4, spec.n * sTotal * 4);
      if (sumZ) bytes += Math.max(4, spec.n * sTotal * 4);
      if (colsum) {
        bytes += Math.ceil(spec.d * 4 / 16) * 16 +
          columnSumPlan(cRows, spec.d, ctx.maxBindingBytes).workspaceBytes;
      }
      return bytes;
    },
    record(rec, a) {
      const { e, c, targets } = a;
      if (e.rows !== spec.n || c.rows !== spec.v || e.cols !== spec.d || e.dtype !== spec.dtype) {
        throw new RangeError(
          `tc forward: E ${e.rows}×${e.cols} ${e.dtype}, C ${c.rows}, prepared for ${
            JSON.stringify(spec)
          }`,
        );
      }
      const map = a.tileMax
        ? { buffer: a.tileMax.shards[0].buffer, layout: checkTileMap(a.tileMax, e, c, { bm, bn }) }
        : undefined;
      if (map) rec.clear(map.buffer);
      scales.record(rec, { tensors: [e, c], first: 0, into: a.scales });
      const plan = splitPlan(c.shards.map((s) => s.rows), bn, splits);
      const sTotal = plan.total;
      const ws = ctx.createBuffer({
        size: spec.n * sTotal * 4,
        role: "workspace",
        label: "lse partials",
      });
      const wsz = sumZ
        ? ctx.createBuffer({ size: spec.n * sTotal * 4, role: "workspace", label: "Σz partials" })
        : undefined;
      let cs: DeviceTensor | undefined;
      if (colsum) {
        cs = a.colsum ??
          createTensor(ctx, {
            dtype: "f32",
            rows: spec.d,
            cols: 1,
            role: "workspace",
            label: "colsum",
          });
        colsum.record(rec, { c, out: cs });
      }
      _recordTiles(rec, { kernel: tiles, a, plan, bm, map, ws, wsz });
      recordMergePass(rec, {
        kernel: merge,
        e,
        targets,
        colsum: cs,
        lse: a.lse,
        lossRows: a.lossRows,
        ws,
        wsz,
        sTotal,
      });
      rec.release(ws, wsz, a.colsum ? undefined : cs?.shards[0].buffer);
    },
  };
}

/** Records the tiles pass: one dispatch of splits × token blocks per (E shard, C shard). */
function _recordTiles(
  rec: Recorder,
  o: {
    kernel: KernelOf<ReturnType<typeof tcForwardSignature>>;
    a: TcForwardArgs;
    plan: ReturnType<typeof splitPlan>;
    bm: number;
    map?: { buffer: TrackedBuffer; layout: TileMapLayout };
    ws: TrackedBuffer;
    wsz?: TrackedBuffer;
  },
): void {
  const { a, plan, map } = o, { e, c } = a;
  const zt = a.lossRows.shards[0].buffer;
  rec.pass("tc forward tiles", (p) => {
    for (const es of e.shards) {
      const blocks = Math.ceil(es.rows / o.bm);
      c.shards.forEach((cshard, i) => {
        const sp = plan.shards[i];
        const params = splitGridParams({ e, es, cs: cshard, i, sp, sTotal: plan.total, map });
        const bg = o.kernel.bind(rec, params, {
          e: es.buffer,
          c: cshard.buffer,
          targets: a.targets.shards[0].buffer,
          ws: o.ws,
          wsz: o.wsz,
          zt,
          tmap: map?.buffer,
          scales: a.scales.scales,
        });
        p.dispatch(o.kernel.pipeline, bg, sp.splits, blocks);
      });
    }
  });
}
