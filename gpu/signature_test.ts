import assert from "node:assert/strict";
import { compileKernel, declaredBindings, signature } from "./signature.ts";
import { Recorder } from "./recorder.ts";
import { createTensor, download } from "./tensor.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";

const SIG = signature({
  params: { rows: "u32", shift: "i32", scale: "f32", count: "u32", base: "u32" },
  bindings: {
    src: { elem: "f32", access: "read" },
    aux: { elem: "u32", access: "read", when: false },
    dst: { elem: "f32", access: "read_write" },
  },
  layout: { breaks: [3] },
});

Deno.test("signature: the struct padded to 16 bytes, the bindings in declaration order", () => {
  assert.equal(
    SIG.struct,
    "struct Params { rows: u32, shift: i32, scale: f32,\n" +
      "  count: u32, base: u32, _a: u32, _b: u32, _c: u32 };",
  );
  assert.equal(
    SIG.bindingLines,
    "@group(0) @binding(0) var<uniform> P: Params;\n" +
      "@group(0) @binding(1) var<storage, read> src: array<f32>;\n" +
      "@group(0) @binding(2) var<storage, read_write> dst: array<f32>;",
  );
  // explicit indices are reserved first; the lines keep the declaration's order
  const s = signature({
    params: { n: "u32", m: "u32", k: "u32", j: "u32" },
    bindings: {
      z: { elem: "vec4<f32>", access: "read" },
      g: { elem: "f32", access: "read_write", index: 3 },
      range: { elem: "atomic<u32>", count: 2, access: "read_write" },
    },
    layout: { struct: "Q", uniform: "q", pad: ["_p"] },
  });
  assert.equal(
    s.wgsl,
    "struct Q { n: u32, m: u32, k: u32, j: u32 };\n" +
      "@group(0) @binding(0) var<uniform> q: Q;\n" +
      "@group(0) @binding(1) var<storage, read> z: array<vec4<f32>>;\n" +
      "@group(0) @binding(3) var<storage, read_write> g: array<f32>;\n" +
      "@group(0) @binding(2) var<storage, read_write> range: array<atomic<u32>, 2>;",
  );
  assert.deepEqual(declaredBindings(s.wgsl).map((b) => `${b.index} ${b.name} ${b.access}`), [
    "0 q uniform",
    "1 z read",
    "3 g read_write",
    "2 range read_write",
  ]);
  assert.throws(
    () =>
      signature({
        bindings: {
          a: { elem: "f32", access: "read", index: 1 },
          b: { elem: "f32", access: "read", index: 1 },
        },
      }),
    /binding 1 twice/,
  );
  assert.throws(
    () => signature({ params: { a: "u32" }, bindings: {}, layout: { pad: ["_x"] } }),
    /too few padding names/,
  );
});

Deno.test("signature: the uniform words packed by name; a missing or unknown field refused", () => {
  const words = SIG.pack({ base: 9, count: 7, scale: 0.5, shift: -3, rows: 4 });
  assert.equal(words.length, 8);
  assert.deepEqual([...words.slice(0, 2)], [4, 2 ** 32 - 3]);
  assert.equal(new Float32Array(words.buffer)[2], 0.5);
  assert.deepEqual([...words.slice(3)], [7, 9, 0, 0, 0]);
  // @ts-expect-error: base missing
  assert.throws(() => SIG.pack({ count: 7, scale: 0.5, shift: -3, rows: 4 }), /'base' missing/);
  assert.throws(
    // @ts-expect-error: an unknown field
    () => SIG.pack({ base: 9, count: 7, scale: 0.5, shift: -3, rows: 4, extra: 1 }),
    /unknown parameter 'extra'/,
  );
  assert.throws(
    () => SIG.pack({ base: 9, count: 7, scale: NaN, shift: -3, rows: 4 }),
    /'scale' missing or not a finite number/,
  );
});

Deno.test("signature: buffers by name in binding order; a missing, unknown or excluded one refused", () => {
  const a = { size: 4 } as GPUBuffer, b = { size: 8 } as GPUBuffer;
  assert.deepEqual(SIG.resources({ dst: b, src: a }), [a, b]);
  // @ts-expect-error: dst missing
  assert.throws(() => SIG.resources({ src: a }), /binding 'dst' missing/);
  // @ts-expect-error: an unknown binding
  assert.throws(() => SIG.resources({ src: a, dst: b, other: a }), /unknown binding 'other'/);
  assert.throws(
    () => SIG.resources({ src: a, dst: b, aux: a }),
    /binding 'aux' is not declared in this variant/,
  );
  // an excluded binding may be passed as undefined (a launcher's optional buffer)
  assert.deepEqual(SIG.resources({ src: a, dst: b, aux: undefined }), [a, b]);
});

Deno.test("signature: a source that does not declare exactly the signature is refused", () => {
  const body = "\n@compute @workgroup_size(1)\nfn main() {}\n";
  SIG.check(`${SIG.wgsl}${body}`, "ok");
  assert.throws(
    () => SIG.check(`${SIG.struct}\n${SIG.line("P")}\n${SIG.line("src")}${body}`, "k"),
    /k: the shader's bindings differ from its signature/,
  );
  const swapped = SIG.wgsl.replace("binding(1)", "binding(9)");
  assert.throws(() => SIG.check(`${swapped}${body}`, "k"), /bindings differ/);
  assert.throws(
    () => SIG.check(`${SIG.bindingLines}${body}`, "k"),
    /does not declare the signature's struct/,
  );
});

Deno.test({
  name: "signature: a kernel compiled from its signature runs with its parameters by name",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const code = `${SIG.wgsl}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < P.count) { dst[P.base + g.x] = src[g.x] * P.scale + f32(P.shift) + f32(P.rows); }
}
`;
    const k = await compileKernel(ctx, SIG, code, "signature test");
    await assert.rejects(
      compileKernel(ctx, SIG, code.replace("read_write> dst", "read> dst"), "mismatch"),
      /mismatch: the shader's bindings differ/,
    );
    const src = createTensor(ctx, { dtype: "f32", rows: 5, cols: 1, role: "input", label: "src" });
    const dst = createTensor(ctx, { dtype: "f32", rows: 8, cols: 1, role: "output", label: "dst" });
    ctx.device.queue.writeBuffer(src.shards[0].buffer.buffer, 0, new Float32Array([1, 2, 3, 4, 5]));
    ctx.device.queue.writeBuffer(dst.shards[0].buffer.buffer, 0, new Float32Array(8));
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      const bg = k.bind(rec, { rows: 10, shift: -2, scale: 0.5, count: 5, base: 3 }, {
        src: src.shards[0].buffer,
        dst: dst.shards[0].buffer,
      });
      rec.pass("signature test", (p) => p.dispatch(k.pipeline, bg, 1));
      await rec.finish();
    });
    assert.deepEqual([...await download(ctx, dst)], [0, 0, 0, 8.5, 9, 9.5, 10, 10.5]);
    src.destroy();
    dst.destroy();
  },
});
