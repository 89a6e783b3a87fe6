/**
 * The bench's variant names (kernels/tc/tc_bench.ts): the dense paths' gradient layouts as the
 * methods hold them, checked (emulated) as scripts/bench_tc.ts checks each variant before timing.
 */
import assert from "node:assert/strict";
import { InputError } from "../../core/errors.ts";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import { tcBenchVariant } from "./tc_bench.ts";
import { checkVariant } from "./tc_product_check.ts";
import type { TcTile } from "./tc_tiles.ts";

Deno.test("tc bench variants: the dense dE's G·C and the dense dC's Gᵀ·E layouts", () => {
  const gc = tcBenchVariant("t128_k32:gc");
  assert.deepEqual(
    [gc.aDtype, gc.bDtype, gc.aTrans, gc.bTrans, gc.aReadWrite, gc.accumulate, gc.outDtype],
    ["f16", "bf16", false, true, true, true, undefined],
  );
  const gcp = tcBenchVariant("t128_k32:gcp");
  assert.deepEqual({ ...gcp, name: "", preload: false }, { ...gc, name: "" });
  assert.equal(gcp.preload, true);
  const gte = tcBenchVariant("t128x256_k16:gte");
  assert.deepEqual(
    [gte.aDtype, gte.bDtype, gte.aTrans, gte.bTrans, gte.aReadWrite, gte.accumulate, gte.outDtype],
    ["f16", "bf16", true, true, true, undefined, "bf16"],
  );
  const plain = tcBenchVariant("t128_k32");
  assert.deepEqual([plain.aTrans, plain.bTrans, plain.outDtype], [false, false, undefined]);
  assert.throws(() => tcBenchVariant("t128_k32:tn"), InputError);
  assert.throws(() => tcBenchVariant("t99:gc"), InputError);
});

const ctx0 = await testContext();

Deno.test({
  name: "tc bench variants: :gc, :gcp and :gte pass the bench's check against float64, emulated",
  ...GPU_TEST,
  ignore: ctx0.engine !== "deno",
  async fn() {
    const ctx = await testContext();
    // a tile that fits lavapipe's 32 KiB with the emulated accumulators (tc_matmul_test.ts)
    const tile: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };
    for (const v of ["t128_k32:gc", "t128_k32:gcp", "t128_k32:gte"]) {
      const k = { ...tcBenchVariant(v), tile, mode: "emulated" as const };
      const r = await checkVariant(ctx, k);
      assert.match(r, /^ok [0-9.]+; ok [0-9.]+$/, `${v}: ${r}`);
    }
  },
});
