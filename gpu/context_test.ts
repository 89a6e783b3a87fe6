import assert from "node:assert/strict";
import { adapterFromEnv, adapterName, bindingConflict, GpuContext } from "./context.ts";
import { Recorder } from "./recorder.ts";
import { createTensor, download } from "./tensor.ts";
import { GpuError, type GpuErrorKind } from "../core/errors.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";

/** A predicate for assert.rejects/throws: a one-line GpuError of `kind` matching `re`. */
const gpuError = (kind: GpuErrorKind, re: RegExp) => (e: unknown) => {
  assert.ok(e instanceof GpuError, `expected GpuError, got ${e}`);
  assert.equal(e.kind, kind, e.message);
  assert.match(e.message, re);
  assert.ok(!e.message.includes("\n"), `one line: ${JSON.stringify(e.message)}`);
  return true;
};

const TWO_BINDINGS = `
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&dst)) { dst[g.x] = src[g.x] * 2.0; }
}
`;

Deno.test({
  name: "context: a bind group missing a binding, dispatched in scoped(), is a validation GpuError",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const p = await ctx.pipeline(TWO_BINDINGS, "two bindings");
    const src = ctx.createBuffer({ size: 256, role: "workspace", label: "src" });
    const before = ctx.memory().liveBytes;
    await assert.rejects(
      ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        const bg = rec.bindGroup(p, [src], "one of two");
        rec.pass("bad dispatch", (pass) => pass.dispatch(p, bg, 1));
        await rec.finish();
      }),
      gpuError("validation", /^WebGPU validation error: /),
    );
    assert.equal(ctx.memory().liveBytes, before);
    // The context is still usable: a valid dispatch of the same pipeline goes through.
    const dst = ctx.createBuffer({ size: 256, role: "workspace", label: "dst" });
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      const bg = rec.bindGroup(p, [src, dst], "both");
      rec.pass("good dispatch", (pass) => pass.dispatch(p, bg, 1));
      await rec.finish();
    });
    src.destroy();
    dst.destroy();
  },
});

Deno.test({
  name: "context: a buffer smaller than the shader's fixed-size binding is a validation GpuError",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const code = `
@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>, 16>;
@compute @workgroup_size(16)
fn main(@builtin(local_invocation_index) i: u32) { out[i] = vec4<f32>(f32(i)); }
`;
    const p = await ctx.pipeline(code, "fixed size");
    const small = ctx.createBuffer({ size: 64, role: "workspace", label: "too small" });
    await assert.rejects(
      ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        rec.pass("small binding", (pass) => pass.dispatch(p, rec.bindGroup(p, [small]), 1));
        await rec.finish();
      }),
      gpuError("validation", /^WebGPU validation error: /),
    );
    small.destroy();
  },
});

Deno.test({
  name: "context: a WGSL compile error names the line; a bad binding type fails too",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const broken = [
      "@group(0) @binding(0) var<storage, read_write> out: array<f32>;",
      "@compute @workgroup_size(1)",
      "fn main() {",
      "  out[0] = undefined_name + 1.0;",
      "}",
    ].join("\n");
    await assert.rejects(
      ctx.pipeline(broken, "broken kernel"),
      gpuError(
        "validation",
        /^broken kernel: WGSL compilation failed at line 4:\d+: .*undefined_name/,
      ),
    );
    // A storage binding written by the shader but declared read-only: the layout refuses it.
    const readOnlyWrite = `
@group(0) @binding(0) var<storage, read> out: array<f32>;
@compute @workgroup_size(1)
fn main() { out[0] = 1.0; }
`;
    await assert.rejects(
      ctx.pipeline(readOnlyWrite, "read-only write"),
      gpuError("validation", /^read-only write: /),
    );
    // Nothing is cached for a failed compile: asking again fails again.
    await assert.rejects(ctx.pipeline(broken, "broken kernel"), GpuError);
    // A good pipeline is cached by its source.
    const a = await ctx.pipeline(TWO_BINDINGS, "a"), b = await ctx.pipeline(TWO_BINDINGS, "b");
    assert.equal(a, b);
  },
});

Deno.test({
  name: "context: an uncaptured error fails the next scoped() call, once",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create();
    try {
      await ctx.scoped(() => Promise.resolve(1));
      // MAP_READ may only go with COPY_DST: an invalid buffer, outside any error scope.
      ctx.device.createBuffer({
        size: 16,
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.STORAGE,
      });
      await assert.rejects(
        ctx.scoped(() => Promise.resolve(1)),
        gpuError("validation", /^uncaptured WebGPU error: /),
      );
      assert.equal(await ctx.scoped(() => Promise.resolve(2)), 2);
      ctx.throwUncaptured(); // nothing left
    } finally {
      ctx.destroy();
    }
  },
});

Deno.test({
  name: "context: scoped() rethrows the callback's own error when the GPU had none",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    await assert.rejects(ctx.scoped(() => Promise.reject(new RangeError("mine"))), RangeError);
    assert.equal(await ctx.scoped(() => Promise.resolve("ok")), "ok");
  },
});

Deno.test({
  name: "context: live and peak bytes follow create/destroy exactly; resetPeak",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create();
    try {
      const zero = { input: 0, workspace: 0, output: 0, params: 0 };
      assert.deepEqual(ctx.memory(), {
        liveBytes: 0,
        peakBytes: 0,
        liveByRole: zero,
        peakByRole: zero,
      });
      const a = ctx.createBuffer({ size: 100, role: "input", label: "a" });
      const b = ctx.createBuffer({ size: 1, role: "workspace", label: "b" }); // → 4
      const c = ctx.createBuffer({ size: 6, role: "output", label: "c" }); // → 8
      const u = ctx.uniform(new Uint32Array(5), "u"); // 20 bytes → 32
      assert.deepEqual([a.size, b.size, c.size, u.size], [100, 4, 8, 32]);
      assert.equal(u.role, "params");
      let m = ctx.memory();
      assert.equal(m.liveBytes, 144);
      assert.equal(m.peakBytes, 144);
      assert.deepEqual(m.liveByRole, { input: 100, workspace: 4, output: 8, params: 32 });
      a.destroy();
      a.destroy(); // idempotent
      assert.equal(a.alive, false);
      m = ctx.memory();
      assert.equal(m.liveBytes, 44);
      assert.equal(m.peakBytes, 144);
      assert.deepEqual(m.liveByRole, { input: 0, workspace: 4, output: 8, params: 32 });
      assert.deepEqual(m.peakByRole, { input: 100, workspace: 4, output: 8, params: 32 });
      ctx.resetPeak();
      m = ctx.memory();
      assert.equal(m.peakBytes, 44);
      assert.deepEqual(m.peakByRole, m.liveByRole);
      const d = ctx.createBuffer({ size: 1000, role: "workspace", label: "d" });
      d.destroy();
      m = ctx.memory();
      assert.equal(m.liveBytes, 44);
      assert.equal(m.peakBytes, 1044);
      assert.equal(m.peakByRole.workspace, 1004);
      for (const t of [b, c, u]) t.destroy();
      assert.equal(ctx.memory().liveBytes, 0);
      // A refused allocation changes nothing.
      assert.throws(
        () => ctx.createBuffer({ size: ctx.maxBufferBytes + 1, role: "workspace", label: "huge" }),
        gpuError(
          "limits",
          new RegExp(
            `^huge: a buffer of ${
              Math.ceil((ctx.maxBufferBytes + 1) / 4) * 4
            } bytes exceeds the adapter's maxBufferSize ${ctx.maxBufferBytes}$`,
          ),
        ),
      );
      assert.equal(ctx.memory().liveBytes, 0);
      assert.equal(ctx.memory().peakBytes, 1044);
    } finally {
      ctx.destroy();
    }
  },
});

Deno.test({
  name: "context: poison fills storage buffers with NaN bytes; without it they are zero",
  ...GPU_TEST,
  async fn() {
    const poisoned = await testContext();
    assert.equal(poisoned.poison, true);
    const plain = await GpuContext.create();
    try {
      for (const dtype of ["f32", "bf16", "f16", "i32"] as const) {
        if (dtype === "f16" && !poisoned.hasF16) continue;
        const o = { dtype, rows: 3, cols: 5, role: "workspace" as const, label: dtype };
        const tp = createTensor(poisoned, o), tz = createTensor(plain, o);
        const gp = await download(poisoned, tp), gz = await download(plain, tz);
        if (dtype === "i32") assert.ok(gp.every((x) => x === -1), `${dtype}: ${gp}`);
        else assert.ok(gp.every(Number.isNaN), `${dtype}: ${gp}`);
        assert.ok(gz.every((x) => x === 0), `${dtype} unpoisoned: ${gz}`);
        tp.destroy();
        tz.destroy();
      }
      // Uniform blocks are not poisoned (they hold their parameters at once).
      const u = poisoned.uniform(new Float32Array([1.5, 2.5]), "u");
      const staging = poisoned.device.createBuffer({
        size: 16,
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      });
      const enc = poisoned.device.createCommandEncoder();
      enc.copyBufferToBuffer(u.buffer, 0, staging, 0, 16);
      poisoned.device.queue.submit([enc.finish()]);
      await staging.mapAsync(GPUMapMode.READ);
      assert.deepEqual([...new Float32Array(staging.getMappedRange().slice(0))], [1.5, 2.5, 0, 0]);
      staging.unmap();
      staging.destroy();
      u.destroy();
    } finally {
      plain.destroy();
    }
  },
});

Deno.test({
  name: "context: maxBindingBytes only lowers the limit, to a multiple of 16 and at least 256",
  ...GPU_TEST,
  async fn() {
    const full = await testContext();
    const adapterMax = full.device.limits.maxStorageBufferBindingSize;
    assert.equal(full.maxBindingBytes, adapterMax);
    for (
      const [asked, want] of [[5000, 4992], [4096, 4096], [100, 256], [adapterMax * 2, adapterMax]]
    ) {
      const ctx = await GpuContext.create({ maxBindingBytes: asked });
      assert.equal(ctx.maxBindingBytes, want, `asked ${asked}`);
      assert.equal(ctx.report.maxBindingBytes, want);
      ctx.destroy();
    }
  },
});

Deno.test({
  name: "context: after the device is lost, scoped() and allocations throw device-lost",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create();
    ctx.destroy();
    await ctx.device.lost;
    assert.ok(ctx.lostReason);
    await assert.rejects(
      ctx.scoped(() => Promise.resolve(1)),
      gpuError("device-lost", /^GPU device lost \(/),
    );
    assert.throws(
      () => ctx.createBuffer({ size: 16, role: "workspace", label: "x" }),
      gpuError("device-lost", /^GPU device lost/),
    );
    await assert.rejects(ctx.pipeline(TWO_BINDINGS + "\n", "after loss"), GpuError);
  },
});

Deno.test("context: LCE_ADAPTER names a bad adapter choice", () => {
  const old = Deno.env.get("LCE_ADAPTER");
  try {
    Deno.env.set("LCE_ADAPTER", "gpu9000");
    assert.throws(
      () => adapterFromEnv(),
      gpuError("limits", /^LCE_ADAPTER must be auto, software or hardware, got 'gpu9000'$/),
    );
    Deno.env.set("LCE_ADAPTER", "software");
    assert.equal(adapterFromEnv(), "software");
  } finally {
    if (old === undefined) Deno.env.delete("LCE_ADAPTER");
    else Deno.env.set("LCE_ADAPTER", old);
  }
});

Deno.test({
  name:
    "context: freed buffers reused within the cache limit read as zeros (or poison), bytes unchanged",
  ...GPU_TEST,
  async fn() {
    for (const poison of [false, true]) {
      const ctx = await GpuContext.create({ poison });
      try {
        ctx.cacheLimitBytes = 4096;
        const t = createTensor(ctx, {
          dtype: "f32",
          rows: 4,
          cols: 64,
          role: "workspace",
          label: "a",
        });
        const first = t.shards[0].buffer.buffer;
        ctx.device.queue.writeBuffer(first, 0, new Float32Array(256).fill(7));
        t.destroy();
        assert.equal(ctx.memory().liveBytes, 0);
        assert.equal(ctx.cachedBytes, 1024);
        // same size: the same GPUBuffer, cleared (or poisoned), counted as live again
        const u = createTensor(ctx, {
          dtype: "f32",
          rows: 4,
          cols: 64,
          role: "output",
          label: "b",
        });
        assert.equal(u.shards[0].buffer.buffer, first);
        assert.equal(ctx.cachedBytes, 0);
        assert.equal(ctx.memory().liveBytes, 1024);
        const got = await download(ctx, u);
        assert.ok(got.every((x) => (poison ? Number.isNaN(x) : x === 0)), `poison ${poison}`);
        // another size is a new buffer; past the limit a freed buffer is destroyed, not kept
        const big = createTensor(ctx, {
          dtype: "f32",
          rows: 32,
          cols: 64,
          role: "workspace",
          label: "c",
        });
        assert.notEqual(big.shards[0].buffer.buffer, first);
        big.destroy();
        assert.equal(ctx.cachedBytes, 0, "8 KiB exceed the 4 KiB limit");
        u.destroy();
        assert.equal(ctx.cachedBytes, 1024);
        ctx.releaseCache();
        assert.equal(ctx.cachedBytes, 0);
        const v = createTensor(ctx, {
          dtype: "f32",
          rows: 4,
          cols: 64,
          role: "output",
          label: "d",
        });
        assert.notEqual(v.shards[0].buffer.buffer, first);
        v.destroy();
      } finally {
        ctx.destroy();
      }
    }
  },
});

const TWO_WRITERS = `
@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&a)) { a[g.x] = f32(g.x); }
  if (g.x < arrayLength(&b)) { b[g.x] = -f32(g.x); }
}
`;

Deno.test("context: which bindings may share a buffer (the WebGPU rules)", () => {
  const buf = { label: "x", size: 1024 } as GPUBuffer, other = { label: "y" } as GPUBuffer;
  const at = (name: string, type: GPUBufferBindingType, offset: number, size: number) => ({
    name,
    type,
    buffer: buf,
    offset,
    size,
  });
  assert.match(
    bindingConflict([at("a", "storage", 0, 512), at("b", "storage", 256, 512)])!,
    /^bindings 'a' and 'b' share the buffer "x": two writable bindings of overlapping byte ranges \[0, 512\) and \[256, 768\)$/,
  );
  assert.equal(
    bindingConflict([at("a", "storage", 0, 256), at("b", "storage", 256, 256)]),
    undefined,
  );
  // a written buffer bound read-only too: refused whatever the ranges (one usage scope)
  assert.match(
    bindingConflict([at("a", "read-only-storage", 0, 256), at("b", "storage", 512, 256)])!,
    /'a' and 'b' .*one writable, the other read-only/,
  );
  assert.match(
    bindingConflict([at("u", "uniform", 0, 16), at("b", "storage", 512, 256)])!,
    /one writable/,
  );
  assert.equal(
    bindingConflict([at("a", "read-only-storage", 0, 512), at("b", "read-only-storage", 0, 512)]),
    undefined,
  );
  assert.equal(
    bindingConflict([at("a", "storage", 0, 512), { ...at("b", "storage", 0, 512), buffer: other }]),
    undefined,
  );
});

Deno.test({
  name: "context: a bind group aliasing a writable buffer is refused, disjoint ranges accepted",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const p = await ctx.pipeline(TWO_WRITERS, "two writers");
    const align = Math.max(256, ctx.device.limits.minStorageBufferOffsetAlignment);
    const buf = ctx.createBuffer({ size: 2 * align, role: "workspace", label: "shared" });
    // the same buffer in both writable bindings: refused before WebGPU sees it (wgpu would not)
    assert.throws(
      () => ctx.bindGroup(p, [buf, buf], ""),
      gpuError(
        "validation",
        /^two writers: bindings 'a' and 'b' share the buffer "shared": two writable bindings of overlapping byte ranges/,
      ),
    );
    assert.throws(
      () =>
        ctx.bindGroup(p, [{ buffer: buf, offset: 0, size: align + 4 }, {
          buffer: buf,
          offset: align,
          size: align,
        }], ""),
      gpuError("validation", /overlapping byte ranges \[0, \d+\) and \[\d+, \d+\)/),
    );
    // disjoint halves of one buffer: allowed, and each binding sees its own range
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      const bg = rec.bindGroup(p, [{ buffer: buf, offset: 0, size: align }, {
        buffer: buf,
        offset: align,
        size: align,
      }]);
      rec.pass("disjoint halves", (pass) => pass.dispatch(p, bg, align / 4 / 64));
      await rec.finish();
    });
    const t = createTensor(ctx, {
      dtype: "f32",
      rows: 2 * align / 4,
      cols: 1,
      role: "workspace",
      label: "view",
    });
    const enc = ctx.device.createCommandEncoder();
    enc.copyBufferToBuffer(buf.buffer, 0, t.shards[0].buffer.buffer, 0, 2 * align);
    ctx.device.queue.submit([enc.finish()]);
    const got = await download(ctx, t);
    const n = align / 4;
    assert.equal(got[3], 3);
    assert.equal(got[n + 3], -3);
    assert.equal(got[2 * n - 1], -(n - 1));
    t.destroy();
    buf.destroy();
  },
});

Deno.test("context: an adapter described by its driver is named by its device", () => {
  assert.equal(
    adapterName({ description: "NVIDIA: 580.159.04 580.159.4.0", device: "nvidia-h100-80gb-hbm3" }),
    "nvidia-h100-80gb-hbm3",
  );
  assert.equal(
    adapterName({ description: "NVIDIA H100 80GB HBM3", device: "0x2330" }),
    "NVIDIA H100 80GB HBM3",
  );
  assert.equal(adapterName({ description: "", device: "" }), "(no description)");
});
