/**
 * WGSL pieces shared by the passes of the fused backward (kernels/fused/filter.ts and
 * kernels/fused/kept_tiles.ts): the logits product of a tile, the per-lane
 * token and vocabulary values, and the unweighted gradient g = p·f' + (β/|V|)(z/s)² that the
 * filter tests and the tile passes multiply by w_n. Each piece decides one switch, so the two
 * passes cannot drift apart. Also how a pass that sets tile-mask bits sets and counts them
 * (the filter, the map filter, the order decision's sorted mask).
 * @module
 */
import type { Dtype, LceOptions } from "../../core/options.ts";
import { type AccSlot, gemmMainloop, type GemmTile } from "../gemm_codegen.ts";

/**
 * WGSL setting bit `mi` (a u32 expression) of the tile mask `mask`: one bit per (token tile, vocab
 * tile), an integer atomicOr since workgroups share words.
 */
export function setMaskBitWgsl(mask: string, mi: string): string {
  return `atomicOr(&${mask}[${mi} >> 5u], 1u << (${mi} & 31u));`;
}

/**
 * A workgroup's kept-tile count: `decl` (zeroed by `lid` 0 before a barrier), `keep` (a tile kept:
 * its bit `mi` of `mask` set and counted) and `flush` (after a barrier, one integer atomicAdd of
 * the count into counter[index]), so the statistics cost one storage atomic a workgroup.
 */
export const TILE_COUNT = {
  decl: "var<workgroup> s_count: atomic<u32>;",
  keep: (mask: string, indent: string) =>
    `${setMaskBitWgsl(mask, "mi")}\n${indent}atomicAdd(&s_count, 1u);`,
  flush: (index: number) =>
    `workgroupBarrier();
  if (lid == 0u) {
    let k = atomicLoad(&s_count);
    if (k != 0u) { atomicAdd(&counter[${index}], k); }
  }`,
};

/** One value per distinct row or column of a tile's accumulator slots. */
export interface Lane {
  /** Suffix of the lane's WGSL names (`g_r` for rows, `h_c` for columns). */
  key: string;
  /** WGSL offset of the lane in the tile. */
  expr: string;
}

/** Key of a slot's row lane. */
export const rowKey = (s: AccSlot): string => `${s.g}_${s.r}`;
/** Key of a slot's column lane. */
export const colKey = (s: AccSlot): string => `${s.h}_${s.c}`;

/** The distinct row and column lanes of a tile's slots, in slot order. */
export function tileLanes(slots: AccSlot[]): { rows: Lane[]; cols: Lane[] } {
  const lanes = (key: (s: AccSlot) => string, expr: (s: AccSlot) => string): Lane[] => {
    const m = new Map<string, string>();
    for (const s of slots) m.set(key(s), expr(s));
    return [...m.entries()].map(([k, x]) => ({ key: k, expr: x }));
  };
  return { rows: lanes(rowKey, (s) => s.row), cols: lanes(colKey, (s) => s.col) };
}

/**
 * Per-lane values: for token lanes tk_ (token), tw_ (its weight, 0 past P.tE) and tl_ (its LSE);
 * for vocabulary lanes vv_ (inside the segment). t0 and v0 are the tile's corners.
 */
export function laneValues(tokens: Lane[], vocab: Lane[]): string[] {
  return [
    ...tokens.map((l) =>
      `let tk_${l.key} = t0 + ${l.expr}; let tw_${l.key} = select(0.0, w[tk_${l.key}], tk_${l.key} < P.tE); let tl_${l.key} = lse[tk_${l.key}];`
    ),
    ...vocab.map((l) => `let vv_${l.key} = (v0 + ${l.expr}) < P.vE;`),
  ];
}

/**
 * WGSL of the unweighted gradient of the tiled part at logit z (after softcap) for a token of
 * log-sum-exp `lse`: exp(z − lse)·f'(z), plus (β/|V|)(z/s)² with softcap and β > 0 (the one
 * place that decides the smoothing term).
 */
export function gradValue(opts: LceOptions, z: string, lse: string): string {
  const smooth = opts.capped && opts.smoothing
    ? ` + (BETA / VOCAB) * (${z} / SOFTCAP) * (${z} / SOFTCAP)`
    : "";
  return `exp(${z} - ${lse}) * softcap_grad(${z})${smooth}`;
}

/** Options of {@link logitsMainloop}. */
export interface LogitsMainloopOptions {
  tile: GemmTile;
  dtype: Dtype;
  /** WGSL of the C row (relative to its binding) of vocabulary position x. */
  crow: (x: string) => string;
  /** Tokens as rows (t0, v0 the tile's corners), else vocabulary entries (the dC pass's tile). */
  tokenRows: boolean;
  /** E and C bound as 16-byte vectors. */
  vec?: boolean;
}

/**
 * The logits product of a tile (E rows from P.eR0, C rows addressed through `crow`, both with d
 * contiguous): tokens as rows or vocabulary entries as rows (the transposed tile, for the dC
 * pass).
 */
export function logitsMainloop(o: LogitsMainloopOptions, declare = true): string {
  const part = { dtype: o.dtype, contig: "k" as const, vec: o.vec };
  const e = { buf: "e", extent: "P.tE", first: "t0", off: (r: string) => `(${r} - P.eR0) * P.d` };
  const c = { buf: "c", extent: "P.vE", first: "v0", off: (r: string) => `${o.crow(r)} * P.d` };
  const [a, b] = o.tokenRows ? [e, c] : [c, e];
  return gemmMainloop({
    tile: o.tile,
    a: part,
    b: part,
    aBuf: a.buf,
    bBuf: b.buf,
    M: a.extent,
    N: b.extent,
    K: "P.d",
    m0: a.first,
    n0: b.first,
    aOff: a.off("m"),
    sAm: "0u",
    sAk: "1u",
    bOff: b.off("n"),
    sBn: "0u",
    sBk: "1u",
  }, declare);
}
