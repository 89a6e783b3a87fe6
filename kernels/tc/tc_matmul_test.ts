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
import { TC_BENCH_TILES, tcTileName, tileSubgroups, validateTcTile } from "./tc_tiles.ts";
import { tcSharedBytes } from "./tc_codegen.ts";
import type { TcMatmulKernel } from "./tc_matmul.ts";
import type { TcTile } from "./tc_tiles.ts";
import { wordRowStep } from "./tc_loads.ts";

const ctx0 = await testContext();
const EMULATE = { ...GPU_TEST, ignore: ctx0.engine !== "deno" };

/** Small tiles that fit lavapipe's 32 KiB of workgroup memory with the emulated accumulators. */
const T_2X1: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };
const T_1X2: TcTile = { sgRows: 1, sgCols: 4, mt: 1, nt: 2, bk: 16, dbuf: true };

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
    const bytes = tcSharedBytes(t, { aContig: "k", bContig: "k" }) + tileSubgroups(t) * 1024;
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
    const kernel = {
      tile: T_1X2,
      aDtype: "f32",
      bDtype: "bf16",
      aTrans: true,
      bTrans: true,
      split: true,
    } as const;
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
  "tc matmul (emulated): word loads in both layouts, bf16 and f16, odd shapes",
  EMULATE,
  async () => {
    const words = { ...T_2X1, words: true };
    const ec = { aDtype: "bf16", bDtype: "bf16", aTrans: false, bTrans: false } as const;
    // rows of lanes a row step apart (k-contiguous), and K-step 48 (no step: a lane's index each load)
    await check(ctx0, { kernel: { ...ec, tile: words }, m: 70, n: 45, k: 40, seed: 6 }, [
      true,
      true,
    ]);
    await check(ctx0, {
      kernel: { ...ec, tile: { ...words, bk: 48 } },
      m: 33,
      n: 50,
      k: 104,
      seed: 7,
    }, [
      true,
      true,
    ]);
    // f16 straight from its bits, and B held transposed (words along its rows) with A split
    const f16 = { aDtype: "f16", bDtype: "f16", aTrans: false, bTrans: false } as const;
    await check(ctx0, { kernel: { ...f16, tile: words }, m: 41, n: 66, k: 56, sb: 1e-3, seed: 8 });
    const gc = { aDtype: "f32", bDtype: "bf16", aTrans: false, bTrans: true, split: true } as const;
    await check(ctx0, {
      kernel: { ...gc, tile: { ...T_1X2, words: true } },
      m: 43,
      n: 80,
      k: 72,
      seed: 9,
    }, [
      true,
      true,
    ]);
  },
);

Deno.test(
  "tc matmul (emulated): the parity loop, sub-arrays and flat staging",
  EMULATE,
  async () => {
    const ec = { aDtype: "bf16", bDtype: "bf16", aTrans: false, bTrans: false } as const;
    const par = { ...T_2X1, dbuf: true, parity: true };
    // an odd count of K-steps (5) and an even one (2), words or vectors
    await check(ctx0, { kernel: { ...ec, tile: par }, m: 70, n: 45, k: 72, seed: 10 }, [
      true,
      true,
    ]);
    await check(ctx0, {
      kernel: { ...ec, tile: { ...par, words: true } },
      m: 35,
      n: 61,
      k: 32,
      seed: 11,
    });
    const gc = { aDtype: "f32", bDtype: "bf16", aTrans: false, bTrans: true, split: true } as const;
    await check(ctx0, {
      kernel: { ...gc, tile: { ...T_1X2, parity: true } },
      m: 43,
      n: 80,
      k: 88,
      seed: 12,
    });
  },
);

Deno.test("tc word loads: the row step puts a warp's 32 words on 32 banks", () => {
  for (const [bk, subRows] of [[16, 64], [32, 64], [32, 32], [64, 64], [16, 16]]) {
    const line = bk / 2, stride = (bk + 8) / 2, step = wordRowStep(line, stride, subRows);
    const rows = 32 / line;
    assert.equal(subRows % (rows * step), 0, `bk ${bk}: the block straddles a sub-array`);
    const banks = new Set<number>();
    for (let lane = 0; lane < 32; lane++) {
      const row = Math.floor(lane / line) * step, w = lane % line;
      banks.add((row * stride + w) % 32);
    }
    assert.equal(banks.size, 32, `bk ${bk}, ${subRows} rows a sub-array: step ${step}`);
  }
  assert.equal(wordRowStep(24, 28, 64), 1);
});
