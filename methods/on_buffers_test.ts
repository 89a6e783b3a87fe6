import assert from "node:assert/strict";
import { GPU_TEST, randomArray } from "../testing/gpu.ts";
import { adapterFromEnv, GpuContext } from "../gpu/context.ts";
import { engineFromEnv, loadEngine } from "../gpu/engine.ts";
import { InputError } from "../core/errors.ts";
import { type HostInputs, resolveOptions } from "../core/options.ts";
import { assertClose, lceReference } from "../reference/lce_reference.ts";
import { methodByName } from "./mod.ts";
import { LceOnBuffers, lceOnBuffers } from "./on_buffers.ts";

/** A device as a program would open it: the adapter's limits, shader-f16 where there is. */
async function _programDevice(): Promise<{ adapter: GPUAdapter; device: GPUDevice }> {
  const { gpu } = await loadEngine(engineFromEnv());
  const adapter = await gpu.requestAdapter({
    forceFallbackAdapter: adapterFromEnv() === "software",
  });
  assert.ok(adapter, "an adapter");
  const requiredLimits: Record<string, number> = {};
  for (const k in adapter.limits) {
    const x = (adapter.limits as unknown as Record<string, number>)[k];
    if (typeof x === "number") requiredLimits[k] = x;
  }
  const f16 = adapter.features.has("shader-f16") ? ["shader-f16" as GPUFeatureName] : [];
  return {
    adapter,
    device: await adapter.requestDevice({ requiredLimits, requiredFeatures: f16 }),
  };
}

/** The program's own SGD step: p[i] −= lr·g[i] for i in [start, start + count). */
const SGD_WGSL = `struct P { start: u32, count: u32, lr: f32, _a: u32 };
@group(0) @binding(0) var<uniform> u: P;
@group(0) @binding(1) var<storage, read_write> params: array<f32>;
@group(0) @binding(2) var<storage, read> grads: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x < u.count) { let i = u.start + gid.x; params[i] = params[i] - u.lr * grads[i]; }
}`;

async function _read(device: GPUDevice, b: GPUBuffer, offset: number, count: number) {
  const staging = device.createBuffer({
    size: count * 4,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(b, offset, staging, 0, count * 4);
  device.queue.submit([enc.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = new Float32Array(staging.getMappedRange().slice(0));
  staging.unmap();
  staging.destroy();
  return out;
}

const align = (x: number) => Math.ceil(x / 256) * 256;

Deno.test({
  name: "on buffers: a program trains a linear softmax classifier on its own buffers; every step " +
    "matches float64",
  ...GPU_TEST,
  async fn() {
    const { adapter, device } = await _programDevice();
    const ctx = GpuContext.fromDevice(device, { adapter });
    const n = 24, v = 37, d = 13, lr = 0.5, steps = 6;
    const o = resolveOptions({ beta: 0.1, reduction: "mean" });
    const e0 = new Float32Array(randomArray(n * d, 11, 0.6));
    const c0 = new Float32Array(randomArray(v * d, 12, 0.6));
    const targets = Int32Array.from({ length: n }, (_, i) => (i % 7 === 3 ? -100 : (i * 5) % v));
    // one buffer of parameters (E, then C at an aligned offset) and one of gradients alike
    const cOff = align(n * d * 4), bytes = cOff + align(v * d * 4);
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    const params = device.createBuffer({ size: bytes, usage });
    device.queue.writeBuffer(params, 0, e0);
    device.queue.writeBuffer(params, cOff, c0);
    const grads = device.createBuffer({ size: bytes, usage });
    const sentinel = new Float32Array((cOff - n * d * 4) / 4).fill(123.5);
    device.queue.writeBuffer(grads, n * d * 4, sentinel); // between dE and dC: never written
    const tg = device.createBuffer({ size: align(n * 4), usage });
    device.queue.writeBuffer(tg, 0, targets);
    const lossBuf = device.createBuffer({ size: 256, usage });
    device.queue.writeBuffer(lossBuf, 0, new Float32Array(64).fill(-7));
    const module = device.createShaderModule({ code: SGD_WGSL });
    const sgd = device.createComputePipeline({ layout: "auto", compute: { module } });
    const step = (start: number, count: number) => {
      const u = device.createBuffer({
        size: 16,
        usage: GPUBufferUsage.UNIFORM,
        mappedAtCreation: true,
      });
      const words = new Uint32Array([start, count, 0, 0]);
      new Float32Array(words.buffer)[2] = lr;
      new Uint32Array(u.getMappedRange()).set(words);
      u.unmap();
      const bg = device.createBindGroup({
        layout: sgd.getBindGroupLayout(0),
        entries: [u, params, grads].map((buffer, binding) => ({ binding, resource: { buffer } })),
      });
      const enc = device.createCommandEncoder();
      const p = enc.beginComputePass();
      p.setPipeline(sgd);
      p.setBindGroup(0, bg);
      p.dispatchWorkgroups(Math.ceil(count / 64));
      p.end();
      device.queue.submit([enc.finish()]);
    };
    const fused = await LceOnBuffers.prepare(
      ctx,
      methodByName("fused"),
      { n, v, d, dtype: "f32" },
      o,
    );
    // the float64 trajectory of the same SGD
    const e64 = Float64Array.from(e0), c64 = Float64Array.from(c0);
    const losses: number[] = [];
    for (let s = 0; s < steps; s++) {
      await fused.run({
        e: { buffer: params },
        c: { buffer: params, offset: cOff },
        targets: { buffer: tg },
        loss: { buffer: lossBuf },
        dE: { buffer: grads },
        dC: { buffer: grads, offset: cOff },
      });
      const e = await _read(device, params, 0, n * d), c = await _read(device, params, cOff, v * d);
      const x: HostInputs = { n, v, d, e, c, targets };
      const want = lceReference(x, o, 1);
      const loss = await _read(device, lossBuf, 0, 2);
      assert.equal(loss[1], -7, "the loss buffer past the loss is untouched");
      const dE = await _read(device, grads, 0, n * d), dC = await _read(device, grads, cOff, v * d);
      const tol = (a: Float64Array) => ({ atol: 2e-5 * Math.max(...a.map(Math.abs)), rtol: 2e-4 });
      assertClose(loss.subarray(0, 1), want.loss, { ...tol(want.loss), name: `loss, step ${s}` });
      assertClose(dE, want.dE, { ...tol(want.dE), name: `dE, step ${s}`, cols: d });
      assertClose(dC, want.dC, { ...tol(want.dC), name: `dC, step ${s}`, cols: d });
      // the GPU's parameters follow float64 SGD from the same start
      assertClose(e, e64, { atol: 1e-5, rtol: 1e-5, name: `E, step ${s}`, cols: d });
      assertClose(c, c64, { atol: 1e-5, rtol: 1e-5, name: `C, step ${s}`, cols: d });
      const g64 = _float64Grads(e64, c64, targets, { n, v, d }, o);
      for (let i = 0; i < e64.length; i++) e64[i] -= lr * g64.dE[i];
      for (let i = 0; i < c64.length; i++) c64[i] -= lr * g64.dC[i];
      losses.push(loss[0]);
      step(0, n * d);
      step(cOff / 4, v * d);
    }
    assert.ok(losses[steps - 1] < losses[0] - 0.1, `the loss falls: ${losses.join(", ")}`);
    assert.deepEqual(await _read(device, grads, n * d * 4, sentinel.length), sentinel);
    fused.release();
    ctx.destroy();
    assert.ok((await _read(device, lossBuf, 0, 1)).length === 1, "the program's device stays open");
    device.destroy();
  },
});

/** Float64 gradients at float64 parameters (lceReference's arithmetic, on wider inputs). */
function _float64Grads(
  e: Float64Array,
  c: Float64Array,
  targets: Int32Array,
  s: { n: number; v: number; d: number },
  o: ReturnType<typeof resolveOptions>,
) {
  const { n, v, d } = s;
  const dE = new Float64Array(n * d), dC = new Float64Array(v * d);
  let count = 0;
  for (const t of targets) if (t !== o.ignoreIndex) count++;
  const z = new Float64Array(v);
  for (let i = 0; i < n; i++) {
    const t = targets[i];
    if (t === o.ignoreIndex) continue;
    let m = -Infinity;
    for (let j = 0; j < v; j++) {
      let acc = 0;
      for (let k = 0; k < d; k++) acc += e[i * d + k] * c[j * d + k];
      z[j] = acc;
      m = Math.max(m, acc);
    }
    let sum = 0;
    for (let j = 0; j < v; j++) sum += Math.exp(z[j] - m);
    for (let j = 0; j < v; j++) {
      const g = (Math.exp(z[j] - m) / sum - (j === t ? 1 - o.beta : 0) - o.beta / v) / count;
      for (let k = 0; k < d; k++) {
        dE[i * d + k] += g * c[j * d + k];
        dC[j * d + k] += g * e[i * d + k];
      }
    }
  }
  return { dE, dC };
}

Deno.test({
  name: "on buffers: bad usage, size, offset or shape is refused with one line, nothing written",
  ...GPU_TEST,
  async fn() {
    const { adapter, device } = await _programDevice();
    const ctx = GpuContext.fromDevice(device, { adapter });
    const n = 5, v = 7, d = 3;
    const o = resolveOptions({});
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    const buf = (size: number, u = usage) => device.createBuffer({ size, usage: u });
    const e = buf(256), c = buf(256), tg = buf(256), out = buf(256);
    device.queue.writeBuffer(tg, 0, Int32Array.of(0, 1, 2, 3, 4));
    device.queue.writeBuffer(out, 0, new Float32Array(64).fill(9));
    const m = methodByName("fused");
    const good = {
      e: { buffer: e },
      c: { buffer: c },
      targets: { buffer: tg },
      dE: { buffer: out },
    };
    const spec = { n, v, d, dtype: "f32" as const };
    const cases: [string, Parameters<typeof lceOnBuffers>[3], RegExp][] = [
      [
        "no STORAGE",
        { ...good, c: { buffer: buf(256, GPUBufferUsage.COPY_DST) } },
        /C: the buffer lacks STORAGE usage/,
      ],
      [
        "too small",
        { ...good, c: { buffer: buf(64) } },
        /C: 7×3 f32 needs bytes \[0, 96\) .* the buffer has 64/,
      ],
      [
        "misaligned",
        { ...good, e: { buffer: e, offset: 4 } },
        /E: offset 4 is not a multiple of the device's minStorageBufferOffsetAlignment/,
      ],
      [
        "offset past the end",
        { ...good, dE: { buffer: out, offset: 256 } },
        /dE: .* the buffer has 256/,
      ],
      [
        "bad output dtype",
        { ...good, dE: { buffer: out, dtype: "f64" as "f32" } },
        /unknown dtype 'f64'/,
      ],
      [
        "not a buffer",
        { ...good, targets: { buffer: {} as GPUBuffer } },
        /targets: not a GPUBuffer/,
      ],
      [
        "upstream gradient",
        { ...good, gradOut: [1, 2] },
        /upstream gradient has 2 values, expected 1/,
      ],
    ];
    for (const [what, b, re] of cases) {
      const err = await lceOnBuffers(ctx, m, spec, b, o).then(() => undefined, (x) => x);
      assert.ok(err instanceof InputError, `${what}: ${err}`);
      assert.match(err.message, re, what);
      assert.ok(!err.message.includes("\n"), `${what}: one line`);
    }
    await assert.rejects(lceOnBuffers(ctx, m, { ...spec, n: 0 }, good, o), /n must be a positive/);
    assert.deepEqual(
      await _read(device, out, 0, 64),
      new Float32Array(64).fill(9),
      "nothing written",
    );
    // and the same call with good buffers does write
    await lceOnBuffers(ctx, m, spec, good, o);
    assert.notDeepEqual(await _read(device, out, 0, 15), new Float32Array(15).fill(9));
    assert.deepEqual(await _read(device, out, 60, 4), new Float32Array(4).fill(9), "past dE: kept");
    ctx.destroy();
    device.destroy();
  },
});
