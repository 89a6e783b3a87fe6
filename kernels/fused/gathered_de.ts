/**
 * dE of the fused backward's kept tiles as one dense product per token tile (issue 17, item 1):
 * the kept tiles are gathered instead of walked one by one.
 *
 * The per-tile dE pass (kernels/fused/kept_tiles.ts) recomputes a kept tile's logits and then adds
 * P·C[vocab tile, :] into its token rows in d chunks, each a product of depth VT with a
 * read-modify-write of the f32 accumulator: on the `llm` fixture (38% of tiles kept) it ran at a
 * third of the plain product's rate. Here the same work is two dense products (H100, `llm`: 5.2 +
 * 7.1 ms against 23.7 for the per-tile pass, 19.4 with its product's 16-byte loads of C: the
 * recompute and the product at 29 TFLOP/s, 64% of the plain product's 45.6; at the paper's shape,
 * 0.05% of tiles kept, the 8 rounds cost 2.3 ms against 0.8: reports/README.md, session 8):
 *
 * 1. pass `kept g` ({@link keptGradWgsl}): one workgroup per (vocab tile, token tile) of a round
 *    (or per {@link KEPT_CHUNK} vocab tiles); a tile the mask keeps recomputes its TT×VT logits
 *    and stores the unweighted gradient g (see gradValue in kernels/fused/backward_wgsl.ts) in
 *    *slot* `rank` of its token tile, rank being the count of kept tiles before it in the token
 *    tile's mask row (so slots follow the vocab order), and the C rows of its VT entries in the
 *    token tile's *row list* (through the vocab order when sorting; as f32, exact below 2²⁴).
 *    Skipped tiles return at once.
 * 2. pass `dE` ({@link gatheredDEWgsl}): one workgroup per (token tile, BN columns of d) computes
 *    Σ_j g[slot j]·C[rows of slot j, columns] as a product of depth (kept tiles)·VT, the B
 *    operand's rows gathered through the row list (one dependent load), and adds w_n times it
 *    into dE's f32 accumulator (which already holds the exact terms: kernels/fused/corrections.ts).
 *
 * Storage: no memory of its own. dE is formed completely before dC's storage is first written
 * (see "Gradient dtype" in kernels/fused/backward_plan.ts), so the slots and row lists live in dC's
 * first output buffer, behind dE's f32 accumulator when that is there too. Slots are sized for the
 * worst case (every tile kept): a round covers as many token tiles as the storage holds that way,
 * so nothing can overflow and nothing is read back (bf16 gradients at the paper's shape: 8 token
 * tiles a round, 8 rounds; on `llm` 4096×24,576×2304: 5 a round, 7 rounds; f32 gradients 17 a
 * round, 4 and 2 rounds). g is stored in f32: in f16 a confident token's p ≈ 1 at its target would
 * keep only 2⁻¹² of 1 − p, which the exact target term −(1 − β) cancels (tried: bf16 dE off by 1.5
 * output roundings on a peaked fixture).
 *
 * Order and ownership: every output element is owned by one workgroup of one dispatch, its kept
 * tiles added in vocab order in one accumulator: bitwise reproducible, no atomics on floats (the
 * only atomic counts mask bits in workgroup memory).
 *
 * Where it applies ({@link PreparedGatheredDE.record} returns false otherwise and the caller runs
 * the per-tile pass): one binding each of E, C, dE and dC (one token and one vocab segment), VT a
 * multiple of 8, and dC's first buffer holding at least one token tile's slots.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
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
  WgslBindings,
} from "./backward_wgsl.ts";

/** Options of the two kernels. */
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
  /** `kept g`: vocab tiles a workgroup walks (default {@link KEPT_CHUNK}). */
  keptChunk?: number;
}

/**
 * Vocab tiles a workgroup of pass `kept g` looks at (⌈tiles/CH⌉ apart: its mask bits read at once,
 * the kept ones computed in turn): fewer workgroups that find nothing where few tiles are kept.
 */
export const KEPT_CHUNK = 1;

/**
 * The product tile of pass `dE`: for 128-token tiles on hardware 128×32 (8×4 a thread, 16-byte
 * loads, [k][row] staging; tuned on the H100, see reports/README.md), else TT×64 with at most 256
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

const PARAMS =
  `struct Params { tS: u32, tE: u32, eR0: u32, vS: u32, vE: u32, cR0: u32, oR0: u32, d: u32,
  tBase: u32, vBase: u32, vTotal: u32, nVT: u32, tt0: u32, gW: u32, lW: u32, aW: u32 };`;

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

/** The mask helpers and the workgroup words they use. */
function _maskDecls(): string {
  return `var<workgroup> s_cnt: atomic<u32>;
var<workgroup> s_val: u32;
fn bits_in(lo: u32, hi: u32, wi: u32) -> u32 {
  let a = max(lo, wi * 32u);
  let b = min(hi, wi * 32u + 32u);
  if (b <= a) { return 0u; }
  let n = b - a;
  let word = mask[wi] >> (a & 31u);
  return countOneBits(select(word & ((1u << n) - 1u), word, n == 32u));
}`;
}

/**
 * WGSL of pass `kept g` (see the module doc). Grid: (⌈vocab tiles of the segment / chunk⌉, token
 * tiles of the round). Bindings: P, e, c, lse, w, [perm], mask, ws (the slots and row lists, u32 words).
 */
export function keptGradWgsl(o: GatheredDEKernelOptions): string {
  const t = o.keptTile ?? { ...backwardGemmTiles(o.tile).dE, stage2d: true };
  validateTile(t);
  if (t.bm !== o.tile.tokens || t.bn !== o.tile.vocab) {
    throw new RangeError(`kept g: tile ${JSON.stringify(t)} is not the backward tile's TT×VT`);
  }
  const TT = o.tile.tokens, VT = o.tile.vocab, threads = tileThreads(t);
  const CH = o.keptChunk ?? KEPT_CHUNK;
  if (!Number.isInteger(CH) || CH < 1 || CH > 32) {
    throw new RangeError(`kept g: chunks of ${CH} vocab tiles (1 to 32)`);
  }
  const vec = o.vecLoads === true;
  const st = wgslStorageType(o.dtype, vec);
  const b = new WgslBindings();
  b.add("uniform> P: Params");
  b.add(`storage, read> e: array<${st}>`);
  b.add(`storage, read> c: array<${st}>`);
  b.add("storage, read> lse: array<f32>");
  b.add("storage, read> w: array<f32>");
  if (o.sort) b.add("storage, read> perm: array<u32>");
  b.add("storage, read> mask: array<u32>");
  b.add("storage, read_write> ws: array<u32>");
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
${PARAMS}
${b}
${dtypeHelpers([{ name: "e", dtype: o.dtype, vec }, { name: "c", dtype: o.dtype, vec }])}
${gemmShared({ tile: t })}
${_maskDecls()}
${o.sort ? `var<workgroup> s_rows: array<u32, ${VT}>;` : ""}
@compute @workgroup_size(${threads})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(t)}
  ${accVecs(t).map((v) => `var ${v}: vec4<f32>;`).join(" ")}
  // vocab tiles wg.x + i·stride, i < CH: the kept tiles of a cluster (sorting gathers them) land
  // in different workgroups
  let stride = (P.nVT + ${CH - 1}u) / ${CH}u;
  let tl = wg.y;
  let tt = P.tt0 + tl;
  let t0 = P.tS + tt * ${TT}u;
  let rs = (P.tBase + tt) * P.vTotal + P.vBase;
  if (lid == 0u) {
    var bits = 0u;
    for (var i = 0u; i < ${CH}u; i++) {
      let vt = wg.x + i * stride;
      if (vt < P.nVT) { bits = bits | (((mask[(rs + vt) >> 5u] >> ((rs + vt) & 31u)) & 1u) << i); }
    }
    s_val = bits;
  }
  var rem = workgroupUniformLoad(&s_val);
  loop {
    if (rem == 0u) { break; }
    let vt = wg.x + countTrailingZeros(rem) * stride;
    rem = rem & (rem - 1u);
    ${_countBits("rank", "rs", "rs + vt", threads)}
    let v0 = P.vS + vt * ${VT}u;
    workgroupBarrier(); // s_rows and the staging are rewritten
    ${
    o.sort
      ? `for (var i = lid; i < ${VT}u; i += ${threads}u) { s_rows[i] = perm[min(v0 + i, P.vE - 1u)]; }
    workgroupBarrier();`
      : ""
  }
    ${accVecs(t).map((v) => `${v} = vec4<f32>(0.0);`).join(" ")}
    {
    ${logitsMainloop({ tile: t, dtype: o.dtype, crow, tokenRows: true, vec }, false)}
    }
    ${laneValues(lanes.rows, lanes.cols).join("\n    ")}
    let slot = tl * P.nVT + rank;
    let gb = P.gW + slot * ${slotWords(o)}u;
    ${stores.join("\n    ")}
    // the C row (relative to its binding) of each of the slot's VT depths in pass dE
    for (var i = lid; i < ${VT}u; i += ${threads}u) { ws[P.lW + slot * ${VT}u + i] = bitcast<u32>(f32(${
    o.sort ? "s_rows[i]" : "min(v0 + i, P.vE - 1u)"
  } - P.cR0)); }
  }
}
`;
}

/** u32 words of a slot. */
function slotWords(o: GatheredDEKernelOptions): number {
  return slotBytes(o.tile) / 4;
}

/**
 * WGSL of pass `dE` (see the module doc). Grid: (⌈d/BN⌉, token tiles of the round). Bindings: P,
 * c, w, [perm], mask, ws (slots, lists, and with `accShared` dE's f32 accumulator, as 16-byte
 * words), [acc] (dE's f32 accumulator, without `accShared`).
 */
export function gatheredDEWgsl(o: GatheredDEKernelOptions): string {
  const gt = o.gemmTile;
  validateTile(gt);
  const TT = o.tile.tokens, VT = o.tile.vocab, threads = tileThreads(gt);
  if (gt.bm !== TT) throw new RangeError(`gathered dE: tile rows ${gt.bm} ≠ ${TT} tokens`);
  if (VT % 4 !== 0) throw new RangeError(`gathered dE: ${VT} vocab entries a tile`);
  const cVec = o.cVec === true;
  const b = new WgslBindings();
  b.add("uniform> P: Params");
  b.add(`storage, read> c: array<${wgslStorageType(o.dtype, cVec)}>`);
  b.add("storage, read> w: array<f32>");
  b.add("storage, read> mask: array<u32>");
  b.add("storage, read_write> ws: array<vec4<f32>>");
  if (!o.accShared) b.add("storage, read_write> acc: array<f32>");
  const add = o.accShared
    ? "let i = P.aW + j; ws[i >> 2u][i & 3u] = ws[i >> 2u][i & 3u] + x;"
    : "acc[j] = acc[j] + x;";
  const epilogue = accSlots(gt).map((x) =>
    `{ let tk = t0 + ${x.row}; let col = n0 + ${x.col}; if (tk < P.tE && col < P.d) { acc_add((tk - P.oR0) * P.d + col, w[tk] * ${x.expr}); } }`
  );
  return `${enableDirectives([o.dtype])}
${PARAMS}
${b}
${dtypeHelpers([{ name: "c", dtype: o.dtype, vec: cVec }])}
${gemmShared({ tile: gt })}
${_maskDecls()}
/** The C row of gathered depth i of the round's lists (written by pass kept g). */
fn crow_at(i: u32) -> u32 { return u32(ws[i >> 2u][i & 3u]); }
fn acc_add(j: u32, x: f32) { ${add} }
@compute @workgroup_size(${threads})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(gt)}
  let n0 = wg.x * ${gt.bn}u;
  let tl = wg.y;
  let tt = P.tt0 + tl;
  let t0 = P.tS + tt * ${TT}u;
  let rs = (P.tBase + tt) * P.vTotal + P.vBase;
  ${_countBits("kept", "rs", "rs + P.nVT", threads)}
  let kn = kept * ${VT}u;
  let lb = P.lW + tl * P.nVT * ${VT}u;
  let ga = P.gW + tl * P.nVT * ${TT * VT}u; // A(m, k): slot k / VT, row m, column k % VT
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

/** Where dE's f32 accumulator and the free storage are, for {@link PreparedGatheredDE.record}. */
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
  /** Binding limit in bytes. */
  maxBindingBytes: number;
}

/** Compiled passes of the gathered dE. */
export interface PreparedGatheredDE {
  /** Token tiles a round covers at most ({@link GatheredDEPrepareOptions.maxRoundTiles}). */
  readonly maxRoundTiles: number;
  /** Rounds of the last successful record (0 before any, or after a fallback). */
  lastRounds: number;
  /**
   * Records the rounds (pass `kept g`, then pass `dE`, per round) and returns true, or records
   * nothing and returns false where the gathered form does not apply (see the module doc).
   */
  record(a: GatheredDEArgs): boolean;
}

/** Options of {@link prepareGatheredDE}. */
export interface GatheredDEPrepareOptions extends GatheredDEKernelOptions {
  /** Cap on token tiles per round (default: as many as the storage holds; tests force rounds). */
  maxRoundTiles?: number;
}

/** What a caller may set of the gathered dE (tests, tuning); the rest comes from the backward. */
export interface GatheredDETuning {
  /** Cap on token tiles per round ({@link GatheredDEPrepareOptions.maxRoundTiles}). */
  maxRoundTiles?: number;
  /** The kept g pass's tile and chunk ({@link GatheredDEKernelOptions}). */
  keptTile?: GemmTile;
  keptChunk?: number;
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

/** The round size and the word offsets of the lists and slots in the free buffer. */
function _layout(o: GatheredDEPrepareOptions, a: GatheredDEArgs, nVT: number, tTotal: number) {
  const acc = _accumulator(o, a.grads);
  if (!acc) return undefined;
  const free = a.grads.dCOut.shards[0].buffer;
  const shared = acc.buffer === free;
  if (shared !== o.accShared || acc.r0 !== 0 || acc.rows < a.tok[0].end) return undefined;
  const start = shared ? Math.ceil((acc.rows * a.d * 4) / 256) * 256 : 0;
  const end = Math.min(free.size, a.maxBindingBytes);
  const perTile = nVT * (o.tile.vocab * 4 + slotBytes(o.tile));
  let round = Math.floor((end - start - 256) / perTile);
  round = Math.min(round, tTotal, o.maxRoundTiles ?? tTotal, 65535);
  if (round < 1) return undefined;
  const lW = start / 4;
  const gW = lW + Math.ceil((round * nVT * o.tile.vocab * 4) / 256) * 64;
  return { round, lW, gW, acc, free };
}

/** Compiles the two passes. */
export async function prepareGatheredDE(
  ctx: GpuContext,
  o: GatheredDEPrepareOptions,
): Promise<PreparedGatheredDE> {
  const gPass = await ctx.pipeline(keptGradWgsl(o), "fused_backward_kept_g");
  const gemm = await ctx.pipeline(gatheredDEWgsl(o), "fused_backward_gathered_dE");
  const prepared: PreparedGatheredDE = {
    maxRoundTiles: o.maxRoundTiles ?? Infinity,
    lastRounds: 0,
    record(a) {
      prepared.lastRounds = 0;
      const [ts, vs] = [a.tok[0], a.voc[0]];
      const oneBinding = (t: DeviceTensor) => t.shards.length === 1;
      if (a.tok.length !== 1 || a.voc.length !== 1 || !oneBinding(a.e) || !oneBinding(a.c)) {
        return false;
      }
      if (vs.tiles > 65535 || vs.end > 2 ** 24) return false;
      const lay = _layout(o, a, vs.tiles, ts.tiles);
      if (!lay) return false;
      const { rec } = a;
      const rounds = Math.ceil(ts.tiles / lay.round);
      for (let r = 0; r < rounds; r++) {
        const tt0 = r * lay.round;
        const count = Math.min(lay.round, ts.tiles - tt0);
        const u = rec.uniform(
          new Uint32Array([
            ts.start,
            ts.end,
            0,
            vs.start,
            vs.end,
            0,
            0,
            a.d,
            ts.base,
            vs.base,
            a.vTotal,
            vs.tiles,
            tt0,
            lay.gW,
            lay.lW,
            0,
          ]),
          "gathered dE params",
        );
        const tail = a.perm ? [a.perm, a.mask] : [a.mask];
        const eb = a.e.shards[0].buffer, cb = a.c.shards[0].buffer;
        rec.pass("fused backward kept g", (p) => {
          const bg = rec.bindGroup(gPass, [u, eb, cb, a.lse, a.w, ...tail, lay.free]);
          p.dispatch(gPass, bg, Math.ceil(vs.tiles / (o.keptChunk ?? KEPT_CHUNK)), count);
        });
        rec.pass("fused backward dE", (p) => {
          const acc = o.accShared ? [] : [lay.acc.buffer];
          const bg = rec.bindGroup(gemm, [u, cb, a.w, a.mask, lay.free, ...acc]);
          p.dispatch(gemm, bg, Math.ceil(a.d / o.gemmTile.bn), count);
        });
      }
      prepared.lastRounds = rounds;
      return true;
    },
  };
  return prepared;
}
