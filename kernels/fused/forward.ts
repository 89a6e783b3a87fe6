/**
 * The fused forward of the label-smoothed linear cross-entropy (the paper's "Ours" forward):
 * per token LSE_n and the loss row LSE_n − (1−β)·z_{n,t_n} − (β/|V|)·Σ_v z_nv, without ever holding
 * the n×|V| logits. Two passes:
 *
 * - `fused tiles` (kernels/fused/forward_tiles.ts): a grid of (vocab split S) × (token block);
 *   each workgroup walks its range of vocab tiles, computing logit tiles in registers and one
 *   partial log-sum-exp per row and split (and the target logit, from the tile that holds it).
 *   On hardware adapters under wgpu, with one E and one C binding, the *stream split* instead
 *   (kernels/fused/forward_stream.ts): W workgroups share the tiles equally, so the pass ends
 *   in whole waves whatever the token blocks; each row gets a partial per piece.
 * - `fused merge` (kernels/fused/forward_merge.ts): per token, the S partials merged in split
 *   order, lse and the loss row written.
 *
 * Smoothing term Σ_v z_nv: with `identity` (default, no softcap) it is E_n·colsum(C), a per-token
 * dot product in the merge pass with colsum(C) from kernels/column_sum.ts; with softcap (where the
 * sum does not factor) or `in-kernel`, the tiles sum their capped logits and the merge pass adds
 * the S split partials in order. With β = 0 the term is not computed at all.
 *
 * Tile map (option `tileMax`, the `fused-tilemap` row): each tile also leaves its largest capped
 * logit in a map of one u32 per (token block, vocab tile), reduced over the tile's rows with a
 * workgroup integer atomicMax (order independent: the one atomic of the forward, so the
 * determinism below holds); the backward's map filter reads the map instead of recomputing the
 * tiles (kernels/fused/tile_map.ts).
 *
 * Determinism: no float atomics anywhere. Every value is produced by a fixed sequence of f32 operations:
 * a row's running pair follows its tiles in increasing vocab order, the partials of the threads
 * sharing a row are merged in thread order, splits in increasing vocab order, and sums (Σz, the
 * dot product) in fixed trees or orders. The grid's scheduling decides only when each of these
 * runs, never the order of the operations, so two runs give bitwise-identical results.
 *
 * Sharding: E and C may be split by rows; the tiles pass is dispatched once per (E shard, C shard)
 * with the shard's first token and first vocab index in a uniform block. Each C shard gets its own
 * share of the S splits (at least one), so a tile never straddles two bindings, and the global
 * split index orders the workspace. Ragged edges (any n, v, d ≥ 1) are masked in the kernel.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor, rowsPerBinding, shardRows } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import {
  type GemmTile,
  TILE_HW_WIDE,
  TILE_SMALL,
  validateTile,
  vecLoadsFit,
} from "../gemm_codegen.ts";
import { columnSumPlan, prepareColumnSum, type PreparedColumnSum } from "../column_sum.ts";
import {
  defaultRoundRows,
  fusedTilesSignature,
  fusedTilesWgsl,
  fusedTilesWorkgroupBytes,
  type TileState,
} from "./forward_tiles.ts";
import { recordTilesPass } from "./forward_tiles_record.ts";
import {
  fusedMergeSignature,
  fusedMergeWgsl,
  recordMergePass,
  type SmoothingPlan,
} from "./forward_merge.ts";
import { checkTileMap, forwardMapTile, type TileMapTile } from "./tile_map.ts";
import { compileKernel, compileKernelNow } from "../../gpu/signature.ts";
import { type StreamPlan, streamPlan } from "./forward_stream.ts";
import { workgroupSlots } from "../gemm_tiles.ts";

/** Shape and storage dtype of the problem. */
export interface FusedForwardSpec extends Shape {
  dtype: Dtype;
}

/**
 * How Σ_v z_nv is obtained: `identity` as E_n·colsum(C) (only without softcap; with softcap the
 * tiles sum instead), `in-kernel` by summing the logits inside the tiles.
 */
export type SmoothingMode = "identity" | "in-kernel";

/** Options of {@link prepareFusedForward}. */
export interface FusedForwardOptions {
  spec: FusedForwardSpec;
  opts: LceOptions;
  /** GEMM tile (default {@link defaultFusedTile}: 128×256 on hardware, 64×64 on software). */
  tile?: GemmTile;
  /** Smoothing term variant (default `identity`). */
  smoothing?: SmoothingMode;
  /** Vocab splits S of the split grid (default: {@link defaultVocabSplits}). */
  vocabSplits?: number;
  /**
   * Workgroups of the stream split (kernels/fused/forward_stream.ts; `tile` state), 0 for the
   * split grid (default: {@link defaultStreamWorkgroups}). Taken where E and C each fit one
   * binding; otherwise the split grid runs.
   */
  streamWorkgroups?: number;
  /** Compile the per-token calibration statistics (required to pass `tokenStats` to record). */
  tokenStats?: boolean;
  /** Where the tiles keep their running row state (default `tile`). */
  tileState?: TileState;
  /** `tile` state: rows of a thread reduced per round (default: defaultRoundRows). */
  roundRows?: number;
  /** Keep the tile map (kernels/fused/tile_map.ts; record then needs `tileMax`). */
  tileMax?: boolean;
}

/** Tensors of {@link PreparedFusedForward.record}. */
export interface FusedForwardArgs {
  /** n×d and v×d in the prepared dtype, sharded by rows as they are. */
  e: DeviceTensor;
  c: DeviceTensor;
  /** n×1 i32, one shard. */
  targets: DeviceTensor;
  /** Outputs, n×1 f32, one shard each: log-sum-exp and loss row (0 for ignored rows). */
  lse: DeviceTensor;
  lossRows: DeviceTensor;
  /**
   * Optional n×4 f32 output, one shard: max logit, argmax (first index of the max, as an exact
   * f32 integer), Σ_v p_nv·z_nv, and the entropy LSE − Σ p·z (nats).
   */
  tokenStats?: DeviceTensor;
  /**
   * The tile map (kernels/fused/tile_map.ts, createTileMap: one u32 per forward tile), written
   * with each tile's largest capped logit; required when prepared with `tileMax`.
   */
  tileMax?: DeviceTensor;
  /**
   * Optional d×1 f32 output, one shard: Σ_v C_v, kept for the backward's smoothing term instead of
   * a workspace released after the merge. Written only where the forward computes it (`smoothing`
   * `identity`); left alone otherwise.
   */
  colsum?: DeviceTensor;
}

/** A compiled fused forward. */
export interface PreparedFusedForward {
  /** Tile in use. */
  readonly tile: GemmTile;
  /** The tile map's entries ({@link forwardMapTile}: 128×128 entries for the 128×256 tile). */
  readonly mapTile: TileMapTile;
  /** How the smoothing term is computed (`none` when β = 0). */
  readonly smoothing: SmoothingPlan;
  /** Requested vocab splits (each C shard gets a share; see {@link splitPlan}). */
  readonly vocabSplits: number;
  /** The stream split's workgroups (0: the split grid). */
  readonly streamWorkgroups: number;
  /** `tile` state: rows of a thread reduced per round (undefined in `registers` state). */
  readonly roundRows: number | undefined;
  /** Records the passes; workspace buffers are released after the submission. */
  record(rec: Recorder, a: FusedForwardArgs): void;
  /**
   * Workspace bytes that record allocates (and releases) for a problem of `spec` (default: the
   * prepared one), with C sharded as createTensor shards it by default on this context unless
   * `cShardRows` gives the shards, and with the token stats when `tokenStats` (default: whether
   * they were prepared).
   */
  workspaceBytes(
    spec?: FusedForwardSpec,
    o?: { cShardRows?: number[]; tokenStats?: boolean },
  ): number;
}

/** Vocab splits of one C shard. */
export interface ShardSplits {
  /** Vocab tiles in the shard. */
  tiles: number;
  /** Splits (workgroup columns) of the shard, 1 ≤ splits ≤ tiles. */
  splits: number;
  /** Global index of the shard's first split. */
  base: number;
}

/**
 * Splits per C shard: `s` shared out in proportion to each shard's tiles, at least one and at
 * most one per tile. Returns the per-shard plan and the total S (workspace columns).
 */
export function splitPlan(
  shardRows: number[],
  bn: number,
  s: number,
): { shards: ShardSplits[]; total: number } {
  const tiles = shardRows.map((r) => Math.ceil(r / bn));
  const all = tiles.reduce((a, b) => a + b, 0);
  let base = 0;
  const shards = tiles.map((t) => {
    const splits = Math.max(1, Math.min(t, Math.round((s * t) / all)));
    const out = { tiles: t, splits, base };
    base += splits;
    return out;
  });
  return { shards, total: base };
}

/**
 * Workgroups the tiles pass aims for on a hardware adapter: about two per SM of a 132-SM GPU (on an
 * H200 at the paper's shape S = 4, 8, 16 ran within 1%, S = 4 fastest; more splits cost more merges).
 */
export const TARGET_WORKGROUPS = 256;
/** Largest split workspace (max, sumexp pairs) the default S allows. */
export const SPLIT_WORKSPACE_BUDGET = 1 << 20;

/**
 * The least share of the split grid's time, by waves, that the default stream split must save.
 * On an H200 the stream split cost about 2% of its own beside the waves it saves: at the paper's
 * shape (a 3.0% saving by waves) the tiles pass ran 1.0% faster, 212.2 → 210.0 ms, and at `llm`
 * (4096 × 24,576, no saving by waves) 1.5% slower (docs/performance.md).
 */
export const STREAM_MIN_SAVING = 0.025;

/**
 * Whether the stream split of one workgroup a slot saves at least {@link STREAM_MIN_SAVING} of
 * the split grid's tile-times: the grid runs ⌈blocks·S/slots⌉ waves of ⌈tiles/S⌉ tiles, the stream
 * ⌈blocks·tiles/slots⌉ tiles a workgroup.
 */
export function streamSaves(o: { blocks: number; tiles: number; splits: number; slots: number }) {
  const grid = Math.ceil((o.blocks * o.splits) / o.slots) * Math.ceil(o.tiles / o.splits);
  return Math.ceil((o.blocks * o.tiles) / o.slots) <= (1 - STREAM_MIN_SAVING) * grid;
}

/**
 * The default stream split: one workgroup a slot of the tile (gemm_tiles.ts `workgroupSlots`; at
 * the paper's shape 132, 264, 396 and 528 ran within 0.6%, 132 fastest) on hardware adapters
 * under Deno's own WebGPU, where it saves time by {@link streamSaves} against the default split
 * grid and its partials (n·slots·8 bytes) fit {@link SPLIT_WORKSPACE_BUDGET}; else 0, the split
 * grid. Always the grid on software adapters, and on Dawn: there the same kernels ran the
 * forward 0.8% slower at the paper's shape (1.5% with Dawn's robustness off; the tile map's
 * forward 1.9% faster and 1.2% slower), where wgpu ran it 1.0% faster; no faster on Dawn in
 * three runs of four (docs/performance.md).
 */
export function defaultStreamWorkgroups(ctx: GpuContext, spec: Shape, tile: GemmTile): number {
  if (ctx.report.isFallbackAdapter || ctx.report.engine !== "deno") return 0;
  const slots = workgroupSlots(tile);
  const blocks = Math.ceil(spec.n / tile.bm), tiles = Math.ceil(spec.v / tile.bn);
  const splits = defaultVocabSplits(ctx, spec, tile);
  if (!streamSaves({ blocks, tiles, splits, slots })) return 0;
  const plan = streamPlan(blocks, tiles, slots);
  return plan && spec.n * plan.slots * 8 <= SPLIT_WORKSPACE_BUDGET ? slots : 0;
}

/**
 * The default S: enough splits for about {@link TARGET_WORKGROUPS} workgroups with the token
 * blocks (16 on a software adapter, which has few cores), at most one per vocab tile, and the
 * partials' workspace (counted as n·S·8, what the calibration stats need) within
 * {@link SPLIT_WORKSPACE_BUDGET}. At the paper's shape (n = 8192, 64 token blocks of 128) this
 * gives S = 4 and a 128 KiB workspace (n·S·4).
 */
export function defaultVocabSplits(
  ctx: GpuContext,
  spec: Shape,
  tile: GemmTile,
): number {
  const blocks = Math.ceil(spec.n / tile.bm);
  const target = ctx.report.isFallbackAdapter ? 16 : TARGET_WORKGROUPS;
  const want = Math.ceil(target / blocks);
  const budget = Math.floor(SPLIT_WORKSPACE_BUDGET / (spec.n * 8));
  return Math.max(1, Math.min(want, budget, Math.ceil(spec.v / tile.bn)));
}

/**
 * The fused forward's tile on hardware adapters: the GEMM core's 128×256 tile
 * ({@link TILE_HW_WIDE}: 256 threads of 8×16, K-step 16, 16-byte loads, [k slot][k in slot][row]
 * staging), the tile of the plain product P, with 2 rows a reduction round. At the paper's shape
 * on an H100 it ran the forward in 211.2 ms at S = 4 against 223.7 for the 128×128 tile
 * (the tile before), with 2 rows a round (4 rows: 233.3, 1 row: 216.1); see docs/performance.md.
 * With a tile map it keeps two 128-column entries a tile (kernels/fused/tile_map.ts). Where d is
 * not a multiple of the vector width the kernel falls back to scalar loads.
 */
export const FUSED_TILE_HW: GemmTile = TILE_HW_WIDE;

/** The tile used when none is given: {@link FUSED_TILE_HW} on hardware adapters, TILE_SMALL else. */
export function defaultFusedTile(ctx: GpuContext): GemmTile {
  return ctx.report.isFallbackAdapter ? TILE_SMALL : FUSED_TILE_HW;
}

const bytes4 = (b: number) => Math.max(4, Math.ceil(b / 4) * 4);
const tensorBytes = (b: number) => bytes4(Math.ceil(b / 16) * 16);

/** The resolved configuration of a fused forward. */
interface ForwardPlan {
  tile: GemmTile;
  stats: boolean;
  smoothing: SmoothingPlan;
  sumZ: boolean;
  state: TileState;
  roundRows: number | undefined;
  splits: number;
  /** Stream split workgroups (0: the split grid). */
  stream: number;
  tileMax: boolean;
}

/** Resolves the options against the context; throws where they cannot run. */
function _plan(ctx: GpuContext, o: FusedForwardOptions): ForwardPlan {
  const { spec, opts } = o;
  const tile = o.tile ?? defaultFusedTile(ctx);
  validateTile(tile);
  const stats = o.tokenStats ?? false;
  const smoothing: SmoothingPlan = !opts.smoothing
    ? "none"
    : opts.capped || o.smoothing === "in-kernel"
    ? "in-kernel"
    : "identity";
  const sumZ = smoothing === "in-kernel";
  const state = o.tileState ?? "tile";
  const tileMax = o.tileMax ?? false;
  const wgLimit = ctx.device.limits.maxComputeWorkgroupStorageSize;
  const roundRows = state === "tile"
    ? o.roundRows ?? defaultRoundRows(tile, { sumZ, stats, tileMax }, wgLimit)
    : undefined;
  const wgMem = fusedTilesWorkgroupBytes(tile, { sumZ, stats, state, roundRows, tileMax });
  if (wgMem > wgLimit) {
    throw new RangeError(
      `fused forward: tile ${JSON.stringify(tile)} needs ${wgMem} bytes of workgroup memory, ` +
        `more than the ${wgLimit} available`,
    );
  }
  const splits = o.vocabSplits ?? defaultVocabSplits(ctx, spec, tile);
  if (!Number.isInteger(splits) || splits < 1) {
    throw new RangeError(`fused forward: vocabSplits must be a positive integer, got ${splits}`);
  }
  const stream = o.streamWorkgroups ??
    (state === "tile" ? defaultStreamWorkgroups(ctx, spec, tile) : 0);
  if (!Number.isInteger(stream) || stream < 0) {
    throw new RangeError(`fused forward: streamWorkgroups must be an integer ≥ 0, got ${stream}`);
  }
  if (stream > 0 && state !== "tile") {
    throw new RangeError("fused forward: the stream split needs tile state");
  }
  return { tile, stats, smoothing, sumZ, state, roundRows, splits, stream, tileMax };
}

/**
 * The stream split of a call (E's and C's shard rows), or undefined where the split grid runs:
 * no stream workgroups, several shards, or the kernel's arithmetic would overflow.
 */
function _stream(p: ForwardPlan, eRows: number[], cRows: number[]): StreamPlan | undefined {
  if (p.stream === 0 || eRows.length !== 1 || cRows.length !== 1) return undefined;
  return streamPlan(Math.ceil(eRows[0] / p.tile.bm), Math.ceil(cRows[0] / p.tile.bn), p.stream);
}

/** Rows of each binding of a tensor of `rows` rows of d as createTensor shards it by default. */
function _shardRows(ctx: GpuContext, s: FusedForwardSpec, rows: number): number[] {
  return shardRows(rows, rowsPerBinding(ctx, s.dtype, s.d));
}

/** The workspace bytes of one call: split partials, [Σz], [stats], [colsum and its partials]. */
function _workspaceBytes(
  ctx: GpuContext,
  p: ForwardPlan,
  s: FusedForwardSpec,
  cRows: number[],
  withStats: boolean,
): number {
  const sTotal = _stream(p, _shardRows(ctx, s, s.n), cRows)?.slots ??
    splitPlan(cRows, p.tile.bn, p.splits).total;
  let bytes = bytes4(s.n * sTotal * (withStats ? 8 : 4));
  if (p.smoothing === "in-kernel") bytes += bytes4(s.n * sTotal * 4);
  if (withStats) bytes += bytes4(s.n * sTotal * 8);
  if (p.smoothing === "identity") {
    bytes += tensorBytes(s.d * 4) + columnSumPlan(cRows, s.d, ctx.maxBindingBytes).workspaceBytes;
  }
  return bytes;
}

/** Throws unless the call's tensors are what the forward was prepared for. */
function _checkArgs(
  spec: FusedForwardSpec,
  p: { stats: boolean; tileMax: boolean },
  a: FusedForwardArgs,
): void {
  const { e, c } = a;
  const n = e.rows, d = e.cols, v = c.rows;
  const one = (t: DeviceTensor, rows: number, cols: number, dt: string, name: string) => {
    if (t.rows !== rows || t.cols !== cols || t.dtype !== dt || t.shards.length !== 1) {
      throw new RangeError(
        `fused forward: ${name} is ${t.rows}×${t.cols} ${t.dtype} in ${t.shards.length} shards, expected ${rows}×${cols} ${dt} in one`,
      );
    }
  };
  if (
    e.dtype !== spec.dtype || c.dtype !== spec.dtype || c.cols !== d || n !== spec.n ||
    v !== spec.v || d !== spec.d
  ) {
    throw new RangeError(
      `fused forward: E ${n}×${d} ${e.dtype}, C ${v}×${c.cols} ${c.dtype}, prepared for ${
        JSON.stringify(spec)
      }`,
    );
  }
  one(a.targets, n, 1, "i32", "targets");
  one(a.lse, n, 1, "f32", "lse");
  one(a.lossRows, n, 1, "f32", "lossRows");
  if (a.tokenStats) {
    if (!p.stats) throw new RangeError("fused forward: prepared without tokenStats");
    one(a.tokenStats, n, 4, "f32", "tokenStats");
  }
  if (p.tileMax !== (a.tileMax !== undefined)) {
    throw new RangeError(`fused forward: prepared ${p.tileMax ? "with" : "without"} tileMax`);
  }
}

/** Compiles the fused forward for a problem. */
export async function prepareFusedForward(
  ctx: GpuContext,
  o: FusedForwardOptions,
): Promise<PreparedFusedForward> {
  const { spec, opts } = o;
  const p = _plan(ctx, o);
  const { tile, smoothing, splits } = p;
  const stream = _stream(p, _shardRows(ctx, spec, spec.n), _shardRows(ctx, spec, spec.v));
  if (!stream) p.stream = 0; // E or C over several bindings: the split grid, in the accounting too
  const compile = async (withStats: boolean) => {
    const to = {
      stream: stream !== undefined,
      tile,
      dtype: spec.dtype,
      softcap: opts.softcap,
      sumZ: p.sumZ,
      stats: withStats,
      state: p.state,
      roundRows: p.roundRows,
      vecLoads: vecLoadsFit(tile, spec.dtype, spec.d),
      tileMax: p.tileMax,
    };
    const mo = { dtype: spec.dtype, opts, v: spec.v, smoothing, stats: withStats };
    return {
      tiles: await compileKernel(
        ctx,
        fusedTilesSignature(to),
        fusedTilesWgsl(to),
        "fused_forward_tiles",
      ),
      // the split grid's kernel, for calls whose tensors span several bindings after all
      grid: () => {
        const g = { ...to, stream: false };
        return compileKernelNow(
          ctx,
          fusedTilesSignature(g),
          fusedTilesWgsl(g),
          "fused_forward_tiles",
        );
      },
      merge: await compileKernel(
        ctx,
        fusedMergeSignature(mo),
        fusedMergeWgsl(mo),
        "fused_forward_merge",
      ),
    };
  };
  const plain = await compile(false);
  const withStats = p.stats ? await compile(true) : undefined;
  const colsum: PreparedColumnSum | undefined = smoothing === "identity"
    ? await prepareColumnSum(ctx, { dtype: spec.dtype })
    : undefined;
  const mapTile = forwardMapTile(tile);
  return {
    tile,
    mapTile,
    smoothing,
    vocabSplits: splits,
    streamWorkgroups: stream?.wgs ?? 0,
    roundRows: p.roundRows,
    workspaceBytes(s = spec, w = {}) {
      const cRows = w.cShardRows ?? _shardRows(ctx, s, s.v);
      return _workspaceBytes(ctx, p, s, cRows, w.tokenStats ?? p.stats);
    },
    record(rec, a) {
      _checkArgs(spec, p, a);
      const map = a.tileMax
        ? {
          buffer: a.tileMax.shards[0].buffer,
          layout: checkTileMap(a.tileMax, a.e, a.c, mapTile),
        }
        : undefined;
      if (map) rec.clear(map.buffer);
      const { e, c, targets } = a;
      const n = e.rows, d = e.cols;
      const pipes = a.tokenStats ? withStats! : plain;
      const plan = splitPlan(c.shards.map((s) => s.rows), tile.bn, splits);
      const rows = (t: DeviceTensor) => t.shards.map((s) => s.rows);
      const st = stream && _stream(p, rows(e), rows(c));
      const sTotal = st ? st.slots : plan.total;
      const ws = ctx.createBuffer({
        size: n * sTotal * (a.tokenStats ? 8 : 4),
        role: "workspace",
        label: "lse partials",
      });
      const wsz = smoothing === "in-kernel"
        ? ctx.createBuffer({ size: n * sTotal * 4, role: "workspace", label: "Σz partials" })
        : undefined;
      const wsx = a.tokenStats
        ? ctx.createBuffer({ size: n * sTotal * 8, role: "workspace", label: "stats partials" })
        : undefined;
      let cs: DeviceTensor | undefined;
      if (colsum) {
        cs = a.colsum ?? createTensor(ctx, {
          dtype: "f32",
          rows: d,
          cols: 1,
          role: "workspace",
          label: "colsum",
        });
        colsum.record(rec, { c, out: cs });
      }
      const zt = a.lossRows.shards[0].buffer;
      const work = { ws, wsz, wsx, sTotal };
      recordTilesPass(rec, {
        kernel: st || !stream ? pipes.tiles : pipes.grid(),
        stream: st || undefined,
        tile,
        e,
        c,
        targets,
        shards: plan.shards,
        zt,
        map,
        ...work,
      });
      recordMergePass(rec, {
        kernel: pipes.merge,
        e,
        targets,
        colsum: cs,
        lse: a.lse,
        lossRows: a.lossRows,
        tokenStats: a.tokenStats,
        ...work,
      });
      rec.release(ws, wsz, wsx, a.colsum ? undefined : cs?.shards[0].buffer);
    },
  };
}
