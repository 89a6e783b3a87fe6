/**
 * The GEMM core's tile parameters ({@link GemmTile}), the named tiles the kernels and methods use
 * (each with the measurements that chose it) and the checks on a tile. The generator that emits
 * a tile's WGSL is kernels/gemm_codegen.ts, which re-exports all of this.
 * @module
 */

/** Tile parameters of the generated product. */
export interface GemmTile {
  /** Output rows per workgroup. */
  bm: number;
  /** Output columns per workgroup. */
  bn: number;
  /** K-step: depth of one staged slice of A and B. */
  bk: number;
  /** Rows per thread (multiple of 4). */
  tm: number;
  /** Columns per thread (multiple of 4). */
  tn: number;
  /**
   * Vectorised global loads: each thread reads 16 bytes (8 bf16/f16 or 4 f32 values along k) per
   * load instead of one element, for operands whose k index is contiguous and whose K, offsets and
   * strides are multiples of the vector width (kernels decide per operand; others keep scalar
   * loads). Needs `bk` to be a multiple of the width. Default off.
   */
  vec?: boolean;
  /**
   * Double-buffered workgroup staging: two copies of the A and B slices, so one barrier per K-step
   * instead of two (twice the staging memory). Default off.
   */
  dbuf?: boolean;
  /**
   * Map each 32-thread group to 4 × 8 threads of the tile's thread grid (rows × columns) instead
   * of 2 × 16: its reads of the staged B operand then span 128 bytes instead of 256 (plain
   * products only; the fused kernels keep the row-major mapping their reductions assume).
   */
  warpTile?: boolean;
  /**
   * Stage operands in [k][row/4] arrays (gemmShared in kernels/gemm_codegen.ts) instead of flat ones. Only for
   * kernels that declare their staging with gemmShared. Default off.
   */
  stage2d?: boolean;
  /**
   * With {@link stage2d}: stage each operand as [k / kSplit][k % kSplit][row/4] instead of
   * [k][row/4]. A 16-byte load along k of kSplit elements (8 for bf16 and f16) is then stashed at
   * indices that are constants but for the thread's k slot and row, which the loop does not
   * change, so the driver keeps the store addresses instead of recomputing each one every K-step.
   * On an H100 the 128×256 kernel's stash between its barriers went from 150 to 94 instructions,
   * and E·Cᵀ went from 46.6 to 46.9 TFLOP/s in three runs
   * (reports/h100_2026-11-25s12/run_f, run_g, run_h). Loads of another width, and scalar loads,
   * stash through the general index. Needs `bk` to be a multiple of it. Default off.
   */
  kSplit?: number;
  /**
   * Plain products only: consecutive workgroups walk down the output's rows (workgroup x = row
   * tile) instead of along its columns, so that the workgroups in flight share B's tiles and
   * read A's (the smaller operand of E·Cᵀ) from L2. Default off.
   */
  mFirst?: boolean;
  /**
   * Plain products only: stage each operand as [thread row][k·groups + group] (A: the tile's
   * thread rows tm, B: its thread columns tn; a row padded by one vec4), instead of [k][row/4]:
   * a thread's reads of the staging then share one dynamic index (its own tm or tn, clamped once)
   * and differ by constants only. Excludes {@link stage2d}. Default off.
   */
  threadMajor?: boolean;
}

/** 128×128 output tile, 256 threads, 8×8 per thread, K-step 16 (the layout that ran 37 TFLOP/s). */
export const TILE_LARGE: GemmTile = { bm: 128, bn: 128, bk: 16, tm: 8, tn: 8 };
/**
 * {@link TILE_LARGE} with 16-byte vector loads (for operands held untransposed) and [k][row]
 * staging: the generator's fastest plain product on an H200 (8192×256000×2304 bf16 → f32 logits
 * in 227.1 ms, 42.6 TFLOP/s; flat staging 243.6 ms; scalar loads 297.1 ms).
 */
export const TILE_HW: GemmTile = { ...TILE_LARGE, vec: true, stage2d: true };
/**
 * {@link TILE_HW} with K-step 32: for products whose operands are both held transposed and whose A
 * is f32 (dC = Gᵀ·E with an f32 G), where it ran 209.7 ms against 219.6 ms for the paper's dC on an
 * H100. It is slower elsewhere: 242 against 223 ms for E·Cᵀ, and the dC of a bf16 G (the compiled
 * and chunked rows' backward) lost 2–3% in their rows.
 */
export const TILE_HW_TT: GemmTile = { ...TILE_HW, bk: 32 };
/**
 * {@link TILE_HW} with thread-major staging ({@link GemmTile.threadMajor}): for logits written in
 * the input's 16-bit dtype (the compiled and chunked rows' forward), where it ran the paper's E·Cᵀ
 * in 215.4 and 215.5 ms against 220.3 and 220.5 for {@link TILE_HW}, and the chunked method's
 * 1,024-row chunks in 26.71 against 27.20 and 27.31 ms, on an H100 (reports/h100_2026-11-24/
 * run_c, run_e). Slower for f32 logits (224.6 against 211.6 ms for {@link TILE_HW_WIDE}) and for
 * the gradient products (run_c).
 */
export const TILE_HW_TM: GemmTile = { ...TILE_LARGE, vec: true, threadMajor: true };
/**
 * 128×256 with vector loads and [k slot][k in slot][row] staging ({@link GemmTile.kSplit}), 8×16
 * per thread (256 threads, 128 f32 accumulators each): per K-step a thread reads 6 vec4s of
 * staging for 128 FMAs instead of 4 for 64. On an H100 it ran E·Cᵀ of the paper's shape into f32
 * in 211.3 ms against 223.2 for {@link TILE_HW} in one run
 * (reports/gemm_h100_2026-11-23/gemm_wide_layouts.json; 209.6 ms alone in
 * gemm_w128x256_k16.json); with K-step 8 it ran 243 ms. It is slower for every gradient product
 * and no faster for 16-bit logits (same file).
 */
export const TILE_HW_WIDE: GemmTile = {
  bm: 128,
  bn: 256,
  bk: 16,
  tm: 8,
  tn: 16,
  vec: true,
  stage2d: true,
  kSplit: 8,
};
/**
 * 128×256 on 512 threads of 8×8 (vector loads, [k][row] staging): for the baseline's dE = G·C
 * (f32 G of all n rows, K = |V|) split at least 12 ways, where it ran the paper's dE in 220.9 ms
 * against 224.7 for {@link TILE_HW_8X16} split 12 ways and 230.4 split 6 ways in one bench on an
 * H100 (224.7 for itself split 6 ways, 234.7 split 8; reports/h100_2026-11-23d/run_d/). Slower
 * for E·Cᵀ (233.7 against 211.9 ms for {@link TILE_HW_WIDE}).
 */
export const TILE_HW_512: GemmTile = {
  bm: 128,
  bn: 256,
  bk: 16,
  tm: 8,
  tn: 8,
  vec: true,
  stage2d: true,
};
/**
 * 128×128 with 8×16 per thread on 128 threads (vector loads, [k][row] staging): for dE = G·C with
 * an f32 G over K = |V| split 6 ways, where it ran the paper's dE in 229.9 ms (three runs) against
 * 234.1 for {@link TILE_HW} split 6 ways and 238.8 split 3 ways on an H100
 * (reports/gemm_h100_2026-11-23/gemm_s5_de_ab*.json, gemm_s5_de_tiles.json). No faster elsewhere:
 * 223.4 against 223.2 ms for E·Cᵀ, slower for dE16 and Liger's dC (gemm_s5_*.json).
 */
export const TILE_HW_8X16: GemmTile = {
  bm: 128,
  bn: 128,
  bk: 16,
  tm: 8,
  tn: 16,
  vec: true,
  stage2d: true,
};
/**
 * {@link TILE_HW_8X16} with thread-major staging ({@link GemmTile.threadMajor}): for dC = Gᵀ·E with
 * a 16-bit G (the compiled and chunked rows), where it ran the paper's dC in 200.5, 199.0 and
 * 199.0 ms against 210.8, 209.3 and 209.3 for {@link TILE_HW}, and the chunked method's 1,024-row
 * chunks in 24.99 against 26.24 ms, on an H100 (reports/h100_2026-11-24/run_g, run_h). No faster
 * with an f32 G (210.1 against 209.5 ms for {@link TILE_HW_TT}); slower for the dE products and
 * Liger's chunk dC (run_g).
 */
export const TILE_HW_8X16_TM: GemmTile = { ...TILE_HW_8X16, stage2d: false, threadMajor: true };
/** 64×64 output tile, 256 threads, 4×4 per thread, K-step 16: for small problems and CPUs. */
export const TILE_SMALL: GemmTile = { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4 };

/** Threads per workgroup for a tile. */
export function tileThreads(t: GemmTile): number {
  return (t.bm / t.tm) * (t.bn / t.tn);
}

/** Streaming multiprocessors of the GPUs the split rule was measured on (H100 SXM, H200). */
export const GPU_SMS = 132;
/** 32-bit registers of one SM (NVIDIA since Volta). */
const _SM_REGISTERS = 65536;

/**
 * Workgroups of a tile one SM holds at once, from an estimate of a thread's registers: its tm·tn
 * f32 accumulators, a fragment of A and of B twice (2·(tm + tn): the next k's read ahead) and about
 * 40 more (prefetched loads, addresses, indices). 1 for the 256-thread 128×128 and 128×256 tiles
 * and the 512-thread ones, 2 for the 128-thread 8×16 tile. The split rule's measurements agree
 * for the 128×128 tile: split 2, 3, 4 and 5 ways the compiled row's dEᵀ ran 227.2, 235.3, 226.9
 * and 222.0 ms, in the order of its wave efficiency with one workgroup an SM (0.97, 0.935, 0.97,
 * 0.992), not with two (0.873, 0.935, 0.97, 0.909) (reports/h100_2026-11-25s10/run_j/).
 */
export function tileResidency(t: GemmTile): number {
  const regs = t.tm * t.tn + 2 * (t.tm + t.tn) + 40;
  return Math.max(1, Math.floor(_SM_REGISTERS / (tileThreads(t) * regs)));
}

/** Workgroups of a tile the GPU runs at once: {@link GPU_SMS} × {@link tileResidency}. */
export function workgroupSlots(t: GemmTile): number {
  return GPU_SMS * tileResidency(t);
}

/** Throws unless the tile is one the generator can emit. */
export function validateTile(t: GemmTile): void {
  const ok = t.tm % 4 === 0 && t.tn % 4 === 0 && t.bm % t.tm === 0 && t.bn % t.tn === 0 &&
    (t.bm * t.bk) % tileThreads(t) === 0 && (t.bn * t.bk) % tileThreads(t) === 0 &&
    tileThreads(t) <= 1024 && t.bk >= 1;
  const layoutOk = (!t.threadMajor || t.stage2d !== true) &&
    (t.kSplit === undefined ||
      (t.stage2d === true && Number.isInteger(t.kSplit) && t.kSplit >= 1 &&
        t.bk % t.kSplit === 0));
  if (!ok || !layoutOk) throw new RangeError(`unsupported GEMM tile ${JSON.stringify(t)}`);
}
