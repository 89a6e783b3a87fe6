/**
 * The options of the fused backward's tile passes (kernels/fused/kept_tiles.ts).
 * @module
 */
import type { Dtype, LceOptions } from "../../core/options.ts";
import type { Dtype16 } from "../cast16.ts";
import type { BackwardTile } from "./backward_tiles.ts";

/** Options of a tile pass (kernels/fused/kept_tiles.ts `tilePassWgsl`). */
export interface TilePassKernelOptions {
  /**
   * `dC`: a workgroup owns a vocab tile; `dE`: owns a row slice of a token tile (see
   * {@link TilePassKernelOptions.rowSlices}).
   */
  kind: "dC" | "dE";
  tile: BackwardTile;
  /**
   * dE only: row slices per TT-token backward tile (default 1): a workgroup owns TT/rowSlices
   * tokens (backward_tiles.ts `dESliceTile`) and reads the mask bit of the backward tile holding them.
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
   * (filter.ts `keptBoundsWgsl`) instead of its vocab tiles into S equal ranges. The kernel then binds
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
   * dC with the filter only: workgroup slot ot walks vocab tile order[vBase + ot] of its segment
   * (kernels/fused/dc_order.ts: most kept token tiles first) and stops at the first tile with no
   * kept token tile (its count, order[vTotal + vBase + tile]); the kernel binds `order` after the
   * mask.
   */
  ordered?: boolean;
  /**
   * dC ordered only: long walks split (kernels/fused/dc_split.ts). Workgroup slot ot walks segment
   * ot − S_r of the tile of rank r (S from the split plan, in the order's third part: S_r ≤ ot <
   * S_{r+1}), the kept token tiles [⌊s·c/m⌋, ⌊(s+1)·c/m⌋) of its c in m segments; segment 0 adds
   * into the tile's rows, segment s ≥ 1 into a borrowed empty tile's rows, its first update a
   * write. The grid covers up to twice the segment's tiles.
   */
  split?: boolean;
  /**
   * dC only: the output is packed 16-bit of this dtype (d even), updated in place: each thread
   * reads a word, adds its two f32 contributions and writes it back rounded to nearest even (a
   * thread owns both halves of every word it writes: its columns come in aligned groups of 4).
   */
  out16?: Dtype16;
  /**
   * dC only: the tile's epilogue adds each token's target coefficient a_n (the exact target term
   * −w_n(1−β)·f'(z_t), kernels/fused/corrections.ts) to the gradient of its target logit when the
   * target lies in the tile, and sets the token's word in `folded` to 1; the target scatter then
   * adds only the tokens not folded. A kept tile's update is then the gradient's own sum, whose
   * partial sums stay near the final row instead of starting from the rows' large target sums
   * (with a 16-bit dC rounded at every update, that cancellation cost most of its accuracy). The
   * kernel binds `targets`, `coef` and `folded` last.
   */
  foldTargets?: boolean;
  /** dC only: the gradient product reads E from storage, P as vectors (kernels/fused/dc_product.ts). */
  dCDirect?: boolean;
  /** dC direct only: the logits product staged as [k][row] arrays (GemmTile.stage2d). */
  dCStage2d?: boolean;
}
