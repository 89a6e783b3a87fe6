import assert from "node:assert/strict";
import { createTensor, download, fromHost } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { resolveOptions } from "../core/options.ts";
import { prepareLogitGrad } from "./logit_grad.ts";
import { columnVector, GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

Deno.test({
  name:
    "logit_grad: f32 in place or not, scalar and 16-byte kernels, vocab chunks, shards, softcap",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 11, vocab = 97;
    // widths: odd (scalar kernel) and multiples of 4 (16-byte kernel), whole rows and chunks
    const cases = [
      { cols: 37, colStart: 0 },
      { cols: 40, colStart: 0 },
      { cols: 40, colStart: 52 },
      { cols: 96, colStart: 1 },
    ];
    for (const [softcap, inPlace] of [[undefined, true], [2.5, true], [2.5, false]] as const) {
      const o = resolveOptions({ beta: 0.1, softcap });
      const cap = (x: number) => softcap === undefined ? x : softcap * Math.tanh(x / softcap);
      const dcap = (z: number) => softcap === undefined ? 1 : 1 - (z / softcap) ** 2;
      for (const { cols, colStart } of cases) {
        // targets in the chunk, outside it, and ignored
        const targets = Int32Array.from(
          randomArray(n, 4),
          (u, i) =>
            i % 4 === 1
              ? o.ignoreIndex
              : i % 4 === 2
              ? colStart + (i % cols)
              : Math.floor(((u + 1) / 2) * vocab),
        );
        const wHost = randomArray(n, 5, 2);
        const zHost = randomArray(n * cols, 6 + cols + colStart, 4);
        const lseHost = Float32Array.from(randomArray(n, 7), (u) => 3 + u);
        const vec = (data: Float32Array | Int32Array, label: string) =>
          columnVector(ctx, data, label);
        const z = fromHost(ctx, {
          dtype: "f32",
          rows: n,
          cols,
          role: "input",
          label: "z",
          maxRowsPerShard: 4,
        }, zHost);
        const tT = vec(targets, "targets"), lse = vec(lseHost, "lse"), w = vec(wHost, "w");
        const g = inPlace ? z : createTensor(ctx, {
          dtype: "f32",
          rows: n,
          cols,
          role: "output",
          label: "g",
          maxRowsPerShard: 4,
        });
        const k = await prepareLogitGrad(ctx, { logitsDtype: "f32", opts: o, v: vocab, inPlace });
        await ctx.scoped(async () => {
          const rec = new Recorder(ctx);
          k.record(rec, { logits: z, targets: tT, lse, w, grad: g, colStart });
          await rec.finish();
        });
        const got = await download(ctx, g);
        for (let r = 0; r < n; r++) {
          for (let j = 0; j < cols; j++) {
            const zc = cap(zHost[r * cols + j]);
            const p = Math.exp(zc - lseHost[r]);
            const on = j + colStart === targets[r] ? 1 - o.beta : 0;
            const want = wHost[r] * (p - on - o.beta / vocab) * dcap(zc);
            const ok = Math.abs(got[r * cols + j] - want) <= 1e-5 * Math.abs(want) + 1e-7;
            assert.ok(
              ok,
              `cols ${cols} from ${colStart}, softcap ${softcap}, in place ${inPlace}: G[${r}][${j}] = ${
                got[r * cols + j]
              }, want ${want}`,
            );
          }
        }
        for (const t of new Set([z, g, tT, lse, w])) t.destroy();
      }
    }
  },
});
