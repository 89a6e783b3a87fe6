import assert from "node:assert/strict";
import { createTensor, download, fromHost } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { machineEps, roundArray } from "../core/dtype.ts";
import { type Dtype, resolveOptions } from "../core/options.ts";
import { prepareLogitGrad16 } from "./logit_grad16.ts";
import { columnVector, GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

Deno.test({
  name: "logit_grad16: 16-bit gradient from 16-bit or f32 logits, odd widths, shards, row offset",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 20, v = 37, rows = 11, off = 6;
    const o = resolveOptions({ beta: 0.1, softcap: 2.5 });
    const targets = Int32Array.from(
      randomArray(n, 4),
      (u, i) => i % 4 === 1 ? o.ignoreIndex : Math.floor(((u + 1) / 2) * v),
    );
    const wHost = randomArray(n, 5, 2);
    const vec = (data: Float32Array | Int32Array, label: string) => columnVector(ctx, data, label);
    const logitsDtypes: Dtype[] = ctx.hasF16 ? ["f32", "bf16", "f16"] : ["f32", "bf16"];
    for (const logitsDtype of logitsDtypes) {
      for (const gradDtype of ["bf16", "f16"] as const) {
        const zHost = roundArray(randomArray(rows * v, 6, 4), logitsDtype);
        // LSE of the capped rows, in float64 (the kernel only reads it).
        const cap = (x: number) => o.softcap! * Math.tanh(x / o.softcap!);
        const lseHost = new Float32Array(n);
        for (let r = 0; r < rows; r++) {
          let s = 0;
          for (let j = 0; j < v; j++) s += Math.exp(cap(zHost[r * v + j]));
          lseHost[off + r] = Math.log(s);
        }
        const z = fromHost(ctx, {
          dtype: logitsDtype,
          rows,
          cols: v,
          role: "input",
          label: "z",
          maxRowsPerShard: 4,
        }, zHost);
        const g = createTensor(ctx, {
          dtype: gradDtype,
          rows,
          cols: v,
          role: "output",
          label: "g",
          maxRowsPerShard: 4,
        });
        const tT = vec(targets, "targets"), lse = vec(lseHost, "lse"), w = vec(wHost, "w");
        const k = await prepareLogitGrad16(ctx, { logitsDtype, gradDtype, opts: o, v });
        await ctx.scoped(async () => {
          const rec = new Recorder(ctx);
          k.record(rec, { logits: z, rowOffset: off, targets: tT, lse, w, grad: g });
          await rec.finish();
        });
        const got = await download(ctx, g);
        const eps = machineEps(gradDtype);
        for (let r = 0; r < rows; r++) {
          const row = off + r;
          for (let j = 0; j < v; j++) {
            const zc = cap(zHost[r * v + j]);
            const p = Math.exp(zc - lseHost[row]);
            const want = wHost[row] * (p - (j === targets[row] ? 1 - o.beta : 0) - o.beta / v) *
              (1 - (zc / o.softcap!) ** 2);
            // f32 arithmetic may round to either neighbour; f16 subnormals are 6e-8 apart.
            const ok = Math.abs(got[r * v + j] - want) <= eps * Math.abs(want) + 1e-7;
            assert.ok(
              ok,
              `${logitsDtype}→${gradDtype} G[${row}][${j}] = ${got[r * v + j]}, want ${want}`,
            );
          }
        }
        for (const t of [z, g, tT, lse, w]) t.destroy();
      }
    }
  },
});
