/**
 * WGSL of the gathered dE of the fused backward (kernels/fused/gathered_de.ts): passes `dE plan`,
 * `kept g` and `dE`, and their signatures.
 * @module
 */
import type { Dtype, LceOptions } from "../../core/options.ts";
import {
  accSlots,
  accVecs,
  gemmMainloop,
  gemmShared,
  gemmThreadCoords,
  type GemmTile,
  tileThreads,
  validateTile,
} from "../gemm_codegen.ts";
import { dtypeHelpers, enableDirectives, lossConstants, wgslStorageType } from "../wgsl_common.ts";
import { backwardGemmTiles, type BackwardTile } from "./backward_tiles.ts";
import {
  colKey,
  gradValue,
  laneValues,
  logitsMainloop,
  rowKey,
  tileLanes,
} from "./backward_wgsl.ts";
import { signature, u32s } from "../../gpu/signature.ts";

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
const PARAMS = u32s("tS tE eR0 vS vE cR0 oR0 d tBase vBase vTotal nVT round gW lW nR");

/**
 * Pass `kept g`'s signature: E, C, lse, the row weights w, [perm], the mask, the plan, ws (the
 * free storage: the slots and row lists, u32 words).
 */
export function keptGradSignature(o: GatheredDEKernelOptions) {
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
export function gatheredDESignature(o: GatheredDEKernelOptions) {
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
export const PLAN_SIG = signature({
  params: u32s("T nVT cap nR tBase vTotal vBase gX dX"),
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
${keptGradSignature(o).wgsl}
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
${gatheredDESignature(o).wgsl}
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
