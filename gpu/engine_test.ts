import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import { WEBGPU_FLAG } from "../core/cli.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import {
  captureStderr,
  DAWN_INSTANCE_TOGGLES,
  DAWN_NOTICE,
  DAWN_PACKAGE,
  DAWN_UNCHECKED_TOGGLE,
  dawnToggles,
  deviceSummary,
  engineFromEnv,
  engineName,
  ENGINES,
  isDawn,
  parseEngine,
} from "./engine.ts";
import { Recorder } from "./recorder.ts";

Deno.test("engine: parseEngine and LCE_WEBGPU accept deno, dawn and dawn-unchecked, and name the choices otherwise", () => {
  assert.equal(parseEngine("deno"), "deno");
  assert.equal(parseEngine("dawn"), "dawn");
  assert.equal(parseEngine("dawn-unchecked"), "dawn-unchecked");
  assert.throws(() => parseEngine("wgpu"), (e: unknown) => {
    assert.ok(e instanceof InputError);
    assert.equal(e.message, "--webgpu must be deno, dawn or dawn-unchecked, got 'wgpu'");
    return true;
  });
  const old = Deno.env.get("LCE_WEBGPU");
  try {
    Deno.env.set("LCE_WEBGPU", "");
    assert.equal(engineFromEnv(), "deno");
    Deno.env.set("LCE_WEBGPU", "dawn");
    assert.equal(engineFromEnv(), "dawn");
    Deno.env.set("LCE_WEBGPU", "chrome");
    assert.throws(
      () => engineFromEnv(),
      /^InputError: LCE_WEBGPU must be deno, dawn or dawn-unchecked/,
    );
  } finally {
    if (old === undefined) Deno.env.delete("LCE_WEBGPU");
    else Deno.env.set("LCE_WEBGPU", old);
  }
});

Deno.test("engine: deviceSummary names the engine and each kernel feature the device had or lacked", () => {
  assert.equal(
    deviceSummary({
      engine: "dawn",
      engineVersion: `Dawn (${DAWN_PACKAGE})`,
      features: ["core-features-and-limits", "shader-f16", "subgroups", "timestamp-query"].concat(
        "chromium-experimental-subgroup-matrix",
      ),
      subgroupMatrixConfigs: [
        { componentType: "f16", resultComponentType: "f32", M: 16, N: 16, K: 16 },
        { componentType: "f16", resultComponentType: "f32", M: 16, N: 16, K: 16 },
      ],
    }),
    `Dawn (${DAWN_PACKAGE}); shader-f16, subgroups, subgroup-matrix (f16→f32 16×16×16), ` +
      "timestamp-query",
  );
  // a report written before the engine fields existed was measured on wgpu
  assert.equal(
    deviceSummary({ features: ["timestamp-query"] }),
    "wgpu; timestamp-query; no shader-f16, no subgroups, no subgroup-matrix",
  );
  assert.equal(engineName(undefined), "wgpu");
  assert.equal(engineName("dawn"), "Dawn");
  assert.equal(engineName("dawn-unchecked"), "Dawn, robustness off");
});

Deno.test("engine: Dawn's limit notices are recognised exactly, nothing else is", () => {
  for (const kind of ["Uniform", "Storage"]) {
    assert.match(
      `Warning: maxDynamic${kind}BuffersPerPipelineLayout artificially reduced from 1000000 to 16 ` +
        "to fit dynamic offset allocation limit.",
      DAWN_NOTICE,
    );
  }
  assert.doesNotMatch("Warning: vkCreateInstance: Found no drivers!", DAWN_NOTICE);
  assert.doesNotMatch(
    "Warning: maxDynamicUniformBuffersPerPipelineLayout artificially reduced from 8 to 4 because",
    DAWN_NOTICE,
  );
});

Deno.test({
  name: "engine: captureStderr returns what native code wrote to descriptor 2, which the " +
    "terminal never sees",
  ignore: Deno.build.os !== "linux", // the descriptor is redirected through glibc only
  fn() {
    const libc = Deno.dlopen(
      "libc.so.6",
      {
        write: { parameters: ["i32", "buffer", "usize"], result: "isize" },
      } as const,
    );
    try {
      const text = new TextEncoder().encode("first line\nsecond line\n");
      const { value, lines } = captureStderr(() => {
        libc.symbols.write(2, text, BigInt(text.byteLength));
        return 42;
      });
      assert.equal(value, 42);
      assert.deepEqual(lines, ["first line", "second line"]);
      assert.deepEqual(captureStderr(() => 0).lines, []);
    } finally {
      libc.close();
    }
  },
});

Deno.test({
  name: "engine: the test context runs on LCE_WEBGPU's engine; a software adapter has shader-f16 " +
    "and timestamps on either engine, so every f16 parity case runs on both",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    assert.equal(ctx.engine, engineFromEnv());
    assert.equal(ctx.report.engine, ctx.engine);
    assert.match(
      ctx.report.engineVersion,
      {
        deno: /^wgpu/,
        dawn: /^Dawn \(npm:webgpu@[^,]*\)$/,
        "dawn-unchecked": /, robustness off\)$/,
      }[
        ctx.engine
      ],
    );
    if (ctx.report.isFallbackAdapter) {
      assert.ok(ctx.hasF16, `${ctx.engine}: no shader-f16 (${ctx.report.features})`);
      assert.ok(ctx.hasTimestamps, `${ctx.engine}: no timestamp-query`);
    }
  },
});

Deno.test({
  name: "engine: pass timestamps are not quantised (Dawn's timestamp_quantization is off)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    if (!ctx.hasTimestamps) return; // wall time only: nothing quantised
    const p = await ctx.pipeline(
      `@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  var x = a[g.x];
  for (var i = 0u; i < 2000u; i++) { x = x * 0.999 + 1.0; }
  a[g.x] = x;
}`,
      "engine timestamps",
    );
    const buf = ctx.createBuffer({ size: 64 * 64 * 4, role: "workspace", label: "a" });
    const t = await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      const bg = rec.bindGroup(p, [buf]);
      for (let i = 0; i < 24; i++) rec.pass(`pass ${i}`, (q) => q.dispatch(p, bg, 1 + (i % 4)));
      return await rec.finish();
    });
    buf.destroy();
    // Dawn's quantisation masks the low 16 bits of every nanosecond timestamp
    const quantum = 65536 / 1e6;
    const off = t.passes.filter((q) => {
      const k = q.gpuMs / quantum;
      return Math.abs(k - Math.round(k)) > 1e-3;
    });
    assert.ok(off.length >= t.passes.length / 2, `${off.length} of ${t.passes.length} off-grid`);
  },
});

Deno.test("engine: dawn-unchecked adds disable_robustness to the one enable entry of Dawn's toggles", () => {
  assert.deepEqual(dawnToggles("dawn"), [...DAWN_INSTANCE_TOGGLES]);
  const t = dawnToggles("dawn-unchecked");
  assert.equal(t.filter((x) => x.startsWith("enable-dawn-features=")).length, 1);
  assert.equal(t[0], `${DAWN_INSTANCE_TOGGLES[0]},${DAWN_UNCHECKED_TOGGLE}`);
  assert.deepEqual(t.slice(1), DAWN_INSTANCE_TOGGLES.slice(1));
  assert.ok(!DAWN_INSTANCE_TOGGLES.join(",").includes(DAWN_UNCHECKED_TOGGLE));
  assert.ok(isDawn("dawn") && isDawn("dawn-unchecked") && !isDawn("deno") && !isDawn(undefined));
});

Deno.test("engine: the --webgpu flag offers exactly the engines, in their order", () => {
  assert.deepEqual([...WEBGPU_FLAG.choices], [...ENGINES]);
});
