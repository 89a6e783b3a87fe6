import assert from "node:assert/strict";
import { liger, ligerChunkSize } from "./liger.ts";
import { assertParity, caseInputs, standardCases } from "../testing/parity.ts";
import { bufferBytes, methodPeaks } from "../testing/method_peaks.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { type Reduction, resolveOptions } from "../core/options.ts";
import { uploadGradOut, uploadInputs } from "./run.ts";

// Liger's chunk logits are f32 here and nothing else is rounded: every dtype keeps the default
// parity tolerance.

Deno.test("liger: chunk size next_pow2(⌈n / ⌈|V|/d⌉⌉), at most n", () => {
  assert.equal(ligerChunkSize(37, 131, 29), 8); // 8, 8, 8, 8, 5
  assert.equal(ligerChunkSize(70, 257, 33), 16); // 16 ×4, 6
  assert.equal(ligerChunkSize(5, 7, 16), 5); // one chunk: 8 clamped to n
  assert.equal(ligerChunkSize(8192, 256000, 2304), 128); // the paper's shape: ⌈8192/112⌉ = 74
});

Deno.test({
  name: "liger: parity at odd shapes, ragged chunks, every β, reduction, dtype, softcap",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const c of standardCases(ctx)) await assertParity(ctx, liger, c);
    for (const reduction of ["mean", "none"] as Reduction[]) {
      await assertParity(ctx, liger, {
        n: 70,
        v: 257,
        d: 33,
        dtype: "bf16",
        beta: 0.1,
        softcap: 3,
        reduction,
        ignoreFraction: 0.2,
        gradOutput: reduction === "none" ? "vector" : -0.8,
        seed: 21,
      });
    }
    await assertParity(ctx, liger, { n: 5, v: 7, d: 16, dtype: "f32", beta: 0.1, seed: 4 });
    await assertParity(ctx, liger, { n: 1, v: 1, d: 1, dtype: "f32", beta: 0.5, seed: 12 });
  },
});

Deno.test({
  name: "liger: sharded operands and chunk (small bindings)",
  ...GPU_TEST,
  async fn() {
    // 2048-byte bindings: the 8-row f32 chunk (v = 131) spans 3 shards, E 16 rows per shard.
    const ctx = await GpuContext.create({ poison: true, maxBindingBytes: 2048 });
    for (const reduction of ["sum", "none"] as Reduction[]) {
      await assertParity(ctx, liger, {
        n: 37,
        v: 131,
        d: 29,
        dtype: "bf16",
        beta: 0.1,
        softcap: 3,
        reduction,
        gradOutput: reduction === "none" ? "vector" : 2.5,
        ignoreFraction: 0.2,
        seed: 8,
      });
    }
    ctx.destroy();
  },
});

Deno.test({
  name: "liger: a second backward of one forward is refused (gradients were handed over)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const opts = resolveOptions({ beta: 0.1 });
    const x = caseInputs({ n: 9, v: 11, d: 5, dtype: "f32", beta: 0.1 });
    const p = await liger.prepare(ctx, { n: 9, v: 11, d: 5, dtype: "f32" }, opts);
    const inputs = uploadInputs(ctx, x, "f32");
    const gradOut = uploadGradOut(ctx, 9, opts, 2);
    const rec = new Recorder(ctx);
    const f = await p.forward(rec, inputs);
    await p.backward(rec, inputs, f.saved, gradOut);
    await assert.rejects(p.backward(rec, inputs, f.saved, gradOut), /already scaled/);
    await rec.finish();
    p.dispose(f.saved);
    for (const t of [f.loss, gradOut, inputs.e, inputs.c, inputs.targets]) t.destroy();
  },
});

Deno.test({
  name: "liger: memory — one f32 chunk of logits reused, gradients made in the forward",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 64, v = 512, d = 32;
    const chunk = ligerChunkSize(n, v, d);
    assert.equal(chunk, 4);
    const vec = bufferBytes(n, 4), scalar = bufferBytes(1, 4);
    const chunkBytes = bufferBytes(chunk * v, 4);
    const grads = bufferBytes(n * d, 4) + bufferBytes(v * d, 4);
    for (const reduction of ["mean", "none"] as Reduction[]) {
      const opts = resolveOptions({ beta: 0.1, reduction });
      const got = await methodPeaks(ctx, liger, { n, v, d, dtype: "bf16", beta: 0.1 }, opts);
      if (reduction === "mean") {
        // forward: the chunk, dE, dC, row weights, LSE, loss rows, count, loss
        assert.equal(got.fwd, chunkBytes + grads + 3 * vec + 2 * scalar, "mean forward");
        // backward: the stored gradients, scaled in place and handed over
        assert.equal(got.bwd, grads, "mean backward");
      } else {
        // forward: the loss only — the chunk, LSE, loss rows, count, n losses
        assert.equal(got.fwd, chunkBytes + 3 * vec + scalar, "none forward");
        // backward: the chunk loop again with g_n folded in, writing new dE and dC
        assert.equal(got.bwd, chunkBytes + grads + 3 * vec, "none backward");
      }
      // Liger's point: far below the n×|V| f32 logits of the baseline.
      assert.ok(got.fwd - (reduction === "mean" ? grads : 0) < (n * v * 4) / 4);
      assert.ok(got.fwdParams + got.bwdParams < 16 * 1024, "uniform blocks stay small");
    }
  },
});
