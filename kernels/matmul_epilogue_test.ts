import assert from "node:assert/strict";
import { createTensor, download, fromHost } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { resolveOptions } from "../core/options.ts";
import { f32ToBf16Bits } from "../core/dtype.ts";
import { type MatmulKernelOptions, prepareMatmul, rowView } from "./matmul.ts";
import { prepareLogitGrad } from "./logit_grad.ts";
import { TILE_SMALL } from "./gemm_tiles.ts";
import { columnVector, GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

/** The product E·C[chunk]ᵀ of the tests. */
const K: MatmulKernelOptions = {
  tile: TILE_SMALL,
  aDtype: "bf16",
  bDtype: "bf16",
  aTrans: false,
  bTrans: false,
};

Deno.test({
  name:
    "matmul gradient epilogue: the product and logit_grad bit for bit, f32 and bf16, chunks, softcap",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 37, v = 101, d = 24;
    const eHost = randomArray(n * d, 1), cHost = randomArray(v * d, 2);
    const e = fromHost(ctx, { dtype: "bf16", rows: n, cols: d, role: "input", label: "E" }, eHost);
    const c = fromHost(ctx, { dtype: "bf16", rows: v, cols: d, role: "input", label: "C" }, cHost);
    const targets = Int32Array.from(
      randomArray(n, 3),
      (u, i) => (i % 5 === 1 ? -100 : i % 5 === 2 ? 40 + (i % 20) : Math.floor(((u + 1) / 2) * v)),
    );
    const lseHost = Float32Array.from(randomArray(n, 4), (u) => 2 + u);
    const wHost = randomArray(n, 5, 2);
    const tT = columnVector(ctx, targets, "targets");
    const lse = columnVector(ctx, lseHost, "lse"), w = columnVector(ctx, wHost, "w");
    // chunks of the vocabulary: odd widths (scalar stores), multiples of 4 (vec4), not from 0
    for (const softcap of [undefined, 3]) {
      const opts = resolveOptions({ beta: 0.1, softcap });
      const base: MatmulKernelOptions = { ...K };
      const plain = await prepareMatmul(ctx, base);
      const grad = await prepareLogitGrad(ctx, { logitsDtype: "f32", opts, v, inPlace: true });
      const withEp = async (outDtype: "f32" | "bf16") =>
        await prepareMatmul(ctx, { ...base, outDtype, gradEpilogue: { opts, v } });
      const epF32 = await withEp("f32"), epBf16 = await withEp("bf16");
      for (const [v0, v1] of [[0, 101], [40, 77], [13, 61]]) {
        const cols = v1 - v0;
        const out = (dtype: "f32" | "bf16", label: string) =>
          createTensor(ctx, { dtype, rows: n, cols, role: "output", label });
        const ref = out("f32", "z"), gotF = out("f32", "G f32"), gotB = out("bf16", "G bf16");
        const b = { view: rowView(c, v0, v1), trans: false };
        const a = { tensor: e, trans: false };
        const ep = { targets: tT, lse, w, col0: v0 };
        const rec = new Recorder(ctx);
        plain.record(rec, { a, b, out: ref, splitK: 1 });
        grad.record(rec, { logits: ref, targets: tT, lse, w, grad: ref, colStart: v0 });
        epF32.record(rec, { a, b, out: gotF, splitK: 1, epilogue: ep });
        epBf16.record(rec, { a, b, out: gotB, splitK: 1, epilogue: ep });
        await rec.finish();
        const want = await download(ctx, ref);
        const tag = `softcap ${softcap}, chunk [${v0}, ${v1})`;
        assert.ok(want.some((x) => x !== 0), `${tag}: a gradient`);
        assert.deepEqual(await download(ctx, gotF), want, `${tag}: f32`);
        const bits = Uint16Array.from(want, (x) => f32ToBf16Bits(x));
        const got16 = Uint16Array.from(await download(ctx, gotB), (x) => f32ToBf16Bits(x));
        assert.deepEqual(got16, bits, `${tag}: bf16, rounded once`);
        for (const t of [ref, gotF, gotB]) t.destroy();
      }
    }
    // an epilogue where none was prepared (and the reverse) is refused
    const opts = resolveOptions({ beta: 0.1 });
    const plain = await prepareMatmul(ctx, K);
    const out = createTensor(ctx, { dtype: "f32", rows: n, cols: v, role: "output", label: "z" });
    const args = { a: { tensor: e, trans: false }, b: { tensor: c, trans: false }, out };
    const ep = { targets: tT, lse, w, col0: 0 };
    assert.throws(() => plain.record(new Recorder(ctx), { ...args, epilogue: ep }), /epilogue/);
    const epK = await prepareMatmul(ctx, { ...K, gradEpilogue: { opts, v } });
    assert.throws(() => epK.record(new Recorder(ctx), args), /epilogue/);
    assert.throws(
      () => epK.record(new Recorder(ctx), { ...args, epilogue: ep, splitK: 4 }),
      /one K slice/,
    );
    for (const t of [e, c, tT, lse, w, out]) t.destroy();
  },
});
