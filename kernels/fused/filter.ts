/**
 * The filter of the fused backward (kernels/fused/backward.ts) and what it decides before the
 * gradient passes:
 *
 * - pass `filter` ({@link filterPassWgsl}): the grid covers every (token, vocab) tile pair with
 *   the GEMM's fast tile (128×128 on hardware, covering several TT×VT backward tiles); each
 *   workgroup recomputes its logits, tests g ≥ ε per element, and sets one bit per kept backward
 *   tile in a zeroed mask of one bit per (token tile, vocab tile) (integer atomicOr: workgroups
 *   share mask words); kept tiles are counted with an integer atomic (order-independent) for the
 *   statistics. With the order decision it works in the own order and also records entry bits,
 * - from which the `order decision` pass (kernels/fused/order_decision.ts) forms the sorted
 *   order's mask and picks the order that keeps fewer tiles (below);
 * - with dE splits, the `kept bounds` pass ({@link keptBoundsWgsl}) cuts each token tile's kept
 *   tiles into S runs of equal count.
 *
 * Order decision (sorting with the filter, FusedBackwardOptions.decideOrder, default on).
 * Sorting by mean logit gathers the rows that many tokens keep (LLM-like data: a Zipf head), but
 * it scatters rows that are hot for *neighbouring tokens only*: on the `cce` recipe token n's
 * peak is row n, so in the own order a token tile's hot rows fill one or two vocab tiles, and
 * sorting spreads them over many (96.9% of tiles skipped instead of 99.95% at the paper's shape,
 * and a 45% slower backward). The choice is made exactly, on the GPU, from the filter pass itself:
 * the filter runs in the own order and, besides the own order's tile mask, records one bit per
 * (token tile, vocabulary row) for "some token of the tile keeps this entry" (tT·|V|/8 bytes: 2 MB
 * at the paper's shape, held in dC's output storage, which is written only after dE). A small
 * pass forms the sorted order's tile mask from these bits (a tile is kept when any of its rows
 * perm[p] is) and counts its kept tiles; the sorted order is used when it keeps at least 5% fewer
 * tiles than the own order (SORT_MARGIN in kernels/fused/order_decision.ts: C read through the
 * permutation costs a little per tile), else the order is reset to the identity. The dE and dC
 * passes then walk the chosen mask, so the kept tiles are exactly those of the chosen order, and
 * the result is bitwise that of the chosen order alone. Cost: the sort (1.3 ms at the paper's
 * shape), one bit per kept entry in the filter (where the filter tile is one token tile tall, a
 * register bit per column and one integer atomicOr per kept column; else a workgroup-local OR,
 * then one integer atomicOr per non-zero word), and tT·(|V|/VT) lookups of VT bits each (the
 * sorted mask, ~16 M bit reads);
 * with the bound (FusedBackwardOptions.sortBound), where the entry bits show that no order could
 * keep 5% fewer tiles than the own order, the sort's keys and the sorted mask are skipped on the
 * GPU (kernels/fused/order_decision.ts). The kept-tile count is the right proxy: the dE and dC work is proportional to the kept tiles,
 * and the filter's cost does not depend on the order.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
import { GpuError } from "../../core/errors.ts";
import type { Dtype, LceOptions } from "../../core/options.ts";
import {
  type AccSlot,
  accSlots,
  gemmShared,
  gemmThreadCoords,
  type GemmTile,
  TILE_HW_WIDE,
  tileThreads,
  validateTile,
} from "../gemm_codegen.ts";
import {
  dtypeHelpers,
  enableDirectives,
  f32Lit,
  lossConstants,
  wgslStorageType,
} from "../wgsl_common.ts";
import { type TileSegment } from "./backward_plan.ts";
import { backwardGemmTiles, type BackwardTile } from "./backward_tiles.ts";
import {
  colKey,
  gradValue,
  laneValues,
  logitsMainloop,
  rowKey,
  setMaskBitWgsl,
  tileLanes,
} from "./backward_wgsl.ts";
import { type KernelOf, signature, u32s } from "../../gpu/signature.ts";

/** Options of {@link filterPassWgsl}. */
export interface FilterPassKernelOptions {
  /** The backward tile: the mask has one bit per (TT tokens, VT vocab) tile. */
  tile: BackwardTile;
  /** GEMM tile of the filter pass; its bm and bn are multiples of TT and VT (≤ 32 tiles each). */
  filterTile: GemmTile;
  dtype: Dtype;
  opts: LceOptions;
  v: number;
  eps: number;
  sort: boolean;
  /**
   * Also record, per token tile and vocabulary row, whether any of the tile's tokens keeps the
   * entry (g ≥ ε): one bit per (token tile, row) in `hot` (row-major, P.hotWords words per token
   * tile, zeroed beforehand; integer atomicOr). The pass then works in the vocabulary's own order
   * (`sort` must be false): the order decision (kernels/fused/order_decision.ts) derives the
   * sorted order's mask from the bits.
   */
  entryBits?: boolean;
  /**
   * E and C bound as 16-byte vectors and read 16 bytes at a time along k (only where
   * vecLoadsFit(filterTile, dtype, d) holds: the caller's promise).
   */
  vecLoads?: boolean;
  /**
   * A `scales` binding (f32) after the pass's own: another kernel family's filter reads its
   * operands' scales there (the tensor-core one, kernels/tc/tc_filter_wgsl.ts).
   */
  scales?: boolean;
  /**
   * Refine a mask in place instead of filling a zeroed one (the tile map's exact filter,
   * kernels/fused/map_refine.ts): a workgroup walks a group of filter tiles of its token block's
   * row, steps past those none of whose backward tiles is set in the mask, and for the others
   * clears the bits of the set tiles that keep no element and takes them off counter[0]. The kept
   * tiles are then exactly those the mask held and the plain pass keeps. Not with entry bits.
   */
  refine?: boolean;
}

/** What the filter pass's pieces are decided from (one place per switch). */
interface _FilterShape {
  o: FilterPassKernelOptions;
  t: GemmTile;
  TT: number;
  VT: number;
  /** Backward tiles per filter tile along tokens and vocabulary. */
  subT: number;
  subV: number;
  /** Entry bits recorded ({@link FilterPassKernelOptions.entryBits}). */
  hot: boolean;
  /**
   * Entry bits through the thread's column register `cb` (one bit per column lane): with entry
   * bits where the filter tile is one token tile tall, so a column's bit is the entry bit of the
   * tile's only token tile and the unrolled test holds no atomics ({@link _columnBitsFlush}).
   */
  colReg: boolean;
  /** Entry bits through the workgroup set `s_hot` (with entry bits, without the column register). */
  set: boolean;
  vec: boolean;
  /** Words of the workgroup's entry bits per token sub-tile (columns v0 … v0 + bn − 1). */
  HW: number;
  refine: boolean;
}

function _filterShape(o: FilterPassKernelOptions): _FilterShape {
  const t = o.filterTile;
  validateTile(t);
  const TT = o.tile.tokens, VT = o.tile.vocab;
  const subT = t.bm / TT, subV = t.bn / VT;
  if (!Number.isInteger(subT) || !Number.isInteger(subV) || subT * subV > 32) {
    throw new RangeError(`filter tile ${JSON.stringify(t)} does not cover whole backward tiles`);
  }
  const hot = o.entryBits === true, refine = o.refine === true;
  if (hot && o.sort) throw new RangeError("filter pass: entry bits are taken in the own order");
  if (hot && refine) throw new RangeError("filter pass: a refining pass records no entry bits");
  const colReg = hot && subT === 1;
  const HW = t.bn / 32 + 1, set = hot && !colReg;
  return { o, t, TT, VT, subT, subV, hot, colReg, set, vec: o.vecLoads === true, HW, refine };
}

/**
 * The filter pass's signature: the token segment [tS, tE) of the E shard starting at row eR0, the
 * vocab segment [vS, vE) of the C shard starting at cR0, depth d, the segments' first global tiles
 * tBase and vBase, vTotal vocab tiles in all, hotWords words of entry bits per token tile.
 * Bindings: E, C, lse, the row weights w, [perm] (the sorted order), the mask, the counters,
 * [the entry bits].
 */
function _filterSignature(s: { o: FilterPassKernelOptions; vec: boolean; hot: boolean }) {
  const vst = wgslStorageType(s.o.dtype, s.vec);
  return signature({
    params: u32s("tS tE eR0 vS vE cR0 d tBase vBase vTotal hotWords"),
    bindings: {
      e: { elem: vst, access: "read" },
      c: { elem: vst, access: "read" },
      lse: { elem: "f32", access: "read" },
      w: { elem: "f32", access: "read" },
      perm: { elem: "u32", access: "read", when: s.o.sort },
      mask: { elem: "atomic<u32>", access: "read_write" },
      counter: { elem: "atomic<u32>", access: "read_write" },
      hot: { elem: "atomic<u32>", access: "read_write", when: s.hot },
      scales: { elem: "f32", access: "read", when: s.o.scales === true },
    },
    layout: { pad: ["_b"], breaks: [8] },
  });
}

/** The filter pass's signature for these options. */
export function filterPassSignature(o: FilterPassKernelOptions) {
  return _filterSignature(_filterShape(o));
}

/** Sets the workgroup's entry bit of tile column `col` in the words of token sub-tile `sub`. */
function _setHot(s: _FilterShape, sub: string, col: string): string {
  const word = `${sub === "0u" ? "" : `${sub} * ${s.HW}u + `}(hv >> 5u) - (v0 >> 5u)`;
  return `let hv = v0 + ${col}; atomicOr(&s_hot[${word}], 1u << (hv & 31u));`;
}

/**
 * Where a kept element's entry bit goes: nowhere without entry bits, a bit of the column register
 * ({@link _FilterShape.colReg}), else straight into `s_hot`.
 */
function _entryBit(s: _FilterShape, x: AccSlot, lane: number): string {
  if (!s.hot) return "";
  if (s.colReg) return ` cb |= ${1 << lane}u;`;
  return ` ${_setHot(s, `(${x.row} / ${s.TT}u)`, x.col)}`;
}

/**
 * The column register's bits ORed straight into `hot` (one integer atomicOr a kept column: rare
 * where few tiles are kept, and no workgroup set to clear and flush in every tile).
 */
function _columnBitsFlush(s: _FilterShape, cols: { key: string; expr: string }[]): string {
  if (!s.colReg) return "";
  const sets = cols.map((l, j) =>
    `if ((cb & ${
      1 << j
    }u) != 0u) { let hv = v0 + ${l.expr}; atomicOr(&hot[hr + (hv >> 5u)], 1u << (hv & 31u)); }`
  );
  return `if (cb != 0u) {
    let hr = (P.tBase + (t0 - P.tS) / ${s.TT}u) * P.hotWords;
    ${sets.join("\n    ")}
  }`;
}

/** The per-element test g ≥ ε, OR-ing the verdicts into `bits` (one bit per backward tile). */
function _filterTest(s: _FilterShape): string {
  const slots = accSlots(s.t);
  const lanes = tileLanes(slots);
  if (s.colReg && lanes.cols.length > 32) {
    throw new RangeError(`filter tile ${JSON.stringify(s.t)}: more than 32 column lanes a thread`);
  }
  const laneOf = new Map(lanes.cols.map((l, j) => [l.key, j]));
  const test = slots.map((x) => {
    const r = rowKey(x), c = colKey(x);
    return `if (tw_${r} != 0.0 && vv_${c}) { let z = softcap(${x.expr}); let g = ${
      gradValue(s.o.opts, "z", `tl_${r}`)
    }; if (g >= EPS) { bits |= 1u << ((${x.row} / ${s.TT}u) * ${s.subV}u + (${x.col} / ${s.VT}u));${
      _entryBit(s, x, laneOf.get(c)!)
    } } }`;
  });
  return [
    ...laneValues(lanes.rows, lanes.cols),
    "var bits = 0u;",
    ...(s.colReg ? ["var cb = 0u;"] : []),
    ...test,
    _columnBitsFlush(s, lanes.cols),
  ].join("\n  ");
}

/** What the flushes of a filter pass depend on. */
type _FlushShape = Pick<_FilterShape, "TT" | "VT" | "subT" | "subV" | "set" | "HW">;

/**
 * The end of a filter pass after its workgroup barrier: the entry bits flushed into `hot` and the
 * kept tiles' bits set in the mask and counted, from the workgroup's `s_any` (and `s_hot`), for a
 * filter tile of bm tokens × bn vocabulary entries at corner (t0, v0). Shared with the
 * tensor-core filter pass (kernels/tc/tc_filter_wgsl.ts), which declares the same workgroup
 * variables and parameters (its `s_any` the first word of an array: `any` names it).
 */
export function filterFlushWgsl(
  o: { bm: number; bn: number; tile: BackwardTile; entryBits: boolean; any?: string },
): string {
  const TT = o.tile.tokens, VT = o.tile.vocab;
  const s = { TT, VT, subT: o.bm / TT, subV: o.bn / VT, set: o.entryBits, HW: o.bn / 32 + 1 };
  return `${_entryBitsFlush(s)}\n  ${_keptTilesFlush(s, o.any)}`;
}

/** The workgroup set's entry bits ORed into `hot` (one integer atomicOr per non-zero word). */
function _entryBitsFlush(s: _FlushShape): string {
  if (!s.set) return "";
  return `if (lid < ${s.subT * s.HW}u) {
    let word = atomicLoad(&s_hot[lid]);
    let ts = t0 + (lid / ${s.HW}u) * ${s.TT}u;
    if (word != 0u && ts < P.tE) {
      let row = P.tBase + (ts - P.tS) / ${s.TT}u;
      atomicOr(&hot[row * P.hotWords + (v0 >> 5u) + lid % ${s.HW}u], word);
    }
  }`;
}

/**
 * The loop over the workgroup's backward tiles inside the segment, `body` seeing `bit` (index
 * a·subV + b) and `mi` (the tile's mask bit).
 */
function _eachTile(s: _FlushShape, body: string): string {
  return `for (var a = 0u; a < ${s.subT}u; a++) {
      let ts = t0 + a * ${s.TT}u;
      if (ts >= P.tE) { break; }
      for (var b = 0u; b < ${s.subV}u; b++) {
        let vs = v0 + b * ${s.VT}u;
        if (vs >= P.vE) { break; }
        let bit = a * ${s.subV}u + b;
        let mi = (P.tBase + (ts - P.tS) / ${s.TT}u) * P.vTotal + P.vBase + (vs - P.vS) / ${s.VT}u;
        ${body}
      }
    }`;
}

/** Module-scope WGSL both filter passes open with (the staging, the kept-tile bits `s_any`). */
function _filterHeader(s: _FilterShape): string {
  const { o, t, vec } = s;
  return `${enableDirectives([o.dtype])}
${lossConstants(o.opts, o.v)}
const EPS: f32 = ${f32Lit(o.eps)};
${_filterSignature(s).wgsl}
${dtypeHelpers([{ name: "e", dtype: o.dtype, vec }, { name: "c", dtype: o.dtype, vec }])}
${gemmShared({ tile: t })}
var<workgroup> s_any: atomic<u32>;`;
}

/**
 * WGSL of a refining pass ({@link FilterPassKernelOptions.refine}): workgroup (x, y) walks the
 * filter tiles y·G … y·G + G − 1 of token block x's row, G = ⌈tiles / num_workgroups.y⌉ (the
 * record picks the grid; G = 1 is a workgroup a tile), reading each tile's bits and stepping past
 * the unset ones; a tile with bits set is the plain pass's, then its flush.
 */
function _refineWgsl(s: _FilterShape, crow: (x: string) => string): string {
  const { o, t, vec } = s;
  return `${_filterHeader(s)}
var<workgroup> s_prior: u32;
@compute @workgroup_size(${tileThreads(t)})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  ${gemmThreadCoords(t)}
  let t0 = P.tS + wg.x * ${t.bm}u;
  let tiles = (P.vE - P.vS + ${t.bn - 1}u) / ${t.bn}u;
  let group = (tiles + nwg.y - 1u) / nwg.y;
  for (var gi = 0u; gi < group; gi++) {
    let vt = wg.y * group + gi;
    if (vt >= tiles) { break; }
    let v0 = P.vS + vt * ${t.bn}u;
    // the mask's bits of the tile's backward tiles; none set: the next tile
    if (lid == 0u) {
      atomicStore(&s_any, 0u);
      var bits = 0u;
      ${_eachTile(s, "bits |= ((atomicLoad(&mask[mi >> 5u]) >> (mi & 31u)) & 1u) << bit;")}
      s_prior = bits;
    }
    let prior = workgroupUniformLoad(&s_prior);
    workgroupBarrier(); // s_prior is rewritten by the next tile
    if (prior == 0u) { continue; }
    {
    ${logitsMainloop({ tile: t, dtype: o.dtype, crow, tokenRows: true, vec })}
    ${_filterTest(s)}
    if (bits != 0u) { atomicOr(&s_any, bits); }
    }
    workgroupBarrier();
    ${_refineFlush(s)}
    workgroupBarrier(); // s_any and the staging are rewritten by the next tile
  }
}
`;
}

/** A refining pass's end (thread 0): the set tiles that keep no element cleared and uncounted. */
function _refineFlush(s: _FlushShape): string {
  return `if (lid == 0u) {
    let drop = prior & ~atomicLoad(&s_any);
    var n = 0u;
    ${
    _eachTile(
      s,
      "if (((drop >> bit) & 1u) != 0u) { atomicAnd(&mask[mi >> 5u], ~(1u << (mi & 31u))); n += 1u; }",
    )
  }
    if (n != 0u) { atomicSub(&counter[0], n); }
  }`;
}

/** The kept backward tiles' bits set in the mask and counted (thread 0). */
function _keptTilesFlush(s: _FlushShape, any = "s_any"): string {
  return `if (lid == 0u) {
    let flags = atomicLoad(&${any});
    var kept = 0u;
    for (var a = 0u; a < ${s.subT}u; a++) {
      let ts = t0 + a * ${s.TT}u;
      if (ts >= P.tE) { break; }
      for (var b = 0u; b < ${s.subV}u; b++) {
        let vs = v0 + b * ${s.VT}u;
        if (vs >= P.vE) { break; }
        let bit = (flags >> (a * ${s.subV}u + b)) & 1u;
        if (bit != 0u) {
          let mi = (P.tBase + (ts - P.tS) / ${s.TT}u) * P.vTotal + P.vBase + (vs - P.vS) / ${s.VT}u;
          ${setMaskBitWgsl("mask", "mi")}
        }
        kept += bit;
      }
    }
    if (kept != 0u) { atomicAdd(&counter[0], kept); }
  }`;
}

/**
 * WGSL of the filter pass: one workgroup per filter tile (bm tokens × bn vocab, the GEMM's fast
 * tile) computes the logits, tests g = p·f' + (β/|V|)(z/s)² ≥ ε per element (only for tokens with
 * w_n ≠ 0), ORs the verdicts of the (bm/TT)·(bn/VT) backward tiles it covers into a workgroup
 * atomic bit set, sets the kept tiles' bits of the zeroed mask (integer atomicOr: several
 * workgroups share a mask word, and OR does not depend on their order) and counts the kept ones
 * (integer atomic) ({@link filterPassSignature}).
 */
export function filterPassWgsl(o: FilterPassKernelOptions): string {
  const s = _filterShape(o);
  const { t, set, vec } = s;
  const crow = (x: string) => `(${o.sort ? `perm[${x}]` : `(${x})`} - P.cR0)`;
  if (s.refine) return _refineWgsl(s, crow);
  return `${_filterHeader(s)}
${set ? `var<workgroup> s_hot: array<atomic<u32>, ${s.subT * s.HW}>;` : ""}
@compute @workgroup_size(${tileThreads(t)})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(t)}
  let t0 = P.tS + wg.x * ${t.bm}u;
  let v0 = P.vS + wg.y * ${t.bn}u;
  if (lid == 0u) { atomicStore(&s_any, 0u); }
  ${set ? `if (lid < ${s.subT * s.HW}u) { atomicStore(&s_hot[lid], 0u); }` : ""}
  ${logitsMainloop({ tile: t, dtype: o.dtype, crow, tokenRows: true, vec })}
  ${_filterTest(s)}
  if (bits != 0u) { atomicOr(&s_any, bits); }
  workgroupBarrier();
  ${_entryBitsFlush(s)}
  ${_keptTilesFlush(s)}
}
`;
}

/**
 * The filter pass's GEMM tile: on hardware adapters the GEMM core's 128×256 tile
 * ({@link TILE_HW_WIDE}: 8×16 per thread, 16-byte loads where d allows, [k slot][k in slot][row]
 * staging) when TT divides 128 and VT divides 256 (on an H100 the filter pass ran about 5% faster
 * than on the 128×128 tile: docs/performance.md), else the dE pass's own tile.
 */
export function defaultFilterTile(ctx: GpuContext, bt: BackwardTile): GemmTile {
  const t = TILE_HW_WIDE;
  if (!ctx.report.isFallbackAdapter && t.bm % bt.tokens === 0 && t.bn % bt.vocab === 0) return t;
  return backwardGemmTiles(bt).dE;
}

/** The kept bounds' signature: vTotal vocab tiles; the mask, the bounds. */
export const KEPT_BOUNDS_SIG = signature({
  params: { vTotal: "u32" },
  bindings: {
    mask: { elem: "u32", access: "read" },
    bounds: { elem: "u32", access: "read_write" },
  },
});

/**
 * WGSL of the balanced dE splits: one workgroup per token tile counts the kept tiles of its mask
 * row (K), and writes S + 1 bounds: b_0 = 0, b_S = vTotal, and b_s = the global vocab tile index
 * of its kept tile of rank ⌊s·K/S⌋ (vTotal when there is none), so split s walks the tiles [b_s,
 * b_{s+1}) holding ⌊(s+1)·K/S⌋ − ⌊s·K/S⌋ kept tiles. Integer counts and a fixed-order
 * workgroup scan: deterministic ({@link KEPT_BOUNDS_SIG}). Grid: tTotal.
 */
export function keptBoundsWgsl(splits: number): string {
  const S = splits;
  return `${KEPT_BOUNDS_SIG.wgsl}
var<workgroup> s_scan: array<u32, 256>;
fn bit(i: u32) -> u32 { return (mask[i >> 5u] >> (i & 31u)) & 1u; }
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let r = wg.x;
  let row = r * P.vTotal;
  let per = (P.vTotal + 255u) / 256u;
  let a = min(lid * per, P.vTotal);
  let b = min(a + per, P.vTotal);
  var cnt = 0u;
  for (var j = a; j < b; j++) { cnt += bit(row + j); }
  s_scan[lid] = cnt;
  workgroupBarrier();
  for (var off = 1u; off < 256u; off = off << 1u) {
    var x = 0u;
    if (lid >= off) { x = s_scan[lid - off]; }
    workgroupBarrier();
    s_scan[lid] = s_scan[lid] + x;
    workgroupBarrier();
  }
  let incl = s_scan[lid];
  let excl = incl - cnt;
  let K = s_scan[255];
  let o = r * ${S + 1}u;
  if (lid == 0u) {
    bounds[o] = 0u;
    bounds[o + ${S}u] = P.vTotal;
  }
  for (var s = 1u; s < ${S}u; s++) {
    let rank = (s * K) / ${S}u;
    if (rank >= K) {
      if (lid == 0u) { bounds[o + s] = P.vTotal; }
    } else if (excl <= rank && rank < incl) {
      var seen = excl;
      for (var j = a; j < b; j++) {
        if (bit(row + j) != 0u) {
          if (seen == rank) { bounds[o + s] = j; break; }
          seen += 1u;
        }
      }
    }
  }
}
`;
}

/** Buffers and layout shared by the filter's record functions. */
export interface FilterRecordOptions {
  rec: Recorder;
  e: DeviceTensor;
  c: DeviceTensor;
  /** Token and vocabulary segments ({@link TileSegment}) and the tiles in all. */
  tok: TileSegment[];
  voc: TileSegment[];
  tTotal: number;
  vTotal: number;
  /** The tile mask (zeroed) and the kept-tile counters (zeroed). */
  mask: TrackedBuffer;
  counter: TrackedBuffer;
  /** Words of entry bits per token tile (⌈|V|/32⌉). */
  hotWords: number;
}

/**
 * Records pass `filter`: one dispatch per (vocab segment, token segment), x = token tiles
 * (neighbouring workgroups share a C tile, so C streams from memory about once while E stays in
 * cache). `perm` is bound when the pass works in the sorted order, `hot` with entry bits.
 */
export function recordFilterPass(
  o: FilterRecordOptions & {
    kernel: KernelOf<ReturnType<typeof filterPassSignature>>;
    filterTile: GemmTile;
    lse: TrackedBuffer;
    w: TrackedBuffer;
    d: number;
    perm?: TrackedBuffer;
    hot?: TrackedBuffer;
    /** The `scales` binding of another kernel family's filter (FilterPassKernelOptions.scales). */
    scales?: TrackedBuffer;
    /** The pass's label (default `fused backward filter`). */
    label?: string;
    /**
     * A refining pass ({@link FilterPassKernelOptions.refine}): about this many workgroups a
     * segment pair, each walking ⌈tiles / workgroups⌉ filter tiles of its token block's row.
     */
    refineWorkgroups?: number;
  },
): void {
  const { rec, e, c, filterTile, kernel } = o;
  rec.pass(o.label ?? "fused backward filter", (p) => {
    for (const vs of o.voc) {
      const cs = c.shardOf(vs.start);
      const gVoc = Math.ceil((vs.end - vs.start) / filterTile.bn);
      for (const ts of o.tok) {
        const es = e.shardOf(ts.start);
        const gTok = Math.ceil((ts.end - ts.start) / filterTile.bm);
        if (gVoc > 65535 || gTok > 65535) {
          throw new GpuError("limits", `fused backward: filter grid ${gTok}×${gVoc}`);
        }
        // a refining pass: each workgroup walks a group of its row's filter tiles
        const group = o.refineWorkgroups
          ? Math.max(1, Math.ceil((gTok * gVoc) / o.refineWorkgroups))
          : 1;
        const params = {
          tS: ts.start,
          tE: ts.end,
          eR0: es.rowStart,
          vS: vs.start,
          vE: vs.end,
          cR0: cs.rowStart,
          d: o.d,
          tBase: ts.base,
          vBase: vs.base,
          vTotal: o.vTotal,
          hotWords: o.hotWords,
        };
        const bg = kernel.bind(rec, params, {
          e: es.buffer,
          c: cs.buffer,
          lse: o.lse,
          w: o.w,
          perm: o.perm,
          mask: o.mask,
          counter: o.counter,
          hot: o.hot,
          scales: o.scales,
        });
        p.dispatch(kernel.pipeline, bg, gTok, Math.ceil(gVoc / group));
      }
    }
  });
}

/** Records the `kept bounds` pass ({@link keptBoundsWgsl}) into `bounds`. */
export function recordKeptBounds(o: {
  rec: Recorder;
  kernel: KernelOf<typeof KEPT_BOUNDS_SIG>;
  mask: TrackedBuffer;
  bounds: TrackedBuffer;
  tTotal: number;
  vTotal: number;
}): void {
  const { rec, kernel } = o;
  rec.pass("fused backward kept bounds", (p) => {
    const bg = kernel.bind(rec, { vTotal: o.vTotal }, { mask: o.mask, bounds: o.bounds });
    p.dispatch(kernel.pipeline, bg, o.tTotal);
  });
}
