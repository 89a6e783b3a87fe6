/**
 * The gradient passes of the fused backward (kernels/fused/backward.ts): they recompute the logits
 * of the tiles the filter keeps (every tile without it) and add their products into dE and dC, each
 * output element owned by one workgroup.
 *
 * - pass `dE` ({@link tilePassWgsl}, kind "dE"; with the filter only where the gathered dE of
 *   kernels/fused/gathered_de.ts does not apply): one workgroup owns a *row slice* of a token tile
 *   (TT/R tokens, R "row slices" per backward tile) and one split, and walks its vocab tiles in
 *   order, 32 mask bits at a time (jumping to the next kept tile: a skipped tile costs no barrier);
 *   for the tiles the mask keeps (the bit of the backward tile holding the slice: conservative for
 *   the slice, so still exact) it recomputes the slice's logits, forms P and adds P·C[vocab tile,
 *   :] into its dE rows, d in chunks of VT columns. The splits are the grid's y dimension (one
 *   dispatch, so they run side by side: dispatches writing one buffer would be ordered one after
 *   the other); split s accumulates into part s of the f32 slabs (part 0 holds the exact terms with
 *   a 16-bit output; the other parts, and all with an f32 output, start at zero; one split into f32
 *   accumulates into dE itself). With the filter the splits are runs of equal kept-tile counts
 *   (balanced however the kept tiles cluster), without it S contiguous ranges of vocab tiles.
 * - the partials are added to dE in split order (kernels/fused/slab_reduce.ts), and dE is cast to
 *   its 16-bit output.
 * - after dC's exact terms, pass `dC` ({@link tilePassWgsl}, kind "dC"): one workgroup owns a vocab
 *   tile (VT classifier rows, in sorted order when sorting; with the filter workgroup slot i takes
 *   the tile with the i-th most kept token tiles: kernels/fused/dc_order.ts, since a workgroup
 *   walks its tile's kept token tiles one after the other) and walks the token tiles in order; for
 *   each tile the mask keeps (every tile without the filter) it recomputes the VT×TT logits with
 *   the generated GEMM over d, forms Pᵀ in registers, stages it in workgroup memory and adds
 *   Pᵀ·E[token tile, :] into its own dC rows, d in chunks (read-modify-write: the rows belong to
 *   this workgroup only), E read from storage (`dCDirect`, kernels/fused/dc_product.ts) or
 *   staged by the GEMM generator's mainloop.
 *   With `split` (kernels/fused/dc_split.ts) a long walk is cut into segments, each its own
 *   workgroup: segment 0 adds into the tile's rows, the others write partials into the rows of
 *   vocab tiles no token tile keeps (each such row written by that segment only).
 *
 * The passes' records: kernels/fused/kept_tiles_record.ts.
 *
 * Parallelism of the dE pass (n/TT token tiles: 64 at the paper's shape, half an H200's SMs): S
 * splits give S times the workgroups and need n·d·4 bytes of partials per split, which live in
 * dC's storage while dE is formed, so they cost no workspace where |V| ≥ 2·S·n
 * ({@link dESlabsFitDC}); R row slices give R times the workgroups with no workspace (disjoint dE
 * rows, the same mask bit and flops) but each kept C tile is read R times and a thread holds 4×4
 * logits. Splitting P·C's d columns instead would recompute every kept tile once per column group,
 * so it is not used. Defaults: with the filter the splits first ({@link defaultFilteredDESplits}:
 * S = 4, R = 1 at the paper's shape), as many as dC's storage holds, then row slices
 * ({@link defaultDERowSlices}); without the filter S = 4, R = 1 ({@link defaultDESplits}).
 * @module
 */
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
import { type Dtype16, wgslFrom16, wgslTo16 } from "../cast16.ts";
import {
  backwardGemmTiles,
  backwardGradTiles,
  backwardStaging,
  dESliceTile,
} from "./backward_tiles.ts";
import {
  colKey,
  gradValue,
  type Lane,
  laneValues,
  logitsMainloop,
  rowKey,
  tileLanes,
} from "./backward_wgsl.ts";
import { signature, u32s } from "../../gpu/signature.ts";
import { firstEmptyWgsl } from "./dc_split.ts";
import type { TilePassKernelOptions } from "./kept_tiles_options.ts";
export type { TilePassKernelOptions } from "./kept_tiles_options.ts";
import { dCDirectProductWgsl, dCDirectPsDecl, dCDirectPsStore } from "./dc_product.ts";

/** What the tile pass's pieces are decided from (one place per switch). */
interface _TileShape {
  o: TilePassKernelOptions;
  dE: boolean;
  slices: number;
  TT: number;
  VT: number;
  /** Logits and gradient-product GEMM tiles. */
  t: GemmTile;
  gt: GemmTile;
  filter: boolean;
  vec: boolean;
  /** dC only: the packed 16-bit output. */
  out16?: Dtype16;
  nSplits: number;
  balanced: boolean;
  /** The dE pass with the filter walks its mask row 32 bits at a time. */
  wordWalk: boolean;
  /** WGSL of the owned tile's token tile index. */
  tokTile: string;
  /** dC: the owned vocab tile comes from `order` ({@link TilePassKernelOptions.ordered}). */
  ordered: boolean;
  /** dC: the target terms of kept tiles are added here ({@link TilePassKernelOptions.foldTargets}). */
  fold: boolean;
  /** dC ordered: long walks split ({@link TilePassKernelOptions.split}). */
  split: boolean;
  /** dC: the direct gradient product ({@link TilePassKernelOptions.dCDirect}). */
  direct: boolean;
}

function _tileShape(o: TilePassKernelOptions): _TileShape {
  const dE = o.kind === "dE";
  const slices = dE ? o.rowSlices ?? 1 : 1;
  const tile = dE ? dESliceTile(o.tile, slices) : o.tile;
  const lt = backwardGemmTiles(tile)[o.kind];
  const t = !dE && o.dCDirect && o.dCStage2d ? { ...lt, stage2d: true } : lt;
  const gt = backwardGradTiles(tile)[o.kind];
  validateTile(t);
  validateTile(gt);
  const filter = o.eps !== null;
  // bf16 with d a multiple of 8: E and C bound as 16-byte vectors, the logits product loads 16
  // bytes along k, the gradient product 16 bytes along d
  const vec = o.vecLoads === true;
  if (vec && o.dtype !== "bf16") throw new RangeError("tile pass: vector loads only for bf16");
  const nSplits = dE ? o.splits ?? 1 : 1;
  return {
    o,
    dE,
    slices,
    TT: tile.tokens,
    VT: tile.vocab,
    t,
    gt,
    filter,
    vec,
    out16: !dE ? o.out16 : undefined,
    nSplits,
    balanced: dE && filter && o.balanced === true && nSplits > 1,
    // The dE pass walks a row of the mask (consecutive bits): it reads 32 tiles' bits at once and
    // jumps to the next kept tile, so a skipped tile costs no barrier (the dC pass walks a column:
    // one bit per token tile, a few dozen at most).
    wordWalk: filter && dE,
    tokTile: dE ? (slices === 1 ? "ot" : `ot / ${slices}u`) : "it",
    ordered: !dE && filter && o.ordered === true,
    fold: !dE && o.foldTargets === true,
    split: !dE && filter && o.ordered === true && o.split === true,
    direct: !dE && o.dCDirect === true,
  };
}

/**
 * The signature of a tile pass: the token segment [tS, tE) of E's binding from row eR0, the vocab
 * segment [vS, vE) (positions) of C's from cR0, the output binding's first row oR0, depth d, the
 * segments' first global tiles tBase and vBase, vTotal vocab tiles in all, nOuter owned tiles or
 * slices, lo and hi (the walked tiles; dE: 0 and the segment's tiles, cut by the splits), sRows
 * (dE: rows between the splits' slab parts). Bindings: E, C, the output (16-bit: words, 4 a vector
 * with the direct product's 16-byte loads), lse, the row weights w, [perm], [mask] (one bit per
 * backward tile, from the filter pass), [bounds] (balanced splits), [order] (the dC pass's tile
 * order), [targets, coef, folded] (dC with foldTargets).
 */
function _tileSignature(s: _TileShape) {
  const st = wgslStorageType(s.o.dtype, s.vec);
  const out = s.out16 ? (s.direct && s.vec ? "vec4<u32>" : "u32") : "f32";
  return signature({
    params: u32s("tS tE eR0 vS vE cR0 oR0 d tBase vBase vTotal nOuter lo hi sRows"),
    bindings: {
      e: { elem: st, access: "read" },
      c: { elem: st, access: "read" },
      outp: { elem: out, access: "read_write" },
      lse: { elem: "f32", access: "read" },
      w: { elem: "f32", access: "read" },
      perm: { elem: "u32", access: "read", when: s.o.sort },
      mask: { elem: "u32", access: "read", when: s.filter },
      bounds: { elem: "u32", access: "read", when: s.balanced },
      order: { elem: "u32", access: "read", when: s.ordered },
      targets: { elem: "i32", access: "read", when: s.fold },
      coef: { elem: "f32", access: "read", when: s.fold },
      folded: { elem: "u32", access: "read_write", when: s.fold },
    },
    layout: { pad: ["_b"], breaks: [8] },
  });
}

/** The signature of the tile pass of these options. */
export function tilePassSignature(o: TilePassKernelOptions) {
  return _tileSignature(_tileShape(o));
}

/**
 * Vocabulary rows: sorted, the vocab tile's rows perm[v0 … v0 + VT) are read once per tile into
 * s_rows (every C load of the products would otherwise read perm again); x is in
 * [v0, min(v0 + VT, vE)). `loadRows` fills s_rows (empty without sorting).
 */
function _vocabRows(s: _TileShape) {
  const vrow = (x: string) => (s.o.sort ? `s_rows[(${x}) - v0]` : `(${x})`);
  const crow = (x: string) => `(${vrow(x)} - P.cR0)`;
  const loadRows = s.o.sort
    ? `for (var i = lid; i < ${s.VT}u; i += ${
      tileThreads(s.t)
    }u) { s_rows[i] = perm[min(v0 + i, P.vE - 1u)]; }
      workgroupBarrier();`
    : "";
  return { vrow, crow, loadRows };
}

/** Lane values, w_n·g per logit, and P staged in workgroup memory. */
function _tileEpilogue(s: _TileShape, vrow: (x: string) => string): string {
  const slots = accSlots(s.t);
  const lanes = tileLanes(slots);
  const [tok, voc] = s.dE ? [lanes.rows, lanes.cols] : [lanes.cols, lanes.rows];
  const [tokKey, vocKey] = s.dE ? [rowKey, colKey] : [colKey, rowKey];
  const epilogue = slots.map((x) => {
    const tk = tokKey(x), vk = vocKey(x);
    const fold = s.fold
      ? `\n        if (vv_${vk} && u32(tt_${tk}) == vr_${vk}) { ${x.expr} = ${x.expr} + ta_${tk}; folded[tk_${tk}] = 1u; }`
      : "";
    return `{ let z = softcap(${x.expr}); var g = 0.0;
        if (tw_${tk} != 0.0 && vv_${vk}) { g = ${gradValue(s.o.opts, "z", `tl_${tk}`)}; }
        ${x.expr} = tw_${tk} * g;${fold} }`;
  });
  const stage = slots.map((x) =>
    s.direct
      ? dCDirectPsStore(s.t, x.row, x.col, x.expr)
      : `Ps[${x.row} * ${s.t.bn}u + ${x.col}] = ${x.expr};`
  );
  return [...laneValues(tok, voc), ..._foldLanes(s, tok, voc, vrow), ...epilogue, ...stage].join(
    "\n      ",
  );
}

/**
 * dC with foldTargets: per token lane its target tt_ (−1 past P.tE) and coefficient ta_, per
 * vocabulary lane its classifier row vr_ (see {@link TilePassKernelOptions.foldTargets}).
 */
function _foldLanes(s: _TileShape, tok: Lane[], voc: Lane[], vrow: (x: string) => string) {
  if (!s.fold) return [];
  return [
    ...tok.map((l) =>
      `let tt_${l.key} = select(-1, targets[min(tk_${l.key}, P.tE - 1u)], tk_${l.key} < P.tE); let ta_${l.key} = coef[min(tk_${l.key}, P.tE - 1u)];`
    ),
    ...voc.map((l) => `let vr_${l.key} = ${vrow(`min(v0 + ${l.expr}, P.vE - 1u)`)};`),
  ];
}

/** Per output row lane: ov_ (inside the segment) and ob_ (its offset in the output binding). */
function _outRows(s: _TileShape, vrow: (x: string) => string): string {
  return tileLanes(accSlots(s.t)).rows.map((l) =>
    s.dE
      ? `let ov_${l.key} = (t0 + ${l.expr}) < P.tE; let ob_${l.key} = select(0u, (t0 + ${l.expr} - oR0) * P.d, ov_${l.key});`
      : `let ov_${l.key} = (v0 + ${l.expr}) < P.vE; let ob_${l.key} = select(0u, (${
        s.split
          ? _outRow(s, `min(o0 + ${l.expr}, P.vE - 1u)`)
          : vrow(`min(v0 + ${l.expr}, P.vE - 1u)`)
      } - P.oR0) * P.d, ov_${l.key});`
  ).join("\n    ");
}

/** dC split: the output tile's row at position x (a borrowed tile's own rows through s_orows). */
function _outRow(s: _TileShape, x: string): string {
  return s.o.sort ? `s_orows[(${x}) - o0]` : `(${x})`;
}

/**
 * The gradient product's read-modify-write of the output: f32, or packed 16-bit pairs (c, c + 1),
 * c even: the word (ob + col)/2 holds both (ob and col are even, so col < d implies col + 1 < d).
 */
function _readModifyWrite(s: _TileShape): string {
  const gSlots = accSlots(s.gt);
  if (s.out16) {
    return gSlots.filter((x) => x.comp % 2 === 0).map((x) => {
      const hi = gSlots.find((y) => y.vec === x.vec && y.comp === x.comp + 1)!;
      return `{ let col = dc + ${x.col}; if (ov_${rowKey(x)} && col < P.d) { let wi = (ob_${
        rowKey(x)
      } + col) >> 1u; let old = ${
        s.split ? "select(outp[wi], 0u, fresh)" : "outp[wi]"
      }; outp[wi] = to16(from16(old & 0xffffu) + ${x.expr}) | (to16(from16(old >> 16u) + ${hi.expr}) << 16u); } }`;
    }).join("\n        ");
  }
  return gSlots.map((x) =>
    `{ let col = dc + ${x.col}; if (ov_${rowKey(x)} && col < P.d) { let i = ob_${
      rowKey(x)
    } + col; outp[i] = ${s.split ? "select(outp[i], 0.0, fresh)" : "outp[i]"} + ${x.expr}; } }`
  ).join("\n        ");
}

/** The gradient product: P·C chunk (dE) or Pᵀ·E chunk (dC), columns [dc, dc + gt.bn). */
function _gradProduct(s: _TileShape, crow: (x: string) => string): string {
  return gemmMainloop({
    tile: s.gt,
    a: { dtype: "f32", contig: "k" },
    b: { dtype: s.o.dtype, contig: "mn", vec: s.vec },
    aBuf: "Ps",
    bBuf: s.dE ? "c" : "e",
    M: `${s.t.bm}u`,
    N: "P.d",
    K: "kdepth",
    m0: "0u",
    n0: "dc",
    aOff: "0u",
    sAm: `${s.t.bn}u`,
    sAk: "1u",
    bOff: s.dE ? `${crow("v0 + k")} * P.d` : "(t0 + k - P.eR0) * P.d",
    sBn: "1u",
    sBk: "0u",
  }, false);
}

/**
 * dE: the split's range [lo_, hi_) of the segment's vocab tiles: with balanced splits from
 * `bounds` (global tile indices, clamped to the segment), else the split's share of P.hi.
 */
function _splitRange(s: _TileShape): string {
  if (s.balanced) {
    return `if (lid == 0u) {
      let b = (P.tBase + ${s.tokTile}) * ${s.nSplits + 1}u + split;
      let lo = min(max(bounds[b], P.vBase), P.vBase + P.hi) - P.vBase;
      s_range = vec2<u32>(lo, min(max(bounds[b + 1u], P.vBase), P.vBase + P.hi) - P.vBase);
    }
    let rg = workgroupUniformLoad(&s_range);
    workgroupBarrier(); // s_range is rewritten by the next owned tile
    let lo_ = rg.x;
    let hi_ = rg.y;`;
  }
  return s.nSplits > 1
    ? `let lo_ = (split * P.hi) / ${s.nSplits}u;\n    let hi_ = ((split + 1u) * P.hi) / ${s.nSplits}u;`
    : "let lo_ = P.lo;\n    let hi_ = P.hi;";
}

/** The walk over the tiles of the owned row or column, up to the kept tile's first line. */
function _tileWalk(s: _TileShape, loadRows: string): string {
  const { dE, filter, VT, TT } = s;
  const vocTile = dE ? "it" : s.ordered ? "vt" : "ot";
  const maskIndex = `let mi = (P.tBase + ${s.tokTile}) * P.vTotal + P.vBase + ${vocTile};`;
  if (s.wordWalk) {
    return `${_splitRange(s)}
    var it = lo_;
    loop {
      if (it >= hi_) { break; }
      ${maskIndex}
      if (lid == 0u) { s_keep = mask[mi >> 5u] >> (mi & 31u); }
      let bits = workgroupUniformLoad(&s_keep);
      workgroupBarrier(); // s_keep is rewritten by the next word
      if (bits == 0u) { it = it + 32u - (mi & 31u); continue; }
      it = it + countTrailingZeros(bits);
      if (it >= hi_) { break; }
      let v0 = P.vS + it * ${VT}u;
      ${loadRows}`;
  }
  const keep = filter
    ? `${maskIndex}
      if (lid == 0u) { s_keep = (mask[mi >> 5u] >> (mi & 31u)) & 1u; }
      let kept = workgroupUniformLoad(&s_keep);
      workgroupBarrier(); // s_keep is rewritten by the next tile
      if (kept == 0u) { continue; }${
      s.split
        ? `
      // the segment's kept token tiles only; its first update of a borrowed tile writes
      let kn = kk;
      kk = kk + 1u;
      if (kn < klo) { continue; }
      if (kn >= khi) { break; }
      let fresh = part && kn == klo;`
        : ""
    }`
    : "";
  return `${dE ? _splitRange(s) : ""}
    for (var it = ${dE ? "lo_" : "P.lo"}; it < ${dE ? "hi_" : "P.hi"}; it++) {
      let ${dE ? `v0 = P.vS + it * ${VT}u` : `t0 = P.tS + it * ${TT}u`};
      ${keep}
      ${dE ? loadRows : ""}`;
}

/**
 * The owned tile's first token (dE) or vocabulary position (dC). With an order, `vt` is the tile
 * of rank ot, and the walk ends at the first tile no token tile keeps: the ranks go by kept count,
 * larger first, and a workgroup's ranks only grow (its count is read through s_keep so that the
 * break stays in uniform control flow).
 */
function _ownedTile(s: _TileShape): string {
  if (s.dE) return `let t0 = P.tS + ot * ${s.TT}u;`;
  if (!s.ordered) return `let v0 = P.vS + ot * ${s.VT}u;`;
  if (s.split) return _splitSlot(s);
  return `let vt = order[P.vBase + ot];
    if (lid == 0u) { s_keep = order[P.vTotal + P.vBase + vt]; }
    if (workgroupUniformLoad(&s_keep) == 0u) { break; }
    workgroupBarrier(); // s_keep is rewritten by the walk
    let v0 = P.vS + vt * ${s.VT}u;`;
}

/**
 * dC split: slot ot's tile (rank r: S_r ≤ ot < S_{r+1}), segment, output tile and kept-tile range,
 * and the kept token tiles before this dispatch's token segment; the walk ends at the first slot
 * past the segments (an empty tile's).
 */
function _splitSlot(s: _TileShape): string {
  const VT = s.VT;
  return `if (lid == 0u) {
      let tiles = (P.vE - P.vS + ${VT - 1}u) / ${VT}u;
      let sr = 2u * P.vTotal + P.vBase;
      var lo = 0u;
      var hi = tiles;
      loop {
        if (hi - lo <= 1u) { break; }
        let mid = (lo + hi) / 2u;
        if (order[sr + mid] <= ot) { lo = mid; } else { hi = mid; }
      }
      let own = order[P.vBase + lo];
      var c = order[P.vTotal + P.vBase + own];
      let sg = ot - order[sr + lo];
      var m = 1u;
      if (lo + 1u < tiles) { m = order[sr + lo + 1u] - order[sr + lo]; }
      if (sg >= m) { c = 0u; }
      var out = own;
      var k0 = 0u;
      if (c > 0u) {
        if (sg > 0u) {
          out = order[P.vBase + firstEmpty(P.vTotal, P.vBase, tiles) + order[sr + lo] - lo + sg - 1u];
        }
        for (var t = 0u; t < P.tBase; t++) {
          let i = t * P.vTotal + P.vBase + own;
          k0 += (mask[i >> 5u] >> (i & 31u)) & 1u;
        }
      }
      s_own = vec4<u32>(own, c, out, sg);
      s_seg = vec4<u32>(sg * c / m, (sg + 1u) * c / m, k0, 0u);
    }
    let sl = workgroupUniformLoad(&s_own);
    if (sl.y == 0u) { break; }
    let sr_ = workgroupUniformLoad(&s_seg);
    workgroupBarrier(); // s_own and s_seg are rewritten by the next slot
    let vt = sl.x;
    let v0 = P.vS + vt * ${VT}u;
    let o0 = P.vS + sl.z * ${VT}u;
    let part = sl.w > 0u;
    let klo = sr_.x;
    let khi = sr_.y;
    var kk = sr_.z;`;
}

/** dC split, sorted: the output tile's rows perm[o0 … o0 + VT) into s_orows. */
function _loadOutRows(s: _TileShape): string {
  return `for (var i = lid; i < ${s.VT}u; i += ${
    tileThreads(s.t)
  }u) { s_orows[i] = perm[min(o0 + i, P.vE - 1u)]; }
    workgroupBarrier();`;
}

/** Module-scope declarations: constants, params, bindings, helpers and workgroup memory. */
function _tileDecls(s: _TileShape): string {
  const { o, vec, out16 } = s;
  const st = backwardStaging(s.t, s.gt);
  const flat = `var<workgroup> As: array<vec4<f32>, ${st.a}>;
var<workgroup> Bs: array<vec4<f32>, ${st.b}>;`;
  return `${enableDirectives([o.dtype])}
${lossConstants(o.opts, o.v)}
${_tileSignature(s).wgsl}
${dtypeHelpers([{ name: "e", dtype: o.dtype, vec }, { name: "c", dtype: o.dtype, vec }])}
${out16 ? wgslTo16(out16) + wgslFrom16(out16) : ""}
${s.t.stage2d ? gemmShared({ tile: s.t }) : flat}
${s.direct ? dCDirectPsDecl(s.t) : `var<workgroup> Ps: array<f32, ${s.t.bm * s.t.bn}>;`}
${s.filter ? "var<workgroup> s_keep: u32;" : ""}
${s.balanced ? "var<workgroup> s_range: vec2<u32>;" : ""}
${o.sort ? `var<workgroup> s_rows: array<u32, ${s.VT}>;` : ""}
${
    s.split
      ? `var<workgroup> s_own: vec4<u32>;
var<workgroup> s_seg: vec4<u32>;
${o.sort ? `var<workgroup> s_orows: array<u32, ${s.VT}>;` : ""}
${firstEmptyWgsl("order")}`
      : ""
  }`;
}

/** WGSL of a tile pass (see the module doc and {@link tilePassSignature}). */
export function tilePassWgsl(o: TilePassKernelOptions): string {
  const s = _tileShape(o);
  const { dE, t, gt, TT, VT } = s;
  const { vrow, crow, loadRows } = _vocabRows(s);
  const zero = accVecs(t).map((v) => `${v} = vec4<f32>(0.0);`).join(" ");
  const zeroGrad = accVecs(gt).map((v) => `${v} = vec4<f32>(0.0);`).join(" ");
  const accNames = [...new Set([...accVecs(t), ...accVecs(gt)])];
  const direct = { tile: t, dtype: o.dtype, vec: s.vec, out16: !!s.out16, split: s.split };
  const logits = logitsMainloop(
    { tile: t, dtype: o.dtype, crow, tokenRows: dE, vec: s.vec },
    false,
  );
  return `${_tileDecls(s)}
@compute @workgroup_size(${tileThreads(t)})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  ${gemmThreadCoords(t)}
  ${accNames.map((v) => `var ${v}: vec4<f32>;`).join(" ")}
  ${
    dE
      ? "let split = wg.y;\n  let oR0 = P.oR0 - split * P.sRows; // u32 wrap: slab part `split`"
      : ""
  }
  for (var ot = wg.x; ot < P.nOuter; ot += nwg.x) {
    ${_ownedTile(s)}
    ${!dE && o.sort ? `workgroupBarrier(); // s_rows is rewritten\n    ${loadRows}` : ""}
    ${s.split && o.sort ? _loadOutRows(s) : ""}
    ${_outRows(s, vrow)}
    ${_tileWalk(s, loadRows)}
      ${zero}
      {
      ${logits}
      }
      ${_tileEpilogue(s, vrow)}
      workgroupBarrier();
      let kdepth = ${dE ? `min(${VT}u, P.vE - v0)` : `min(${TT}u, P.tE - t0)`};
      ${
    s.direct ? dCDirectProductWgsl(direct) : `for (var dc = 0u; dc < P.d; dc += ${gt.bn}u) {
        ${zeroGrad}
        {
        ${_gradProduct(s, crow)}
        }
        ${_readModifyWrite(s)}
      }`
  }
      ${s.wordWalk ? "it = it + 1u;" : ""}
    }
  }
}
`;
}
