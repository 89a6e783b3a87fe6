/**
 * The fused backward of the label-smoothed linear cross-entropy (the paper's "Ours" backward):
 * dE and dC without the n×|V| logits, with an optional gradient filter and vocabulary sorting.
 *
 * Split of the gradient. With w_n the per-token weight, f' = 1 − (z/s)² the softcap derivative
 * (1 without softcap) and p = softmax(z_n):
 *
 *   ∂L/∂x_nv = w_n·[p_nv·f' + (β/|V|)(z_nv/s)²]   (dense, tiled, may be filtered: "P")
 *            − (β/|V|)·w_n                          (rank one, exact: kernels/fused/corrections.ts)
 *            − (1−β)·w_n·f'(z_{n,t_n})·[v = t_n]    (sparse, exact: kernels/fused/corrections.ts)
 *
 * (the three add up to w_n·f'·(p − β/|V| − (1−β)[v = t])). Only P is tiled. The middle term of P
 * exists only with softcap and β > 0 and is bounded by (β/|V|)·w_n; it is kept inside P, so the
 * filter treats it like the softmax: a skipped tile drops at most ε·|w_n| per element, for both
 * parts. The filter tests the unweighted value g = P/w_n (as the reference CCE code does before it
 * multiplies by the upstream gradient): a tile is skipped when every g in it is < ε, so the error
 * of a filtered gradient is bounded by |ΔdE_nk| ≤ ε·|w_n|·Σ_{v skipped} |C_vk| and
 * |ΔdC_vk| ≤ ε·Σ_{n skipped} |w_n·E_nk|. Ignored tokens (w_n = 0) never keep a tile alive.
 *
 * Accumulation: each output element written by one workgroup, its terms in a fixed order, no
 * float atomics (integer ones only: mask ORs, counts, ranks, the sort keys' range): bitwise
 * reproducible gradients.
 *
 * The record, in order (dE formed before dC's storage is first written: backward_plan.ts):
 *
 * 1. With sorting, the vocab order (kernels/fused/vocab_order.ts); with the order decision's
 *    bound (sortBound) after the filter instead, under the bound's gate.
 * 2. With a filter, pass `filter` (where both dense paths below apply: first pass `filter sample`
 *    over the first eighth of the token tiles, then `filter sample decision`, and the filter's
 *    rest under a gate of it, which does no work where the sample keeps enough tiles for both
 *    dense paths: kernels/fused/filter_sample.ts), then with the order decision the `order
 *    bound` pass where recorded and the `order decision` pass (kernels/fused/order_decision.ts),
 *    and with dE splits the `kept bounds` pass (kernels/fused/filter.ts: the mask of kept tiles).
 *    With `mapFilter` (the `fused-tilemap` row) the `map filter` pass sets the mask from the
 *    forward's tile maxima instead (kernels/fused/tile_map.ts: no products); then, where
 *    recorded, `map refine decision` and under its gate `map refine`, the exact filter over the
 *    tiles the map keeps (kernels/fused/map_refine.ts; a refine by another family's filter over
 *    every tile takes the filter's sample as the filter does, its gate nested in the refine's).
 * 3. dE's exact terms (kernels/fused/corrections.ts) initialise dE's f32 accumulator.
 * 4. With the filter, by default, pass `dE plan`, then `kept g` and `dE` (gathered_de.ts) in
 *    rounds of token tiles: the kept tiles' g in dC's not yet written storage, then each token
 *    tile's dE as one dense product over its kept tiles. Otherwise (sharded tensors, too little
 *    storage, no mask, dESplits/dERowSlices given): pass `dE` (kept_tiles.ts), the kept tiles'
 *    P·C into dE's rows tile by tile, split by S. With the gathered dE, pass `dense dE decision`
 *    first chooses on the GPU between those passes and dense products over every tile where
 *    most tiles are kept (dense_de.ts; each path recorded under a gate of its flag).
 * 5. The partials are added to dE in split order, and dE is cast to its 16-bit output.
 * 6. dC's smoothing row, with the filter pass `dC order` (dc_order.ts: vocab tiles by their kept
 *    token tiles, most first) and on hardware `dC split plan` (dc_split.ts: long walks cut into
 *    segments, their partials in the rows of vocab tiles nobody keeps), then pass `dC`
 *    (kept_tiles.ts): Pᵀ·E, a workgroup a vocab tile or segment, the kept tiles' target terms
 *    included; `dC split sum` adds the partials; then the other target terms (corrections.ts).
 *    Where recorded, pass `dense dC decision` first chooses on the GPU between the `dC` pass (with
 *    its split's sum) and dense products over every tile, vocabulary chunk by chunk from the
 *    top, where most tiles are kept (dense_dc.ts; each under a gate of its flag; the light
 *    passes around the `dC` pass run either way, the dense products overwrite what they wrote).
 *
 * With the filter, every tile's logits are computed once (filter pass) and a kept tile's twice
 * more; a skipped tile costs one mask read in each gradient pass. Without the filter the two
 * gradient passes recompute every tile (4 GEMM-equivalents in all). The plan (tiles, splits, row
 * slices, segments, slabs, workspace, peak memory) and the gradient dtype
 * ({@link FusedBackwardOptions.gradDtype}): backward_plan.ts. Vocabulary sorting: a permutation
 * of C's rows; vocab tiles are ranges of positions in it, C/dC rows addressed through it (whether
 * it is used: "Order decision" in kernels/fused/filter.ts).
 *
 * Sharding: E, dE and C, dC may each span several bindings. The passes work on *segments*, row
 * ranges inside one binding of each tensor of the pair (the union of both tensors' shard
 * boundaries); tiles never straddle them, one dispatch per (vocab, token) segment pair, the sort
 * permutes rows within a vocab segment. (Bindings of a few rows, as in the forced-sharding tests,
 * shrink tiles to a few elements: still within the bound above.)
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { GemmTile } from "../gemm_codegen.ts";
import { createTensor, download } from "../../gpu/tensor.ts";
import { GpuError } from "../../core/errors.ts";
import { columnPartialsBytes } from "../column_sum.ts";
import {
  allocateGradients,
  type BackwardGradients,
  dCOrderBytes,
  denseDCPlanFor,
  denseSharedPlanFor,
  fusedBackwardWorkspaceBytes,
  maskBytes,
  paddedBytes,
  type TileSegment,
  tileSegments,
  type WorkspaceLayout,
} from "./backward_plan.ts";
import { recordFilterPass, recordKeptBounds } from "./filter.ts";
import { filterSampleRows, KEPT_COUNTER_WORDS, sampleSegments } from "./filter_sample.ts";
import type { DensePathArgs } from "./dense_decision.ts";
import { recordOrderDecision, sortedOrderWins } from "./order_decision.ts";
import { recordDCPass, recordDEPass } from "./kept_tiles_record.ts";
import { recordSlabReduce } from "./slab_reduce.ts";
import { type BackwardPipelines, compileBackward } from "./backward_pipelines.ts";
import { type BackwardOptionsPlan, planBackward } from "./backward_options.ts";
import {
  checkBackwardArgs,
  type FusedBackwardArgs,
  type FusedBackwardOptions,
  type PreparedFusedBackward,
} from "./backward_types.ts";
export type {
  FusedBackwardArgs,
  FusedBackwardOptions,
  FusedBackwardStats,
  PreparedFusedBackward,
} from "./backward_types.ts";

/** The state of one record. */
interface _Record {
  ctx: GpuContext;
  rec: Recorder;
  p: BackwardOptionsPlan;
  pipes: BackwardPipelines;
  /** The kept-tile counters (with the filter). */
  counter?: TrackedBuffer;
  a: FusedBackwardArgs;
  g: BackwardGradients;
  tok: TileSegment[];
  voc: TileSegment[];
  tTotal: number;
  vTotal: number;
  /** Workspace released after the record. */
  release: (TrackedBuffer | undefined)[];
  /** The filter's sample was recorded (set by the filter's record; absent: not). */
  sampled?: boolean;
  /** The dense backward sharing G was recorded (dense_shared.ts). */
  shared?: boolean;
}

/** Buffers of the sort and the filter (E's column partials, order, masks, entry bits). */
type _Masks = ReturnType<typeof _recordSortAndMasks>;

/** Allocates the sort's and the filter's buffers and records the sort. */
function _recordSortAndMasks(r: _Record) {
  const { ctx, rec, p, a, g } = r;
  const { v, d } = p.spec;
  const maskSize = p.eps !== null ? maskBytes(r.tTotal, r.vTotal) : 0;
  if (maskSize > ctx.maxBindingBytes) {
    throw new GpuError(
      "limits",
      `fused backward: the tile mask (${maskSize} bytes) exceeds one binding`,
    );
  }
  // One buffer of E's column partials serves the sort's Ē and the corrections' Σ_n w_n·E_n.
  const partials = r.pipes.sorter !== undefined || r.pipes.corrections.usesEPartials
    ? ctx.createBuffer({
      size: columnPartialsBytes(a.e.shards.map((s) => s.rows), d),
      role: "workspace",
      label: "E column partials",
    })
    : undefined;
  r.release.push(partials);
  let perm: TrackedBuffer | undefined;
  if (r.pipes.sorter) {
    perm = ctx.createBuffer({ size: v * 4, role: "workspace", label: "vocab order" });
    // with the bound the sort waits for the filter's entry bits (_recordFilter)
    if (!r.pipes.sortBound) _recordSort(r, perm, partials);
    r.release.push(perm);
  }
  let mask: TrackedBuffer | undefined;
  if (p.eps !== null) {
    mask = ctx.createBuffer({ size: maskSize, role: "workspace", label: "tile mask" });
    rec.clear(mask);
    rec.clear(r.counter!);
    r.release.push(mask);
  }
  // the order decision: entry bits (in dC's first buffer when it holds them: dC is written only
  // after dE) and the sorted order's mask
  const hotWords = Math.ceil(v / 32);
  const hotBytes = r.tTotal * hotWords * 4;
  let hot: TrackedBuffer | undefined, maskS: TrackedBuffer | undefined;
  if (p.decide) {
    const inDC = g.dCOut.shards[0].buffer.size >= hotBytes;
    const bits = inDC
      ? g.dCOut.shards[0].buffer
      : ctx.createBuffer({ size: paddedBytes(hotBytes), role: "workspace", label: "entry bits" });
    if (!inDC) r.release.push(bits);
    rec.clear(bits, 0, Math.ceil(hotBytes / 4) * 4);
    hot = bits;
    maskS = ctx.createBuffer({ size: maskSize, role: "workspace", label: "sorted tile mask" });
    rec.clear(maskS);
    r.release.push(maskS);
  }
  return { partials, perm, mask, maskSize, hot, maskS, hotWords };
}

/** Records the vocabulary sort into `perm` (Ē and the keys inside `keysUnder`, where given). */
function _recordSort(
  r: _Record,
  perm: TrackedBuffer,
  partials: TrackedBuffer | undefined,
  keysUnder?: (fn: () => void) => void,
) {
  const { e, c, targets, count } = r.a;
  const segments = r.voc;
  r.pipes.sorter!.record(r.rec, { e, c, targets, count, perm, segments, partials, keysUnder });
}

/** Records the filter, the order decision and the kept bounds; returns the split bounds. */
function _recordFilter(r: _Record, m: _Masks): TrackedBuffer | undefined {
  const { ctx, rec, p, a, pipes, counter } = r;
  const { filterPass, sortedMask, orderSelect, keptBounds } = pipes;
  const { perm, mask, hot, maskS } = m;
  const base = { rec, e: a.e, c: a.c, tok: r.tok, voc: r.voc, tTotal: r.tTotal, vTotal: r.vTotal };
  if (pipes.mapFilter && mask && counter) {
    const { tileMap } = a as Required<FusedBackwardArgs>;
    pipes.mapFilter.record(rec, { ...base, tileMap, lse: a.lse, w: a.w, mask, counter });
    const { targets, lse, w } = a, tiles = r.tTotal * r.vTotal, d = p.spec.d;
    const scales = a.filterScales;
    // a refine by another family's filter over every tile takes the filter's sample as the plain
    // filter does (map_refine.ts)
    const rows = p.mapRefine?.full ? _filterSampleRows(r, m, p.mapRefine.filterTile) : 0;
    const sample = rows > 0
      ? { rows, tileTokens: p.tile.tokens, prepared: pipes.filterSample! }
      : undefined;
    if (sample) r.sampled = true;
    pipes.mapRefine?.record({ ...base, mask, counter, targets, lse, w, tiles, d, scales, sample });
  }
  if (filterPass && p.filterTile && mask && counter) {
    const filter = {
      ...base,
      mask,
      counter,
      hotWords: m.hotWords,
      kernel: filterPass,
      filterTile: p.filterTile,
      lse: a.lse.shards[0].buffer,
      w: a.w.shards[0].buffer,
      d: p.spec.d,
      perm: p.decide ? undefined : perm,
      hot,
      scales: a.filterScales,
    };
    const rows = _filterSampleRows(r, m, p.filterTile);
    if (rows > 0) {
      // the sample's token tiles, the decision, then the rest under its gate (filter_sample.ts)
      const [first, rest] = sampleSegments(r.tok[0], rows, p.tile.tokens);
      const sample = pipes.filterSample!;
      r.sampled = true;
      recordFilterPass({ ...filter, tok: [first], label: "fused backward filter sample" });
      sample.record(rec, { counter, sampled: first.tiles * r.vTotal, total: r.tTotal * r.vTotal });
      sample.rest(rec, () => recordFilterPass({ ...filter, tok: [rest] }));
    } else recordFilterPass(filter);
  }
  const bound = pipes.sortBound;
  if (bound && hot && perm && counter) {
    // Ē and the keys only where the bound leaves the sorted order a chance (order_decision.ts);
    // the sort's own dispatches (55 at |V| = 256,000) cost less run than gated
    bound.record(rec, { hot, counter, tTotal: r.tTotal, hotWords: m.hotWords });
    _recordSort(r, perm, m.partials, (fn) => bound.under(rec, fn));
  }
  if (sortedMask && orderSelect && hot && maskS && perm && mask && counter) {
    recordOrderDecision({
      ...base,
      mask,
      counter,
      hotWords: m.hotWords,
      sortedMask,
      orderSelect,
      v: p.spec.v,
      perm,
      hot,
      maskS,
      maskSize: m.maskSize,
      maskUnder: bound && ((fn) => bound.under(rec, fn)),
    });
  }
  if (!keptBounds || !mask) return undefined;
  if (r.tTotal > 65535) throw new GpuError("limits", `fused backward: ${r.tTotal} token tiles`);
  const bounds = ctx.createBuffer({
    size: paddedBytes(r.tTotal * (p.splits + 1) * 4),
    role: "workspace",
    label: "dE split bounds",
  });
  r.release.push(bounds);
  recordKeptBounds({ rec, kernel: keptBounds, mask, bounds, tTotal: r.tTotal, vTotal: r.vTotal });
  return bounds;
}

/** What the dense paths read, but their outputs. */
function _densePathArgs(r: _Record): DensePathArgs {
  const { e, c, targets, w, lse } = r.a;
  return {
    rec: r.rec,
    e,
    c,
    targets,
    w,
    lse,
    counter: r.counter!,
    tok: r.tok,
    voc: r.voc,
    tiles: r.tTotal * r.vTotal,
    sortDecided: r.p.decide,
  };
}

/**
 * The filter sample's rows: where it is recorded and both dense paths apply to this record, about
 * an eighth of the token tiles in whole filter and backward tiles (filter_sample.ts), else 0.
 */
function _filterSampleRows(r: _Record, m: _Masks, filterTile: GemmTile): number {
  const { pipes, p } = r;
  if (!pipes.filterSample || !pipes.dense || !pipes.denseDC || !m.mask || r.tok.length !== 1) {
    return 0;
  }
  const a = _densePathArgs(r);
  if (!pipes.dense.applies({ ...a, grads: r.g }) || !pipes.denseDC.applies({ ...a, dC: r.g.dC })) {
    return 0;
  }
  const gcd = (x: number, y: number): number => (y === 0 ? x : gcd(y, x % y));
  const bm = filterTile.bm, tt = p.tile.tokens;
  return filterSampleRows(p.spec.n, (bm * tt) / gcd(bm, tt));
}

/**
 * Records dE (its exact terms, the dE pass, the split partials' sum, the cast), then dC (its exact
 * terms, overwriting whatever dE's slabs left in its storage, then the dC pass and the cast).
 */
function _recordGradients(r: _Record, m: _Masks, bounds: TrackedBuffer | undefined): void {
  const { rec, p, a, g, pipes } = r;
  const { e, c, targets, w } = a;
  const d = p.spec.d;
  const exact = { e, c, targets, w, ePartials: m.partials, csum: a.colsum };
  const { coefficients } = pipes.corrections.record(rec, { ...exact, dE: g.dE, part: "dE" });
  // split partials (parts ≥ 1 of the slabs; all parts with an f32 output) start at zero
  const first = p.out16 ? 1 : 0;
  for (const sl of g.slabs) {
    if (g.parts > first) {
      const bytes = sl.rows * d * 4;
      rec.clear(sl.buffer, first * bytes, (g.parts - first) * bytes);
    }
  }
  const tail = { lse: a.lse.shards[0].buffer, w: w.shards[0].buffer, perm: m.perm, mask: m.mask };
  const base = { rec, e, c, tok: r.tok, voc: r.voc, vTotal: r.vTotal, d, tail };
  const { sliceRows, splits } = p;
  const keptDE = () => {
    const gathered = m.mask && pipes.gathered?.record({
      ...base,
      lse: a.lse.shards[0].buffer,
      w: w.shards[0].buffer,
      perm: m.perm,
      mask: m.mask,
      grads: g,
    });
    if (!gathered) recordDEPass({ ...base, ...g, kernel: pipes.dEPass, sliceRows, splits, bounds });
  };
  const { counter } = r;
  // both dense paths the GEMM core's: one G for both where both are taken (dense_shared.ts);
  // each decision is given the other's mode and threshold
  const { dense: dE, denseDC: dC } = pipes;
  const sharing = m.mask && counter && dE?.applies({ ..._densePathArgs(r), grads: g })
    ? dC?.sharing?.({ ..._densePathArgs(r), dC: g.dC, dE: g.dE })
    : undefined;
  r.shared = sharing !== undefined;
  const dense = m.mask && counter && dE?.record(
    { ..._densePathArgs(r), grads: g },
    keptDE,
    sharing && { share: { mode: p.denseDC!, above: dC!.above }, fn: sharing.dEPhases },
  );
  if (!dense) keptDE();
  if (pipes.reduce) {
    const { slabs, dEOut } = g;
    recordSlabReduce({ rec, kernel: pipes.reduce, slabs, d, dEOut, inPlace: !!p.out16 });
  }
  if (pipes.cast && g.dE !== g.dEOut) pipes.cast.record(rec, { src: g.dE, dst: g.dEOut });
  // dC: the kept tiles' pass, or where recorded the dense path's decision between the two: then
  // the dC pass, its split's sum and the target scatter are gated, the light passes around them
  // run either way (the dense path overwrites every row they write)
  // with the shared path the kept path's light passes too only where it is taken: the shared
  // chunks wrote dC's rows before them
  const keptDC = (gated: (fn: () => void) => void) =>
    sharing ? gated(() => _keptDC((fn) => fn())) : _keptDC(gated);
  const _keptDC = (gated: (fn: () => void) => void) => {
    const split = pipes.dCSplit && m.mask && counter ? pipes.dCSplit : undefined;
    const { smoothRow } = pipes.corrections.record(rec, {
      ...exact,
      dC: g.dC,
      part: "dC",
      coefficients,
      keepSmoothRow: split !== undefined,
    });
    r.release.push(smoothRow?.shards[0].buffer);
    const folded = coefficients
      ? r.ctx.createBuffer({ size: paddedBytes(p.spec.n * 4), role: "workspace", label: "folded" })
      : undefined;
    r.release.push(folded);
    if (folded) rec.clear(folded);
    let order: TrackedBuffer | undefined;
    if (pipes.dCOrder && m.mask) {
      const size = dCOrderBytes(r.vTotal);
      order = r.ctx.createBuffer({ size, role: "workspace", label: "dC order" });
      r.release.push(order);
      pipes.dCOrder.record({
        rec,
        mask: m.mask,
        ord: order,
        voc: r.voc,
        tTotal: r.tTotal,
        vTotal: r.vTotal,
      });
    }
    const fold = coefficients && folded
      ? { targets: targets.shards[0].buffer, coef: coefficients.shards[0].buffer, folded }
      : undefined;
    if (split && order) {
      split.plan({
        rec,
        ord: order,
        counter: counter!,
        voc: r.voc,
        vTotal: r.vTotal,
        ...p.dCSplit,
      });
    }
    gated(() => {
      recordDCPass({ ...base, kernel: pipes.dCPass, dC: g.dC, order, fold, split: !!split });
      if (split && order) {
        const rvec = smoothRow?.shards[0].buffer;
        split.sum({ rec, ord: order, dC: g.dC, voc: r.voc, vTotal: r.vTotal, rvec, perm: m.perm });
      }
    });
    const scatter = { dC: g.dC, part: "dC-scatter" as const, coefficients, folded };
    pipes.corrections.record(rec, { ...exact, ...scatter, scatterUnder: gated });
  };
  const denseDC = m.mask && counter &&
    pipes.denseDC?.record(
      { ..._densePathArgs(r), dC: g.dC },
      keptDC,
      sharing && { share: { mode: p.denseDE!, above: dE!.above }, record: sharing },
    );
  if (!denseDC) keptDC((fn) => fn());
  if (pipes.cast && g.dC !== g.dCOut) pipes.cast.record(rec, { src: g.dC, dst: g.dCOut });
}

/** Compiles the fused backward for a problem. */
export async function prepareFusedBackward(
  ctx: GpuContext,
  o: FusedBackwardOptions,
): Promise<PreparedFusedBackward> {
  const p = planBackward(ctx, o);
  const { spec, tile } = p;
  const workspace = (layout: WorkspaceLayout, denseDC: boolean) => ({
    spec,
    opts: p.opts,
    filter: p.eps !== null,
    sort: p.sort,
    decideOrder: o.decideOrder,
    tile,
    dESplits: p.splits,
    dCOrder: p.dCOrder,
    gradDtype: o.gradDtype,
    layout: { ...layout, maxBindingBytes: layout.maxBindingBytes ?? ctx.maxBindingBytes },
    denseDC,
    denseDCTailRows: o.denseDCTailRows,
    denseDCGBytes: o.denseDCPath?.gBytes,
    denseShared: p.denseShared,
  });
  const denseDCPlan = p.denseDC ? denseDCPlanFor(workspace({}, true)) : undefined;
  const sharedPlan = p.denseShared ? denseSharedPlanFor(workspace({}, true)) : undefined;
  const pipes = await compileBackward(ctx, p, denseDCPlan, sharedPlan);
  const counter = p.eps !== null
    ? createTensor(ctx, {
      dtype: "u32",
      rows: 1,
      cols: KEPT_COUNTER_WORDS,
      role: "workspace",
      label: "kept tiles",
    })
    : undefined;
  let lastTotal = 0, lastSampled = false, lastShared = false;
  const roundings = { dE: p.out16 ? 1 : 0, dC: p.out16 ? 1 : 0 };
  return {
    tile,
    filterTile: p.filterTile,
    dESplits: p.splits,
    dERowSlices: p.slices,
    filterEps: p.eps,
    gradDtype: p.out16 ?? "f32",
    roundings,
    get lastDenseDEChunkRows() {
      return pipes.dense?.lastChunkRows ?? 0;
    },
    get lastDenseDCChunks() {
      return pipes.denseDC?.lastChunks ?? 0;
    },
    get lastDERounds() {
      return pipes.gathered?.lastRounds ?? 0;
    },
    workspaceBytes(layout = {}) {
      return fusedBackwardWorkspaceBytes(workspace(layout, pipes.denseDC !== undefined));
    },
    release() {
      counter?.destroy();
      pipes.sortBound?.release();
      pipes.gathered?.release();
      pipes.dense?.release();
      pipes.denseDC?.release();
      pipes.mapRefine?.release();
      pipes.filterSample?.release();
    },
    usedDERounds() {
      return pipes.gathered && pipes.gathered.lastRounds > 0
        ? pipes.gathered.usedRounds()
        : Promise.resolve(0);
    },
    async stats() {
      if (!counter) return { tilesSkipped: 0, tilesTotal: lastTotal };
      // [own order's kept tiles, sorted order's (with the order decision; where the bound
      // skipped it, the bound), the dC split's segments, the bound, the filter's sample taken,
      // its estimate]: the chosen order's, or the sample's estimate
      const got = await download(ctx, counter);
      const sampled = got[4] === 1;
      const chosen = p.decide && sortedOrderWins(got[0], got[1]) ? got[1] : got[0];
      const kept = sampled ? got[5] : chosen;
      const stats = {
        tilesSkipped: lastTotal - kept,
        tilesTotal: lastTotal,
        ...(pipes.sortBound ? { sortSkipped: sortedOrderWins(got[0], got[3]) ? 0 : 1 } : {}),
        ...(lastSampled ? { filterSampled: sampled ? 1 : 0 } : {}),
      };
      const split = pipes.dCSplit ? { dCSplits: got[2] } : {};
      const dE = pipes.dense && pipes.dense.lastChunkRows > 0
        ? { denseDE: (await pipes.dense.took()) ? 1 : 0 }
        : {};
      // another kernel family's dense dE may round G as coarsely as the output
      const dERounds = dE.denseDE === 1 ? pipes.dense!.dERoundings : undefined;
      roundings.dE = dERounds ?? (p.out16 ? 1 : 0);
      const refine = await pipes.mapRefine?.state();
      const map = refine
        ? { mapRefined: refine.refined ? 1 : 0, mapKeptTiles: refine.mapKept }
        : {};
      // where the shared path was recorded its flag says both (2: shared, 1: dense dC alone)
      const flag = lastShared ? await pipes.denseDC!.taken!() : undefined;
      const sharedTook = flag === 2;
      const dC = pipes.denseDC && pipes.denseDC.lastChunks > 0
        ? { denseDC: (flag ?? ((await pipes.denseDC.took()) ? 1 : 0)) > 0 ? 1 : 0 }
        : {};
      // the dense dC rounds G (16 bits where dC is accumulated in place) and the output once,
      // or as another kernel family's path says
      const own = p.dCInPlace ? 2 : p.out16 ? 1 : 0;
      if (dC.denseDC === 1) roundings.dC = pipes.denseDC!.dCRoundings ?? own;
      // the shared path: dE from G in dC's element type, rounded as dC's G is
      const shared = lastShared ? { denseShared: sharedTook ? 1 : 0 } : {};
      if (shared.denseShared === 1) roundings.dE = own;
      return { ...stats, ...split, ...dE, ...dC, ...shared, ...map };
    },
    record(rec, a) {
      checkBackwardArgs(spec, p.mapTile !== undefined && p.eps !== null, a);
      const release: (TrackedBuffer | undefined)[] = [];
      const g = allocateGradients(ctx, { ...p, release });
      const tok = tileSegments(spec.n, tile.tokens, [
        a.e.shards.map((s) => s.rowStart),
        g.dEOut.shards.map((s) => s.rowStart),
        g.slabs.map((sl) => sl.r0),
      ]);
      const voc = tileSegments(spec.v, tile.vocab, [
        a.c.shards.map((s) => s.rowStart),
        g.dC.shards.map((s) => s.rowStart),
      ]);
      const tTotal = tok.reduce((s, t) => s + t.tiles, 0);
      const vTotal = voc.reduce((s, t) => s + t.tiles, 0);
      lastTotal = tTotal * vTotal;
      // the smoothing row, each kept token tile, [the split's sum,] [the target terms]
      const sum = pipes.dCSplit && p.eps !== null ? 1 : 0;
      roundings.dC = p.dCInPlace ? (p.opts.targetTerm ? 2 : 1) + tTotal + sum : p.out16 ? 1 : 0;
      const cb = counter?.shards[0].buffer;
      const r: _Record = {
        ctx,
        rec,
        p,
        pipes,
        counter: cb,
        a,
        g,
        tok,
        voc,
        tTotal,
        vTotal,
        release,
      };
      const m = _recordSortAndMasks(r);
      const bounds = _recordFilter(r, m);
      lastSampled = r.sampled === true;
      _recordGradients(r, m, bounds);
      lastShared = r.shared === true;
      rec.release(...release);
      return { dE: g.dEOut, dC: g.dCOut };
    },
  };
}
