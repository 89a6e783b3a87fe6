import assert from "node:assert/strict";
import { chunked, chunkRanges, makeChunked } from "./chunked.ts";
import { assertParity, type ParityCase, standardCases } from "../testing/parity.ts";
import { roundedLogitsTolerance } from "../testing/rounded_logits_tol.ts";
import { bufferBytes, methodPeaks } from "../testing/method_peaks.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { GpuContext } from "../gpu/context.ts";
import { type Dtype, resolveOptions } from "../core/options.ts";

// Logits and their gradient are stored in the input dtype, so 16-bit cases get the tolerance of
// testing/rounded_logits_tol.ts: the f32 tolerance plus a first-order bound of what rounding the
// logits and G to nearest even (relative error ≤ 2⁻⁸ bf16, 2⁻¹¹ f16) changes in loss, dE and dC,
// evaluated on each case's data (a few % of the arrays' scale for bf16). f32 keeps the default.
const _parity = (ctx: GpuContext, c: ParityCase, method = chunked) =>
  assertParity(ctx, method, { ...c, tol: roundedLogitsTolerance(c) });

Deno.test("chunked: torch.chunk sizes", () => {
  assert.deepEqual(chunkRanges(37, 8), [[0, 5], [5, 10], [10, 15], [15, 20], [20, 25], [25, 30], [
    30,
    35,
  ], [35, 37]]);
  assert.deepEqual(chunkRanges(5, 8), [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]);
  assert.deepEqual(chunkRanges(9, 4), [[0, 3], [3, 6], [6, 9]]); // torch.chunk: 3 pieces, not 4
  assert.throws(() => makeChunked(0), RangeError);
  assert.equal(makeChunked(3).label, "Chunked CE (torchtune, 3 chunks)");
});

Deno.test({
  name: "chunked: parity at odd shapes, ragged chunks, every β, reduction, dtype, softcap",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const c of standardCases(ctx)) await _parity(ctx, c);
    for (const dtype of ["f32", "bf16"] as Dtype[]) {
      await _parity(ctx, {
        n: 70,
        v: 257,
        d: 33,
        dtype,
        beta: 0.1,
        softcap: 3,
        ignoreFraction: 0.2,
        seed: 21,
      });
    }
    // n < chunks: five chunks of one token
    await _parity(ctx, { n: 5, v: 19, d: 7, dtype: "bf16", beta: 0.1, reduction: "sum", seed: 4 });
    await _parity(ctx, { n: 37, v: 131, d: 29, dtype: "f32", beta: 0.1, seed: 5 }, makeChunked(3));
    await _parity(ctx, { n: 1, v: 1, d: 1, dtype: "f32", beta: 0.5, seed: 12 });
    // The 16-bit rows really are rounded: the f32 tolerance does not hold for them.
    await assert.rejects(
      assertParity(ctx, chunked, { n: 37, v: 131, d: 29, dtype: "bf16", beta: 0.1, seed: 3 }),
    );
  },
});

Deno.test({
  name: "chunked: sharded chunks and gradients (small bindings); unsupported when 2 rows don't fit",
  ...GPU_TEST,
  async fn() {
    // 2048-byte bindings: 2 rows of f32 logits (v = 131) per shard, 16 rows of bf16 E.
    const ctx = await GpuContext.create({ poison: true, maxBindingBytes: 2048 });
    await _parity(ctx, {
      n: 37,
      v: 131,
      d: 29,
      dtype: "bf16",
      beta: 0.1,
      softcap: 3,
      ignoreFraction: 0.2,
      seed: 8,
    });
    await _parity(ctx, { n: 37, v: 131, d: 29, dtype: "f32", beta: 1, reduction: "sum", seed: 9 });
    const tiny = await GpuContext.create({ maxBindingBytes: 1000 });
    const spec = { n: 8, v: 131, d: 4, dtype: "bf16" as const };
    assert.match(chunked.unsupported!(tiny, spec, resolveOptions({})) ?? "", /two f32 rows/);
    assert.equal(chunked.unsupported!(tiny, { ...spec, v: 130 }, resolveOptions({})), undefined);
    tiny.destroy();
    ctx.destroy();
  },
});

Deno.test({
  name: "chunked: memory — all chunks' 16-bit logits in the forward, one chunk's gradient after",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 64, v = 512, d = 32, chunks = 8, rows = n / chunks;
    for (const dtype of ["bf16", "f32"] as Dtype[]) {
      const b = dtype === "f32" ? 4 : 2;
      const opts = resolveOptions({ beta: 0.1 });
      const got = await methodPeaks(ctx, chunked, { n, v, d, dtype, beta: 0.1 }, opts);
      const vec = bufferBytes(n, 4), scalar = bufferBytes(1, 4);
      // forward: 8 chunks of logits in the input dtype, LSE, loss rows, count, loss
      const fwd = chunks * bufferBytes(rows * v, b) + 2 * vec + 2 * scalar;
      // backward: row weights, one chunk's f32 gradient and its 16-bit cast, dE, dC
      const bwd = vec + bufferBytes(rows * v, 4) +
        (dtype === "f32" ? 0 : bufferBytes(rows * v, 2)) +
        bufferBytes(n * d, 4) + bufferBytes(v * d, 4);
      assert.equal(got.fwd, fwd, `${dtype} forward`);
      assert.equal(got.bwd, bwd, `${dtype} backward`);
      assert.ok(got.fwd >= n * v * b);
      assert.ok(got.fwdParams + got.bwdParams < 16 * 1024, "uniform blocks stay small");
    }
  },
});
