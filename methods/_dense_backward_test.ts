import assert from "node:assert/strict";
import { fusedMethod } from "./fused.ts";
import { DENSE_CHUNK_BYTES, denseChunkRows } from "./_dense_backward.ts";
import { runMethod } from "./run.ts";
import { assertParity, caseInputs, standardCases } from "../testing/parity.ts";
import { resolveOptions } from "../core/options.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";

/** The no-filter rows with small vocabulary chunks: several chunks and a narrower last one. */
const variant = (fb: boolean, chunk: number) =>
  fusedMethod({
    name: fb ? "fused-fb-nofilter" : "fused-nofilter",
    label: "dense backward (test)",
    description: "test",
    filter: false,
    fusedForwardBackward: fb,
    gradDtype: "f32",
  }, { denseChunkRows: chunk });

Deno.test({
  name: "dense backward: vocabulary chunks at odd sizes, every dtype, β, reduction, softcap",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // 131 = 2·48 + 35: three chunks, the last narrower; 131 = 128 + 3; one chunk of all 131
    for (const [i, c] of standardCases(ctx).entries()) {
      const chunk = [48, 128, 131][i % 3];
      await assertParity(ctx, variant(false, chunk), { ...c, softcap: i % 2 ? 4 : undefined });
    }
    // the fused forward-backward (unit weights, scaled after), ignored rows, softcap
    await assertParity(ctx, variant(true, 40), {
      n: 70,
      v: 257,
      d: 33,
      dtype: "bf16",
      beta: 0.1,
      softcap: 5,
      ignoreFraction: 0.3,
    });
  },
});

Deno.test({
  name: "dense backward: bitwise reproducible; chunk size from the workspace budget",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const x = caseInputs({ n: 45, v: 211, d: 26, dtype: "bf16", beta: 0.1, seed: 3 });
    const o = resolveOptions({ beta: 0.1 });
    const m = variant(false, 64);
    const a = await runMethod(ctx, m, x, o, { dtype: "bf16", gradOutput: 1.3 });
    const b = await runMethod(ctx, m, x, o, { dtype: "bf16", gradOutput: 1.3 });
    for (const k of ["loss", "dE", "dC"] as const) assert.deepEqual(b[k], a[k], k);
    // the paper's shape: 4,096 vocabulary rows per chunk (128 MiB of f32 logits), 63 chunks
    assert.equal(denseChunkRows(8192, 256000), 4096);
    assert.equal(8192 * 4096 * 4, DENSE_CHUNK_BYTES);
    assert.equal(denseChunkRows(37, 131), 131);
    assert.equal(denseChunkRows(1 << 20, 256000), 128);
  },
});
