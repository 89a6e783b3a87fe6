/**
 * The plan of the fused backward (kernels/fused/backward.ts): the dE pass's splits and row slices
 * of its tiles (kernels/fused/backward_tiles.ts), the segments its passes work on, where dE's f32
 * slabs live, and its workspace, in bytes, exactly.
 *
 * Workspace ({@link fusedBackwardWorkspaceBytes}, exact; paper's shape, bf16, β = 0.1, filter
 * and sorting: 1.80 MiB): the mask (1 bit a tile: 32 KB for 64 × 4001 tiles), the order decision's
 * sorted mask (its entry bits, 2 MB, sit in dC's storage), the split bounds (tT·(S + 1) u32), the
 * vocab order (|V| u32, 1 MB, kernels/fused/vocab_order.ts), E's column partials (shared by the
 * sort's Ē and the corrections' Σ_n w_n·E_n), the corrections' target coefficients and pairs, C's
 * column-sum partials (β > 0), the dC pass's order (3 u32 a vocab tile) and target flags (a u32 a
 * token, β < 1); dE's f32 slabs only where dC's storage cannot hold them. Peak of the backward
 * there (128×64 tiles, S = 4; gradients + workspace + row weights): fused 1,161 + 1.83 MiB (f32
 * gradients: 2,322 + 1.83), fused-nosort 1,161 + 0.81.
 *
 * Gradient dtype (FusedBackwardOptions.gradDtype of kernels/fused/backward.ts). "f32" (the
 * kernel's default): dE and dC are f32 outputs, accumulated in place. "input" with bf16/f16
 * inputs returns both in the input dtype (half the output memory):
 * - dC, d even: packed 16-bit, accumulated in place: the smoothing row first, each kept tile's
 *   f32 Pᵀ·E (its target terms folded in: kernels/fused/kept_tiles.ts) by a read-modify-write of
 *   the 16-bit words (round to nearest even), the other target terms last, each rounded once
 *   (kernels/fused/corrections.ts). A thread owns both halves of every word it writes (its
 *   columns come in aligned groups of 4, rows start at even elements), so ownership and bitwise
 *   reproducibility are kept. An element sees 2 + (kept token tiles of
 *   its vocab tile) roundings: ~4 at the paper's shape with the filter and sorting.
 * - dC, d odd: rows straddle words, so dC is accumulated in an f32 scratch (v·d·4 bytes of
 *   workspace) and cast once at the end.
 * - dE: a token tile walks ~125 kept vocab tiles at the paper's shape, so in-place 16-bit
 *   accumulation would round ~125 times; dE is accumulated in f32 and cast once. The f32
 *   accumulator needs no memory of its own: dE is formed completely (exact terms, tiles, split
 *   partials, cast) before dC's storage is first written, so the accumulator (and the S − 1
 *   split partials) live in dC's output buffers, whose v·d·2 bytes hold S·n·d·4 whenever
 *   |V| ≥ 2·S·n in a binding (the paper's shape, S = 4: 256,000 ≥ 65,536). Only where they do not
 *   fit (small |V|, or many splits) do they get buffers of their own ("slabs", counted as
 *   workspace). The same holds for the S split partials of f32 gradients (in dC's f32 storage
 *   when |V| ≥ S·n; they are added to dE at the end). The errors are those of one f32
 *   accumulation and one rounding.
 * Measured against float64 (kernels/fused/backward_test.ts, max |error| / max |value|, 70×257,
 * 64×64 tiles): bf16 dE 2.7e-3 – 3.3e-3, dC 2.0e-3 (1 rounding) – 4.6e-3 (4); f16 dE 2.5e-4 –
 * 4.2e-4, dC 2.6e-4 – 4.4e-4; the f32 mode stays at 1e-7 – 5e-7. Without the filter every
 * token tile is added: at n = 640 (10 token tiles, 12 roundings) bf16 dC reaches 5.6e-3 (8.9e-3
 * before the target terms were folded into the tiles; 2.6e-3 with the f32 scratch and one
 * rounding), f16 9.1e-4; the growth is about √R. So the no-filter methods (methods/fused.ts)
 * keep f32 gradients; "input" stays available to them with that error. On data whose frequent
 * targets carry most of dC (the llm fixture, 4096 × 24,576 × 64 on the software adapter, 33
 * token tiles) folding took bf16 dC from 0.14 to 2.4e-3 of the scale (f32 gradients: 1.3e-3).
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import {
  createTensor,
  DeviceTensor,
  elementBytes,
  shardRows,
  type TensorDtype,
} from "../../gpu/tensor.ts";
import { GpuError } from "../../core/errors.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import { machineEps } from "../../core/dtype.ts";
import { columnPartialsBytes, columnSumPlan } from "../column_sum.ts";
import { type VocabSegment, vocabSortWorkspaceBytes } from "./vocab_order.ts";
import { gradCorrectionsWorkspaceBytes } from "./corrections.ts";
import type { Dtype16 } from "../cast16.ts";
import { type BackwardTile, dESliceTile } from "./backward_tiles.ts";
import { type DenseDCPlan, denseDCPlan } from "./dense_dc.ts";
import { type DenseSharedPlan, denseSharedPlan } from "./dense_shared.ts";

/** The paper's filter threshold: eps(dtype)/32 (2⁻¹² bf16, 2⁻¹⁵ f16, 2⁻²⁸ f32). */
export function defaultFilterEps(dtype: Dtype): number {
  return machineEps(dtype) / 32;
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
 * workspace. The splits cut each token tile's kept tiles into equal counts (keptBoundsWgsl in
 * kernels/fused/filter.ts), so they stay balanced however the kept tiles cluster in the
 * vocabulary.
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
  const parts = slabParts(out16, splits);
  if (parts === 0) return true;
  const per = gradRowsPerBinding(limit, spec.d, out16);
  const sizes = shardRows(spec.v, per).map((r) => paddedBytes(r * spec.d * (out16 ? 2 : 4)));
  return _slabRows(sizes, spec.n, spec.d, parts, out16 && spec.d % 2 === 1) !== undefined;
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

/** Shard layout for PreparedFusedBackward.workspaceBytes (kernels/fused/backward.ts). */
export interface WorkspaceLayout {
  /** Rows per shard of E and C (default: as createTensor makes them under the binding limit). */
  e?: number[];
  c?: number[];
  /**
   * Binding limit the shards are computed for (default: this context's; at most 2 GiB − 4 on a
   * hardware adapter): decides the shards of E, C (unless given), dE, dC and the column sums.
   */
  maxBindingBytes?: number;
  /** Σ_v C_v is handed in (FusedBackwardArgs.colsum): neither it nor its partials are here. */
  colsum?: boolean;
}

/** A slab of dE's f32 accumulators: `parts` copies of rows [r0, r0 + rows), j·rows apart. */
export interface DESlab {
  buffer: TrackedBuffer;
  r0: number;
  rows: number;
}

/** Rows [start, end) inside one binding of every tensor of a pass; tiles never straddle two. */
export interface TileSegment extends VocabSegment {
  /** Tiles in the segment and global index of its first tile. */
  tiles: number;
  base: number;
}

/** Row ranges inside one binding of every tensor whose shard starts are given. */
export function tileSegments(total: number, tileRows: number, starts: number[][]): TileSegment[] {
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
  return shardRows(n, k);
}

/**
 * Where dE's f32 accumulators go: `parts` copies of dE's rows (the 16-bit mode's accumulator and
 * the S − 1 split partials). They are formed and reduced before dC is, so they live in dC's output
 * buffers (sizes `dCSizes`) when those can hold them (v·d·2 ≥ parts·n·d·4 in one binding: |V| ≥
 * 2·parts·n), else in buffers of their own (`own`, counted as workspace).
 */
export function slabPlan(o: {
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
export function slabParts(out16: boolean, splits: number): number {
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

const _starts = (rows: number[]) => rows.map((_, i) => rows.slice(0, i).reduce((a, b) => a + b, 0));

/** Rows of `cols` columns of `dtype` per binding of `limit` bytes (as gpu/tensor.ts cuts them). */
function _rowsPer(limit: number, dtype: TensorDtype, cols: number): number {
  const b = elementBytes(dtype);
  let rows = Math.floor(limit / (cols * b));
  if (b === 2 && cols % 2 === 1) rows -= rows % 2;
  return Math.max(1, rows);
}

/** Bytes of a buffer made by createTensor (16-byte padded). */
export const paddedBytes = (b: number) => Math.ceil(Math.max(b, 4) / 16) * 16;

/** Bytes of the filter mask of tT × vT tiles: one bit per tile, 16-byte padded. */
export const maskBytes = (tokenTiles: number, vocabTiles: number): number =>
  paddedBytes(Math.ceil((tokenTiles * vocabTiles) / 32) * 4);

/** Bytes of the dC pass's order of vT vocab tiles (kernels/fused/dc_order.ts: 3 u32 a tile). */
export const dCOrderBytes = (vocabTiles: number): number => paddedBytes(vocabTiles * 12);

/**
 * Bytes one record of the fused backward allocates besides dE and dC (uniform blocks aside),
 * exactly, for the shards of `layout`:
 *
 * - dE's f32 slabs (16-bit output: the accumulator and S − 1 partials; f32: the partials) only
 *   where dC's output buffers cannot hold them (see the module doc: none when |V| ≥ 2·S·n);
 * - with a 16-bit output (gradDtype "input") and d odd, dC's f32 scratch (v·d·4);
 * - the filter mask (a bit a backward tile, {@link maskBytes}), the dC order ({@link dCOrderBytes});
 * - E's column partials (one buffer for the sort's Ē and the corrections' Σ_n w_n·E_n);
 * - the vocab order (|V| u32) and the sort's Ē and key range;
 * - the corrections' buffers, C's column-sum partials included (β > 0);
 * - with the dense dC path (`denseDC`), its tail: the last chunk's G, in what the rest leaves of
 *   FUSED_BACKWARD_WORKSPACE_LIMIT ({@link denseDCPlanFor}).
 *
 * The kept-tile counter (16 bytes) is allocated at prepare time and not counted.
 */
export function fusedBackwardWorkspaceBytes(o: {
  spec: Shape & { dtype: Dtype };
  opts: LceOptions;
  filter: boolean;
  sort: boolean;
  /** The order decision (default true; FusedBackwardOptions.decideOrder, kernels/fused/backward.ts). */
  decideOrder?: boolean;
  tile: BackwardTile;
  dESplits: number;
  /** The dC pass's order (default true; FusedBackwardOptions.dCOrder). */
  dCOrder?: boolean;
  /** Default "f32". */
  gradDtype?: GradDtype;
  layout: WorkspaceLayout & { maxBindingBytes: number };
  /** The dense dC path is recorded (FusedBackwardOptions.denseDC; default false). */
  denseDC?: boolean;
  /** Its tail's rows at most (FusedBackwardOptions.denseDCTailRows). */
  denseDCTailRows?: number;
  /** Bytes of its G an element where another kernel family's (FusedBackwardOptions.denseDCPath). */
  denseDCGBytes?: number;
  /** With it, the dense backward sharing G, whose tail may be larger (kernels/fused/dense_shared.ts). */
  denseShared?: boolean;
}): number {
  if (o.denseDC) {
    const rest = fusedBackwardWorkspaceBytes({ ...o, denseDC: false });
    const shared = o.denseShared ? denseSharedPlanFor(o)?.tailBytes ?? 0 : 0;
    return rest + Math.max(denseDCPlanFor(o)?.tailBytes ?? 0, shared);
  }
  const { spec, opts, tile, layout } = o;
  const limit = layout.maxBindingBytes;
  const perIn = _rowsPer(limit, spec.dtype, spec.d);
  const eRows = layout.e ?? shardRows(spec.n, perIn);
  const cRows = layout.c ?? shardRows(spec.v, perIn);
  const out16 = gradOut16(spec.dtype, o.gradDtype) !== undefined;
  const perF32 = gradRowsPerBinding(limit, spec.d, out16);
  const dERows = shardRows(spec.n, perF32), dCRows = shardRows(spec.v, perF32);
  const out16B = out16 ? 2 : 4;
  const plan = slabPlan({
    dCSizes: dCRows.map((r) => paddedBytes(r * spec.d * out16B)),
    n: spec.n,
    d: spec.d,
    parts: slabParts(out16, o.dESplits),
    even: out16 && spec.d % 2 === 1,
    limit,
  });
  const tok = tileSegments(spec.n, tile.tokens, [
    _starts(eRows),
    _starts(dERows),
    _slabStarts(plan.rows),
  ]);
  const voc = tileSegments(spec.v, tile.vocab, [_starts(cRows), _starts(dCRows)]);
  const tT = tok.reduce((s, g) => s + g.tiles, 0), vT = voc.reduce((s, g) => s + g.tiles, 0);
  const f32Bytes = (rows: number[]) => rows.reduce((s, r) => s + paddedBytes(r * spec.d * 4), 0);
  const parts = slabParts(out16, o.dESplits);
  // dE's accumulator slabs when dC's storage cannot hold them; dC's f32 scratch when d is odd
  let bytes = plan.own ? plan.rows.reduce((s, r) => s + paddedBytes(r * spec.d * 4 * parts), 0) : 0;
  if (out16 && spec.d % 2 === 1) bytes += f32Bytes(dCRows);
  if (o.filter) bytes += maskBytes(tT, vT) + (o.dCOrder ?? true ? dCOrderBytes(vT) : 0);
  if (o.filter && o.dESplits > 1) bytes += paddedBytes(tT * (o.dESplits + 1) * 4); // split bounds
  if (o.filter && o.sort && (o.decideOrder ?? true)) {
    // the order decision: the sorted order's mask, and the entry bits unless dC's first buffer
    // holds them
    const hotBytes = tT * Math.ceil(spec.v / 32) * 4;
    bytes += maskBytes(tT, vT);
    if (paddedBytes(dCRows[0] * spec.d * out16B) < hotBytes) bytes += paddedBytes(hotBytes);
  }
  if (o.sort || opts.smoothing) bytes += columnPartialsBytes(eRows, spec.d);
  if (o.sort) bytes += spec.v * 4 + vocabSortWorkspaceBytes(eRows, spec.d, false);
  const cs = opts.smoothing ? columnSumPlan(cRows, spec.d, limit).workspaceBytes : 0;
  const cSum = layout.colsum ? "given" : cs;
  if (opts.targetTerm) bytes += paddedBytes(spec.n * 4); // the dC pass's folded-target flags
  return bytes + gradCorrectionsWorkspaceBytes(opts, eRows, spec.d, cSum, false);
}

/**
 * The dense dC path's chunks for a backward's options ({@link fusedBackwardWorkspaceBytes}'s), or
 * undefined where the path cannot apply: E, C or dC (its accumulator) over several bindings, or
 * too little workspace left for its tail (kernels/fused/dense_dc.ts).
 */
export function denseDCPlanFor(
  o: Parameters<typeof fusedBackwardWorkspaceBytes>[0],
): DenseDCPlan | undefined {
  const inputs = _denseDCPlanInputs(o);
  return inputs && denseDCPlan(inputs);
}

/**
 * The dense backward sharing G's chunks for a backward's options (kernels/fused/dense_shared.ts),
 * or undefined where it cannot apply: where the dense dC cannot, or its phases do not fit.
 */
export function denseSharedPlanFor(
  o: Parameters<typeof fusedBackwardWorkspaceBytes>[0],
): DenseSharedPlan | undefined {
  const inputs = _denseDCPlanInputs(o);
  if (!inputs) return undefined;
  // dE's f32 accumulator at the start of dC's storage with 16-bit gradients in place
  const accBytes = inputs.outBytes === 2 ? o.spec.n * o.spec.d * 4 : 0;
  return denseSharedPlan({ ...inputs, accBytes });
}

function _denseDCPlanInputs(o: Parameters<typeof fusedBackwardWorkspaceBytes>[0]) {
  const { spec, layout } = o;
  const limit = layout.maxBindingBytes;
  const perIn = _rowsPer(limit, spec.dtype, spec.d);
  const out16 = gradOut16(spec.dtype, o.gradDtype) !== undefined;
  const outBytes = out16 && spec.d % 2 === 0 ? 2 : 4;
  const single = (rows: number[] | undefined, total: number, per: number) =>
    (rows ?? shardRows(total, per)).length === 1;
  if (
    !single(layout.e, spec.n, perIn) || !single(layout.c, spec.v, perIn) ||
    !single(undefined, spec.v, gradRowsPerBinding(limit, spec.d, out16))
  ) return undefined;
  return {
    n: spec.n,
    v: spec.v,
    d: spec.d,
    outBytes,
    gBytes: o.denseDCGBytes,
    // the rest as where Σ_v C_v is not handed in, so that the plan does not depend on it
    restBytes: fusedBackwardWorkspaceBytes({
      ...o,
      denseDC: false,
      layout: { ...layout, colsum: false },
    }),
    maxBindingBytes: limit,
    maxTailRows: o.denseDCTailRows,
  };
}

/** The gradient tensors of one record. */
export interface BackwardGradients {
  dEOut: DeviceTensor;
  dCOut: DeviceTensor;
  /** dC's accumulator: the output, or its f32 scratch (16-bit output, d odd). */
  dC: DeviceTensor;
  /** dE's accumulator: the output itself (f32) or part 0 of the slabs (16-bit output). */
  dE: DeviceTensor;
  slabs: DESlab[];
  /** f32 copies of dE's rows in the slabs ({@link slabParts}). */
  parts: number;
}

/**
 * The storage a backward may use as scratch before dC is first written (dE is formed before it):
 * dC's first output buffer, up to one binding, from past dE's f32 accumulator `acc` where that
 * lives there (`shared`), else from its start. The gathered dE's slots and the dense dE's chunks
 * live here.
 */
export function dCScratch(
  g: BackwardGradients,
  acc: { buffer: TrackedBuffer; rows: number },
  d: number,
  limit: number,
): { free: TrackedBuffer; shared: boolean; start: number; end: number } {
  const free = g.dCOut.shards[0].buffer;
  const shared = acc.buffer === free;
  const start = shared ? Math.ceil((acc.rows * d * 4) / 256) * 256 : 0;
  return { free, shared, start, end: Math.min(free.size, limit) };
}

/**
 * Gradient tensors: the outputs (f32 or 16-bit), dC's f32 scratch (16-bit output, d odd), and
 * dE's f32 accumulator slabs (16-bit output: the accumulator and the split partials; f32: the
 * partials), in dC's output buffers when they fit (dE is finished before dC's storage is first
 * written), else in buffers of their own.
 */
export function allocateGradients(ctx: GpuContext, p: {
  spec: Shape;
  /** The 16-bit gradient dtype, or undefined for f32 gradients. */
  out16?: Dtype16;
  /** dC accumulated in place in 16 bits (d even), else in an f32 scratch. */
  dCInPlace?: Dtype16;
  splits: number;
  /** Workspace buffers to release after the record. */
  release: (TrackedBuffer | undefined)[];
}): BackwardGradients {
  const { release } = p;
  const { n, v, d } = p.spec;
  const { out16 } = p;
  const per = gradRowsPerBinding(ctx.maxBindingBytes, d, out16 !== undefined);
  const grad = (rows: number, dtype: TensorDtype, label: string, role: "output" | "workspace") =>
    createTensor(ctx, { dtype, rows, cols: d, role, label, maxRowsPerShard: per });
  const dEOut = grad(n, out16 ?? "f32", "dE", "output");
  const dCOut = grad(v, out16 ?? "f32", "dC", "output");
  const dC = out16 && !p.dCInPlace ? grad(v, "f32", "dC f32 scratch", "workspace") : dCOut;
  if (dC !== dCOut) release.push(...dC.shards.map((sh) => sh.buffer));
  const parts = slabParts(out16 !== undefined, p.splits);
  const plan = slabPlan({
    dCSizes: dCOut.shards.map((sh) => sh.buffer.size),
    n,
    d,
    parts,
    even: out16 !== undefined && d % 2 === 1,
    limit: ctx.maxBindingBytes,
  });
  const slabs: DESlab[] = [];
  let r0 = 0;
  plan.rows.forEach((rows, i) => {
    if (rows === 0) return;
    const buffer = plan.own
      ? ctx.createBuffer({
        size: paddedBytes(rows * d * 4 * parts),
        role: "workspace",
        label: "dE f32 slab",
      })
      : dCOut.shards[i].buffer;
    if (plan.own) release.push(buffer);
    slabs.push({ buffer, r0, rows });
    r0 += rows;
  });
  const dE = out16
    ? new DeviceTensor(
      "f32",
      n,
      d,
      slabs.map((sl) => ({ buffer: sl.buffer, rowStart: sl.r0, rows: sl.rows })),
      "dE f32 accumulator",
    )
    : dEOut;
  return { dEOut, dCOut, dC, dE, slabs, parts };
}
