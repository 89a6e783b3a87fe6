/**
 * The tensor-core product in its emulated mode (kernels/tc/tc_codegen.ts) on the test adapter,
 * against float64 products of fresh inputs (kernels/tc/tc_product_check.ts) at odd shapes: vector
 * and scalar loads, the three layouts the methods use, hi/lo split operands, scales far from 1,
 * split-K, accumulation and sharded tensors. The native kernels' WGSL is validated by
 * tc_null_test.ts. Under Dawn the emulation is skipped (see methods/fused_tc_test.ts).
 */
import assert from "node:assert/strict";
import { GpuContext } from "../../gpu/context.ts";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import { checkProduct, type ProductCheck } from "./tc_product_check.ts";
import { TC_BENCH_TILES, tcTileName, validateTcTile } from "./tc_tiles.ts";
import { tcSharedBytes } from "./tc_codegen.ts";
import { tcStoreScratchWords } from "./tc_matmul_wgsl.ts";
import type { TcMatmulKernel } from "./tc_matmul.ts";
import type { TcTile } from "./tc_tiles.ts";

const ctx0 = await testContext();
const EMULATE = { ...GPU_TEST, ignore: ctx0.engine !== "deno" };

/** Small tiles that fit lavapipe's 32 KiB of workgroup memory with the emulated accumulators. */
const T_2X1: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };
const T_1X2: TcTile = { sgRows: 1, sgCols: 4, mt: 1, nt: 2, bk: 16, dbuf: true };

/** The Gᵀ·E layout with G split into hi and lo f16 parts (the baseline's dC product). */
const GTE_SPLIT = {
  tile: T_1X2,
  aDtype: "f32",
  bDtype: "bf16",
  aTrans: true,
  bTrans: true,
  split: true,
} as const;

async function check(ctx: GpuContext, c: ProductCheck, vec?: [boolean, boolean]): Promise<void> {
  const k: TcMatmulKernel = { ...c.kernel, mode: "emulated" };
  const r = await checkProduct(ctx, { ...c, kernel: k });
  const tag = `${tcTileName(k.tile)} ${
    JSON.stringify({ ...c, kernel: { ...k, tile: undefined } })
  }`;
  assert.ok(r.ok, `${tag}: ${r.worst} of the bound at ${JSON.stringify(r.at)}`);
  if (vec) assert.deepEqual([r.variant.vecA, r.variant.vecB], vec, `${tag}: load variant`);
}

Deno.test("tc tiles: the bench's tiles are valid and fit 48 KiB", () => {
  for (const t of Object.values(TC_BENCH_TILES)) {
    validateTcTile(t);
    // the product's staging and its epilogue scratch (a result matrix a subgroup)
    const bytes = tcSharedBytes(t, { aContig: "k", bContig: "k" }) + 4 * tcStoreScratchWords(t);
    assert.ok(bytes <= 48 << 10, `${tcTileName(t)}: ${bytes} bytes`);
  }
  assert.throws(() => validateTcTile({ ...T_2X1, bk: 12 }), /unsupported tensor-core tile/);
});

Deno.test("tc matmul (emulated): E·Cᵀ layout, bf16, vector and scalar loads", EMULATE, async () => {
  const kernel = {
    tile: T_2X1,
    aDtype: "bf16",
    bDtype: "bf16",
    aTrans: false,
    bTrans: false,
  } as const;
  await check(ctx0, { kernel, m: 70, n: 45, k: 40, seed: 1 }, [true, true]);
  await check(ctx0, { kernel, m: 37, n: 29, k: 37, sa: 3e4, sb: 1e-5, seed: 2 }, [false, false]);
});

Deno.test("tc matmul (emulated): Gᵀ·E layout, split f32 A, sharded", EMULATE, async () => {
  const ctx = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
  try {
    const kernel = GTE_SPLIT;
    await check(ctx, { kernel, m: 66, n: 72, k: 99, sa: 1e-4, seed: 3 });
  } finally {
    ctx.destroy();
  }
});

Deno.test("tc matmul (emulated): G·C layout, accumulate, split-K, alpha", EMULATE, async () => {
  const kernel = {
    tile: T_1X2,
    aDtype: "f32",
    bDtype: "f16",
    aTrans: false,
    bTrans: true,
    split: true,
  } as const;
  await check(ctx0, {
    kernel,
    m: 43,
    n: 80,
    k: 200,
    accumulate: true,
    alpha: -0.75,
    splitK: 3,
    seed: 4,
  });
  await check(ctx0, { kernel: { ...kernel, split: false }, m: 21, n: 17, k: 48, seed: 5 }, [
    true,
    false,
  ]);
});

Deno.test(
  "tc matmul (emulated): G·C accumulating with the output preloaded, full and edge tiles, split-K",
  EMULATE,
  async () => {
    // the dense dE's layout: G f16 through a read_write binding, C transposed, into f32
    const kernel = {
      tile: T_2X1,
      aDtype: "f16",
      bDtype: "bf16",
      aTrans: false,
      bTrans: true,
      aReadWrite: true,
      preload: true,
    } as const;
    // 64×48: whole tiles of T_2X1 (64×32), then ragged ones; alpha far from 1 and not a power
    // of two; split-K slices after the preloaded first
    await check(ctx0, { kernel, m: 64, n: 64, k: 96, accumulate: true, alpha: -0.75, seed: 12 });
    await check(ctx0, { kernel, m: 77, n: 52, k: 40, accumulate: true, alpha: 1, seed: 13 });
    await check(ctx0, {
      kernel,
      m: 128,
      n: 96,
      k: 200,
      accumulate: true,
      alpha: 0.5,
      splitK: 3,
      seed: 14,
    });
    // not accumulating: the straight stores as without the preload
    await check(ctx0, { kernel, m: 64, n: 64, k: 48, seed: 15 });
  },
);

Deno.test("tc matmul (emulated): 16-bit outputs, odd widths, split A", EMULATE, async () => {
  const kernel = GTE_SPLIT;
  // odd n: rows start on odd elements, words shared by two rows' ends
  await check(ctx0, { kernel: { ...kernel, outDtype: "bf16" }, m: 43, n: 37, k: 99, seed: 9 });
  await check(ctx0, { kernel: { ...kernel, outDtype: "f16" }, m: 66, n: 72, k: 40, seed: 10 });
  await check(ctx0, {
    kernel: { ...kernel, tile: { ...T_2X1, scratchTurns: true }, outDtype: "bf16" },
    m: 37,
    n: 29,
    k: 37,
    alpha: -0.5,
    seed: 11,
  });
});

Deno.test(
  "tc matmul (emulated): one scratch matrix in turns, edges, accumulation",
  EMULATE,
  async () => {
    const kernel = {
      tile: { ...T_2X1, scratchTurns: true },
      aDtype: "bf16",
      bDtype: "bf16",
      aTrans: false,
      bTrans: false,
    } as const;
    await check(ctx0, { kernel, m: 70, n: 45, k: 40, seed: 6 });
    await check(ctx0, { kernel, m: 37, n: 29, k: 37, accumulate: true, alpha: 0.5, seed: 7 });
    await check(ctx0, {
      kernel: { ...kernel, tile: { ...T_1X2, scratchTurns: true } },
      m: 43,
      n: 80,
      k: 200,
      splitK: 3,
      seed: 8,
    });
  },
);
