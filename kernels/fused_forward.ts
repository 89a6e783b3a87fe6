/**
 * The fused forward of the label-smoothed linear cross-entropy (the paper's "Ours" forward):
 * per token LSE_n and the loss row LSE_n − (1−β)·z_{n,t_n} − (β/|V|)·Σ_v z_nv, without ever holding
 * the n×|V| logits.
 *
 * Pass `fused tiles`: workgroups form a grid of (vocab split S) × (token block of BM rows). A
 * workgroup walks its contiguous range of BN-wide vocab tiles in order; for each it computes the
 * BM×BN logits tile with the generated register-tiled GEMM ({@link gemmMainloop}), and the epilogue
 * works on the accumulators in registers: softcap, mask of the ragged vocab edge, and for each of
 * the thread's TM rows its (max, Σexp(z − max)) over its TN columns (one max, then TN exps; no
 * rescale). The row state across tiles lives, by default (`tile` state), with one owner thread per
 * row: the threads sharing a row hand their partials through a small workgroup scratch, and the
 * owner folds them into its running pair (max first, then the rescaled sum, an exp per partial).
 * This keeps registers and workgroup memory near the plain GEMM's, which is what its occupancy
 * and speed depend on; the `registers` state (a running pair per thread row in registers, merged
 * across threads once at the end of the range) is kept for comparison. One partial log-sum-exp
 * L = max + log Σexp(z − max) per row per split goes to a workspace of n × S × 4 bytes (the merge
 * treats it as the pair (L, 1); one log and one exp more per partial than merging pairs, ~1 ulp of
 * L); with the calibration stats the (max, Σexp) pairs are kept (n × S × 8) with n × S × 8 more
 * for the stats, plus n × S × 4 for the tile Σz with softcap or the in-kernel variant.
 *
 * Target logit: written from inside the tile that holds t_n, by the one thread that holds that
 * element (it is unique: exactly one workgroup of one shard dispatch covers column t_n of row n,
 * and exactly one thread of it). It costs one compare per row per tile (the element loop runs
 * only in the one tile that holds the target), reads nothing extra, and gives the very value that
 * entered the LSE (so loss ≥ 0 holds up to rounding of the LSE alone). A separate E_n·C_{t_n} dot
 * product would re-read n rows of C gathered across shards and round differently. The value is
 * parked in `lossRows[n]`, which the merge pass then overwrites with the loss.
 *
 * Pass `fused merge`: one workgroup per token merges its S partials in split order with
 * lse_merge, and writes lse and the loss row. Smoothing term Σ_v z_nv: with `identity` (default,
 * no softcap) it is E_n·colsum(C), a per-token dot product in the merge pass with colsum(C) from
 * kernels/column_sum.ts; with softcap (where the sum does not factor) or `in-kernel`, the tiles sum
 * their capped logits and the merge pass adds the S split partials in order. With β = 0 the term is
 * not computed at all.
 *
 * Tile map (option `tileMax`, the `fused-tilemap` row): each tile also leaves its largest capped
 * logit in a map of one u32 per (token block, vocab tile), reduced over the tile's rows with a
 * workgroup integer atomicMax (order independent: the one atomic of the forward, so the
 * determinism below holds); the backward's map filter reads the map instead of recomputing the
 * tiles (kernels/fused_tile_map.ts).
 *
 * Determinism: no atomics anywhere. Every value is produced by a fixed sequence of f32 operations:
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
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import { createTensor, type DeviceTensor, rowsPerBinding } from "../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../core/options.ts";
import {
  type AccSlot,
  accSlots,
  accVecs,
  gemmMainloop,
  gemmShared,
  gemmSharedBytes,
  gemmThreadCoords,
  type GemmTile,
  TILE_SMALL,
  tileThreads,
  validateTile,
  vecLoadsFit,
} from "./gemm_codegen.ts";
import {
  dtypeHelpers,
  enableDirectives,
  f32Lit,
  loadF32,
  lossConstants,
  LSE_MERGE,
  wgslStorageType,
} from "./wgsl_common.ts";
import { columnSumPlan, prepareColumnSum, type PreparedColumnSum } from "./column_sum.ts";
import { checkTileMap, tileMapForwardWgsl } from "./fused_tile_map.ts";

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
  /** GEMM tile (default {@link defaultFusedTile}: 128×128×8 on hardware, 64×64×16 on software). */
  tile?: GemmTile;
  /** Smoothing term variant (default `identity`). */
  smoothing?: SmoothingMode;
  /** Vocab splits S (default: {@link defaultVocabSplits}). */
  vocabSplits?: number;
  /** Compile the per-token calibration statistics (required to pass `tokenStats` to record). */
  tokenStats?: boolean;
  /** Where the tiles keep their running row state (default `tile`). */
  tileState?: TileState;
  /** `tile` state: rows of a thread reduced per round (default {@link tileRowsPerRound}). */
  roundRows?: number;
  /** Keep the tile map (kernels/fused_tile_map.ts; record then needs `tileMax`). */
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
   * The tile map (kernels/fused_tile_map.ts, createTileMap: one u32 per forward tile), written
   * with each tile's largest capped logit; required when prepared with `tileMax`.
   */
  tileMax?: DeviceTensor;
}

/** What the smoothing term costs where: resolved from the options. */
export type SmoothingPlan = "none" | "identity" | "in-kernel";

/** A compiled fused forward. */
export interface PreparedFusedForward {
  /** Tile in use. */
  readonly tile: GemmTile;
  /** How the smoothing term is computed (`none` when β = 0). */
  readonly smoothing: SmoothingPlan;
  /** Requested vocab splits (each C shard gets a share; see {@link splitPlan}). */
  readonly vocabSplits: number;
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

/** Options of the tiles kernel (what its source depends on). */
export interface FusedTilesKernelOptions {
  tile: GemmTile;
  dtype: Dtype;
  /** Softcap s, or undefined. */
  softcap?: number;
  /** Sum the (capped) logits per split. */
  sumZ: boolean;
  /** Track argmax and Σexp(z − m)·(z − m). */
  stats: boolean;
  /** Where the running row state lives between tiles (default `tile`); see {@link TileState}. */
  state?: TileState;
  /** `tile` state: a thread's rows reduced per round (default {@link tileRowsPerRound}). */
  roundRows?: number;
  /**
   * Declare E and C as 16-byte vectors and load them so (the caller's promise: d is a multiple of
   * the vector width; see {@link vecLoadsFit}).
   */
  vecLoads?: boolean;
  /**
   * Write each tile's largest capped logit into the tile map `tmap` (kernels/fused_tile_map.ts;
   * Params mapRow0, mapCol0, mapCols).
   */
  tileMax?: boolean;
}

/**
 * Where the tiles kernel keeps the running (max, sumexp) state of its rows across its vocab tiles:
 *
 * - `tile` (default): each tile's rows are reduced across the threads that share them, through a
 *   small workgroup scratch (2 of a thread's TM rows per round, so 2·THREADS·8 bytes), and one
 *   owner thread per row keeps the row's running pair in two registers. Costs 2·TM/2 − 1 barriers
 *   and 16 exps per owner per tile (noise next to the tile's d·BM·BN FMAs) and keeps both the
 *   register count and the workgroup memory close to the plain GEMM's, which is what the GEMM's
 *   occupancy, and so its speed, depends on (on an H200 at the paper's shape, a bare 128×128×8
 *   tile loop ran 288 ms with ≤ 17 KiB of workgroup memory and 354 ms with 8 KiB more; the fused
 *   kernel ran 315 ms in this state, 367 ms in `registers`).
 * - `registers`: each thread keeps a running pair per row in registers (2·TM more registers) and
 *   the threads sharing a row are merged once, at the end of the workgroup's vocab range.
 */
export type TileState = "tile" | "registers";

const NO_TARGET = "0xffffffffu"; // a local target no tile holds
/** Floats per scratch array in `tile` state: rows per round = this / THREADS (≥ 1). */
const SCRATCH_FLOATS = 512;

/**
 * Rows of a thread reduced per round in `tile` state (a power of two dividing TM) that the kernel
 * generator falls back to: small scratch ({@link SCRATCH_FLOATS} floats per array). Prepared
 * forwards use {@link defaultRoundRows} instead.
 */
export function tileRowsPerRound(t: GemmTile): number {
  let r = 1;
  while (r * 2 <= t.tm && t.tm % (r * 2) === 0 && r * 2 * tileThreads(t) <= SCRATCH_FLOATS) r *= 2;
  return r;
}

/**
 * The default rows per round of `tile` state: the largest power of two dividing TM whose
 * workgroup memory fits `limitBytes` (all TM rows in one round needs one barrier pair per tile
 * instead of TM; on an H200 at the paper's shape 128×128×16 vec 2d ran 225.7 ms with 8 rows per
 * round, 233.7 ms with 2), at least {@link tileRowsPerRound}'s choice's smaller neighbour 1.
 */
export function defaultRoundRows(
  t: GemmTile,
  o: { sumZ: boolean; stats: boolean; tileMax?: boolean },
  limitBytes: number,
): number {
  let r = t.tm;
  while (
    r > 1 && (t.tm % r !== 0 || fusedTilesWorkgroupBytes(t, { ...o, roundRows: r }) > limitBytes)
  ) {
    r /= 2;
  }
  return Math.max(1, Math.floor(r));
}

/**
 * WGSL of the tiles pass. Params: rows (E shard), rowStart, vRows (C shard), vStart, d, tiles,
 * splits, splitBase, sTotal. Bindings: params, e, c, targets, ws, [wsz], [wsx], zt (target logits).
 */
export function fusedTilesWgsl(o: FusedTilesKernelOptions): string {
  validateTile(o.tile);
  const t = o.tile;
  const state = o.state ?? "tile";
  const threads = tileThreads(t);
  const tx = t.bn / t.tn;
  if (state === "tile" && t.bm > threads) {
    throw new RangeError(`tile state needs BM ≤ threads, got ${JSON.stringify(t)}`);
  }
  const slots = accSlots(t);
  const rows: { i: number; g: number; r: number; slots: AccSlot[]; row: string }[] = [];
  for (const s of slots) {
    const i = s.g * 4 + s.r;
    rows[i] ??= { i, g: s.g, r: s.r, slots: [], row: s.row };
    rows[i].slots.push(s);
  }
  const bindings: string[] = [];
  let b = 0;
  const bind = (decl: string) => bindings.push(`@group(0) @binding(${b++}) ${decl};`);
  bind("var<uniform> P: Params");
  const vec = o.vecLoads === true;
  bind(`var<storage, read> e: array<${wgslStorageType(o.dtype, vec)}>`);
  bind(`var<storage, read> c: array<${wgslStorageType(o.dtype, vec)}>`);
  bind("var<storage, read> targets: array<i32>");
  // a split's (max, Σexp) pair, or without the stats its log-sum-exp max + log Σexp (half the bytes)
  bind(`var<storage, read_write> ws: array<${o.stats ? "vec2<f32>" : "f32"}>`);
  if (o.sumZ) bind("var<storage, read_write> wsz: array<f32>");
  if (o.stats) bind("var<storage, read_write> wsx: array<vec2<f32>>");
  bind("var<storage, read_write> zt: array<f32>");
  if (o.tileMax) bind(tileMapForwardWgsl.binding);
  // Σz sums every column unmasked: off the vocab edge the GEMM loaded zeros, so z = softcap(0) = 0.
  const sum = (xs: string[]) => _tree(xs, (a, b) => `(${a} + ${b})`);
  // A slot's column minus 4·tn, as an i32 literal: comparing it with per-tile values (vlim − 4·tn)
  // leaves no per-column loop invariants for the compiler to hoist into registers.
  const cc = (s: AccSlot) => `${s.h * (t.bn / (t.tn / 4)) + s.c}i`;

  /** Statements computing z_j (capped), v_j (in range), q_j (masked) and the row max mx. */
  const rowValues = (ss: AccSlot[], row: string) => {
    const lines = ss.map((s, j) =>
      `let z${j} = softcap(${s.expr}); let v${j} = ${
        cc(s)
      } < lim; let q${j} = select(NEG_INF, z${j}, v${j});`
    );
    lines.push(`let mx = ${_tree(ss.map((_, j) => `q${j}`), (a, b) => `max(${a}, ${b})`)};`);
    if (o.tileMax) lines.push(tileMapForwardWgsl.row(row));
    return lines;
  };
  /** `am`: the first of the thread's columns (minus 4·tn) holding mx. */
  const argmaxOf = (ss: AccSlot[]) =>
    `var am = ${cc(ss[ss.length - 1])};\n    ${
      ss.slice(0, -1).map((s, j) => ({ s, j })).reverse().map(({ s, j }) =>
        `am = select(am, ${cc(s)}, q${j} == mx);`
      ).join(" ")
    }`;
  /** Writes the target logit from the one thread holding it. */
  const targetWrite = (ss: AccSlot[], tg: string, row: string) =>
    `{
      let lt = ${tg} - n0;
      if (lt < vcap) {
        let rel = i32(lt) - i32(4u * tn);
        ${
      ss.map((s, j) => `if (rel == ${cc(s)}) { zt[P.rowStart + m0 + ${row}] = z${j}; }`).join(
        "\n        ",
      )
    }
      }
    }`;

  let decls: string, init: string, epilogue: string, finish: string;
  if (state === "registers") {
    decls = `var<workgroup> red_ms: array<vec2<f32>, ${threads}>;
${o.sumZ ? `var<workgroup> red_z: array<f32, ${threads}>;` : ""}
${o.stats ? `var<workgroup> red_x: array<vec2<f32>, ${threads}>;` : ""}`;
    init = rows.map(({ i, row }) =>
      `var tg_${i} = ${NO_TARGET};
  { let lr = m0 + ${row}; if (lr < P.rows) { tg_${i} = u32(targets[P.rowStart + lr]) - P.vStart; } }
  var st_m_${i} = NEG_INF;
  var st_s_${i} = 0.0;${o.sumZ ? ` var st_z_${i} = 0.0;` : ""}${
        o.stats ? ` var st_a_${i} = 0u; var st_w_${i} = 0.0;` : ""
      }`
    ).join("\n  ");
    epilogue = rows.map(({ i, row, slots: ss }) => {
      const lines = rowValues(ss, row);
      lines.push(`if (mx > st_m_${i}) {
      let sc = exp(st_m_${i} - mx);
      ${
        o.stats
          ? `st_w_${i} = sc * (st_w_${i} + select(0.0, (st_m_${i} - mx) * st_s_${i}, st_s_${i} > 0.0));\n      `
          : ""
      }st_s_${i} *= sc;
      st_m_${i} = mx;${
        o.stats
          ? `\n      ${argmaxOf(ss)}\n      st_a_${i} = P.vStart + n0 + 4u * tn + u32(am);`
          : ""
      }
    }`);
      ss.forEach((_, j) => lines.push(`let p${j} = select(0.0, exp(q${j} - st_m_${i}), v${j});`));
      lines.push(`st_s_${i} += ${sum(ss.map((_, j) => `p${j}`))};`);
      if (o.stats) {
        lines.push(`st_w_${i} += ${sum(ss.map((_, j) => `p${j} * (z${j} - st_m_${i})`))};`);
      }
      if (o.sumZ) {
        lines.push(`st_z_${i} += ${sum(ss.map((_, j) => `z${j}`))};`);
      }
      lines.push(targetWrite(ss, `tg_${i}`, row));
      return `{\n    ${lines.join("\n    ")}\n  }`;
    }).join("\n  ");
    finish = rows.map(({ i, row }) =>
      `red_ms[lid] = vec2<f32>(st_m_${i}, st_s_${i});${o.sumZ ? ` red_z[lid] = st_z_${i};` : ""}${
        o.stats ? ` red_x[lid] = vec2<f32>(bitcast<f32>(st_a_${i}), st_w_${i});` : ""
      }
  workgroupBarrier();
  if (tn == 0u) {
    let lr = m0 + ${row};
    if (lr < P.rows) {
      let base = tm * ${tx}u;
      var a = red_ms[base];${o.sumZ ? "\n      var zs = red_z[base];" : ""}${
        o.stats ? "\n      var ax = red_x[base];" : ""
      }
      for (var j = 1u; j < ${tx}u; j++) {
        let bb = red_ms[base + j];${o.sumZ ? "\n        zs += red_z[base + j];" : ""}${
        o.stats ? "\n        ax = stats_merge(a, ax, bb, red_x[base + j]);" : ""
      }
        a = lse_merge(a, bb);
      }
      let o = (P.rowStart + lr) * P.sTotal + P.splitBase + wg.x;
      ws[o] = ${o.stats ? "a" : "a.x + log(a.y)"};${o.sumZ ? "\n      wsz[o] = zs;" : ""}${
        o.stats ? "\n      wsx[o] = ax;" : ""
      }
    }
  }
  workgroupBarrier();`
    ).join("\n  ");
  } else {
    const R = o.roundRows ?? tileRowsPerRound(t);
    if (!(R >= 1 && t.tm % R === 0)) throw new RangeError(`roundRows ${R} must divide TM ${t.tm}`);
    const rounds = t.tm / R;
    const arr = (name: string, ty = "f32") =>
      `var<workgroup> ${name}: array<${ty}, ${R * threads}>;`;
    decls = [
      `var<workgroup> sh_tg: array<u32, ${t.bm}>;`,
      arr("scr_m"),
      arr("scr_s"),
      o.sumZ ? arr("scr_z") : "",
      o.stats ? `${arr("scr_a", "u32")}\n${arr("scr_w")}` : "",
    ].join("\n");
    init = `for (var r = lid; r < ${t.bm}u; r += ${threads}u) {
    var tg = ${NO_TARGET};
    let lr = m0 + r;
    if (lr < P.rows) { tg = u32(targets[P.rowStart + lr]) - P.vStart; }
    sh_tg[r] = tg;
  }
  // thread lid < BM owns tile row lid = g·(BM/RG) + r + 4·tm: slot g·4 + r of thread row tm
  var own_m = NEG_INF; var own_s = 0.0;${o.sumZ ? " var own_z = 0.0;" : ""}${
      o.stats ? " var own_a = 0u; var own_w = 0.0;" : ""
    }
  var own_round = 0xffffffffu;
  var own_base = 0u;
  if (lid < ${t.bm}u) {
    let rem = lid % ${t.bm / (t.tm / 4)}u;
    let slot = (lid / ${t.bm / (t.tm / 4)}u) * 4u + rem % 4u;
    own_round = slot / ${R}u;
    own_base = (slot % ${R}u) * ${threads}u + (rem / 4u) * ${tx}u;
  }`;
    const merge = `{
      var mm = scr_m[own_base];
      for (var j = 1u; j < ${tx}u; j++) { mm = max(mm, scr_m[own_base + j]); }
      var ss = 0.0;${o.sumZ ? " var zz = 0.0;" : ""}${
      o.stats ? " var aa = 0xffffffffu; var ww = 0.0;" : ""
    }
      for (var j = 0u; j < ${tx}u; j++) {
        let mj = scr_m[own_base + j];
        let f = exp(mj - mm);
        ss += scr_s[own_base + j] * f;${o.sumZ ? "\n        zz += scr_z[own_base + j];" : ""}${
      o.stats
        ? "\n        let sj = scr_s[own_base + j];" +
          "\n        ww += f * (scr_w[own_base + j] + select(0.0, (max(mj, -1.0e30) - mm) * sj, sj > 0.0));" +
          "\n        if (mj == mm) { aa = min(aa, scr_a[own_base + j]); }"
        : ""
    }
      }
      if (mm > own_m) {
        let sc = exp(own_m - mm);
        ${
      o.stats
        ? "own_w = sc * (own_w + select(0.0, (own_m - mm) * own_s, own_s > 0.0)) + ww; own_a = aa;\n        "
        : ""
    }own_s = own_s * sc + ss;
        own_m = mm;
      } else {
        let sc = exp(mm - own_m);
        own_s += ss * sc;${
      o.stats ? " own_w += sc * (ww + select(0.0, (mm - own_m) * ss, ss > 0.0));" : ""
    }
      }${o.sumZ ? "\n      own_z += zz;" : ""}
    }`;
    const parts: string[] = [];
    for (let q = 0; q < rounds; q++) {
      for (let k = 0; k < R; k++) {
        const { slots: ss, row } = rows[q * R + k];
        const at = `${k * threads}u + lid`;
        const lines = rowValues(ss, row);
        // q = NEG_INF off the vocab edge; mf keeps exp(q − mf) = 0 there when no column is valid
        lines.push("let mf = max(mx, -1.0e30);");
        ss.forEach((_, j) => lines.push(`let p${j} = exp(q${j} - mf);`));
        lines.push(`scr_m[${at}] = mx;`, `scr_s[${at}] = ${sum(ss.map((_, j) => `p${j}`))};`);
        if (o.sumZ) {
          lines.push(`scr_z[${at}] = ${sum(ss.map((_, j) => `z${j}`))};`);
        }
        if (o.stats) {
          lines.push(
            argmaxOf(ss),
            `scr_a[${at}] = P.vStart + n0 + 4u * tn + u32(am);`,
            `scr_w[${at}] = ${sum(ss.map((_, j) => `p${j} * (z${j} - mf)`))};`,
          );
        }
        lines.push(targetWrite(ss, `sh_tg[${row}]`, row));
        parts.push(`{\n    ${lines.join("\n    ")}\n  }`);
      }
      parts.push("workgroupBarrier();");
      parts.push(`if (own_round == ${q}u) ${merge}`);
      // the last round's scratch is next written after the next tile's GEMM barriers
      if (q < rounds - 1) parts.push("workgroupBarrier();");
    }
    epilogue = parts.join("\n  ");
    finish = `if (lid < ${t.bm}u) {
    let lr = m0 + lid;
    if (lr < P.rows) {
      let o = (P.rowStart + lr) * P.sTotal + P.splitBase + wg.x;
      ws[o] = ${o.stats ? "vec2<f32>(own_m, own_s)" : "own_m + log(own_s)"};${
      o.sumZ ? "\n      wsz[o] = own_z;" : ""
    }${o.stats ? "\n      wsx[o] = vec2<f32>(bitcast<f32>(own_a), own_w);" : ""}
    }
  }`;
  }
  return `${enableDirectives([o.dtype])}
const NEG_INF: f32 = -3.0e38;
${
    o.softcap === undefined
      ? "fn softcap(x: f32) -> f32 { return x; }"
      : `const SOFTCAP: f32 = ${f32Lit(o.softcap)};
// s·tanh(x/s) = s − 2s/(exp(2x/s) + 1): one exp (and exact 0 at 0, ±s at ±∞)
fn softcap(x: f32) -> f32 { return SOFTCAP - (2.0 * SOFTCAP) / (exp(x * (2.0 / SOFTCAP)) + 1.0); }`
  }
${state === "registers" ? LSE_MERGE : ""}
${o.stats && state === "registers" ? STATS_MERGE : ""}
struct Params { rows: u32, rowStart: u32, vRows: u32, vStart: u32, d: u32, tiles: u32, splits: u32,
  splitBase: u32, sTotal: u32, mapRow0: u32, mapCol0: u32, mapCols: u32 };
${bindings.join("\n")}
${dtypeHelpers([{ name: "e", dtype: o.dtype, vec }, { name: "c", dtype: o.dtype, vec }])}
${gemmShared({ tile: t })}
${decls}
${o.tileMax ? tileMapForwardWgsl.decls : ""}
@compute @workgroup_size(${threads})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(t)}
  let m0 = wg.y * ${t.bm}u;
  let tBegin = (wg.x * P.tiles) / P.splits;
  let tEnd = ((wg.x + 1u) * P.tiles) / P.splits;
  ${init}
  ${accVecs(t).map((v) => `var ${v}: vec4<f32>;`).join(" ")}
  for (var it = tBegin; it < tEnd; it++) {
    let n0 = it * ${t.bn}u;
    ${accVecs(t).map((v) => `${v} = vec4<f32>(0.0);`).join(" ")}
    ${
    gemmMainloop({
      tile: t,
      a: { dtype: o.dtype, contig: "k", vec },
      b: { dtype: o.dtype, contig: "k", vec },
      aBuf: "e",
      bBuf: "c",
      M: "P.rows",
      N: "P.vRows",
      K: "P.d",
      m0: "m0",
      n0: "n0",
      aOff: "0u",
      sAm: "P.d",
      sAk: "1u",
      bOff: "0u",
      sBn: "P.d",
      sBk: "1u",
    }, false)
  }
    let vlim = P.vRows - n0;
    let vcap = min(vlim, ${t.bn}u);
    let lim = i32(vlim) - i32(4u * tn);
  ${o.tileMax ? tileMapForwardWgsl.init : ""}
  ${epilogue}
  ${o.tileMax ? tileMapForwardWgsl.store : ""}
  }
  ${finish}
}
`;
}

/** Pairwise combination of expressions (a balanced tree, so sums round like pairwise sums). */
function _tree(xs: string[], op: (a: string, b: string) => string): string {
  let cur = xs;
  while (cur.length > 1) {
    const next: string[] = [];
    for (let i = 0; i < cur.length; i += 2) {
      next.push(i + 1 < cur.length ? op(cur[i], cur[i + 1]) : cur[i]);
    }
    cur = next;
  }
  return cur[0];
}

/**
 * `fn stats_merge(a, ax, b, bx) -> vec2<f32>`: merges the calibration partials (argmax bits,
 * Σexp(z − m)·(z − m)) of two (max, sumexp) pairs a and b (before a itself is merged): the argmax
 * of the larger max (the smaller index on a tie), and the sums moved to the common max M:
 * Σe^{z−M}(z − M) = e^{m−M}·(w + (m − M)·s). Relative to the max, so that the entropy
 * log s − w/s has no cancellation against the max (LSE − Σ p·z would lose ~ulp(LSE)).
 */
const STATS_MERGE =
  `fn stats_merge(a: vec2<f32>, ax: vec2<f32>, b: vec2<f32>, bx: vec2<f32>) -> vec2<f32> {
  let m = max(a.x, b.x);
  var arg = ax.x;
  if (b.x > a.x || (b.x == a.x && bitcast<u32>(bx.x) < bitcast<u32>(ax.x))) { arg = bx.x; }
  if (m <= NEG_INF) { return vec2<f32>(arg, 0.0); }
  let wa = select(0.0, exp(a.x - m) * (ax.y + (a.x - m) * a.y), a.y > 0.0);
  let wb = select(0.0, exp(b.x - m) * (bx.y + (b.x - m) * b.y), b.y > 0.0);
  return vec2<f32>(arg, wa + wb);
}
`;

/** Options of the merge kernel. */
export interface FusedMergeKernelOptions {
  dtype: Dtype;
  opts: LceOptions;
  v: number;
  smoothing: SmoothingPlan;
  stats: boolean;
}

const MERGE_WG = 64;

/**
 * WGSL of the merge pass. Params: rows (E shard), rowStart, sTotal, d. Bindings: params, ws,
 * [wsz], [wsx], targets, [e, colsum], lse, lossRows (holds the target logits on entry), [stats].
 */
export function fusedMergeWgsl(o: FusedMergeKernelOptions): string {
  const bindings: string[] = [];
  let b = 0;
  const bind = (decl: string) => bindings.push(`@group(0) @binding(${b++}) ${decl};`);
  bind("var<uniform> P: Params");
  bind(`var<storage, read> ws: array<${o.stats ? "vec2<f32>" : "f32"}>`);
  if (o.smoothing === "in-kernel") bind("var<storage, read> wsz: array<f32>");
  if (o.stats) bind("var<storage, read> wsx: array<vec2<f32>>");
  bind("var<storage, read> targets: array<i32>");
  if (o.smoothing === "identity") {
    bind(`var<storage, read> e: array<${wgslStorageType(o.dtype)}>`);
    bind("var<storage, read> colsum: array<f32>");
  }
  bind("var<storage, read_write> lse: array<f32>");
  bind("var<storage, read_write> loss_rows: array<f32>");
  if (o.stats) bind("var<storage, read_write> token_stats: array<f32>");
  const dot = o.smoothing === "identity"
    ? `var acc = 0.0;
    for (var k = lid; k < P.d; k += ${MERGE_WG}u) {
      acc = fma(${loadF32("e", o.dtype, "r * P.d + k")}, colsum[k], acc);
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var w = ${MERGE_WG / 2}u; w > 0u; w >>= 1u) {
      if (lid < w) { red[lid] += red[lid + w]; }
      workgroupBarrier();
    }`
    : "";
  const zsum = o.smoothing === "identity"
    ? "let zsum = red[0];"
    : o.smoothing === "in-kernel"
    ? `var zsum = wsz[base];
      for (var j = 1u; j < P.sTotal; j++) { zsum += wsz[base + j]; }`
    : "";
  const smooth = o.smoothing === "none" ? "" : " - (BETA / VOCAB) * zsum";
  // a split's partial log-sum-exp L is the pair (L, 1): merged by the same lse_merge
  const pair = (x: string) => o.stats ? x : `vec2<f32>(${x}, 1.0)`;
  return `${enableDirectives(o.smoothing === "identity" ? [o.dtype] : [])}
${lossConstants(o.opts, o.v)}
${LSE_MERGE}
${o.stats ? STATS_MERGE : ""}
struct Params { rows: u32, rowStart: u32, sTotal: u32, d: u32 };
${bindings.join("\n")}
${o.smoothing === "identity" ? dtypeHelpers([{ name: "e", dtype: o.dtype }]) : ""}
var<workgroup> red: array<f32, ${MERGE_WG}>;
@compute @workgroup_size(${MERGE_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var r = wg.x; r < P.rows; r += nwg.x) {
    let row = P.rowStart + r;
    ${dot}
    if (lid == 0u) {
      let base = row * P.sTotal;
      var a = ${pair("ws[base]")};${o.stats ? "\n      var ax = wsx[base];" : ""}
      for (var j = 1u; j < P.sTotal; j++) {
        let bb = ${pair("ws[base + j]")};${
    o.stats ? "\n        ax = stats_merge(a, ax, bb, wsx[base + j]);" : ""
  }
        a = lse_merge(a, bb);
      }
      ${zsum}
      let l = a.x + log(a.y);
      lse[row] = l;
      var loss = l - (1.0 - BETA) * loss_rows[row]${smooth};
      if (targets[row] == IGNORE) { loss = 0.0; }
      loss_rows[row] = loss;${
    o.stats
      ? `
      let wz = ax.y / a.y;
      token_stats[4u * row] = a.x;
      token_stats[4u * row + 1u] = f32(bitcast<u32>(ax.x));
      token_stats[4u * row + 2u] = a.x + wz;
      token_stats[4u * row + 3u] = log(a.y) - wz;`
      : ""
  }
    }
    workgroupBarrier();
  }
}
`;
}

/** Workgroup memory of the tiles kernel in bytes (GEMM staging plus the row reductions). */
export function fusedTilesWorkgroupBytes(
  t: GemmTile,
  o: { sumZ: boolean; stats: boolean; state?: TileState; roundRows?: number; tileMax?: boolean },
): number {
  const threads = tileThreads(t);
  const staging = gemmSharedBytes(t) + (o.tileMax ? 4 : 0);
  const perPartial = 8 + (o.sumZ ? 4 : 0) + (o.stats ? 8 : 0);
  if ((o.state ?? "tile") === "registers") return staging + threads * perPartial;
  return staging + t.bm * 4 + (o.roundRows ?? tileRowsPerRound(t)) * threads * perPartial;
}

/**
 * 128×128 output tile, 256 threads, 8×8 per thread, K-step 16, 16-byte vector loads, [k][row]
 * staging: the fused forward's best tile on an H200 at the paper's shape
 * (reports/tune_forward_nvidia-h200.md: 225.7 ms, 42.8 TFLOP/s effective with S = 4 and 8 rows
 * per round, 0.99× the plain GEMM with the same tile; flat staging 252.6 ms; scalar loads at best
 * 311 ms with K-step 8, 423 ms with K-step 16). Where d is not a multiple of the vector width the
 * kernel falls back to scalar loads.
 */
export const FUSED_TILE_HW: GemmTile = {
  bm: 128,
  bn: 128,
  bk: 16,
  tm: 8,
  tn: 8,
  vec: true,
  stage2d: true,
};

/** The tile used when none is given: {@link FUSED_TILE_HW} on hardware adapters, TILE_SMALL else. */
export function defaultFusedTile(ctx: GpuContext): GemmTile {
  return ctx.report.isFallbackAdapter ? TILE_SMALL : FUSED_TILE_HW;
}

const bytes4 = (b: number) => Math.max(4, Math.ceil(b / 4) * 4);
const tensorBytes = (b: number) => bytes4(Math.ceil(b / 16) * 16);

/** Compiles the fused forward for a problem. */
export async function prepareFusedForward(
  ctx: GpuContext,
  o: FusedForwardOptions,
): Promise<PreparedFusedForward> {
  const { spec, opts } = o;
  const tile = o.tile ?? defaultFusedTile(ctx);
  validateTile(tile);
  const stats = o.tokenStats ?? false;
  const smoothing: SmoothingPlan = opts.beta === 0
    ? "none"
    : opts.softcap !== undefined || o.smoothing === "in-kernel"
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
  if (wgMem > ctx.device.limits.maxComputeWorkgroupStorageSize) {
    throw new RangeError(
      `fused forward: tile ${JSON.stringify(tile)} needs ${wgMem} bytes of workgroup memory, ` +
        `more than the ${ctx.device.limits.maxComputeWorkgroupStorageSize} available`,
    );
  }
  const splits = o.vocabSplits ?? defaultVocabSplits(ctx, spec, tile);
  if (!Number.isInteger(splits) || splits < 1) {
    throw new RangeError(`fused forward: vocabSplits must be a positive integer, got ${splits}`);
  }
  const compile = async (withStats: boolean) => ({
    tiles: await ctx.pipeline(
      fusedTilesWgsl({
        tile,
        dtype: spec.dtype,
        softcap: opts.softcap,
        sumZ,
        stats: withStats,
        state,
        roundRows,
        vecLoads: vecLoadsFit(tile, spec.dtype, spec.d),
        tileMax,
      }),
      "fused_forward_tiles",
    ),
    merge: await ctx.pipeline(
      fusedMergeWgsl({ dtype: spec.dtype, opts, v: spec.v, smoothing, stats: withStats }),
      "fused_forward_merge",
    ),
  });
  const plain = await compile(false);
  const withStats = stats ? await compile(true) : undefined;
  const colsum: PreparedColumnSum | undefined = smoothing === "identity"
    ? await prepareColumnSum(ctx, { dtype: spec.dtype })
    : undefined;
  const workspaceFor = (s: FusedForwardSpec, cRows: number[], withStats: boolean) => {
    const sTotal = splitPlan(cRows, tile.bn, splits).total;
    let bytes = bytes4(s.n * sTotal * (withStats ? 8 : 4));
    if (smoothing === "in-kernel") bytes += bytes4(s.n * sTotal * 4);
    if (withStats) bytes += bytes4(s.n * sTotal * 8);
    if (smoothing === "identity") {
      bytes += tensorBytes(s.d * 4) + columnSumPlan(cRows, s.d, ctx.maxBindingBytes).workspaceBytes;
    }
    return bytes;
  };
  return {
    tile,
    smoothing,
    vocabSplits: splits,
    roundRows,
    workspaceBytes(s = spec, w = {}) {
      let cRows = w.cShardRows;
      if (!cRows) {
        const per = rowsPerBinding(ctx, s.dtype, s.d);
        cRows = [];
        for (let r = 0; r < s.v; r += per) cRows.push(Math.min(per, s.v - r));
      }
      return workspaceFor(s, cRows, w.tokenStats ?? stats);
    },
    record(rec, a) {
      const { e, c, targets, lse, lossRows } = a;
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
      one(targets, n, 1, "i32", "targets");
      one(lse, n, 1, "f32", "lse");
      one(lossRows, n, 1, "f32", "lossRows");
      if (a.tokenStats) {
        if (!stats) throw new RangeError("fused forward: prepared without tokenStats");
        one(a.tokenStats, n, 4, "f32", "tokenStats");
      }
      if (tileMax !== (a.tileMax !== undefined)) {
        throw new RangeError(`fused forward: prepared ${tileMax ? "with" : "without"} tileMax`);
      }
      const map = a.tileMax && checkTileMap(a.tileMax, e, c, tile);
      if (a.tileMax) rec.clear(a.tileMax.shards[0].buffer);
      const pipes = a.tokenStats ? withStats! : plain;
      const plan = splitPlan(c.shards.map((s) => s.rows), tile.bn, splits);
      const sTotal = plan.total;
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
        cs = createTensor(ctx, {
          dtype: "f32",
          rows: d,
          cols: 1,
          role: "workspace",
          label: "colsum",
        });
        colsum.record(rec, { c, out: cs });
      }
      const zt = lossRows.shards[0].buffer;
      rec.pass("fused forward tiles", (p) => {
        for (const es of e.shards) {
          const blocks = Math.ceil(es.rows / tile.bm);
          if (blocks > 65535) throw new RangeError(`fused forward: ${blocks} token blocks`);
          c.shards.forEach((cshard, i) => {
            const sp = plan.shards[i];
            const u = rec.uniform(
              new Uint32Array([
                es.rows,
                es.rowStart,
                cshard.rows,
                cshard.rowStart,
                d,
                sp.tiles,
                sp.splits,
                sp.base,
                sTotal,
                map ? map.rowBase[e.shards.indexOf(es)] : 0,
                map ? map.colBase[i] : 0,
                map ? map.cols : 0,
              ]),
              "fused tiles params",
            );
            const bufs = [u, es.buffer, cshard.buffer, targets.shards[0].buffer, ws];
            if (wsz) bufs.push(wsz);
            if (wsx) bufs.push(wsx);
            bufs.push(zt);
            if (a.tileMax) bufs.push(a.tileMax.shards[0].buffer);
            p.dispatch(pipes.tiles, rec.bindGroup(pipes.tiles, bufs), sp.splits, blocks);
          });
        }
      });
      rec.pass("fused forward merge", (p) => {
        for (const es of e.shards) {
          const u = rec.uniform(
            new Uint32Array([es.rows, es.rowStart, sTotal, d]),
            "fused merge params",
          );
          const bufs = [u, ws];
          if (wsz) bufs.push(wsz);
          if (wsx) bufs.push(wsx);
          bufs.push(targets.shards[0].buffer);
          if (cs) bufs.push(es.buffer, cs.shards[0].buffer);
          bufs.push(lse.shards[0].buffer, lossRows.shards[0].buffer);
          if (a.tokenStats) bufs.push(a.tokenStats.shards[0].buffer);
          p.dispatch(pipes.merge, rec.bindGroup(pipes.merge, bufs), Math.min(es.rows, 65535));
        }
      });
      rec.release(ws, wsz, wsx, cs?.shards[0].buffer);
    },
  };
}
