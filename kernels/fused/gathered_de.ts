/**
 * dE of the fused backward's kept tiles as one dense product per token tile: the kept tiles are
 * gathered instead of walked one by one.
 *
 * The per-tile dE pass (kernels/fused/kept_tiles.ts) recomputes a kept tile's logits and then adds
 * P·C[vocab tile, :] into its token rows in d chunks, each a product of depth VT with a
 * read-modify-write of the f32 accumulator: on the `llm` fixture (38% of tiles kept) it ran at a
 * third of the plain product's rate. Here the same work is three passes, about twice as fast on
 * the H100 where many tiles are kept and a few tenths of a millisecond slower at the paper's
 * shape, where almost none are (docs/performance.md):
 *
 * 0. pass `dE plan` ({@link gatheredPlanWgsl}, one workgroup): counts each token tile's kept tiles
 *    and packs the token tiles in order into *rounds* of at most `cap` slots, writing each round's
 *    workgroup counts (read by indirect dispatches: empty rounds cost nothing), its first token
 *    tile, and each token tile's first slot in its round.
 * 1. pass `kept g` ({@link keptGradWgsl}): one workgroup per (vocab tile, token tile) of a round;
 *    a tile the mask keeps recomputes its TT×VT logits and stores the unweighted gradient g (see
 *    gradValue in kernels/fused/backward_wgsl.ts) in the token tile's slot `rank`, rank being the
 *    count of kept tiles before it in the token tile's mask row (so slots follow the vocab order),
 *    and the C rows of its VT entries in the *row list* (through the vocab order when sorting; as
 *    f32, exact below 2²⁴). Skipped tiles return at once.
 * 2. pass `dE` ({@link gatheredDEWgsl}): one workgroup per (token tile, BN columns of d) computes
 *    Σ_j g[slot j]·C[rows of slot j, columns] as a product of depth (kept tiles)·VT, the B
 *    operand's rows gathered through the row list (one dependent load), and adds w_n times it
 *    into dE's f32 accumulator (which already holds the exact terms: kernels/fused/corrections.ts).
 *
 * Storage: no memory of its own (the plan's 9 words a token tile are made at prepare time). dE is
 * formed completely before dC's storage is first written (see "Gradient dtype" in
 * kernels/fused/backward_plan.ts), so the slots and row lists live in dC's first output buffer,
 * behind dE's f32 accumulator when that is there too: `cap` slots. A token tile has at most as
 * many kept tiles as vocab tiles, so every round of the plan closes with at least ⌊cap / vocab
 * tiles⌋ token tiles: the host records that worst case's rounds (bf16 gradients at the paper's
 * shape: 8; on `llm` 4096×24,576×2304: 7; f32 gradients 4 and 2), nothing can overflow and
 * nothing is read back. g is stored in f32: in f16 a confident token's p ≈ 1 at its target would
 * keep only 2⁻¹² of 1 − p, which the exact target term −(1 − β) cancels (tried: bf16 dE off by 1.5
 * output roundings on a peaked fixture).
 *
 * Order and ownership: every output element is owned by one workgroup of one dispatch, its kept
 * tiles added in vocab order in one accumulator: bitwise reproducible, no atomics on floats (the
 * only atomic counts mask bits in workgroup memory).
 *
 * Where it applies ({@link PreparedGatheredDE.record} returns false otherwise and the caller runs
 * the per-tile pass): one binding each of E, C, dE and dC (one token and one vocab segment), VT a
 * multiple of 4, and dC's first buffer holding at least one token tile's worst case of slots.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor, download } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions } from "../../core/options.ts";
import {
  accSlots,
  accVecs,
  gemmMainloop,
  gemmShared,
  gemmThreadCoords,
  type GemmTile,
  TILE_HW,
  tileThreads,
  validateTile,
} from "../gemm_codegen.ts";
import { dtypeHelpers, enableDirectives, lossConstants, wgslStorageType } from "../wgsl_common.ts";
import {
  backwardGemmTiles,
  type BackwardGradients,
  type BackwardTile,
  type TileSegment,
} from "./backward_plan.ts";
import {
  colKey,
  gradValue,
  laneValues,
  logitsMainloop,
  rowKey,
  tileLanes,
} from "./backward_wgsl.ts";
import { compileKernel, signature } from "../../gpu/signature.ts";

/** Options of the kernels of passes `kept g` and `dE`. */
export interface GatheredDEKernelOptions {
  tile: BackwardTile;
  dtype: Dtype;
  opts: LceOptions;
  /** Vocabulary size |V|. */
  v: number;
  /** Address classifier rows through the permutation `perm`. */
  sort: boolean;
  /** dE's f32 accumulator lives in the slots' buffer (16-bit gradients), else in its own. */
  accShared: boolean;
  /** `kept g`: E and C bound as 16-byte vectors (bf16, d a multiple of 8: the caller's promise). */
  vecLoads?: boolean;
  /** `dE`: C read 16 bytes at a time along d (d a multiple of the dtype's vector width). */
  cVec?: boolean;
  /** `dE`: the product's tile (rows = the backward tile's tokens; {@link gatheredDETile}). */
  gemmTile: GemmTile;
  /**
   * `kept g`: the logits product's tile (default the backward tile's dE tile with [k][row]
   * staging; TT×VT, only its staging and thread layout may differ).
   */
  keptTile?: GemmTile;
}

/**
 * The product tile of pass `dE`: for 128-token tiles on hardware 128×32 (8×4 a thread, 16-byte
 * loads, [k][row] staging; tuned on the H100, see docs/performance.md), else TT×64 with at most 256
 * threads (TT/16 rows a thread, at least 4).
 */
export function gatheredDETile(bt: BackwardTile, hardware: boolean): GemmTile {
  if (hardware && bt.tokens === TILE_HW.bm) return { ...TILE_HW, bn: 32, tn: 4 };
  return { bm: bt.tokens, bn: 64, bk: 16, tm: Math.max(4, bt.tokens / 16), tn: 4 };
}

/** Bytes of one slot: a TT×VT tile of g in f32. */
export function slotBytes(bt: BackwardTile): number {
  return bt.tokens * bt.vocab * 4;
}

/**
 * The uniform fields of passes `kept g` and `dE` (one block serves both passes of a round): the
 * token segment [tS, tE) of E's binding from row eR0 and of dE's from row oR0, the vocab segment
 * [vS, vE) of C's from cR0, depth d, the segments' first global tiles tBase and vBase, vTotal vocab
 * tiles in all, nVT tiles of the segment, the round, the word offsets gW (slots) and lW (row
 * lists) in the free storage, nR rounds.
 */
const PARAMS = {
  tS: "u32",
  tE: "u32",
  eR0: "u32",
  vS: "u32",
  vE: "u32",
  cR0: "u32",
  oR0: "u32",
  d: "u32",
  tBase: "u32",
  vBase: "u32",
  vTotal: "u32",
  nVT: "u32",
  round: "u32",
  gW: "u32",
  lW: "u32",
  nR: "u32",
} as const;

/**
 * Pass `kept g`'s signature: E, C, lse, the row weights w, [perm], the mask, the plan, ws (the
 * free storage: the slots and row lists, u32 words).
 */
function _keptGradSignature(o: GatheredDEKernelOptions) {
  const st = wgslStorageType(o.dtype, o.vecLoads === true);
  return signature({
    params: PARAMS,
    bindings: {
      e: { elem: st, access: "read" },
      c: { elem: st, access: "read" },
      lse: { elem: "f32", access: "read" },
      w: { elem: "f32", access: "read" },
      perm: { elem: "u32", access: "read", when: o.sort },
      mask: { elem: "u32", access: "read" },
      plan: { elem: "u32", access: "read" },
      ws: { elem: "u32", access: "read_write" },
    },
    layout: { breaks: [8] },
  });
}

/**
 * Pass `dE`'s signature: C, w, the plan, ws (slots, row lists, and with `accShared` dE's f32
 * accumulator, as 16-byte words), [acc] (dE's f32 accumulator, without `accShared`).
 */
function _gatheredDESignature(o: GatheredDEKernelOptions) {
  return signature({
    params: PARAMS,
    bindings: {
      c: { elem: wgslStorageType(o.dtype, o.cVec === true), access: "read" },
      w: { elem: "f32", access: "read" },
      plan: { elem: "u32", access: "read" },
      ws: { elem: "vec4<f32>", access: "read_write" },
      acc: { elem: "f32", access: "read_write", when: !o.accShared },
    },
    layout: { breaks: [8] },
  });
}

/**
 * The plan's signature: T token tiles, nVT vocab tiles, cap slots a round, nR rounds, the
 * segments' first global tiles tBase and vBase, vTotal, and the grids' x of passes kept g (gX)
 * and dE (dX); the mask, the plan.
 */
const PLAN_SIG = signature({
  params: {
    T: "u32",
    nVT: "u32",
    cap: "u32",
    nR: "u32",
    tBase: "u32",
    vTotal: "u32",
    vBase: "u32",
    gX: "u32",
    dX: "u32",
  },
  bindings: {
    mask: { elem: "u32", access: "read" },
    plan: { elem: "u32", access: "read_write" },
  },
  layout: { struct: "Q", breaks: [8] },
});

/**
 * WGSL of the round's token tile `tl` (its index in the segment, `tt`), its first slot in the
 * round (`base`) and its kept tiles (`kept`), from the plan ({@link gatheredPlanWgsl}).
 */
const ROUND_TILE = `let tt = plan[6u * P.nR + P.round] + tl;
  let base = plan[7u * P.nR + 2u * tt];
  let kept = plan[7u * P.nR + 2u * tt + 1u];`;

/**
 * WGSL counting the mask bits in [lo, hi) into `let name` (uniform): the workgroup's threads add
 * one word each into a workgroup atomic. Needs `bits_in`, `s_cnt` and `s_val` ({@link _maskDecls}).
 */
function _countBits(name: string, lo: string, hi: string, threads: number): string {
  return `if (lid == 0u) { atomicStore(&s_cnt, 0u); }
  workgroupBarrier();
  if (${hi} > ${lo}) {
    for (var wi = (${lo} >> 5u) + lid; wi <= ((${hi} - 1u) >> 5u); wi += ${threads}u) {
      atomicAdd(&s_cnt, bits_in(${lo}, ${hi}, wi));
    }
  }
  workgroupBarrier();
  if (lid == 0u) { s_val = atomicLoad(&s_cnt); }
  let ${name} = workgroupUniformLoad(&s_val);`;
}

/** WGSL of `bits_in(lo, hi, wi)`: the set bits of mask word wi inside bit range [lo, hi). */
const BITS_IN = `fn bits_in(lo: u32, hi: u32, wi: u32) -> u32 {
  let a = max(lo, wi * 32u);
  let b = min(hi, wi * 32u + 32u);
  if (b <= a) { return 0u; }
  let n = b - a;
  let word = mask[wi] >> (a & 31u);
  return countOneBits(select(word & ((1u << n) - 1u), word, n == 32u));
}`;

/** The mask helpers and the workgroup words they use. */
function _maskDecls(): string {
  return `var<workgroup> s_cnt: atomic<u32>;
var<workgroup> s_val: u32;
${BITS_IN}`;
}

/**
 * WGSL of pass `kept g` (see the module doc). Grid: (vocab tiles of the segment, token tiles of
 * the round: from the plan, indirectly).
 */
export function keptGradWgsl(o: GatheredDEKernelOptions): string {
  const t = o.keptTile ?? { ...backwardGemmTiles(o.tile).dE, stage2d: true };
  validateTile(t);
  if (t.bm !== o.tile.tokens || t.bn !== o.tile.vocab) {
    throw new RangeError(`kept g: tile ${JSON.stringify(t)} is not the backward tile's TT×VT`);
  }
  const TT = o.tile.tokens, VT = o.tile.vocab, threads = tileThreads(t);
  const vec = o.vecLoads === true;
  const crow = (x: string) => `(${o.sort ? `s_rows[(${x}) - v0]` : `(${x})`} - P.cR0)`;
  const slots = accSlots(t);
  const lanes = tileLanes(slots);
  const gOf = (x: (typeof slots)[number]) =>
    `select(0.0, ${gradValue(o.opts, `softcap(${x.expr})`, `tl_${rowKey(x)}`)}, tw_${
      rowKey(x)
    } != 0.0 && vv_${colKey(x)})`;
  // a vec4 accumulator holds 4 consecutive columns of one row
  const stores = accVecs(t).map((v) => {
    const s4 = slots.filter((x) => x.vec === v);
    const at = `gb + ${s4[0].row} * ${VT}u + ${s4[0].col}`;
    return `{ let i = ${at}; ${
      s4.map((x, c) => `ws[i + ${c}u] = bitcast<u32>(${gOf(x)});`).join(" ")
    } }`;
  });
  return `${enableDirectives([o.dtype])}
${lossConstants(o.opts, o.v)}
${_keptGradSignature(o).wgsl}
${dtypeHelpers([{ name: "e", dtype: o.dtype, vec }, { name: "c", dtype: o.dtype, vec }])}
${gemmShared({ tile: t })}
${_maskDecls()}
${o.sort ? `var<workgroup> s_rows: array<u32, ${VT}>;` : ""}
@compute @workgroup_size(${threads})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(t)}
  let vt = wg.x;
  let tl = wg.y;
  ${ROUND_TILE}
  let t0 = P.tS + tt * ${TT}u;
  let rs = (P.tBase + tt) * P.vTotal + P.vBase;
  let mi = rs + vt;
  if (lid == 0u) { s_val = (mask[mi >> 5u] >> (mi & 31u)) & 1u; }
  if (workgroupUniformLoad(&s_val) == 0u) { return; }
  ${_countBits("rank", "rs", "mi", threads)}
  let v0 = P.vS + vt * ${VT}u;
  ${
    o.sort
      ? `for (var i = lid; i < ${VT}u; i += ${threads}u) { s_rows[i] = perm[min(v0 + i, P.vE - 1u)]; }
  workgroupBarrier();`
      : ""
  }
  ${logitsMainloop({ tile: t, dtype: o.dtype, crow, tokenRows: true, vec })}
  ${laneValues(lanes.rows, lanes.cols).join("\n  ")}
  let slot = base + rank;
  let gb = P.gW + slot * ${_slotWords(o)}u;
  ${stores.join("\n  ")}
  // the C row (relative to its binding) of each of the slot's VT depths in pass dE
  for (var i = lid; i < ${VT}u; i += ${threads}u) { ws[P.lW + slot * ${VT}u + i] = bitcast<u32>(f32(${
    o.sort ? "s_rows[i]" : "min(v0 + i, P.vE - 1u)"
  } - P.cR0)); }
}
`;
}

/** u32 words of a slot. */
function _slotWords(o: GatheredDEKernelOptions): number {
  return slotBytes(o.tile) / 4;
}

/**
 * WGSL of pass `dE` (see the module doc). Grid: (⌈d/BN⌉, token tiles of the round: from the plan,
 * indirectly).
 */
export function gatheredDEWgsl(o: GatheredDEKernelOptions): string {
  const gt = o.gemmTile;
  validateTile(gt);
  const TT = o.tile.tokens, VT = o.tile.vocab, threads = tileThreads(gt);
  if (gt.bm !== TT) throw new RangeError(`gathered dE: tile rows ${gt.bm} ≠ ${TT} tokens`);
  if (VT % 4 !== 0) throw new RangeError(`gathered dE: ${VT} vocab entries a tile`);
  const cVec = o.cVec === true;
  const add = o.accShared
    ? "ws[j >> 2u][j & 3u] = ws[j >> 2u][j & 3u] + x;"
    : "acc[j] = acc[j] + x;";
  const epilogue = accSlots(gt).map((x) =>
    `{ let tk = t0 + ${x.row}; let col = n0 + ${x.col}; if (tk < P.tE && col < P.d) { acc_add((tk - P.oR0) * P.d + col, w[tk] * ${x.expr}); } }`
  );
  return `${enableDirectives([o.dtype])}
${_gatheredDESignature(o).wgsl}
${dtypeHelpers([{ name: "c", dtype: o.dtype, vec: cVec }])}
${gemmShared({ tile: gt })}
/** The C row at word i of the row list (as f32, written by pass kept g). */
fn crow_at(i: u32) -> u32 { return u32(ws[i >> 2u][i & 3u]); }
fn acc_add(j: u32, x: f32) { ${add} }
@compute @workgroup_size(${threads})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(gt)}
  let n0 = wg.x * ${gt.bn}u;
  let tl = wg.y;
  ${ROUND_TILE}
  let t0 = P.tS + tt * ${TT}u;
  let kn = kept * ${VT}u;
  let lb = P.lW + base * ${VT}u;
  let ga = P.gW + base * ${TT * VT}u; // A(m, k): slot base + k / VT, row m, column k % VT
  ${
    gemmMainloop({
      tile: gt,
      a: { dtype: "f32", contig: "k", vec: true },
      b: { dtype: o.dtype, contig: "mn", vec: cVec },
      aBuf: "ws",
      bBuf: "c",
      M: `${TT}u`,
      N: "P.d",
      K: "kn",
      m0: "0u",
      n0: "n0",
      aOff: `ga + (k / ${VT}u) * ${TT * VT - VT}u`,
      sAm: `${VT}u`,
      sAk: "1u",
      bOff: "crow_at(lb + k) * P.d",
      sBn: "1u",
      sBk: "0u",
    })
  }
  ${epilogue.join("\n  ")}
}
`;
}

/** The tensors and segments of a record ({@link PreparedGatheredDE.record}). */
export interface GatheredDEArgs {
  rec: Recorder;
  e: DeviceTensor;
  c: DeviceTensor;
  lse: TrackedBuffer;
  w: TrackedBuffer;
  perm?: TrackedBuffer;
  mask: TrackedBuffer;
  tok: TileSegment[];
  voc: TileSegment[];
  vTotal: number;
  d: number;
  /**
   * The gradients: dE's f32 accumulator is slab part 0 (16-bit gradients, one slab, one part) or
   * the f32 output (one shard); the free storage is dC's first output buffer.
   */
  grads: BackwardGradients;
}

/** Compiled passes of the gathered dE. */
export interface PreparedGatheredDE {
  /** Rounds recorded by the last successful record (0 before any, or after a fallback). */
  lastRounds: number;
  /**
   * Records the plan, then per round pass `kept g` and pass `dE` (their workgroup counts from
   * the plan), and returns true; or records nothing and returns false where the gathered form
   * does not apply (see the module doc).
   */
  record(a: GatheredDEArgs): boolean;
  /** The last record's rounds that held token tiles (reads the plan on the GPU). */
  usedRounds(): Promise<number>;
  /** Frees the plan's buffer. */
  release(): void;
}

/** Options of {@link prepareGatheredDE}. */
export interface GatheredDEPrepareOptions extends GatheredDEKernelOptions {
  /** Tokens n (sizes the plan). */
  n: number;
  /** Cap on slots per round (default: as many as the storage holds; tests force rounds). */
  maxRoundSlots?: number;
}

/** What a caller may set of the gathered dE (tests, tuning); the rest comes from the backward. */
export interface GatheredDETuning {
  /** Cap on slots per round ({@link GatheredDEPrepareOptions.maxRoundSlots}). */
  maxRoundSlots?: number;
  /** The kept g pass's tile ({@link GatheredDEKernelOptions.keptTile}). */
  keptTile?: GemmTile;
  /** The product's tile (default {@link gatheredDETile}). */
  productTile?: GemmTile;
}

/** dE's f32 accumulator: one slab of one part (16-bit gradients) or the one-shard f32 output. */
function _accumulator(o: GatheredDEPrepareOptions, g: BackwardGradients) {
  if (o.accShared) {
    if (g.slabs.length !== 1 || g.parts !== 1) return undefined;
    return g.slabs[0];
  }
  if (g.dEOut.shards.length !== 1 || g.dEOut.dtype !== "f32") return undefined;
  return { buffer: g.dEOut.shards[0].buffer, r0: 0, rows: g.dEOut.rows };
}

/**
 * The slots a round holds (cap), the rounds the worst case needs (every token tile's every vocab
 * tile kept: each round then holds ⌊cap / vocab tiles⌋ token tiles, and the plan's greedy rounds
 * never need more), and the word offsets of the row lists and slots in the free buffer.
 */
function _layout(
  o: GatheredDEPrepareOptions,
  a: GatheredDEArgs,
  sizes: { nVT: number; tTotal: number; maxBindingBytes: number },
) {
  const { nVT, tTotal } = sizes;
  const acc = _accumulator(o, a.grads);
  if (!acc) return undefined;
  const free = a.grads.dCOut.shards[0].buffer;
  const shared = acc.buffer === free;
  if (shared !== o.accShared || acc.r0 !== 0 || acc.rows < a.tok[0].end) return undefined;
  const start = shared ? Math.ceil((acc.rows * a.d * 4) / 256) * 256 : 0;
  const end = Math.min(free.size, sizes.maxBindingBytes);
  const VT = o.tile.vocab;
  const cap = Math.min(
    Math.floor((end - start - 256) / (VT * 4 + slotBytes(o.tile))),
    o.maxRoundSlots ?? Infinity,
  );
  if (cap < nVT) return undefined;
  const rounds = Math.ceil(tTotal / Math.min(Math.floor(cap / nVT), 65535));
  const lW = start / 4;
  const gW = lW + Math.ceil((cap * VT * 4) / 256) * 64;
  return { cap, rounds, lW, gW, acc, free };
}

/**
 * WGSL of pass `dE plan` (one workgroup): counts each token tile's kept tiles, packs the token
 * tiles in order into rounds of at most `cap` slots (a round closes when the next tile would
 * overflow it, or at 65,535 token tiles: a dispatch's y), and writes per round r the workgroup
 * counts of its kept g and dE dispatches (words 6r…6r+5: the token tiles as y, 0 for rounds past
 * the last), its first token tile (word 6R + r), and per token tile its first slot in its round
 * and its kept tiles (words 7R + 2·tile and 7R + 2·tile + 1: pass dE reads the count there).
 */
export function gatheredPlanWgsl(): string {
  return `${PLAN_SIG.wgsl}
${BITS_IN}
fn close_round(r: u32, first: u32, count: u32) {
  plan[6u * r] = P.gX; plan[6u * r + 1u] = count; plan[6u * r + 2u] = 1u;
  plan[6u * r + 3u] = P.dX; plan[6u * r + 4u] = count; plan[6u * r + 5u] = 1u;
  plan[6u * P.nR + r] = first;
}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32) {
  for (var tt = lid; tt < P.T; tt += 256u) {
    let rs = (P.tBase + tt) * P.vTotal + P.vBase;
    var c = 0u;
    for (var wi = rs >> 5u; wi <= (rs + P.nVT - 1u) >> 5u; wi++) { c += bits_in(rs, rs + P.nVT, wi); }
    plan[7u * P.nR + 2u * tt + 1u] = c;
  }
  storageBarrier();
  if (lid == 0u) {
    var r = 0u;
    var first = 0u;
    var used = 0u;
    for (var tt = 0u; tt < P.T; tt++) {
      let c = plan[7u * P.nR + 2u * tt + 1u];
      if ((used + c > P.cap || tt - first == 65535u) && tt > first) {
        close_round(r, first, tt - first);
        r++;
        first = tt;
        used = 0u;
      }
      plan[7u * P.nR + 2u * tt] = used;
      used += c;
    }
    close_round(r, first, P.T - first);
    for (r++; r < P.nR; r++) { close_round(r, P.T, 0u); }
  }
}
`;
}

/** Compiles the three passes and makes the plan's buffer (9 words a token tile). */
export async function prepareGatheredDE(
  ctx: GpuContext,
  o: GatheredDEPrepareOptions,
): Promise<PreparedGatheredDE> {
  const planPass = await compileKernel(
    ctx,
    PLAN_SIG,
    gatheredPlanWgsl(),
    "fused_backward_dE_plan",
  );
  const gSig = _keptGradSignature(o);
  const gPass = await compileKernel(ctx, gSig, keptGradWgsl(o), "fused_backward_kept_g");
  const gemm = await compileKernel(
    ctx,
    _gatheredDESignature(o),
    gatheredDEWgsl(o),
    "fused_backward_gathered_dE",
  );
  const tMax = Math.ceil(o.n / o.tile.tokens);
  const plan = createTensor(ctx, {
    dtype: "u32",
    rows: 9 * tMax,
    cols: 1,
    role: "workspace",
    label: "gathered dE plan",
    usage: GPUBufferUsage.INDIRECT,
  });
  const pb = plan.shards[0].buffer;
  const prepared: PreparedGatheredDE = {
    lastRounds: 0,
    record(a) {
      prepared.lastRounds = 0;
      const [ts, vs] = [a.tok[0], a.voc[0]];
      const oneBinding = (t: DeviceTensor) => t.shards.length === 1;
      if (a.tok.length !== 1 || a.voc.length !== 1 || !oneBinding(a.e) || !oneBinding(a.c)) {
        return false;
      }
      if (vs.tiles > 65535 || vs.end > 2 ** 24 || ts.tiles > tMax) return false;
      const lay = _layout(o, a, {
        nVT: vs.tiles,
        tTotal: ts.tiles,
        maxBindingBytes: ctx.maxBindingBytes,
      });
      if (!lay) return false;
      const { rec } = a;
      const dX = Math.ceil(a.d / o.gemmTile.bn);
      const q = {
        T: ts.tiles,
        nVT: vs.tiles,
        cap: lay.cap,
        nR: lay.rounds,
        tBase: ts.base,
        vTotal: a.vTotal,
        vBase: vs.base,
        gX: vs.tiles,
        dX,
      };
      rec.pass("fused backward dE plan", (p) => {
        p.dispatch(planPass.pipeline, planPass.bind(rec, q, { mask: a.mask, plan: pb }), 1);
      });
      const eb = a.e.shards[0].buffer, cb = a.c.shards[0].buffer;
      for (let r = 0; r < lay.rounds; r++) {
        // E, C and dE are one binding each from row 0 (see `record`'s conditions)
        const P = gSig.uniform(rec, {
          tS: ts.start,
          tE: ts.end,
          eR0: 0,
          vS: vs.start,
          vE: vs.end,
          cR0: 0,
          oR0: 0,
          d: a.d,
          tBase: ts.base,
          vBase: vs.base,
          vTotal: a.vTotal,
          nVT: vs.tiles,
          round: r,
          gW: lay.gW,
          lW: lay.lW,
          nR: lay.rounds,
        }, "gathered dE params");
        rec.pass("fused backward kept g", (p) => {
          const bg = gPass.bind(rec, P, {
            e: eb,
            c: cb,
            lse: a.lse,
            w: a.w,
            perm: a.perm,
            mask: a.mask,
            plan: pb,
            ws: lay.free,
          });
          p.dispatchIndirect(gPass.pipeline, bg, pb, 24 * r);
        });
        rec.pass("fused backward dE", (p) => {
          const bg = gemm.bind(rec, P, {
            c: cb,
            w: a.w,
            plan: pb,
            ws: lay.free,
            acc: o.accShared ? undefined : lay.acc.buffer,
          });
          p.dispatchIndirect(gemm.pipeline, bg, pb, 24 * r + 12);
        });
      }
      prepared.lastRounds = lay.rounds;
      return true;
    },
    async usedRounds() {
      const words = await download(ctx, plan);
      let used = 0;
      for (let r = 0; r < prepared.lastRounds; r++) if (words[6 * r + 1] > 0) used++;
      return used;
    },
    release() {
      plan.destroy();
    },
  };
  return prepared;
}
