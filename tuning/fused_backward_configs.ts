/**
 * The fused backward bench's configurations (scripts/bench_fused_backward.ts `--configs`), by
 * name: the `fused` method's variant and kernel options (methods/fused.ts FusedKernelOptions):
 *
 * - `ours` (the `fused` method: order decision, the kept tiles' dE gathered, the dC pass's tile
 *   order), `always-sort` (sorted order always: the paper's rule), `nosort` (`fused-nosort`),
 *   `f32grad` (`fused-f32grad`), `nobound` (the order decision's Ē, sort keys and sorted mask always
 *   run, not only where their bound leaves sorting a chance: kernels/fused/order_decision.ts);
 * - `s1r4` (ours with the dE layout before the splits: 1 split, 4 row slices), `s8r1` (8 balanced
 *   splits), and any `s<S>r<R>` (S dE splits, R row slices);
 * - `widefilter` (the filter pass on the 128×256 product tile), `pertile` (dE by the per-tile
 *   pass, not the gathered products), `g1` (the backward tile's gradient products not widened),
 *   `dcseq` (the dC pass in the vocabulary's order, not most kept tiles first), `dense` and `kept`
 *   (dE by the dense path always, or by the kept tiles always: kernels/fused/dense_de.ts), and
 *   `dense-hw`, `dense-n64`, `dense-n32`, `dense-8x16` (the dense path on other product tiles),
 *   `dcdense` and `dckept` (dC by its dense path always, or by the kept tiles always:
 *   kernels/fused/dense_dc.ts), `dcdense-large` and `dcdense-s256` (the dense dC's small-chunk
 *   tiles never, or below 256 rows), `dcdense-pp` (each of its products timed alone; with
 *   `-hw`, `-8x16` the dC product on TILE_HW, TILE_HW_8X16), `dcdense-s1` (no split-K of its
 *   small chunks; `dcdense-s1-pp` timed alone), `dcdense-t64` (its small chunks on 64×64 tiles),
 *   `dcdense-2048`, `dcdense-512` (the small tiles below 2,048 or 512 rows),
 *   `dense-both` and `kept-both` (both gradients each way; `dense-both` each dense path on its own
 *   logits), `dense-shared` (both dense from one G a chunk: kernels/fused/dense_shared.ts) and
 *   `ours-apart` (ours with each dense path on its own logits where both are taken),
 *   `nosplit` (the dC pass's walks whole: kernels/fused/dc_split.ts), `split-s128`, `split-s192`,
 *   `split-s256`, `split-s512` (segments sized for that many workgroups), `split-l1`, `split-l4`
 *   (the shortest segment 1 or 4 kept tiles), `dcstaged`, `dcdirect` (the dC pass's gradient
 *   product: kernels/fused/dc_product.ts), `dcs2d`, `dcflat` (the direct dC pass's logits on
 *   [k][row] staging or not; `dckept-s2d` with the kept tiles always);
 * - any `g<BN>k<BK>t<TM>x<TN>[smw][-kg[smw]]`: the gathered dE's product tile (128 rows, 16-byte
 *   loads; flags `s` [k][row] staging, `m` thread-major staging, `w` the warp layout of
 *   tuning/gemm_layouts.ts), and with `-kg` the `kept g` pass's 128×64 tile with its flags;
 * - any `bt<TPT>x<VPT>k<BK>w<W>[-kgwide]`: the backward tile (128 tokens × 64 vocabulary entries,
 *   the mask's) with TPT tokens × VPT vocabulary entries a thread, K-step BK and gradWiden W; with
 *   `-kgwide` the `kept g` pass keeps the thread shape it has with BACKWARD_TILE_WIDE, so that
 *   only the dC pass (and the per-tile dE pass, unused with the gathered dE) changes
 *   (`bt4x8k16w2-kgwide` is `ours` on the WIDE tile; `bt8x4k16w2` is the WIDE tile before its dC
 *   pass took 4×8, BackwardTile.dCThreads).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { type GemmTile, TILE_HW, TILE_HW_WIDE } from "../kernels/gemm_codegen.ts";
import { TILE_HW_8X16, TILE_SMALL } from "../kernels/gemm_tiles.ts";
import {
  BACKWARD_TILE_WIDE,
  backwardGemmTiles,
  defaultBackwardTile,
} from "../kernels/fused/backward_tiles.ts";
import type { FusedKernelOptions, FusedVariant } from "../methods/fused.ts";
import { withLayout } from "./gemm_layouts.ts";

/** The `fused` method's variant, which every configuration starts from. */
export const BENCH_BASE: FusedVariant = {
  name: "bench",
  label: "bench",
  description: "bench",
  filter: true,
  sort: true,
  fusedForwardBackward: false,
  gradDtype: "input",
};

/** A configuration: what it changes of the variant, and its kernel options. */
export interface BenchConfig {
  variant?: Partial<FusedVariant>;
  kernels?: FusedKernelOptions;
}

const backward = (b: FusedKernelOptions["backward"]): BenchConfig => ({ kernels: { backward: b } });

/** The named configurations. */
export const BENCH_CONFIGS: Record<string, (ctx: GpuContext) => BenchConfig> = {
  ours: () => ({}),
  "always-sort": () => backward({ decideOrder: false }),
  nobound: () => backward({ sortBound: false }),
  nosort: () => ({ variant: { sort: false } }),
  s1r4: (ctx) =>
    backward({
      dESplits: 1,
      dERowSlices: defaultBackwardTile(ctx) === BACKWARD_TILE_WIDE ? 4 : undefined,
    }),
  s8r1: () => backward({ dESplits: 8, dERowSlices: 1 }),
  f32grad: () => ({ variant: { gradDtype: "f32" } }),
  widefilter: () => backward({ filterTile: TILE_HW_WIDE }),
  pertile: () => backward({ dEGather: false }),
  g1: () => backward({ tile: { ...BACKWARD_TILE_WIDE, gradWiden: 1 } }),
  dcseq: () => backward({ dCOrder: false }),
  dense: () => backward({ denseDE: "always" }),
  "dense-hw": () => backward({ denseDE: "always", denseDETile: TILE_HW }),
  "dense-n64": () => backward({ denseDE: "always", denseDETile: { ...TILE_HW, bn: 64, tn: 4 } }),
  "dense-n32": () => backward({ denseDE: "always", denseDETile: { ...TILE_HW, bn: 32, tn: 4 } }),
  "dense-8x16": () => backward({ denseDE: "always", denseDETile: TILE_HW_8X16 }),
  kept: () => backward({ denseDE: "never" }),
  dcdense: () => backward({ denseDC: "always" }),
  "dcdense-large": () => backward({ denseDC: "always", denseDCTuning: { smallBelow: 0 } }),
  "dcdense-s256": () => backward({ denseDC: "always", denseDCTuning: { smallBelow: 256 } }),
  "dcdense-s1": () => backward({ denseDC: "always", denseDCTuning: { smallSplit: 1 } }),
  "dcdense-t64": () => backward({ denseDC: "always", denseDCTuning: { smallTile: TILE_SMALL } }),
  "dcdense-2048": () => backward({ denseDC: "always", denseDCTuning: { smallBelow: 2048 } }),
  "dcdense-512": () => backward({ denseDC: "always", denseDCTuning: { smallBelow: 512 } }),
  "dcdense-s1-pp": () =>
    backward({ denseDC: "always", denseDCTuning: { smallSplit: 1, perProduct: true } }),
  "dcdense-pp": () => backward({ denseDC: "always", denseDCTuning: { perProduct: true } }),
  "dcdense-pp-hw": () =>
    backward({ denseDC: "always", denseDCTuning: { perProduct: true, productTile: TILE_HW } }),
  "dcdense-pp-8x16": () =>
    backward({ denseDC: "always", denseDCTuning: { perProduct: true, productTile: TILE_HW_8X16 } }),
  dckept: () => backward({ denseDC: "never" }),
  "dense-both": () => backward({ denseDE: "always", denseDC: "always", denseShared: "never" }),
  "dense-shared": () => backward({ denseDE: "always", denseDC: "always", denseShared: "auto" }),
  "ours-apart": () => backward({ denseShared: "never" }),
  "kept-both": () => backward({ denseDE: "never", denseDC: "never" }),
  nosplit: () => backward({ dCSplit: false }),
  dcstaged: () => backward({ dCProduct: "staged" }),
  dcdirect: () => backward({ dCProduct: "direct" }),
  dcs2d: () => backward({ dCStage2d: true }),
  dcflat: () => backward({ dCStage2d: false }),
  "dckept-s2d": () => backward({ denseDC: "never", dCStage2d: true }),
  "split-s128": () => backward({ dCSplit: { slots: 128 } }),
  "split-s192": () => backward({ dCSplit: { slots: 192 } }),
  "split-s256": () => backward({ dCSplit: { slots: 256 } }),
  "split-s512": () => backward({ dCSplit: { slots: 512 } }),
  "split-l1": () => backward({ dCSplit: { lMin: 1 } }),
  "split-l4": () => backward({ dCSplit: { lMin: 4 } }),
};

/** A tile with the flags of a `g…` name: `s` stage2d, `m` thread-major, `w` the warp layout. */
function _flagged(t: GemmTile, f: string): GemmTile {
  const tile = {
    ...t,
    stage2d: f.includes("s") || undefined,
    threadMajor: f.includes("m") || undefined,
  };
  return f.includes("w") ? withLayout(tile, { warpTile: true }) : tile;
}

/** The configuration called `name` (see the module doc), or undefined. */
export function benchConfig(name: string): ((ctx: GpuContext) => BenchConfig) | undefined {
  if (BENCH_CONFIGS[name]) return BENCH_CONFIGS[name];
  const m = /^s(\d+)r(\d+)$/.exec(name);
  if (m) return () => backward({ dESplits: Number(m[1]), dERowSlices: Number(m[2]) });
  const b = /^bt(\d+)x(\d+)k(\d+)w([12])(-kgwide)?$/.exec(name);
  if (b) {
    const [tokensPerThread, vocabPerThread, bk, gradWiden] = b.slice(1, 5).map(Number);
    const tile = { tokens: 128, vocab: 64, bk, tokensPerThread, vocabPerThread, gradWiden };
    if (!b[5]) return () => backward({ tile });
    const keptTile = { ...backwardGemmTiles(BACKWARD_TILE_WIDE).dE, stage2d: true };
    return () => backward({ tile, dEGather: { keptTile } });
  }
  const g = /^g(\d+)k(\d+)t(\d+)x(\d+)([smw]*)(?:-kg([smw]*))?$/.exec(name);
  if (!g) return undefined;
  const [bn, bk, tm, tn] = g.slice(1, 5).map(Number);
  const productTile = _flagged({ bm: 128, bn, bk, tm, tn, vec: true }, g[5]);
  const keptTile = g[6] === undefined
    ? undefined
    : _flagged({ bm: 128, bn: 64, bk: 16, tm: 8, tn: 4, vec: true }, g[6]);
  return () => backward({ dEGather: { productTile, keptTile } });
}
