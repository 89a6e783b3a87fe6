/**
 * The tensor-core GEMM's tile parameters ({@link TcTile}), the named tiles, and whether a context
 * can run them at all ({@link tcSupport}).
 *
 * A workgroup computes a bm×bn output tile with sgRows × sgCols subgroups; each subgroup owns a
 * register tile of mt × nt subgroup matrices of MM×NN f32 accumulators (the MMA shape: 16×16×16
 * f16 → f32 on NVIDIA), i.e. bm = sgRows·mt·MM, bn = sgCols·nt·NN. A K-step stages bk columns of
 * both operands in workgroup memory as f16 (converted from bf16, f16 or f32 while staged).
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { isDawn } from "../../gpu/engine.ts";

/** The subgroup-matrix shape of one multiply-accumulate: left M×K, right K×N, result M×N. */
export interface MmaShape {
  m: number;
  n: number;
  k: number;
}

/** The f16 → f32 shape the kernels use (offered on NVIDIA through Vulkan). */
export const MMA_16X16X16: MmaShape = { m: 16, n: 16, k: 16 };

/** Tile parameters of the tensor-core GEMM. */
export interface TcTile {
  /** Subgroups along the rows and columns of the tile. */
  sgRows: number;
  sgCols: number;
  /** Matrices per subgroup along the rows (mt) and the columns (nt). */
  mt: number;
  nt: number;
  /** K-step: columns of A and B staged per step (a multiple of the MMA's k and of 8). */
  bk: number;
  /**
   * Double-buffered staging: two copies, the next K-step stashed into the copy not being read,
   * one barrier a step (twice the staging memory). Otherwise one copy and two barriers a step
   * (the next step's global loads are still issued before the arithmetic).
   */
  dbuf?: boolean;
  /**
   * The product kernel's store scratch (edge tiles, accumulation) is one 16×16 f32 matrix the
   * subgroups take in turn, instead of one a subgroup: 1 KiB of workgroup memory, not 1 KiB a
   * subgroup. On an H200 the 128×128 tile's workgroup past 24 KiB, by as little as 16 bytes, loses
   * a third of its rate (docs/tensor_cores.md#status): this leaves the tile 3 KiB under it.
   */
  scratchTurns?: boolean;
  /**
   * The fused forward's epilogue scratch (kernels/tc/tc_forward_wgsl.ts) one result matrix a
   * subgroup instead of two, for a second barrier a round: the 128×128 forward's workgroup memory
   * 24 KiB instead of 28 (without the in-kernel Σz and the tile map).
   */
  singleScratch?: boolean;
  /** The MMA shape (default {@link MMA_16X16X16}). */
  mma?: MmaShape;
}

/** The MMA shape of a tile. */
export function tileMma(t: TcTile): MmaShape {
  return t.mma ?? MMA_16X16X16;
}

/** Output rows of a tile. */
export function tileRows(t: TcTile): number {
  return t.sgRows * t.mt * tileMma(t).m;
}

/** Output columns of a tile. */
export function tileCols(t: TcTile): number {
  return t.sgCols * t.nt * tileMma(t).n;
}

/** Subgroups of a tile. */
export function tileSubgroups(t: TcTile): number {
  return t.sgRows * t.sgCols;
}

/** Threads of a tile's workgroup with subgroups of `sgSize` invocations. */
export function tcThreads(t: TcTile, sgSize: number): number {
  return tileSubgroups(t) * sgSize;
}

/**
 * Elements a staged row is padded by: 8 halves (16 bytes), so rows stay 16-byte aligned and rows
 * 8 apart fall on different banks for the matrix loads.
 */
export const STAGE_PAD = 8;

/** 128×128, 2×2 subgroups of 4×4 matrices (64×64 each), K-step 32, double-buffered. */
export const TC_TILE_128: TcTile = { sgRows: 2, sgCols: 2, mt: 4, nt: 4, bk: 32, dbuf: true };
/** 128×256, 2×4 subgroups of 4×4 matrices, K-step 16, double-buffered. */
export const TC_TILE_128X256: TcTile = { sgRows: 2, sgCols: 4, mt: 4, nt: 4, bk: 16, dbuf: true };
/** 128×256, 2×4 subgroups of 4×4 matrices, K-step 16, one copy: the baseline's split products. */
export const TC_TILE_128X256_K16: TcTile = { ...TC_TILE_128X256, dbuf: false };
/** 128×256, 2×4 subgroups of 4×4 matrices, K-step 32, one copy: the fused forward's and filter's. */
export const TC_TILE_128X256_K32: TcTile = { ...TC_TILE_128X256, bk: 32, dbuf: false };
/** 64×64, 2×2 subgroups of 2×2 matrices: small problems. */
export const TC_TILE_SMALL: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 2, bk: 32, dbuf: true };

/** Throws unless the generator can emit the tile. */
export function validateTcTile(t: TcTile): void {
  const mma = tileMma(t);
  const ok = [t.sgRows, t.sgCols, t.mt, t.nt, t.bk].every((x) => Number.isInteger(x) && x >= 1) &&
    t.bk % mma.k === 0 && t.bk % 8 === 0 && mma.m % 8 === 0 && mma.n % 8 === 0;
  if (!ok) throw new RangeError(`unsupported tensor-core tile ${JSON.stringify(t)}`);
}

/** A readable name of a tile, e.g. `128x128 2x2sg 4x4 k32 dbuf`. */
export function tcTileName(t: TcTile): string {
  return `${tileRows(t)}x${tileCols(t)} ${t.sgRows}x${t.sgCols}sg ${t.mt}x${t.nt} k${t.bk}${
    t.dbuf ? " dbuf" : ""
  }`;
}

/** What a context offers the tensor-core kernels. */
export interface TcSupport {
  /** Why the kernels cannot run here, or undefined. */
  reason?: string;
  /** Invocations per subgroup (the kernels are generated for it). */
  sgSize: number;
  /** The MMA shape to use. */
  mma: MmaShape;
}

/**
 * Whether the context can run the tensor-core kernels: Dawn with the subgroup-matrix extension,
 * f16 and subgroups, an f16 → f32 configuration of {@link MMA_16X16X16}, and one subgroup size.
 */
export function tcSupport(ctx: GpuContext): TcSupport {
  // a context over a caller's device has no adapter: its subgroup sizes are unknown
  const info = (ctx.adapter?.info ?? {}) as Partial<GPUAdapterInfo> & {
    subgroupMinSize?: number;
    subgroupMaxSize?: number;
  };
  const sgSize = Number(info.subgroupMaxSize ?? 32);
  const base = { sgSize, mma: MMA_16X16X16 };
  if (!ctx.adapter) {
    return { ...base, reason: "the context has no adapter to read its subgroup sizes from" };
  }
  if (!isDawn(ctx.engine)) {
    return {
      ...base,
      reason: "tensor cores need Dawn's subgroup-matrix extension (--webgpu dawn, " +
        "LCE_WEBGPU=dawn); Deno's built-in WebGPU does not expose it",
    };
  }
  const feats = ctx.device.features;
  for (const f of ["chromium-experimental-subgroup-matrix", "shader-f16", "subgroups"]) {
    if (!feats.has(f as GPUFeatureName)) {
      return { ...base, reason: `the adapter does not offer ${f}` };
    }
  }
  const m = MMA_16X16X16;
  const has = ctx.report.subgroupMatrixConfigs.some((c) =>
    c.componentType === "f16" && c.resultComponentType === "f32" && c.M === m.m &&
    c.N === m.n && c.K === m.k
  );
  if (!has) {
    const offered = ctx.report.subgroupMatrixConfigs.map((c) =>
      `${c.componentType}→${c.resultComponentType} ${c.M}×${c.N}×${c.K}`
    );
    return {
      ...base,
      reason: `no f16→f32 16×16×16 subgroup-matrix configuration (offered: ${
        offered.length ? offered.join(", ") : "none"
      })`,
    };
  }
  if (info.subgroupMinSize !== undefined && info.subgroupMinSize !== info.subgroupMaxSize) {
    return {
      ...base,
      reason: `subgroup size varies (${info.subgroupMinSize}–${info.subgroupMaxSize}); the ` +
        "kernels assume one",
    };
  }
  return base;
}

/**
 * The tiles scripts/bench_tc.ts sweeps by name (none measured yet on a GPU when written: the
 * sweep decides): workgroup tile, subgroups and each subgroup's register tile, K-step, buffering.
 */
export const TC_BENCH_TILES: Record<string, TcTile> = {
  t128_k32_db: TC_TILE_128,
  t128_k32: { ...TC_TILE_128, dbuf: false },
  t128_k16_db: { ...TC_TILE_128, bk: 16 },
  t128_k64: { ...TC_TILE_128, bk: 64, dbuf: false },
  t128_8sg_k32_db: { sgRows: 2, sgCols: 4, mt: 4, nt: 2, bk: 32, dbuf: true },
  t128_8sg_k32: { sgRows: 2, sgCols: 4, mt: 4, nt: 2, bk: 32 },
  t128_4x1sg_2x8: { sgRows: 4, sgCols: 1, mt: 2, nt: 8, bk: 32, dbuf: true },
  t128_1x4sg_8x2: { sgRows: 1, sgCols: 4, mt: 8, nt: 2, bk: 32, dbuf: true },
  t128x256_k16_db: TC_TILE_128X256,
  t128x256_k16: TC_TILE_128X256_K16,
  t128x256_k32: TC_TILE_128X256_K32,
  t256x128_k16_db: { sgRows: 4, sgCols: 2, mt: 4, nt: 4, bk: 16, dbuf: true },
  t256x128_k32: { sgRows: 4, sgCols: 2, mt: 4, nt: 4, bk: 32 },
  t64x128_k32_db: { sgRows: 1, sgCols: 2, mt: 4, nt: 4, bk: 32, dbuf: true },
  t64_k32_db: TC_TILE_SMALL,
  t128_k32_st: { ...TC_TILE_128, dbuf: false, scratchTurns: true },
  t128_8sg_k32_st: { sgRows: 2, sgCols: 4, mt: 4, nt: 2, bk: 32, scratchTurns: true },
  // more subgroups a workgroup within 24 KiB: the store scratch taken in turn
  t128_16sg_k32_st: { sgRows: 4, sgCols: 4, mt: 2, nt: 2, bk: 32, scratchTurns: true },
  t128x256_k16_st: { ...TC_TILE_128X256_K16, scratchTurns: true },
  t256x128_k16_st: { sgRows: 4, sgCols: 2, mt: 4, nt: 4, bk: 16, scratchTurns: true },
};

/**
 * The products of the materialised baseline on tensor cores (methods/baseline_tc.ts): the logits
 * on one copy of the 128×128 tile (`t128_k32`), the gradient products (A = G in f32, staged as hi
 * and lo f16 parts) on one copy of the 128×256 tile (`t128x256_k16:split`). Picked by
 * scripts/bench_tc.ts at 4096³ on an H100, a ranking in doubt (docs/tensor_cores.md#status); at
 * the paper's shape each pass is faster than on the tiles before.
 */
export const BASELINE_TC_TILES: { logits: TcTile; split: TcTile } = {
  logits: { ...TC_TILE_128, dbuf: false },
  split: TC_TILE_128X256_K16,
};

/**
 * The variants scripts/bench_tc.ts runs by default: every tile of {@link TC_BENCH_TILES} on bf16,
 * the gradient products' split A on two (`:split`), two on f16 (no conversion), and their staging
 * alone and arithmetic alone (diagnostics).
 */
export const TC_BENCH_VARIANTS: readonly string[] = [
  ...Object.keys(TC_BENCH_TILES),
  "t128_k32:split",
  "t128x256_k16:split",
  "t128_k32_db:f16",
  "t128x256_k16_db:f16",
  "t128_k32_db:copy-only",
  "t128_k32_db:mma-only",
  "t128x256_k16_db:copy-only",
  "t128x256_k16_db:mma-only",
];
