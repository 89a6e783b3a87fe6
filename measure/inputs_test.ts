import assert from "node:assert/strict";
import { GPU_TEST } from "../testing/gpu.ts";
import { GpuContext } from "../gpu/context.ts";
import { download } from "../gpu/tensor.ts";
import { decode } from "../core/dtype.ts";
import { InputError } from "../core/errors.ts";
import { type Dtype, IGNORE_INDEX } from "../core/options.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { CceGenerator, HOST_FIXTURE_MAX_VALUES, makeDeviceInputs } from "./inputs.ts";

/** All of E or C from the generator, decoded to f32, filled in chunks of `chunk` elements. */
function _host(g: CceGenerator, which: "e" | "c", chunk: number): Float32Array {
  const count = (which === "e" ? g.n : g.v) * g.d;
  const words = new Uint32Array(g.dtype === "f32" ? count : Math.ceil(count / 2));
  for (let s = 0; s < count; s += chunk) {
    const part = new Uint32Array(chunk);
    const n = g.fill(which, s, Math.min(chunk, count - s), part);
    words.set(part.subarray(0, n), g.dtype === "f32" ? s : s / 2);
  }
  return decode(new Uint8Array(words.buffer), g.dtype, count);
}

Deno.test("CceGenerator: C starts with E, values do not depend on chunking, seeded", () => {
  for (const dtype of ["bf16", "f16", "f32"] as Dtype[]) {
    // n·d odd: the copied prefix of C ends inside a packed word
    const g = new CceGenerator({ n: 3, v: 11, d: 5, dtype, seed: 7 });
    const e = _host(g, "e", 1 << 10), c = _host(g, "c", 1 << 10);
    assert.deepEqual(c.subarray(0, 15), e);
    assert.deepEqual(_host(g, "c", 4), c, "chunks of 4");
    assert.deepEqual(_host(g, "c", 6), c, "chunks of 6");
    assert.notDeepEqual(c.subarray(15, 30), c.subarray(30, 45));
    const other = new CceGenerator({ n: 3, v: 11, d: 5, dtype, seed: 8 });
    assert.notDeepEqual(_host(other, "e", 64), e);
    assert.deepEqual(_host(new CceGenerator({ n: 3, v: 11, d: 5, dtype, seed: 7 }), "c", 64), c);
  }
  // v < n: only the first v rows of E are copied
  const g = new CceGenerator({ n: 6, v: 2, d: 4, dtype: "bf16", seed: 1 });
  assert.deepEqual(_host(g, "c", 8), _host(g, "e", 8).subarray(0, 8));
});

Deno.test("CceGenerator: values are N(0, 1/√d) rounded to the dtype; targets uniform", () => {
  const d = 64;
  const g = new CceGenerator({ n: 16, v: 4096, d, dtype: "bf16", seed: 3 });
  const c = _host(g, "c", 1 << 16);
  let sum = 0, sq = 0, max = 0;
  for (const x of c) {
    sum += x;
    sq += x * x;
    max = Math.max(max, Math.abs(x));
  }
  const sd = d ** -0.25;
  assert(Math.abs(sum / c.length) < 0.01 * sd, `mean ${sum / c.length}`);
  assert(Math.abs(Math.sqrt(sq / c.length) / sd - 1) < 0.01, `sd ${Math.sqrt(sq / c.length)}`);
  assert(max > 3.5 * sd && max < 4.5 * sd, `max ${max / sd} σ`);
  const t = new CceGenerator({ n: 20000, v: 10, d: 1, dtype: "f32", ignoreFraction: 0.25 })
    .targets();
  const counts = new Array(10).fill(0);
  let ignored = 0;
  for (const x of t) x === IGNORE_INDEX ? ignored++ : counts[x]++;
  assert.equal(ignored, 5000);
  for (const k of counts) assert(Math.abs(k - 1500) < 150, `count ${k}`);
});

Deno.test("CceGenerator: a bad seed, fraction or odd 16-bit chunk start is refused", () => {
  assert.throws(() => new CceGenerator({ n: 1, v: 1, d: 1, dtype: "f32", seed: 0.5 }), InputError);
  assert.throws(
    () => new CceGenerator({ n: 1, v: 1, d: 1, dtype: "f32", ignoreFraction: 2 }),
    InputError,
  );
  const g = new CceGenerator({ n: 2, v: 2, d: 3, dtype: "bf16" });
  assert.throws(() => g.fill("e", 1, 2, new Uint32Array(4)), InputError);
});

Deno.test({
  name: "makeDeviceInputs: sharded uploads hold the generator's values; other fixtures upload",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create({ maxBindingBytes: 256 });
    try {
      const o = { fixture: "cce", n: 9, v: 70, d: 7, dtype: "bf16" as const, seed: 5 };
      const x = await makeDeviceInputs(ctx, o);
      assert.equal(x.generator, "cce-fast");
      assert(x.inputs.c.shards.length > 1, "C is sharded");
      const g = new CceGenerator(o);
      assert.deepEqual(await download(ctx, x.inputs.e), _host(g, "e", 1 << 10));
      assert.deepEqual(await download(ctx, x.inputs.c), _host(g, "c", 1 << 10));
      assert.deepEqual(await download(ctx, x.inputs.targets), Float32Array.from(g.targets()));
      x.destroy();

      const f = { n: 5, v: 13, d: 3, dtype: "f32" as const, seed: 2 };
      const y = await makeDeviceInputs(ctx, { ...f, fixture: "llm" });
      assert.equal(y.generator, "fixtures");
      assert.deepEqual(await download(ctx, y.inputs.c), makeFixture("llm", f).c);
      y.destroy();
      // a fixture's parameters reach its generator
      const spread = await makeDeviceInputs(ctx, { ...f, fixture: "llm:spread=3" });
      const e = await download(ctx, spread.inputs.e);
      assert.deepEqual(e, makeFixture("llm:spread=3", f).e);
      assert.notDeepEqual(e, makeFixture("llm", f).e);
      spread.destroy();
      assert.equal(ctx.memory().liveBytes, 0);

      await assert.rejects(
        makeDeviceInputs(ctx, { ...f, fixture: "uniform", v: HOST_FIXTURE_MAX_VALUES }),
        /use --fixture cce/,
      );
      await assert.rejects(makeDeviceInputs(ctx, { ...f, fixture: "zipf" }), InputError);
    } finally {
      ctx.destroy();
    }
  },
});
