/**
 * The GEMM bench's tile candidates (scripts/bench_gemm.ts `--tiles`), by name: the core's named
 * tiles, their K-step, shape and per-thread variants, and the experimental layouts of
 * tuning/gemm_layouts.ts. Which won where, and why: docs/performance.md.
 * @module
 */
import {
  type GemmTile,
  TILE_HW,
  TILE_HW_512,
  TILE_HW_8X16,
  TILE_HW_WIDE,
  TILE_LARGE,
} from "../kernels/gemm_codegen.ts";
import { withLayout } from "./gemm_layouts.ts";

/** A vector-load, [k][row]-staged tile of these sizes. */
const T = (bm: number, bn: number, bk: number, tm: number, tn: number): GemmTile => ({
  bm,
  bn,
  bk,
  tm,
  tn,
  vec: true,
  stage2d: true,
});
const dbuf = (t: GemmTile) => withLayout(t, { dbuf: true });
const warp = (t: GemmTile) => withLayout(t, { warpTile: true });
const mFirst = (t: GemmTile) => withLayout(t, { mFirst: true });
/** Thread-major staging instead of [k][row]. */
const tmj = (t: GemmTile) => ({ ...t, stage2d: false, threadMajor: true });

/** Tile candidates by name. */
export const GEMM_TILE_CANDIDATES: Record<string, GemmTile> = {
  hw: TILE_HW,
  hw_k8: { ...TILE_HW, bk: 8 },
  hw_wt: warp(TILE_HW),
  skinny_wt: warp(T(128, 64, 16, 8, 4)),
  hw_k32: { ...TILE_HW, bk: 32 },
  hw_dbuf: dbuf(TILE_HW),
  hw_k8_dbuf: dbuf({ ...TILE_HW, bk: 8 }),
  hw_k32_dbuf: dbuf({ ...TILE_HW, bk: 32 }),
  hw_wt_dbuf: withLayout(TILE_HW, { warpTile: true, dbuf: true }),
  w128x256_k16: TILE_HW_WIDE,
  // the wide tile with [k][row] staging instead of its [k slot][k in slot][row] one
  w128x256_k16_nosplit: { ...TILE_HW_WIDE, kSplit: undefined },
  w128x256_dbuf: dbuf(T(128, 256, 16, 8, 16)),
  w256x128_k16: T(256, 128, 16, 16, 8),
  w256x128_dbuf: dbuf(T(256, 128, 16, 16, 8)),
  w128x256: T(128, 256, 8, 8, 16),
  w256x128: T(256, 128, 8, 16, 8),
  w64x128: T(64, 128, 16, 4, 8),
  w128x64: T(128, 64, 16, 8, 4),
  scalar: { ...TILE_LARGE, stage2d: true },
  // 8×16 or 16×8 per thread on 128 threads: the wide tile's reads per FMA with half its threads
  s128_8x16: TILE_HW_8X16,
  s128_16x8: T(128, 128, 16, 16, 8),
  s128_8x16_k32: { ...TILE_HW_8X16, bk: 32 },
  s128_8x16_k8: { ...TILE_HW_8X16, bk: 8 },
  s128_8x16_wt: warp(TILE_HW_8X16),
  s128_8x16_dbuf: dbuf(TILE_HW_8X16),
  s128_16x8_dbuf: dbuf(T(128, 128, 16, 16, 8)),
  w128x256_wt: warp(TILE_HW_WIDE),
  w128x256_16x8: T(128, 256, 16, 16, 8),
  w64x256_8x16: T(64, 256, 16, 8, 16),
  w128x256_mf: mFirst(TILE_HW_WIDE),
  hw_mf: mFirst(TILE_HW),
  s128_8x16_mf: mFirst(TILE_HW_8X16),
  w128x256_k24: { ...TILE_HW_WIDE, bk: 24 },
  w192x256_12x16: T(192, 256, 16, 12, 16),
  w256x192_16x12: T(256, 192, 16, 16, 12),
  w128x192_8x12: T(128, 192, 16, 8, 12),
  w192x128_12x8: T(192, 128, 16, 12, 8),
  w256x64_16x8: T(256, 64, 16, 16, 8),
  // double buffering on the wide tile (K-step 8 fits twice in 48 KiB), and 512-thread tiles of
  // 8×8 a thread (more warps to hide latency, fewer FMAs per staging read)
  w128x256_k8_dbuf: dbuf(T(128, 256, 8, 8, 16)),
  w128x256_8x8: T(128, 256, 16, 8, 8),
  w256x128_8x8: T(256, 128, 16, 8, 8),
  w256x256_8x16: T(256, 256, 8, 8, 16),
  // staging as [thread row][k·groups + group]: one dynamic index per operand
  w128x128_tmj: tmj(TILE_HW),
  w128x128_8x16_tmj: tmj(TILE_HW_8X16),
  w128x128_8x16_tmj_k32: { ...tmj(TILE_HW_8X16), bk: 32 },
  w128x128_16x8_tmj: { ...tmj(TILE_HW_8X16), tm: 16, tn: 8 },
  w128x256_8x8_tmj: tmj(TILE_HW_512),
};
