/**
 * The fused backward of the label-smoothed linear cross-entropy (the paper's "Ours" backward):
 * dE and dC without the n×|V| logits, with an optional gradient filter and vocabulary sorting.
 *
 * Split of the gradient. With w_n the per-token weight, f' = 1 − (z/s)² the softcap derivative
 * (1 without softcap) and p = softmax(z_n):
 *
 *   ∂L/∂x_nv = w_n·[p_nv·f' + (β/|V|)(z_nv/s)²]   (dense, tiled, may be filtered: "P")
 *            − (β/|V|)·w_n                          (rank one, exact: kernels/grad_corrections.ts)
 *            − (1−β)·w_n·f'(z_{n,t_n})·[v = t_n]    (sparse, exact: kernels/grad_corrections.ts)
 *
 * (the three add up to w_n·f'·(p − β/|V| − (1−β)[v = t])). Only P is tiled. The middle term of P
 * exists only with softcap and β > 0 and is bounded by (β/|V|)·w_n; it is kept inside P, so the
 * filter treats it like the softmax: a skipped tile drops at most ε·|w_n| per element, for both
 * parts. The filter tests the unweighted value g = P/w_n (as the reference CCE code does before it
 * multiplies by the upstream gradient): a tile is skipped when every g in it is < ε, so the error
 * of a filtered gradient is bounded by |ΔdE_nk| ≤ ε·|w_n|·Σ_{v skipped} |C_vk| and
 * |ΔdC_vk| ≤ ε·Σ_{n skipped} |w_n·E_nk|. Ignored tokens (w_n = 0) never keep a tile alive.
 *
 * Accumulation: ownership, no atomics on floats, so gradients are bitwise reproducible (every
 * output element is written by one workgroup, its terms added in a fixed order; the only atomics
 * are integer ones: OR into the mask, counts, max of the sort keys' range).
 *
 * The record, in order (dE is formed completely before dC's storage is first written: see
 * "Gradient dtype" for why):
 *
 * 1. With sorting, the vocab order (kernels/vocab_sort.ts).
 * 2. Pass `filter` (only with a filter): the grid covers every (token, vocab) tile pair with the
 *    GEMM's fast tile (128×128 on hardware, covering several TT×VT backward tiles); each
 *    workgroup recomputes its logits, tests g ≥ ε per element, and sets one bit per kept backward
 *    tile in a zeroed mask of one bit per (token tile, vocab tile) (integer atomicOr: workgroups
 *    share mask words); kept tiles are counted with an integer atomic (order-independent) for the
 *    statistics. (With `mapFilter`, the `fused-tilemap` row, in the own order only, the `map
 *    filter` pass sets the mask from the forward's tile maxima instead, kernels/fused/tile_map.ts:
 *    no products.) With the order decision it works in the own order and also records entry bits,
 * 3. from which the `order decision` pass forms the sorted order's mask and picks the order that
 *    keeps fewer tiles (see "Order decision" below).
 * 4. With dE splits and the filter, the `kept bounds` pass cuts each token tile's kept tiles into
 *    S runs of equal count ({@link keptBoundsWgsl}).
 * 5. dE's exact terms (kernels/grad_corrections.ts) initialise dE's f32 accumulator.
 * 6. Pass `dE`: one workgroup owns a *row slice* of a token tile (TT/R tokens, R "row slices" per
 *    backward tile) and one split, and walks its vocab tiles in order, 32 mask bits at a time
 *    (jumping to the next kept tile: a skipped tile costs no barrier); for the tiles the mask
 *    keeps (the bit of the backward tile holding the slice: conservative for the slice, so still
 *    exact) it recomputes the slice's logits, forms P and adds P·C[vocab tile, :] into its dE
 *    rows, d in chunks of VT columns. The splits are the grid's y dimension (one dispatch, so
 *    they run side by side: dispatches writing one buffer would be ordered one after the other);
 *    split s accumulates into part s of the f32 slabs (part 0 holds the exact terms with a 16-bit
 *    output; the other parts, and all with an f32 output, start at zero; one split into f32
 *    accumulates into dE itself). With the filter the splits are runs of equal kept-tile counts
 *    (balanced however the kept tiles cluster), without it S contiguous ranges of vocab tiles.
 * 7. The partials are added to dE in split order, and dE is cast to its 16-bit output.
 * 8. dC's exact terms, then pass `dC`: one workgroup owns a vocab tile (VT classifier rows, in
 *    sorted order when sorting) and walks the token tiles in order; for each tile the mask keeps
 *    (every tile without the filter) it recomputes the VT×TT logits with the generated GEMM over
 *    d, forms Pᵀ in registers, stages it in workgroup memory and adds Pᵀ·E[token tile, :] into its
 *    own dC rows, d in chunks of TT columns (read-modify-write: the rows belong to this
 *    workgroup only).
 *
 * Parallelism of the dE pass. The dE pass has only n/TT token tiles (64 at the paper's shape
 * with 128-token tiles: half an H200's 132 SMs). S splits give S times the workgroups and need
 * n·d·4 bytes of partials per split (302 MB at the paper's shape for S = 4), which live in dC's
 * storage while dE is formed (see "Gradient dtype" below), so they cost no workspace where
 * |V| ≥ 2·S·n ({@link dESlabsFitDC}).
 * Cutting token tiles into R row slices gives R times the workgroups with no workspace at all:
 * the slices own disjoint dE rows, read the same mask bit, and do the same flops in all (each
 * slice recomputes only its own rows' logits); what they lose is reuse: each kept C tile is read
 * by R workgroups instead of one, and a slice's threads hold 4×4 logits (not 8×4) so a workgroup
 * has fewer threads (128 for 32-row slices of the 128×64 tile). The other way to cut the work,
 * splitting P·C's d columns over workgroups, would recompute every kept tile's full logits once
 * per column group (1.5× to 2.5× the flops), so it is not used. Defaults: with the filter the
 * splits first ({@link defaultFilteredDESplits}: S = 4, R = 1 at the paper's shape, 256
 * workgroups of the full 8×4-per-thread tile; before the slabs moved into dC's storage it was
 * S = 1, R = 4, measured 64.9 ms on the H200), as many as dC's storage holds, then row slices
 * ({@link defaultDERowSlices}); without the filter S = 4 (R = 1, {@link defaultDESplits}).
 *
 * Workspace ({@link fusedBackwardWorkspaceBytes}, exact; at the paper's shape, bf16, β = 0.1,
 * with the filter and sorting: 1.72 MiB): the mask (1 bit per tile: 32 KB for 64 × 4001 tiles)
 * and the sorted order's mask of the order decision (its entry bits, 2 MB, sit in dC's storage),
 * the split bounds (tT·(S + 1) u32), the vocab order (|V| u32, 1 MB) in which the sort also works
 * (kernels/vocab_sort.ts), one buffer of E's column partials shared by the sort's Ē and the
 * corrections' Σ_n w_n·E_n, the corrections' target coefficients and pairs, and C's column-sum
 * partials for β > 0 (kernels/column_sum.ts); dE's f32 slabs only where dC's storage cannot hold
 * them. *
 * With the filter, every tile's logits are computed once (filter pass) and a kept tile's twice
 * more; a skipped tile costs one mask read in each gradient pass. Without the filter the mask is
 * not used and the two gradient passes recompute every tile (4 GEMM-equivalents in all).
 *
 * Gradient dtype ({@link FusedBackwardOptions.gradDtype}). "f32" (the kernel's default):
 * dE and dC are f32 outputs, accumulated in place. "input" with bf16/f16 inputs returns both in the
 * input dtype (half the output memory):
 * - dC, d even: packed 16-bit, accumulated in place. The exact terms are added in f32 and
 *   rounded once (kernels/grad_corrections.ts); each kept tile's f32 contribution Pᵀ·E is added by
 *   a read-modify-write of the 16-bit words (round to nearest even). A thread owns both halves of
 *   every word it writes (its columns come in aligned groups of 4, rows start at even elements),
 *   so ownership and bitwise reproducibility are kept. An element sees 1 + (kept token tiles of
 *   its vocab tile) roundings: ~3 at the paper's shape with the filter and sorting.
 * - dC, d odd: rows straddle words, so dC is accumulated in an f32 scratch (v·d·4 bytes of
 *   workspace) and cast once at the end.
 * - dE: a token tile walks ~125 kept vocab tiles at the paper's shape, so in-place 16-bit
 *   accumulation would round ~125 times; dE is accumulated in f32 and cast once. The f32
 *   accumulator needs no memory of its own: dE is formed completely (exact terms, tiles, split
 *   partials, cast) before dC's storage is first written, so the accumulator (and the S − 1
 *   split partials) live in dC's output buffers, whose v·d·2 bytes hold S·n·d·4 whenever
 *   |V| ≥ 2·S·n in a binding (the paper's shape, S = 4: 256,000 ≥ 65,536). Only where they do not fit
 *   (small |V|, or many splits) do they get buffers of their own ("slabs", counted as workspace).
 *   The same holds for the S split partials of f32 gradients (in dC's f32 storage when |V| ≥
 *   S·n; they are added to dE at the end). The errors are those of one f32 accumulation and one rounding, as before the
 *   move (at the gate's shape, bf16, β = 0.1: dE 2.45e-3, dC 4.71e-3 of the max |value|, the
 *   committed baseline's figures).
 * Measured against float64 (kernels/fused_backward_test.ts, max |error| / max |value|, 70×257,
 * 64×64 tiles): bf16 dE 2.6e-3 – 3.1e-3, dC 2.1e-3 (1 rounding) – 4.5e-3 (3); f16 dE 2.3e-4 –
 * 4.3e-4, dC 2.5e-4 – 5.9e-4; the f32 mode stays at 1e-7 – 5e-7. Without the filter every
 * token tile is added: at n = 640 (10 token tiles, 11 roundings) bf16 dC reaches 8.9e-3 (2.0e-3
 * with the f32 scratch and one rounding), f16 1.2e-3; at the paper's 64 token tiles the growth
 * (about √R) would give ~2% of the scale for bf16. So the no-filter methods (methods/fused.ts)
 * keep f32 gradients; "input" stays available to them with that error.
 * Peak of the backward at the paper's shape (bf16, β = 0.1, 128×64 tiles, hardware bindings,
 * default S = 4; gradients + workspace + row weights; computed by fusedBackwardWorkspaceBytes):
 * fused 1,161 + 1.75 MiB (f32 gradients: 2,322 + 1.75), fused-nosort 1,161 + 0.74. Before dE's
 * accumulator moved into dC's storage: fused 1,161 + 73.7 MiB (measured on the H200). *
 * Vocabulary sorting (kernels/vocab_sort.ts) gives a permutation of the classifier rows; vocab
 * tiles are ranges of positions in that order, and C/dC rows are addressed through it.
 *
 * Order decision (sorting with the filter, {@link FusedBackwardOptions.decideOrder}, default on).
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
 * tiles than the own order ({@link SORT_MARGIN}: C read through the permutation costs a little
 * per tile), else the order is reset to the identity. The dE and dC
 * passes then walk the chosen mask, so the kept tiles are exactly those of the chosen order, and
 * the result is bitwise that of the chosen order alone. Cost: the sort (1.3 ms at the paper's
 * shape), one bit per kept entry in the filter (workgroup-local OR, then one integer atomicOr per
 * non-zero word), and tT·(|V|/VT) lookups of VT bits each (the sorted mask, ~16 M bit reads).
 * The kept-tile count is the right proxy: the dE and dC work is proportional to the kept tiles,
 * and the filter's cost does not depend on the order.
 *
 * Sharding: E, dE (tokens) and C, dC (vocabulary) may each be split into several bindings. The
 * passes work on *segments*: row ranges inside one binding of each tensor of the pair (the union of
 * both tensors' shard boundaries), and tiles never straddle segments. One dispatch per (vocab
 * segment, token segment) pair; the sort permutes rows within each vocab segment only. (With
 * bindings of a few rows, as in the forced-sharding tests, tiles shrink to a few elements, and the
 * filter decides per element: still within the bound above.)
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import {
  createTensor,
  DeviceTensor,
  download,
  elementBytes,
  type TensorDtype,
} from "../gpu/tensor.ts";
import { GpuError } from "../core/errors.ts";
import type { Dtype, LceOptions, Shape } from "../core/options.ts";
import { machineEps } from "../core/dtype.ts";
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
  vecLoadsFit,
} from "./gemm_codegen.ts";
import {
  dtypeHelpers,
  enableDirectives,
  f32Lit,
  lossConstants,
  wgslStorageType,
} from "./wgsl_common.ts";
import {
  type PreparedVocabSort,
  prepareVocabSort,
  type VocabSegment,
  vocabSortWorkspaceBytes,
} from "./fused/vocab_order.ts";
import {
  gradCorrectionsWorkspaceBytes,
  type PreparedGradCorrections,
  prepareGradCorrections,
} from "./grad_corrections.ts";
import { columnPartialsBytes, columnSumPlan } from "./column_sum.ts";
import { type Dtype16, prepareCast16, wgslFrom16, wgslTo16 } from "./cast16.ts";
import { prepareMapFilter, type TileMapTile } from "./fused/tile_map.ts";

/** Tile of the backward passes: a workgroup handles TT tokens × VT vocabulary entries. */
export interface BackwardTile {
  /** Tokens per tile (TT). */
  tokens: number;
  /** Vocabulary entries per tile (VT). */
  vocab: number;
  /** K-step of the products. */
  bk: number;
  /** Tokens per thread (a multiple of 4). */
  tokensPerThread: number;
  /** Vocabulary entries per thread (a multiple of 4). */
  vocabPerThread: number;
  /**
   * Columns of the gradient products per thread, as a multiple of the logits tile's (1 or 2;
   * default 1). 2 halves the loop overhead per flop of the d chunks, at the cost of twice the
   * accumulators and a larger shader (slow to compile on software adapters).
   */
  gradWiden?: number;
}

/** 64×64, 256 threads of 4×4, K-step 8 (small shaders): 20.3 KiB of workgroup memory. */
export const BACKWARD_TILE_SMALL: BackwardTile = {
  tokens: 64,
  vocab: 64,
  bk: 8,
  tokensPerThread: 4,
  vocabPerThread: 4,
};
/**
 * 128 tokens × 64 vocab, 256 threads of 8×4, gradient products 8×8 per thread: needs 44.5 KiB of
 * workgroup memory.
 */
export const BACKWARD_TILE_WIDE: BackwardTile = {
  tokens: 128,
  vocab: 64,
  bk: 16,
  tokensPerThread: 8,
  vocabPerThread: 4,
  gradWiden: 2,
};
/** 128×128, 256 threads of 8×8 (the forward's tile): needs 80 KiB of workgroup memory. */
export const BACKWARD_TILE_LARGE: BackwardTile = {
  tokens: 128,
  vocab: 128,
  bk: 16,
  tokensPerThread: 8,
  vocabPerThread: 8,
  gradWiden: 1,
};

/** The GEMM tiles of the two passes: dE has tokens as rows, dC has vocabulary entries as rows. */
export function backwardGemmTiles(bt: BackwardTile): { dE: GemmTile; dC: GemmTile } {
  return {
    dE: { bm: bt.tokens, bn: bt.vocab, bk: bt.bk, tm: bt.tokensPerThread, tn: bt.vocabPerThread },
    dC: { bm: bt.vocab, bn: bt.tokens, bk: bt.bk, tm: bt.vocabPerThread, tn: bt.tokensPerThread },
  };
}

/**
 * The tiles of the gradient products (P·C chunk for dE, Pᵀ·E chunk for dC): the same rows and
 * thread grid as the logits tile, `gradWiden` times its columns per thread (d chunks that much
 * wider); K-step 8 when widened, so that the staging arrays stay the logits product's size.
 */
export function backwardGradTiles(bt: BackwardTile): { dE: GemmTile; dC: GemmTile } {
  const t = backwardGemmTiles(bt);
  const k = bt.gradWiden ?? 1;
  if (k !== 1 && k !== 2) throw new RangeError(`gradWiden must be 1 or 2, got ${k}`);
  const widen = (g: GemmTile): GemmTile =>
    k === 1 ? g : { ...g, bn: k * g.bn, tn: k * g.tn, bk: Math.max(1, g.bk / 2) };
  return { dE: widen(t.dE), dC: widen(t.dC) };
}

/** Staging arrays (vec4 counts) shared by the logits and gradient products of a pass. */
function _staging(t: GemmTile, g: GemmTile): { a: number; b: number } {
  return {
    a: Math.max(t.bk * (t.bm / 4 + 1), g.bk * (g.bm / 4 + 1)),
    b: Math.max(t.bk * (t.bn / 4 + 1), g.bk * (g.bn / 4 + 1)),
  };
}

/**
 * Workgroup memory of a gradient pass: GEMM staging, the P tile (TT·VT f32), a flag, a range and
 * the vocab tile's rows (VT u32, with sorting).
 */
export function backwardSharedBytes(bt: BackwardTile): number {
  const l = backwardGemmTiles(bt), g = backwardGradTiles(bt);
  return Math.max(
    ...(["dE", "dC"] as const).map((k) => {
      const st = _staging(l[k], g[k]);
      return (st.a + st.b) * 16 + bt.tokens * bt.vocab * 4 + 16 + 8 + bt.vocab * 4;
    }),
  );
}

/** The largest tile that fits the device's workgroup memory (64×64 on software adapters). */
export function defaultBackwardTile(ctx: GpuContext): BackwardTile {
  if (ctx.report.isFallbackAdapter) return BACKWARD_TILE_SMALL;
  const limit = ctx.device.limits.maxComputeWorkgroupStorageSize;
  for (const t of [BACKWARD_TILE_LARGE, BACKWARD_TILE_WIDE]) {
    if (backwardSharedBytes(t) <= limit) return t;
  }
  return BACKWARD_TILE_SMALL;
}

/** The paper's filter threshold: eps(dtype)/32 (2⁻¹² bf16, 2⁻¹⁵ f16, 2⁻²⁸ f32). */
export function defaultFilterEps(dtype: Dtype): number {
  return machineEps(dtype) / 32;
}

/**
 * The tile of the dE pass with `slices` row slices per backward tile: TT/slices tokens × VT, the
 * threads' token rows cut by as much (at least 4 per thread), the rest as `bt`. Throws when the
 * slice is not a tile the generator can emit.
 */
export function dESliceTile(bt: BackwardTile, slices: number): BackwardTile {
  if (!Number.isInteger(slices) || slices < 1) {
    throw new RangeError(`dE row slices must be a positive integer, got ${slices}`);
  }
  if (slices === 1) return bt;
  const tokens = bt.tokens / slices;
  const tokensPerThread = Math.max(4, bt.tokensPerThread / slices);
  const s = { ...bt, tokens, tokensPerThread };
  const ok = Number.isInteger(tokens) && Number.isInteger(tokensPerThread) &&
    tokens % tokensPerThread === 0;
  try {
    if (!ok) throw new RangeError();
    validateTile(backwardGemmTiles(s).dE);
    validateTile(backwardGradTiles(s).dE);
  } catch {
    throw new RangeError(
      `the dE pass cannot cut tile ${JSON.stringify(bt)} into ${slices} row slices`,
    );
  }
  return s;
}

/** Options of {@link tilePassWgsl}. */
export interface TilePassKernelOptions {
  /**
   * `dC`: a workgroup owns a vocab tile; `dE`: owns a row slice of a token tile (see
   * {@link TilePassKernelOptions.rowSlices}).
   */
  kind: "dC" | "dE";
  tile: BackwardTile;
  /**
   * dE only: row slices per TT-token backward tile (default 1): a workgroup owns TT/rowSlices
   * tokens ({@link dESliceTile}) and reads the mask bit of the backward tile holding them.
   */
  rowSlices?: number;
  /**
   * dE only: splits S (default 1), the grid's y dimension (split = workgroup_id.y, so that the
   * splits of one dispatch run side by side: separate dispatches writing one buffer are ordered).
   * Split s walks vocab tiles [⌊s·T/S⌋, ⌊(s+1)·T/S⌋) of the segment's T = P.hi tiles, or with
   * `balanced` the range from `bounds`, and accumulates into rows (row − P.oR0 + s·P.sRows) of
   * its output binding (the slab part s).
   */
  splits?: number;
  /**
   * dE with the filter only: the splits cut each token tile's *kept* tiles into S equal counts
   * ({@link keptBoundsWgsl}) instead of its vocab tiles into S equal ranges. The kernel then binds
   * `bounds` after the mask.
   */
  balanced?: boolean;
  dtype: Dtype;
  opts: LceOptions;
  /** Vocabulary size |V|. */
  v: number;
  /** Filter threshold ε, or null for no filter. */
  eps: number | null;
  /** Address classifier rows through the permutation `perm`. */
  sort: boolean;
  /**
   * E and C bound as 16-byte vectors, the logits product reading 16 bytes along k (bf16 only, and
   * only where vecLoadsFit(tile with vec, "bf16", d) holds: the caller's promise).
   */
  vecLoads?: boolean;
  /**
   * dC only: the output is packed 16-bit of this dtype (d even), updated in place: each thread
   * reads a word, adds its two f32 contributions and writes it back rounded to nearest even (a
   * thread owns both halves of every word it writes: its columns come in aligned groups of 4).
   */
  out16?: Dtype16;
}

/**
 * WGSL of a tile pass (see the module doc). Params: tS, tE (token segment), eR0 (E shard's first
 * row), vS, vE (vocab segment, positions), cR0 (C shard's first row), oR0 (output shard's first
 * row), d, tBase, vBase (global tile index of the segments' first tiles), vTotal (vocab tiles in
 * all), nOuter (owned tiles or slices), lo, hi (range of walked tiles; dE: lo 0, hi the
 * segment's tiles, cut by the splits), sRows (dE: rows between the splits' slab parts). Bindings:
 * params, e, c, out, lse, w, [perm], [mask] (read: one bit per backward tile, written by the
 * filter pass), [bounds] (balanced splits).
 */
export function tilePassWgsl(o: TilePassKernelOptions): string {
  const dE = o.kind === "dE";
  const slices = dE ? o.rowSlices ?? 1 : 1;
  const tile = dE ? dESliceTile(o.tile, slices) : o.tile;
  const t = backwardGemmTiles(tile)[o.kind];
  const gt = backwardGradTiles(tile)[o.kind];
  validateTile(t);
  validateTile(gt);
  const staging = _staging(t, gt);
  const filter = o.eps !== null;
  const TT = tile.tokens, VT = tile.vocab;
  // bf16 with d a multiple of 8: E and C bound as 16-byte vectors, the logits product loads 16
  // bytes along k; the gradient product's scalar loads read them through bf16_e/bf16_c below
  const vec = o.vecLoads === true;
  if (vec && o.dtype !== "bf16") throw new RangeError("tile pass: vector loads only for bf16");
  const st = wgslStorageType(o.dtype, vec);
  const bindings: string[] = [];
  const bind = (decl: string) =>
    bindings.push(`@group(0) @binding(${bindings.length}) var<${decl};`);
  bind("uniform> P: Params");
  bind(`storage, read> e: array<${st}>`);
  bind(`storage, read> c: array<${st}>`);
  const out16 = !dE ? o.out16 : undefined;
  bind(`storage, read_write> outp: array<${out16 ? "u32" : "f32"}>`);
  bind("storage, read> lse: array<f32>");
  bind("storage, read> w: array<f32>");
  if (o.sort) bind("storage, read> perm: array<u32>");
  if (filter) bind("storage, read> mask: array<u32>");
  const nSplits = dE ? o.splits ?? 1 : 1;
  const balanced = dE && filter && o.balanced === true && nSplits > 1;
  if (balanced) bind("storage, read> bounds: array<u32>");
  // sorted: the vocab tile's rows perm[v0 … v0 + VT) are read once per tile into s_rows (every
  // C load of the products would otherwise read perm again); x is in [v0, min(v0 + VT, vE))
  const vrow = (x: string) => (o.sort ? `s_rows[(${x}) - v0]` : `(${x})`);
  const crow = (x: string) => `(${vrow(x)} - P.cR0)`;
  const loadRows = o.sort
    ? `for (var i = lid; i < ${VT}u; i += ${
      tileThreads(t)
    }u) { s_rows[i] = perm[min(v0 + i, P.vE - 1u)]; }
      workgroupBarrier();`
    : "";
  const slots = accSlots(t);
  const rowKey = (s: (typeof slots)[0]) => `${s.g}_${s.r}`;
  const colKey = (s: (typeof slots)[0]) => `${s.h}_${s.c}`;
  const lanes = (key: (s: (typeof slots)[0]) => string, expr: (s: (typeof slots)[0]) => string) => {
    const m = new Map<string, string>();
    for (const s of slots) m.set(key(s), expr(s));
    return [...m.entries()].map(([k, x]) => ({ key: k, expr: x }));
  };
  const rowLanes = lanes(rowKey, (s) => s.row), colLanes = lanes(colKey, (s) => s.col);
  const tokLanes = dE ? rowLanes : colLanes, vocLanes = dE ? colLanes : rowLanes;
  const tokKey = dE ? rowKey : colKey, vocKey = dE ? colKey : rowKey;
  const laneCode = [
    ...tokLanes.map((l) =>
      `let tk_${l.key} = t0 + ${l.expr}; let tw_${l.key} = select(0.0, w[tk_${l.key}], tk_${l.key} < P.tE); let tl_${l.key} = lse[tk_${l.key}];`
    ),
    ...vocLanes.map((l) => `let vv_${l.key} = (v0 + ${l.expr}) < P.vE;`),
  ].join("\n      ");
  const smooth = o.opts.softcap !== undefined && o.opts.beta > 0
    ? " + (BETA / VOCAB) * (z / SOFTCAP) * (z / SOFTCAP)"
    : "";
  const epilogue = slots.map((s) => {
    const tk = tokKey(s), vk = vocKey(s);
    return `{ let z = softcap(${s.expr}); var g = 0.0;
        if (tw_${tk} != 0.0 && vv_${vk}) { g = exp(z - tl_${tk}) * softcap_grad(z)${smooth}; }
        ${s.expr} = tw_${tk} * g; }`;
  }).join("\n      ");
  const stage = slots.map((s) => `Ps[${s.row} * ${t.bn}u + ${s.col}] = ${s.expr};`).join(
    "\n      ",
  );
  const outRows = rowLanes.map((l) =>
    dE
      ? `let ov_${l.key} = (t0 + ${l.expr}) < P.tE; let ob_${l.key} = select(0u, (t0 + ${l.expr} - oR0) * P.d, ov_${l.key});`
      : `let ov_${l.key} = (v0 + ${l.expr}) < P.vE; let ob_${l.key} = select(0u, (${
        vrow(`min(v0 + ${l.expr}, P.vE - 1u)`)
      } - P.oR0) * P.d, ov_${l.key});`
  ).join("\n    ");
  const gSlots = accSlots(gt);
  const rmw = out16
    // pairs (c, c + 1), c even: the word (ob + col)/2 holds both (ob and col are even, so col < d
    // implies col + 1 < d)
    ? gSlots.filter((s) => s.comp % 2 === 0).map((s) => {
      const hi = gSlots.find((x) => x.vec === s.vec && x.comp === s.comp + 1)!;
      return `{ let col = dc + ${s.col}; if (ov_${rowKey(s)} && col < P.d) { let wi = (ob_${
        rowKey(s)
      } + col) >> 1u; let old = outp[wi]; outp[wi] = to16(from16(old & 0xffffu) + ${s.expr}) | (to16(from16(old >> 16u) + ${hi.expr}) << 16u); } }`;
    }).join("\n        ")
    : gSlots.map((s) =>
      `{ let col = dc + ${s.col}; if (ov_${rowKey(s)} && col < P.d) { let i = ob_${
        rowKey(s)
      } + col; outp[i] = outp[i] + ${s.expr}; } }`
    ).join("\n        ");
  const zero = accVecs(t).map((v) => `${v} = vec4<f32>(0.0);`).join(" ");
  const zeroGrad = accVecs(gt).map((v) => `${v} = vec4<f32>(0.0);`).join(" ");
  const accNames = [...new Set([...accVecs(t), ...accVecs(gt)])];
  const logits = _logitsMainloop({ tile: t, dtype: o.dtype, crow, tokenRows: dE, vec }, false);
  const grad = gemmMainloop({
    tile: gt,
    a: { dtype: "f32", contig: "k" },
    b: { dtype: o.dtype, contig: "mn" },
    aBuf: "Ps",
    bBuf: dE ? "c" : "e",
    M: `${t.bm}u`,
    N: "P.d",
    K: "kv",
    m0: "0u",
    n0: "dc",
    aOff: "0u",
    sAm: `${t.bn}u`,
    sAk: "1u",
    bOff: dE ? `${crow("v0 + k")} * P.d` : "(t0 + k - P.eR0) * P.d",
    sBn: "1u",
    sBk: "0u",
  }, false);
  const tokTile = dE ? (slices === 1 ? "ot" : `ot / ${slices}u`) : "it";
  const maskIndex = `let mi = (P.tBase + ${tokTile}) * P.vTotal + P.vBase + ${dE ? "it" : "ot"};`;
  // The dE pass walks a row of the mask (consecutive bits): it reads 32 tiles' bits at once and
  // jumps to the next kept tile, so a skipped tile costs no barrier (the dC pass walks a column:
  // one bit per token tile, a few dozen at most).
  const wordWalk = filter && dE;
  // balanced splits: this split's range of global vocab tiles, clamped to the segment
  const range = balanced
    ? `if (lid == 0u) {
      let b = (P.tBase + ${tokTile}) * ${nSplits + 1}u + split;
      let lo = min(max(bounds[b], P.vBase), P.vBase + P.hi) - P.vBase;
      s_range = vec2<u32>(lo, min(max(bounds[b + 1u], P.vBase), P.vBase + P.hi) - P.vBase);
    }
    let rg = workgroupUniformLoad(&s_range);
    workgroupBarrier(); // s_range is rewritten by the next owned tile
    let lo_ = rg.x;
    let hi_ = rg.y;`
    : nSplits > 1
    ? `let lo_ = (split * P.hi) / ${nSplits}u;\n    let hi_ = ((split + 1u) * P.hi) / ${nSplits}u;`
    : "let lo_ = P.lo;\n    let hi_ = P.hi;";
  const walk = wordWalk
    ? `${range}
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
      ${loadRows}`
    : `${dE ? range : ""}
    for (var it = ${dE ? "lo_" : "P.lo"}; it < ${dE ? "hi_" : "P.hi"}; it++) {
      let ${dE ? `v0 = P.vS + it * ${VT}u` : `t0 = P.tS + it * ${TT}u`};
      ${filter ? maskIndex : ""}
      ${
      filter
        ? `if (lid == 0u) { s_keep = (mask[mi >> 5u] >> (mi & 31u)) & 1u; }
      let kept = workgroupUniformLoad(&s_keep);
      workgroupBarrier(); // s_keep is rewritten by the next tile
      if (kept == 0u) { continue; }`
        : ""
    }
      ${dE ? loadRows : ""}`;
  return `${enableDirectives([o.dtype])}
${lossConstants(o.opts, o.v)}
struct Params { tS: u32, tE: u32, eR0: u32, vS: u32, vE: u32, cR0: u32, oR0: u32, d: u32,
  tBase: u32, vBase: u32, vTotal: u32, nOuter: u32, lo: u32, hi: u32, sRows: u32, _b: u32 };
${bindings.join("\n")}
${dtypeHelpers([{ name: "e", dtype: o.dtype, vec }, { name: "c", dtype: o.dtype, vec }])}
${
    vec
      ? "fn bf16_e(i: u32) -> f32 { return ld_e(i); }\nfn bf16_c(i: u32) -> f32 { return ld_c(i); }"
      : ""
  }
${out16 ? wgslTo16(out16) + wgslFrom16(out16) : ""}
var<workgroup> As: array<vec4<f32>, ${staging.a}>;
var<workgroup> Bs: array<vec4<f32>, ${staging.b}>;
var<workgroup> Ps: array<f32, ${t.bm * t.bn}>;
${filter ? "var<workgroup> s_keep: u32;" : ""}
${balanced ? "var<workgroup> s_range: vec2<u32>;" : ""}
${o.sort ? `var<workgroup> s_rows: array<u32, ${VT}>;` : ""}
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
    let ${dE ? `t0 = P.tS + ot * ${TT}u` : `v0 = P.vS + ot * ${VT}u`};
    ${
    !dE && o.sort
      ? `workgroupBarrier(); // s_rows is rewritten
    ${loadRows}`
      : ""
  }
    ${outRows}
    ${walk}
      ${zero}
      {
      ${logits}
      }
      ${laneCode}
      ${epilogue}
      ${stage}
      workgroupBarrier();
      let kv = ${dE ? `min(${VT}u, P.vE - v0)` : `min(${TT}u, P.tE - t0)`};
      for (var dc = 0u; dc < P.d; dc += ${gt.bn}u) {
        ${zeroGrad}
        {
        ${grad}
        }
        ${rmw}
      }
      ${wordWalk ? "it = it + 1u;" : ""}
    }
  }
}
`;
}

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
   * (`sort` must be false): {@link sortedMaskWgsl} derives the sorted order's mask from the bits.
   */
  entryBits?: boolean;
  /**
   * E and C bound as 16-byte vectors and read 16 bytes at a time along k (only where
   * vecLoadsFit(filterTile, dtype, d) holds: the caller's promise).
   */
  vecLoads?: boolean;
}

/**
 * The logits product of a tile (E rows from P.eR0, C rows addressed through `crow`, both with d
 * contiguous): tokens as rows (`tokenRows`, t0/v0 the tile's corners) or vocabulary entries as
 * rows (the transposed tile, for the dC pass).
 */
function _logitsMainloop(
  o: {
    tile: GemmTile;
    dtype: Dtype;
    crow: (x: string) => string;
    tokenRows: boolean;
    vec?: boolean;
  },
  declare = true,
): string {
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

/**
 * WGSL of the filter pass: one workgroup per filter tile (bm tokens × bn vocab, the GEMM's fast
 * tile) computes the logits, tests g = p·f' + (β/|V|)(z/s)² ≥ ε per element (only for tokens with
 * w_n ≠ 0), ORs the verdicts of the (bm/TT)·(bn/VT) backward tiles it covers into a workgroup
 * atomic bit set, sets the kept tiles' bits of the zeroed mask (integer atomicOr: several
 * workgroups share a mask word, and OR does not depend on their order) and counts the kept ones
 * (integer atomic).
 * Params: tS, tE, eR0, vS, vE, cR0, d, tBase, vBase, vTotal. Bindings: params, e, c, lse, w,
 * [perm], mask, counter.
 */
export function filterPassWgsl(o: FilterPassKernelOptions): string {
  const t = o.filterTile;
  validateTile(t);
  const TT = o.tile.tokens, VT = o.tile.vocab;
  const subT = t.bm / TT, subV = t.bn / VT;
  if (!Number.isInteger(subT) || !Number.isInteger(subV) || subT * subV > 32) {
    throw new RangeError(`filter tile ${JSON.stringify(t)} does not cover whole backward tiles`);
  }
  const bindings: string[] = [];
  const bind = (decl: string) =>
    bindings.push(`@group(0) @binding(${bindings.length}) var<${decl};`);
  const vec = o.vecLoads === true;
  const vst = wgslStorageType(o.dtype, vec);
  bind("uniform> P: Params");
  bind(`storage, read> e: array<${vst}>`);
  bind(`storage, read> c: array<${vst}>`);
  bind("storage, read> lse: array<f32>");
  bind("storage, read> w: array<f32>");
  if (o.sort) bind("storage, read> perm: array<u32>");
  bind("storage, read_write> mask: array<atomic<u32>>");
  bind("storage, read_write> counter: array<atomic<u32>>");
  const hot = o.entryBits === true;
  if (hot && o.sort) throw new RangeError("filter pass: entry bits are taken in the own order");
  if (hot) bind("storage, read_write> hot: array<atomic<u32>>");
  // words of the workgroup's entry bits per token sub-tile: columns v0 … v0 + bn − 1 from word
  // v0 / 32 on
  const HW = t.bn / 32 + 1;
  const crow = (x: string) => `(${o.sort ? `perm[${x}]` : `(${x})`} - P.cR0)`;
  const slots = accSlots(t);
  const rowKey = (s: (typeof slots)[0]) => `${s.g}_${s.r}`;
  const colKey = (s: (typeof slots)[0]) => `${s.h}_${s.c}`;
  const rows = new Map<string, string>(), cols = new Map<string, string>();
  for (const s of slots) {
    rows.set(rowKey(s), s.row);
    cols.set(colKey(s), s.col);
  }
  const laneCode = [
    ...[...rows].map(([k, x]) =>
      `let tk_${k} = t0 + ${x}; let tw_${k} = select(0.0, w[tk_${k}], tk_${k} < P.tE); let tl_${k} = lse[tk_${k}];`
    ),
    ...[...cols].map(([k, x]) => `let vv_${k} = (v0 + ${x}) < P.vE;`),
  ].join("\n  ");
  const smooth = o.opts.softcap !== undefined && o.opts.beta > 0
    ? " + (BETA / VOCAB) * (z / SOFTCAP) * (z / SOFTCAP)"
    : "";
  const test = slots.map((s) => {
    const r = rowKey(s), c = colKey(s);
    const entry = hot
      ? ` let hv = v0 + ${s.col}; atomicOr(&s_hot[(${s.row} / ${TT}u) * ${HW}u + (hv >> 5u) - (v0 >> 5u)], 1u << (hv & 31u));`
      : "";
    return `if (tw_${r} != 0.0 && vv_${c}) { let z = softcap(${s.expr}); let g = exp(z - tl_${r}) * softcap_grad(z)${smooth}; if (g >= EPS) { bits |= 1u << ((${s.row} / ${TT}u) * ${subV}u + (${s.col} / ${VT}u));${entry} } }`;
  }).join("\n  ");
  return `${enableDirectives([o.dtype])}
${lossConstants(o.opts, o.v)}
const EPS: f32 = ${f32Lit(o.eps)};
struct Params { tS: u32, tE: u32, eR0: u32, vS: u32, vE: u32, cR0: u32, d: u32, tBase: u32,
  vBase: u32, vTotal: u32, hotWords: u32, _b: u32 };
${bindings.join("\n")}
${dtypeHelpers([{ name: "e", dtype: o.dtype, vec }, { name: "c", dtype: o.dtype, vec }])}
${gemmShared({ tile: t })}
var<workgroup> s_any: atomic<u32>;
${hot ? `var<workgroup> s_hot: array<atomic<u32>, ${subT * HW}>;` : ""}
@compute @workgroup_size(${tileThreads(t)})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(t)}
  let t0 = P.tS + wg.x * ${t.bm}u;
  let v0 = P.vS + wg.y * ${t.bn}u;
  if (lid == 0u) { atomicStore(&s_any, 0u); }
  ${hot ? `if (lid < ${subT * HW}u) { atomicStore(&s_hot[lid], 0u); }` : ""}
  ${_logitsMainloop({ tile: t, dtype: o.dtype, crow, tokenRows: true, vec })}
  ${laneCode}
  var bits = 0u;
  ${test}
  if (bits != 0u) { atomicOr(&s_any, bits); }
  workgroupBarrier();
  ${
    hot
      ? `if (lid < ${subT * HW}u) {
    let word = atomicLoad(&s_hot[lid]);
    let ts = t0 + (lid / ${HW}u) * ${TT}u;
    if (word != 0u && ts < P.tE) {
      let row = P.tBase + (ts - P.tS) / ${TT}u;
      atomicOr(&hot[row * P.hotWords + (v0 >> 5u) + lid % ${HW}u], word);
    }
  }`
      : ""
  }
  if (lid == 0u) {
    let flags = atomicLoad(&s_any);
    var kept = 0u;
    for (var a = 0u; a < ${subT}u; a++) {
      let ts = t0 + a * ${TT}u;
      if (ts >= P.tE) { break; }
      for (var b = 0u; b < ${subV}u; b++) {
        let vs = v0 + b * ${VT}u;
        if (vs >= P.vE) { break; }
        let bit = (flags >> (a * ${subV}u + b)) & 1u;
        if (bit != 0u) {
          let mi = (P.tBase + (ts - P.tS) / ${TT}u) * P.vTotal + P.vBase + (vs - P.vS) / ${VT}u;
          atomicOr(&mask[mi >> 5u], 1u << (mi & 31u));
        }
        kept += bit;
      }
    }
    if (kept != 0u) { atomicAdd(&counter[0], kept); }
  }
}
`;
}

/**
 * WGSL of the balanced dE splits: one workgroup per token tile counts the kept tiles of its mask
 * row (K), and writes S + 1 bounds: b_0 = 0, b_S = vTotal, and b_s = the global vocab tile index
 * of its kept tile of rank ⌊s·K/S⌋ (vTotal when there is none), so split s walks the tiles [b_s,
 * b_{s+1}) holding ⌊(s+1)·K/S⌋ − ⌊s·K/S⌋ kept tiles. Integer counts and a fixed-order
 * workgroup scan: deterministic. Params: vTotal. Bindings: params, mask, bounds. Grid: tTotal.
 */
export function keptBoundsWgsl(splits: number): string {
  const S = splits;
  return `struct Params { vTotal: u32, _a: u32, _b: u32, _c: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> mask: array<u32>;
@group(0) @binding(2) var<storage, read_write> bounds: array<u32>;
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

/**
 * WGSL of the sorted order's mask, from the filter's entry bits (see
 * {@link FilterPassKernelOptions.entryBits}): one thread per (token tile, vocab tile of the sorted
 * order in one segment) keeps the tile when any of its rows perm[p] has its bit set for the token
 * tile; sets the tile's bit in the zeroed `maskS` and counts the kept tiles in counter[1] (integer
 * atomics). Params: vS, vE, vBase, vTotal, tTotal, hotWords, tiles (of the segment). Bindings:
 * params, perm, hot, maskS, counter. Grid: (⌈tiles/64⌉, tTotal).
 */
export function sortedMaskWgsl(tile: BackwardTile): string {
  return `struct Params { vS: u32, vE: u32, vBase: u32, vTotal: u32, tTotal: u32, hotWords: u32,
  tiles: u32, _a: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> perm: array<u32>;
@group(0) @binding(2) var<storage, read> hot: array<u32>;
@group(0) @binding(3) var<storage, read_write> maskS: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> counter: array<atomic<u32>>;
var<workgroup> s_count: atomic<u32>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  if (lid == 0u) { atomicStore(&s_count, 0u); }
  workgroupBarrier();
  let j = wg.x * 64u + lid;
  let r = wg.y;
  if (j < P.tiles) {
    let p0 = P.vS + j * ${tile.vocab}u;
    let p1 = min(p0 + ${tile.vocab}u, P.vE);
    var kept = false;
    for (var p = p0; p < p1; p++) {
      let row = perm[p];
      if (((hot[r * P.hotWords + (row >> 5u)] >> (row & 31u)) & 1u) != 0u) { kept = true; break; }
    }
    if (kept) {
      let mi = r * P.vTotal + P.vBase + j;
      atomicOr(&maskS[mi >> 5u], 1u << (mi & 31u));
      atomicAdd(&s_count, 1u);
    }
  }
  workgroupBarrier();
  if (lid == 0u) {
    let k = atomicLoad(&s_count);
    if (k != 0u) { atomicAdd(&counter[1], k); }
  }
}
`;
}

/**
 * The order decision's margin [a, b]: the sorted order is used when it keeps fewer than a/b of
 * the own order's tiles (5% fewer). Reading C through the permutation scatters its rows, and the
 * sort itself takes time, so a tie-level gain is not worth it (on lavapipe, `llm` fixture at
 * 1024×8192×64, a sorted order keeping 0.7% fewer tiles ran the dE pass 30% slower; on the H200
 * at 4096×24,576×2304 sorting keeps 8.6% fewer tiles and was 13% faster).
 */
export const SORT_MARGIN: readonly [number, number] = [19, 20];

/** Whether the order decision takes the sorted order, from the two kept-tile counts. */
export function sortedOrderWins(ownKept: number, sortedKept: number): boolean {
  return SORT_MARGIN[1] * sortedKept < SORT_MARGIN[0] * ownKept;
}

/**
 * WGSL of the order decision: the sorted order is kept when it keeps fewer tiles than the own
 * order by the margin ({@link sortedOrderWins}, counts counter[0] of the filter pass and
 * counter[1] of {@link sortedMaskWgsl}); then mask = maskS, else perm = identity (mask stays the
 * own order's). Params: maskWords, v. Bindings: params, counter, maskS, mask, perm.
 */
export function orderSelectWgsl(): string {
  return `struct Params { maskWords: u32, v: u32, _a: u32, _b: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> counter: array<u32>;
@group(0) @binding(2) var<storage, read> maskS: array<u32>;
@group(0) @binding(3) var<storage, read_write> mask: array<u32>;
@group(0) @binding(4) var<storage, read_write> perm: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let sorted = ${SORT_MARGIN[1]}u * counter[1] < ${SORT_MARGIN[0]}u * counter[0];
  for (var i = gid.x; i < max(P.maskWords, P.v); i += nwg.x * 256u) {
    if (sorted) {
      if (i < P.maskWords) { mask[i] = maskS[i]; }
    } else if (i < P.v) {
      perm[i] = i;
    }
  }
}
`;
}

/**
 * The filter pass's GEMM tile: the plain product's fastest tile on hardware adapters
 * ({@link TILE_HW}: 128×128, 16-byte loads where d allows, [k][row] staging) when TT and VT divide
 * 128, else the dE pass's own tile.
 */
export function defaultFilterTile(ctx: GpuContext, bt: BackwardTile): GemmTile {
  if (!ctx.report.isFallbackAdapter && 128 % bt.tokens === 0 && 128 % bt.vocab === 0) {
    return TILE_HW;
  }
  return backwardGemmTiles(bt).dE;
}

/**
 * WGSL adding `parts` partial dE blocks to dE in split order: dst[dOff + i] += Σ_j src[sOff + i +
 * j·stride] for i < count (`inPlace`: src and dst are one binding, the slab holding dE's
 * accumulator and its partials). Bindings: params {count, stride, sOff, dOff}, src, [dst].
 */
export function slabReduceWgsl(parts: number, inPlace: boolean): string {
  const adds = Array.from(
    { length: parts },
    (_, j) => `s = s + src[P.sOff + i + ${j}u * P.stride];`,
  )
    .join(" ");
  const dst = inPlace ? "src" : "dst";
  return `struct Params { count: u32, stride: u32, sOff: u32, dOff: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, ${inPlace ? "read_write" : "read"}> src: array<f32>;
${inPlace ? "" : "@group(0) @binding(2) var<storage, read_write> dst: array<f32>;"}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < P.count; i += nwg.x * 256u) {
    var s = ${dst}[P.dOff + i];
    ${adds}
    ${dst}[P.dOff + i] = s;
  }
}
`;
}

/** Workgroups the dE pass aims for (token slices × splits): about two per SM of a large GPU. */
export const DE_TARGET_WORKGROUPS = 256;

/**
 * The dE splits S used without the filter: enough token-tile × split workgroups to keep a large
 * GPU busy (about {@link DE_TARGET_WORKGROUPS}; with one workgroup per SM the pass ran at a quarter
 * of the GEMM's speed on an H200), at most 4 and at most the vocab tiles, and at most as many
 * partial buffers (S − 1 of n×d f32) as fit in max(3·dE, 64 MiB): S = 4 at the paper's shape with
 * 128-token tiles (the partials live in dC's storage where it holds them). With the filter see
 * {@link defaultFilteredDESplits}.
 */
export function defaultDESplits(shape: Shape, tile: BackwardTile): number {
  const tokTiles = Math.ceil(shape.n / tile.tokens);
  const vocTiles = Math.ceil(shape.v / tile.vocab);
  let s = Math.max(1, Math.min(4, vocTiles, Math.ceil(DE_TARGET_WORKGROUPS / tokTiles)));
  const dEBytes = shape.n * shape.d * 4;
  const budget = Math.max(3 * dEBytes, 64 * 2 ** 20);
  while (s > 1 && (s - 1) * dEBytes > budget) s--;
  return s;
}

/**
 * Row slices R of the dE pass: the smallest of 1, 2, 4 that makes token tiles × R × splits reach
 * {@link DE_TARGET_WORKGROUPS}, or the largest the tile can be cut into. R = 4 at the paper's shape
 * with the filter (64 token tiles of 128: 256 workgroups of 32 rows), 1 without it (S = 4).
 */
export function defaultDERowSlices(shape: Shape, tile: BackwardTile, splits: number): number {
  const tokTiles = Math.ceil(shape.n / tile.tokens);
  let r = 1;
  while (r < 4 && tokTiles * r * splits < DE_TARGET_WORKGROUPS) r *= 2;
  for (; r > 1; r /= 2) {
    try {
      dESliceTile(tile, r);
      return r;
    } catch {
      // not a tile the generator can emit: fewer slices
    }
  }
  return 1;
}

/** Most dE splits the filtered backward uses by default. */
export const MAX_FILTERED_DE_SPLITS = 8;

/**
 * dE splits S with the filter: enough token tiles × splits to reach {@link DE_TARGET_WORKGROUPS}
 * (at most {@link MAX_FILTERED_DE_SPLITS}: S = 4 at the paper's shape with 128-token tiles), and
 * no more than dC's output storage holds as dE's f32 slabs (`fits(S)`), so that the splits cost no
 * workspace. The splits cut each token tile's kept tiles into equal counts ({@link keptBoundsWgsl}),
 * so they stay balanced however the kept tiles cluster in the vocabulary.
 */
export function defaultFilteredDESplits(
  shape: Shape,
  tile: BackwardTile,
  fits: (splits: number) => boolean,
): number {
  const tokTiles = Math.ceil(shape.n / tile.tokens);
  const vocTiles = Math.ceil(shape.v / tile.vocab);
  let s = Math.max(
    1,
    Math.min(MAX_FILTERED_DE_SPLITS, vocTiles, Math.ceil(DE_TARGET_WORKGROUPS / tokTiles)),
  );
  while (s > 1 && !fits(s)) s--;
  return s;
}

/**
 * Whether `splits` dE splits keep dE's f32 slabs inside dC's output storage (no buffers of their
 * own) for a problem, with the gradients' sharding under `limit`.
 */
export function dESlabsFitDC(
  spec: Shape,
  splits: number,
  out16: boolean,
  limit: number,
): boolean {
  const parts = _slabParts(out16, splits);
  if (parts === 0) return true;
  const per = gradRowsPerBinding(limit, spec.d, out16);
  const sizes = _shardRows(spec.v, per).map((r) => _pad(r * spec.d * (out16 ? 2 : 4)));
  return _slabRows(sizes, spec.n, spec.d, parts, out16 && spec.d % 2 === 1) !== undefined;
}

/** Options of {@link prepareFusedBackward}. */
export interface FusedBackwardOptions {
  spec: Shape & { dtype: Dtype };
  opts: LceOptions;
  /** Filter threshold ε (see {@link defaultFilterEps}), or null for no gradient filter. */
  filterEps: number | null;
  /** Sort the vocabulary by mean logit. */
  sort: boolean;
  /**
   * With sorting and the filter: use the sorted order only where it keeps fewer tiles than the
   * vocabulary's own order (default true; see the module doc, "Order decision"); false: always
   * the sorted order (the paper's rule).
   */
  decideOrder?: boolean;
  /** Tile (default {@link defaultBackwardTile}). */
  tile?: BackwardTile;
  /**
   * Splits S of the dE pass (n×d f32 partials, in dC's storage where it holds them;
   * default {@link defaultFilteredDESplits} with the filter, {@link defaultDESplits} without).
   */
  dESplits?: number;
  /** Row slices of the dE pass (default {@link defaultDERowSlices}). */
  dERowSlices?: number;
  /** GEMM tile of the filter pass (default {@link defaultFilterTile}). */
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
}

/** Dtype option of the fused backward's gradients. */
export type GradDtype = "f32" | "input";

/** The 16-bit dtype the gradients are returned in, or undefined for f32. */
export function gradOut16(dtype: Dtype, gradDtype: GradDtype | undefined): Dtype16 | undefined {
  return gradDtype === "input" && dtype !== "f32" ? dtype : undefined;
}

/**
 * Rows per binding of the gradients (and of dC's f32 scratch): a 16-bit output of even width is
 * sharded as createTensor makes 16-bit rows (at the paper's shape dC is then one binding, one
 * vocab segment: one dispatch per pass); otherwise as it makes f32 rows, made even with a
 * 16-bit output of odd width (its shards start at even elements), so that dC's f32 scratch and
 * its 16-bit output are sharded alike.
 */
export function gradRowsPerBinding(limit: number, d: number, out16: boolean): number {
  if (out16 && d % 2 === 0) return _rowsPer(limit, "bf16", d);
  let per = _rowsPer(limit, "f32", d);
  if (out16 && d % 2 === 1) {
    per -= per % 2;
    if (per < 2) {
      throw new GpuError("limits", `fused backward: two f32 rows of ${d} exceed one binding`);
    }
  }
  return per;
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
}

/** Filter statistics of the last recorded backward. */
export interface FusedBackwardStats {
  tilesSkipped: number;
  tilesTotal: number;
}

/** Shard layout for {@link PreparedFusedBackward.workspaceBytes}. */
export interface WorkspaceLayout {
  /** Rows per shard of E and C (default: as createTensor makes them under the binding limit). */
  e?: number[];
  c?: number[];
  /**
   * Binding limit the shards are computed for (default: this context's; a hardware adapter's is
   * 2 GiB − 4 at most): decides the shards of E, C (unless given), dE and dC, and the column sum's
   * chunking.
   */
  maxBindingBytes?: number;
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
   * (d even; every kept tile is one read-modify-write), 1 with the f32 scratch (d odd).
   */
  readonly roundings: { dE: number; dC: number };
  /**
   * Records the backward; returns new dE (n×d) and dC (v×d), valid after submission: f32, or in
   * the input dtype with gradDtype "input" ({@link PreparedFusedBackward.gradDtype}).
   */
  record(rec: Recorder, a: FusedBackwardArgs): { dE: DeviceTensor; dC: DeviceTensor };
  /** Tiles skipped by the filter in the last record (reads a counter on the GPU). */
  stats(): Promise<FusedBackwardStats>;
  /** Frees the buffers made at prepare time (the kept-tile counter). */
  release(): void;
  /**
   * Bytes one record allocates besides dE and dC (uniform blocks aside), exactly, for the shards
   * of `layout` (default: as createTensor makes them on this context).
   */
  workspaceBytes(layout?: WorkspaceLayout): number;
}

/** A slab of dE's f32 accumulators: `parts` copies of rows [r0, r0 + rows), j·rows apart. */
interface _Slab {
  buffer: TrackedBuffer;
  r0: number;
  rows: number;
}

interface _Segment extends VocabSegment {
  /** Tiles in the segment and global index of its first tile. */
  tiles: number;
  base: number;
}

/** Row ranges inside one binding of every tensor whose shard starts are given. */
function _segments(total: number, tileRows: number, starts: number[][]): _Segment[] {
  const cuts = new Set<number>([0]);
  for (const s of starts) for (const r of s) if (r > 0 && r < total) cuts.add(r);
  const sorted = [...cuts].sort((a, b) => a - b);
  let base = 0;
  return sorted.map((start, i) => {
    const end = i + 1 < sorted.length ? sorted[i + 1] : total;
    const tiles = Math.ceil((end - start) / tileRows);
    const seg = { start, end, tiles, base };
    base += tiles;
    return seg;
  });
}

/**
 * Rows of dE's f32 accumulator slabs in buffers of the given byte sizes: slab i holds `parts`
 * copies (part j at row offset j·rows) of a range of dE rows, the ranges consecutive from row 0
 * (0 rows: buffer i unused); slab rows even, but the last, when `even`. Undefined when the
 * buffers cannot hold all n rows.
 */
function _slabRows(
  sizes: number[],
  n: number,
  d: number,
  parts: number,
  even: boolean,
): number[] | undefined {
  const out: number[] = [];
  let r = 0;
  for (const size of sizes) {
    if (r >= n) break;
    let k = Math.floor(size / (d * 4 * parts));
    if (k >= n - r) k = n - r;
    else if (even) k -= k % 2;
    k = Math.max(0, k);
    out.push(k);
    r += k;
  }
  return r >= n ? out : undefined;
}

/** Rows per slab of the slabs allocated apart (when dC's storage cannot hold them). */
function _ownSlabRows(limit: number, n: number, d: number, parts: number, even: boolean) {
  let k = Math.floor(limit / (d * 4 * parts));
  if (even) k -= k % 2;
  if (k < 1) {
    throw new GpuError("limits", `fused backward: ${parts} f32 rows of ${d} exceed one binding`);
  }
  return _shardRows(n, k);
}

/**
 * Where dE's f32 accumulators go: `parts` copies of dE's rows (the 16-bit mode's accumulator and
 * the S − 1 split partials). They are formed and reduced before dC is, so they live in dC's output
 * buffers (sizes `dCSizes`) when those can hold them (v·d·2 ≥ parts·n·d·4 in one binding: |V| ≥
 * 2·parts·n), else in buffers of their own (`own`, counted as workspace).
 */
function _slabPlan(o: {
  dCSizes: number[];
  n: number;
  d: number;
  parts: number;
  even: boolean;
  limit: number;
}): { rows: number[]; own: boolean } {
  if (o.parts === 0) return { rows: [], own: false };
  const inDC = _slabRows(o.dCSizes, o.n, o.d, o.parts, o.even);
  if (inDC) return { rows: inDC, own: false };
  return { rows: _ownSlabRows(o.limit, o.n, o.d, o.parts, o.even), own: true };
}

/**
 * f32 copies of dE's rows in the slabs: S (the 16-bit output's accumulator and S − 1 partials,
 * or with an f32 output S partials added to dE at the end), none for one split into f32.
 */
function _slabParts(out16: boolean, splits: number): number {
  return out16 || splits > 1 ? splits : 0;
}

/** First rows of the non-empty slabs of a plan. */
function _slabStarts(rows: number[]): number[] {
  const out: number[] = [];
  let r = 0;
  for (const k of rows) {
    if (k > 0) out.push(r);
    r += k;
  }
  return out;
}

function _shardRows(rows: number, per: number): number[] {
  const out: number[] = [];
  for (let r = 0; r < rows; r += per) out.push(Math.min(per, rows - r));
  return out;
}

const _starts = (rows: number[]) => rows.map((_, i) => rows.slice(0, i).reduce((a, b) => a + b, 0));

/** Rows of `cols` columns of `dtype` per binding of `limit` bytes (as gpu/tensor.ts cuts them). */
function _rowsPer(limit: number, dtype: TensorDtype, cols: number): number {
  const b = elementBytes(dtype);
  let rows = Math.floor(limit / (cols * b));
  if (b === 2 && cols % 2 === 1) rows -= rows % 2;
  return Math.max(1, rows);
}

/** Bytes of a buffer made by createTensor (16-byte padded). */
const _pad = (b: number) => Math.ceil(Math.max(b, 4) / 16) * 16;

/** Bytes of the filter mask of tT × vT tiles: one bit per tile, 16-byte padded. */
export function maskBytes(tokenTiles: number, vocabTiles: number): number {
  return _pad(Math.ceil((tokenTiles * vocabTiles) / 32) * 4);
}

/**
 * Bytes one record of the fused backward allocates besides dE and dC (uniform blocks aside),
 * exactly, for the shards of `layout`:
 *
 * - dE's f32 slabs (16-bit output: the accumulator and S − 1 partials; f32: the partials) only
 *   where dC's output buffers cannot hold them (see the module doc: none when |V| ≥ 2·S·n);
 * - with a 16-bit output (gradDtype "input") and d odd, dC's f32 scratch (v·d·4);
 * - the filter mask (one bit per backward tile, {@link maskBytes});
 * - E's column partials (one buffer for the sort's Ē and the corrections' Σ_n w_n·E_n);
 * - the vocab order (|V| u32) and the sort's Ē and key range;
 * - the corrections' buffers, C's column-sum partials included (β > 0).
 *
 * The kept-tile counter (16 bytes) is allocated at prepare time and not counted.
 */
export function fusedBackwardWorkspaceBytes(o: {
  spec: Shape & { dtype: Dtype };
  opts: LceOptions;
  filter: boolean;
  sort: boolean;
  /** The order decision (default true; see {@link FusedBackwardOptions.decideOrder}). */
  decideOrder?: boolean;
  tile: BackwardTile;
  dESplits: number;
  /** Default "f32". */
  gradDtype?: GradDtype;
  layout: WorkspaceLayout & { maxBindingBytes: number };
}): number {
  const { spec, opts, tile, layout } = o;
  const limit = layout.maxBindingBytes;
  const perIn = _rowsPer(limit, spec.dtype, spec.d);
  const eRows = layout.e ?? _shardRows(spec.n, perIn);
  const cRows = layout.c ?? _shardRows(spec.v, perIn);
  const out16 = gradOut16(spec.dtype, o.gradDtype) !== undefined;
  const perF32 = gradRowsPerBinding(limit, spec.d, out16);
  const dERows = _shardRows(spec.n, perF32), dCRows = _shardRows(spec.v, perF32);
  const out16B = out16 ? 2 : 4;
  const plan = _slabPlan({
    dCSizes: dCRows.map((r) => _pad(r * spec.d * out16B)),
    n: spec.n,
    d: spec.d,
    parts: _slabParts(out16, o.dESplits),
    even: out16 && spec.d % 2 === 1,
    limit,
  });
  const tok = _segments(spec.n, tile.tokens, [
    _starts(eRows),
    _starts(dERows),
    _slabStarts(plan.rows),
  ]);
  const voc = _segments(spec.v, tile.vocab, [_starts(cRows), _starts(dCRows)]);
  const tT = tok.reduce((s, g) => s + g.tiles, 0), vT = voc.reduce((s, g) => s + g.tiles, 0);
  const f32Bytes = (rows: number[]) => rows.reduce((s, r) => s + _pad(r * spec.d * 4), 0);
  const parts = _slabParts(out16, o.dESplits);
  // dE's accumulator slabs when dC's storage cannot hold them; dC's f32 scratch when d is odd
  let bytes = plan.own ? plan.rows.reduce((s, r) => s + _pad(r * spec.d * 4 * parts), 0) : 0;
  if (out16 && spec.d % 2 === 1) bytes += f32Bytes(dCRows);
  if (o.filter) bytes += maskBytes(tT, vT);
  if (o.filter && o.dESplits > 1) bytes += _pad(tT * (o.dESplits + 1) * 4); // split bounds
  if (o.filter && o.sort && (o.decideOrder ?? true)) {
    // the order decision: the sorted order's mask, and the entry bits unless dC's first buffer
    // holds them
    const hotBytes = tT * Math.ceil(spec.v / 32) * 4;
    bytes += maskBytes(tT, vT);
    if (_pad(dCRows[0] * spec.d * out16B) < hotBytes) bytes += _pad(hotBytes);
  }
  if (o.sort || opts.beta > 0) bytes += columnPartialsBytes(eRows, spec.d);
  if (o.sort) bytes += spec.v * 4 + vocabSortWorkspaceBytes(eRows, spec.d, false);
  const cs = opts.beta > 0 ? columnSumPlan(cRows, spec.d, limit).workspaceBytes : 0;
  return bytes + gradCorrectionsWorkspaceBytes(opts, eRows, spec.d, cs, false);
}

/** Compiles the fused backward for a problem. */
export async function prepareFusedBackward(
  ctx: GpuContext,
  o: FusedBackwardOptions,
): Promise<PreparedFusedBackward> {
  const { spec, opts } = o;
  const tile = o.tile ?? defaultBackwardTile(ctx);
  const shared = backwardSharedBytes(tile);
  if (shared > ctx.device.limits.maxComputeWorkgroupStorageSize) {
    throw new GpuError(
      "limits",
      `fused backward: tile ${JSON.stringify(tile)} needs ${shared} bytes of workgroup memory`,
    );
  }
  const eps = o.filterEps;
  if (eps !== null && !(eps > 0 && Number.isFinite(eps))) {
    throw new RangeError(`fused backward: filterEps must be > 0 or null, got ${eps}`);
  }
  const out16 = gradOut16(spec.dtype, o.gradDtype);
  const splits = o.dESplits ??
    (eps !== null
      ? defaultFilteredDESplits(
        spec,
        tile,
        (k) => dESlabsFitDC(spec, k, out16 !== undefined, ctx.maxBindingBytes),
      )
      : defaultDESplits(spec, tile));
  if (!Number.isInteger(splits) || splits < 1) {
    throw new RangeError(`fused backward: dESplits must be a positive integer, got ${splits}`);
  }
  const slices = o.dERowSlices ?? defaultDERowSlices(spec, tile, splits);
  const sliceRows = dESliceTile(tile, slices).tokens;
  const base = { tile, dtype: spec.dtype, opts, v: spec.v, eps, sort: o.sort };
  if (o.mapFilter && (eps === null || o.sort)) {
    throw new RangeError("fused backward: the map filter needs the filter and no sorting");
  }
  const mapFilter = o.mapFilter && eps !== null
    ? await prepareMapFilter(ctx, { tile, mapTile: o.mapFilter.tile, opts, v: spec.v, eps })
    : undefined;
  const filterTile = eps !== null && !mapFilter
    ? o.filterTile ?? defaultFilterTile(ctx, tile)
    : null;
  const decide = o.sort && eps !== null && (o.decideOrder ?? true);
  const filterPass = eps !== null && filterTile
    ? await ctx.pipeline(
      filterPassWgsl({
        ...base,
        eps,
        filterTile,
        vecLoads: vecLoadsFit(filterTile, spec.dtype, spec.d),
        sort: decide ? false : o.sort,
        entryBits: decide,
      }),
      "fused_backward_filter",
    )
    : undefined;
  // with the filter, splits cut the kept tiles of each token tile into equal counts
  const balanced = eps !== null && splits > 1;
  const keptBounds = balanced
    ? await ctx.pipeline(keptBoundsWgsl(splits), "kept_bounds")
    : undefined;
  const sortedMask = decide ? await ctx.pipeline(sortedMaskWgsl(tile), "sorted_mask") : undefined;
  const orderSelect = decide ? await ctx.pipeline(orderSelectWgsl(), "order_select") : undefined;
  // dC in place in 16 bits needs whole words per row (d even); else an f32 scratch and a cast
  const dCInPlace = out16 !== undefined && spec.d % 2 === 0 ? out16 : undefined;
  // 16-byte loads of bf16 E and C in the tile passes' logits products where d allows
  const tileVec = (k: "dE" | "dC", bt: BackwardTile) =>
    spec.dtype === "bf16" &&
    vecLoadsFit({ ...backwardGemmTiles(bt)[k], vec: true }, "bf16", spec.d);
  const dCPass = await ctx.pipeline(
    tilePassWgsl({ ...base, kind: "dC", out16: dCInPlace, vecLoads: tileVec("dC", tile) }),
    "fused_backward_dC",
  );
  const cast = out16 ? await prepareCast16(ctx, out16) : undefined;
  const dEPass = await ctx.pipeline(
    tilePassWgsl({
      ...base,
      kind: "dE",
      rowSlices: slices,
      vecLoads: tileVec("dE", dESliceTile(tile, slices)),
      splits,
      balanced,
    }),
    "fused_backward_dE",
  );
  // the split partials are added in place (16-bit output: slab parts 1…S−1 into part 0) or into
  // the f32 output (slab parts 0…S−1)
  const reduce = splits > 1
    ? await ctx.pipeline(
      slabReduceWgsl(out16 !== undefined ? splits - 1 : splits, out16 !== undefined),
      "fused_backward_split_reduce",
    )
    : undefined;
  const sorter: PreparedVocabSort | undefined = o.sort
    ? await prepareVocabSort(ctx, { dtype: spec.dtype, opts })
    : undefined;
  const corrections: PreparedGradCorrections = await prepareGradCorrections(ctx, {
    dtype: spec.dtype,
    opts,
    v: spec.v,
    dC16: dCInPlace,
  });
  // One buffer of E's column partials serves the sort's Ē and the corrections' Σ_n w_n·E_n.
  const ePartials = sorter !== undefined || corrections.usesEPartials;
  const counter = eps !== null
    ? createTensor(ctx, { dtype: "u32", rows: 1, cols: 2, role: "workspace", label: "kept tiles" })
    : undefined;
  let lastTotal = 0;
  const roundings = { dE: out16 ? 1 : 0, dC: out16 ? 1 : 0 };
  return {
    tile,
    filterTile,
    dESplits: splits,
    dERowSlices: slices,
    filterEps: eps,
    gradDtype: out16 ?? "f32",
    roundings,
    workspaceBytes(layout = {}) {
      return fusedBackwardWorkspaceBytes({
        spec,
        opts,
        filter: eps !== null,
        sort: o.sort,
        decideOrder: o.decideOrder,
        tile,
        dESplits: splits,
        gradDtype: o.gradDtype,
        layout: { ...layout, maxBindingBytes: layout.maxBindingBytes ?? ctx.maxBindingBytes },
      });
    },
    release() {
      counter?.destroy();
    },
    async stats() {
      if (!counter) return { tilesSkipped: 0, tilesTotal: lastTotal };
      // [own order's kept tiles, sorted order's (with the order decision)]: the chosen one's
      const got = await download(ctx, counter);
      const kept = decide && sortedOrderWins(got[0], got[1]) ? got[1] : got[0];
      return { tilesSkipped: lastTotal - kept, tilesTotal: lastTotal };
    },
    record(rec, a) {
      const { e, c, targets, lse, w, count } = a;
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
      for (const [name, t] of [["targets", targets], ["lse", lse], ["w", w]] as const) {
        if (t.rows !== n || t.shards.length !== 1) {
          throw new RangeError(`fused backward: ${name} must be n×1 in one shard`);
        }
      }
      if (mapFilter && !a.tileMap) {
        throw new RangeError("fused backward: the map filter needs the forward's tile map");
      }
      // Gradient tensors: the outputs (f32 or 16-bit), dC's f32 scratch (16-bit output, d odd),
      // and dE's f32 accumulator slabs (16-bit output: the accumulator and the split partials;
      // f32: the partials), in dC's output buffers when they fit (dE is finished before dC's
      // storage is first written), else in buffers of their own.
      const per = gradRowsPerBinding(ctx.maxBindingBytes, d, out16 !== undefined);
      const grad = (
        rows: number,
        dtype: TensorDtype,
        label: string,
        role: "output" | "workspace",
      ) => createTensor(ctx, { dtype, rows, cols: d, role, label, maxRowsPerShard: per });
      const dEOut = grad(n, out16 ?? "f32", "dE", "output");
      const dCOut = grad(v, out16 ?? "f32", "dC", "output");
      const dC = out16 && !dCInPlace ? grad(v, "f32", "dC f32 scratch", "workspace") : dCOut;
      const release: (TrackedBuffer | undefined)[] = [];
      if (dC !== dCOut) release.push(...dC.shards.map((sh) => sh.buffer));
      const parts = _slabParts(out16 !== undefined, splits);
      const even = out16 !== undefined && d % 2 === 1;
      const plan = _slabPlan({
        dCSizes: dCOut.shards.map((sh) => sh.buffer.size),
        n,
        d,
        parts,
        even,
        limit: ctx.maxBindingBytes,
      });
      const slabs: _Slab[] = [];
      {
        let r0 = 0;
        plan.rows.forEach((rows, i) => {
          if (rows === 0) return;
          const buffer = plan.own
            ? ctx.createBuffer({
              size: _pad(rows * d * 4 * parts),
              role: "workspace",
              label: "dE f32 slab",
            })
            : dCOut.shards[i].buffer;
          if (plan.own) release.push(buffer);
          slabs.push({ buffer, r0, rows });
          r0 += rows;
        });
      }
      const slabOf = (row: number) => slabs.find((sl) => row < sl.r0 + sl.rows)!;
      // dE's accumulator: the output itself (f32) or part 0 of the slabs (16-bit output)
      const dE = out16
        ? new DeviceTensor(
          "f32",
          n,
          d,
          slabs.map((sl) => ({ buffer: sl.buffer, rowStart: sl.r0, rows: sl.rows })),
          "dE f32 accumulator",
        )
        : dEOut;
      const tok = _segments(n, tile.tokens, [
        e.shards.map((s) => s.rowStart),
        dEOut.shards.map((s) => s.rowStart),
        slabs.map((sl) => sl.r0),
      ]);
      const voc = _segments(v, tile.vocab, [
        c.shards.map((s) => s.rowStart),
        dC.shards.map((s) => s.rowStart),
      ]);
      const tTotal = tok.reduce((s, g) => s + g.tiles, 0);
      const vTotal = voc.reduce((s, g) => s + g.tiles, 0);
      lastTotal = tTotal * vTotal;
      roundings.dC = dCInPlace ? 1 + tTotal : out16 ? 1 : 0;
      const maskSize = eps !== null ? maskBytes(tTotal, vTotal) : 0;
      if (maskSize > ctx.maxBindingBytes) {
        throw new GpuError(
          "limits",
          `fused backward: the tile mask (${maskSize} bytes) exceeds one binding`,
        );
      }
      const partials = ePartials
        ? ctx.createBuffer({
          size: columnPartialsBytes(e.shards.map((s) => s.rows), d),
          role: "workspace",
          label: "E column partials",
        })
        : undefined;
      release.push(partials);
      let perm: TrackedBuffer | undefined;
      if (sorter) {
        perm = ctx.createBuffer({ size: v * 4, role: "workspace", label: "vocab order" });
        sorter.record(rec, { e, c, targets, count, perm, segments: voc, partials });
        release.push(perm);
      }
      let mask: TrackedBuffer | undefined;
      if (eps !== null) {
        mask = ctx.createBuffer({ size: maskSize, role: "workspace", label: "tile mask" });
        rec.clear(mask);
        rec.clear(counter!.shards[0].buffer);
        release.push(mask);
      }
      // the order decision: entry bits (in dC's first buffer when it holds them: dC is written
      // only after dE) and the sorted order's mask
      const hotWords = Math.ceil(v / 32);
      const hotBytes = tTotal * hotWords * 4;
      let hot: TrackedBuffer | undefined, maskS: TrackedBuffer | undefined;
      if (decide) {
        if (dCOut.shards[0].buffer.size >= hotBytes) hot = dCOut.shards[0].buffer;
        else {
          hot = ctx.createBuffer({ size: _pad(hotBytes), role: "workspace", label: "entry bits" });
          release.push(hot);
        }
        rec.clear(hot, 0, Math.ceil(hotBytes / 4) * 4);
        maskS = ctx.createBuffer({ size: maskSize, role: "workspace", label: "sorted tile mask" });
        rec.clear(maskS);
        release.push(maskS);
      }
      const tail = (): (TrackedBuffer | GPUBuffer)[] => {
        const b: TrackedBuffer[] = [lse.shards[0].buffer, w.shards[0].buffer];
        if (perm) b.push(perm);
        if (mask) b.push(mask);
        return b;
      };
      const params = (
        ts: _Segment,
        eR0: number,
        vs: _Segment,
        cR0: number,
        oR0: number,
        nOuter: number,
        lo: number,
        hi: number,
        sRows = 0,
      ) =>
        rec.uniform(
          new Uint32Array([
            ts.start,
            ts.end,
            eR0,
            vs.start,
            vs.end,
            cR0,
            oR0,
            d,
            ts.base,
            vs.base,
            vTotal,
            nOuter,
            lo,
            hi,
            sRows,
            0,
          ]),
          "fused backward params",
        );
      if (mapFilter && mask && counter) {
        const { tileMap } = a as Required<FusedBackwardArgs>;
        const cb = counter.shards[0].buffer;
        mapFilter.record(rec, { e, c, tileMap, lse, w, tok, voc, vTotal, mask, counter: cb });
      }
      if (filterPass && filterTile && mask && counter) {
        rec.pass("fused backward filter", (p) => {
          for (const vs of voc) {
            const cs = c.shardOf(vs.start);
            const gVoc = Math.ceil((vs.end - vs.start) / filterTile.bn);
            for (const ts of tok) {
              const es = e.shardOf(ts.start);
              const gTok = Math.ceil((ts.end - ts.start) / filterTile.bm);
              if (gVoc > 65535 || gTok > 65535) {
                throw new GpuError("limits", `fused backward: filter grid ${gTok}×${gVoc}`);
              }
              const u = rec.uniform(
                new Uint32Array([
                  ts.start,
                  ts.end,
                  es.rowStart,
                  vs.start,
                  vs.end,
                  cs.rowStart,
                  d,
                  ts.base,
                  vs.base,
                  vTotal,
                  hotWords,
                  0,
                ]),
                "filter params",
              );
              const bufs: TrackedBuffer[] = [
                u,
                es.buffer,
                cs.buffer,
                lse.shards[0].buffer,
                w.shards[0].buffer,
              ];
              if (perm && !decide) bufs.push(perm);
              bufs.push(mask, counter.shards[0].buffer);
              if (hot) bufs.push(hot);
              // x = token tiles: neighbouring workgroups share a C tile, so C streams from memory
              // about once while E (n×d, small) stays in cache.
              p.dispatch(filterPass, rec.bindGroup(filterPass, bufs), gTok, gVoc);
            }
          }
        });
      }
      if (sortedMask && orderSelect && hot && maskS && perm && mask && counter) {
        rec.pass("fused backward order decision", (p) => {
          for (const vs of voc) {
            const u = rec.uniform(
              new Uint32Array([vs.start, vs.end, vs.base, vTotal, tTotal, hotWords, vs.tiles, 0]),
              "sorted mask params",
            );
            const bufs = [u, perm, hot, maskS, counter.shards[0].buffer];
            p.dispatch(
              sortedMask,
              rec.bindGroup(sortedMask, bufs),
              Math.ceil(vs.tiles / 64),
              tTotal,
            );
          }
          const words = maskSize / 4;
          const u = rec.uniform(new Uint32Array([words, v, 0, 0]), "order select params");
          const bufs = [u, counter.shards[0].buffer, maskS, mask, perm];
          p.dispatch(
            orderSelect,
            rec.bindGroup(orderSelect, bufs),
            Math.min(Math.ceil(Math.max(words, v) / 256), 65535),
          );
        });
      }
      let bounds: TrackedBuffer | undefined;
      if (keptBounds && mask) {
        if (tTotal > 65535) throw new GpuError("limits", `fused backward: ${tTotal} token tiles`);
        bounds = ctx.createBuffer({
          size: _pad(tTotal * (splits + 1) * 4),
          role: "workspace",
          label: "dE split bounds",
        });
        release.push(bounds);
        const kb = keptBounds;
        rec.pass("fused backward kept bounds", (p) => {
          const u = rec.uniform(new Uint32Array([vTotal, 0, 0, 0]), "kept bounds params");
          p.dispatch(kb, rec.bindGroup(kb, [u, mask!, bounds!]), tTotal);
        });
      }
      // dE's exact terms now, dC's after dE is complete (dE's slabs may live in dC's storage)
      const { coefficients } = corrections.record(rec, {
        e,
        c,
        targets,
        w,
        dE,
        ePartials: partials,
        part: "dE",
      });
      // split partials (parts ≥ 1 of the slabs; all parts with an f32 output) start at zero
      const first = out16 ? 1 : 0;
      for (const sl of slabs) {
        if (parts > first) {
          const bytes = sl.rows * d * 4;
          rec.clear(sl.buffer, first * bytes, (parts - first) * bytes);
        }
      }
      rec.pass("fused backward dE", (p) => {
        for (const ts of tok) {
          const es = e.shardOf(ts.start);
          const owned = Math.ceil((ts.end - ts.start) / sliceRows);
          // split s (workgroup_id.y) accumulates into slab part s at row offset s·rows (oR0
          // wraps around in u32: the kernel's (row − oR0 + s·rows)·d is then the offset), or,
          // with an f32 output and one split, into dE itself
          let buffer: TrackedBuffer, oR0: number, sRows: number;
          if (slabs.length === 0) {
            const os = dEOut.shardOf(ts.start);
            buffer = os.buffer;
            oR0 = os.rowStart;
            sRows = 0;
          } else {
            const sl = slabOf(ts.start);
            buffer = sl.buffer;
            oR0 = sl.r0;
            sRows = sl.rows;
          }
          for (const vs of voc) {
            const cs = c.shardOf(vs.start);
            const u = params(ts, es.rowStart, vs, cs.rowStart, oR0, owned, 0, vs.tiles, sRows);
            const bufs = [u, es.buffer, cs.buffer, buffer, ...tail()];
            if (bounds) bufs.push(bounds);
            p.dispatch(dEPass, rec.bindGroup(dEPass, bufs), Math.min(owned, 65535), splits);
          }
        }
      });
      if (reduce) {
        rec.pass("fused backward dE splits", (p) => {
          for (const sl of slabs) {
            const stride = sl.rows * d;
            if (out16) {
              // in place: part 0 (the accumulator) += parts 1…S−1
              const u = rec.uniform(new Uint32Array([stride, stride, stride, 0]), "reduce params");
              p.dispatch(
                reduce,
                rec.bindGroup(reduce, [u, sl.buffer]),
                Math.min(Math.ceil(stride / 256), 65535),
              );
              continue;
            }
            // into the f32 output, piece by piece of its shards
            const cuts = [sl.r0, ...dEOut.shards.map((sh) => sh.rowStart)].filter((r) =>
              r >= sl.r0 && r < sl.r0 + sl.rows
            );
            const starts = [...new Set(cuts)].sort((x, y) => x - y);
            starts.forEach((r0, i) => {
              const r1 = i + 1 < starts.length ? starts[i + 1] : sl.r0 + sl.rows;
              const os = dEOut.shardOf(r0);
              const count = (r1 - r0) * d;
              const u = rec.uniform(
                new Uint32Array([count, stride, (r0 - sl.r0) * d, (r0 - os.rowStart) * d]),
                "reduce params",
              );
              p.dispatch(
                reduce,
                rec.bindGroup(reduce, [u, sl.buffer, os.buffer]),
                Math.min(Math.ceil(count / 256), 65535),
              );
            });
          }
        });
      }
      if (cast && dE !== dEOut) cast.record(rec, { src: dE, dst: dEOut });
      // dC: its exact terms (overwriting whatever dE's slabs left in its storage), then the tiles
      corrections.record(rec, {
        e,
        c,
        targets,
        w,
        dC,
        ePartials: partials,
        part: "dC",
        coefficients,
      });
      rec.pass("fused backward dC", (p) => {
        for (const vs of voc) {
          const cs = c.shardOf(vs.start), os = dC.shardOf(vs.start);
          for (const ts of tok) {
            const es = e.shardOf(ts.start);
            const u = params(ts, es.rowStart, vs, cs.rowStart, os.rowStart, vs.tiles, 0, ts.tiles);
            const bufs = [u, es.buffer, cs.buffer, os.buffer, ...tail()];
            p.dispatch(dCPass, rec.bindGroup(dCPass, bufs), Math.min(vs.tiles, 65535));
          }
        }
      });
      if (cast && dC !== dCOut) cast.record(rec, { src: dC, dst: dCOut });
      rec.release(...release);
      return { dE: dEOut, dC: dCOut };
    },
  };
}
