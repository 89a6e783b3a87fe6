/**
 * The backward's tiles (kernels/fused/backward.ts): the tile every pass works on (TT tokens × VT
 * vocabulary entries, one bit of the filter's mask), its threads' shapes, the GEMM tiles of its
 * logits and gradient products, their workgroup memory, and the dE pass's row slices of it.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { type GemmTile, validateTile } from "../gemm_codegen.ts";

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
  /**
   * The dC pass's elements a thread (vocabulary entries × tokens, each a multiple of 4, the same
   * thread count) where they differ from the tile's; the other passes keep
   * tokensPerThread × vocabPerThread.
   */
  dCThreads?: { vocab: number; tokens: number };
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
 * workgroup memory. The dC pass takes 4 tokens × 8 vocabulary entries a thread (its products
 * 8×8): 5% faster there than 8×4 on an H200, while the kept g pass is faster on 8×4
 * (docs/performance.md).
 */
export const BACKWARD_TILE_WIDE: BackwardTile = {
  tokens: 128,
  vocab: 64,
  bk: 16,
  tokensPerThread: 8,
  vocabPerThread: 4,
  gradWiden: 2,
  dCThreads: { vocab: 8, tokens: 4 },
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
  const c = bt.dCThreads ?? { vocab: bt.vocabPerThread, tokens: bt.tokensPerThread };
  return {
    dE: { bm: bt.tokens, bn: bt.vocab, bk: bt.bk, tm: bt.tokensPerThread, tn: bt.vocabPerThread },
    dC: { bm: bt.vocab, bn: bt.tokens, bk: bt.bk, tm: c.vocab, tn: c.tokens },
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
export function backwardStaging(t: GemmTile, g: GemmTile): { a: number; b: number } {
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
      const st = backwardStaging(l[k], g[k]);
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
  const { dCThreads: _dC, ...rest } = bt; // the slice is the dE pass's alone
  const s = { ...rest, tokens, tokensPerThread };
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
