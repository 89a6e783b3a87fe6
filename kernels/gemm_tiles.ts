/**
 * The GEMM core's tile parameters ({@link GemmTile}), the named tiles the kernels and methods use
 * (what each is for; the measurements that chose them: docs/performance.md), the checks on a
 * tile, and the interface of the generator that writes a tile's WGSL
 * (kernels/gemm_codegen.ts, which re-exports all of this).
 * @module
 */
import type { TensorDtype } from "../gpu/tensor.ts";

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
   * Stage operands in [k][row/4] arrays (gemmShared in kernels/gemm_codegen.ts) instead of flat
   * ones. Only for kernels that declare their staging with gemmShared. Default off.
   */
  stage2d?: boolean;
  /**
   * With {@link stage2d}: stage each operand as [k / kSplit][k % kSplit][row/4] instead of
   * [k][row/4]. A 16-byte load along k of kSplit elements (8 for bf16 and f16) is then stashed at
   * indices that are constants but for the thread's k slot and row, which the loop does not
   * change, so the driver keeps the store addresses instead of recomputing each one every K-step
   * (the 128×256 kernel's stash between its barriers went from 150 to 94 instructions on an H100).
   * Loads of another width, and scalar loads, stash through the general index. Needs `bk` to be a
   * multiple of it. Default off.
   */
  kSplit?: number;
  /**
   * Plain products only: stage each operand as [thread row][k·groups + group] (A: the tile's
   * thread rows tm, B: its thread columns tn; a row padded by one vec4), instead of [k][row/4]:
   * a thread's reads of the staging then share one dynamic index (its own tm or tn, clamped once)
   * and differ by constants only. Excludes {@link stage2d}. Default off.
   */
  threadMajor?: boolean;
  /**
   * A generator of the tile's WGSL other than the core's ({@link GemmCodegen}): the experimental
   * layouts of the tuning module (tuning/gemm_layouts.ts) attach one. Default: the core's.
   */
  readonly [GEMM_CODEGEN]?: GemmCodegen;
}

/** The key of {@link GemmTile}'s own generator (a symbol: JSON and tile names ignore it). */
export const GEMM_CODEGEN: unique symbol = Symbol("GEMM codegen");

/** Which operand index is contiguous in memory: `k` (A·Bᵀ style) or the row index (`mn`). */
export type Contig = "k" | "mn";

/** What the generator needs to know about one operand. */
export interface OperandSpec {
  /** Storage type in its binding. */
  dtype: TensorDtype;
  /** Contiguous index, for coalesced global loads. */
  contig: Contig;
  /**
   * The binding is declared as 16-byte vectors (wgslStorageType with `vec`) and read 16 bytes at
   * a time along the contiguous index: along k (`contig: "k"`: K, the offset and the row stride
   * multiples of the vector width) or along the rows (`contig: "mn"`: the offset and the k stride
   * multiples of the width; the tile's rows too). The caller's promise: the kernel does not
   * check. Rows past the extent inside a vector are read (they stay inside the k-row) but only
   * feed output rows that are never stored.
   */
  vec?: boolean;
}

/** Options of gemmMainloop (kernels/gemm_codegen.ts). */
export interface MainloopOptions {
  tile: GemmTile;
  a: OperandSpec;
  b: OperandSpec;
  /** Binding names of A and B. */
  aBuf: string;
  bBuf: string;
  /**
   * WGSL expressions (u32) for the problem: rows M, columns N, depth K, the tile's first row m0
   * and column n0, the element offsets and strides of A and B, and the first k (default 0u).
   */
  M: string;
  N: string;
  K: string;
  m0: string;
  n0: string;
  aOff: string;
  sAm: string;
  sAk: string;
  bOff: string;
  sBn: string;
  sBk: string;
  /** Prefix for the workgroup arrays (so two products can live in one shader). */
  prefix?: string;
}

/**
 * The pieces of WGSL a tile's product is written with (kernels/gemm_codegen.ts: CORE_CODEGEN is
 * the core's).
 */
export interface GemmCodegen {
  /** Workgroup declarations of the staging. */
  shared(o: { tile: GemmTile; prefix?: string }): string;
  /** Bytes of workgroup memory the staging takes. */
  sharedBytes(t: GemmTile): number;
  /** Statements defining `tm`, `tn` (the thread's coordinates in the tile) from `lid`. */
  threadCoords(t: GemmTile): string;
  /** The main loop (see gemmMainloop). */
  mainloop(o: MainloopOptions, declare: boolean): string;
  /**
   * Plain products: the workgroup id components ("x" or "y") that give its tile row and column,
   * and the grid (x, y) of an output of tilesM × tilesN tiles.
   */
  origin(t: GemmTile): { m: "x" | "y"; n: "x" | "y" };
  grid(tilesM: number, tilesN: number): [number, number];
}

/** 128×128 output tile, 256 threads, 8×8 per thread, K-step 16. */
export const TILE_LARGE: GemmTile = { bm: 128, bn: 128, bk: 16, tm: 8, tn: 8 };
/**
 * {@link TILE_LARGE} with 16-byte vector loads (for operands held untransposed) and [k][row]
 * staging: the generator's fastest plain product (flat staging and scalar loads are slower).
 */
export const TILE_HW: GemmTile = { ...TILE_LARGE, vec: true, stage2d: true };
/**
 * {@link TILE_HW} with K-step 32: for products whose operands are both held transposed and whose A
 * is f32 (dC = Gᵀ·E with an f32 G); slower elsewhere.
 */
export const TILE_HW_TT: GemmTile = { ...TILE_HW, bk: 32 };
/**
 * {@link TILE_HW} with thread-major staging ({@link GemmTile.threadMajor}): for logits written in
 * the input's 16-bit dtype (the compiled and chunked rows' forward); slower for f32 logits and the
 * gradient products.
 */
export const TILE_HW_TM: GemmTile = { ...TILE_LARGE, vec: true, threadMajor: true };
/**
 * 128×256 with vector loads and [k slot][k in slot][row] staging ({@link GemmTile.kSplit}), 8×16
 * per thread (256 threads, 128 f32 accumulators each): per K-step a thread reads 6 vec4s of
 * staging for 128 FMAs instead of 4 for 64. The fastest f32 logits; slower for every gradient
 * product, no faster for 16-bit logits.
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
 * (f32 G of all n rows, K = |V|) split at least 12 ways. Slower for E·Cᵀ than
 * {@link TILE_HW_WIDE}.
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
 * 128×128 with 8×16 per thread on 128 threads (vector loads, [k][row] staging): for dE = G·C over
 * a long K (Liger's and the chunked method's chunks); no faster elsewhere.
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
 * a 16-bit G (the compiled and chunked rows); no faster with an f32 G, slower for the dE products.
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
 * for the 128×128 tile: products split several ways ran in the order of their wave efficiency
 * with one workgroup an SM, not with two.
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
