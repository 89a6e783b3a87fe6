/**
 * `./dev task gpu-smoke [--n N --v V --d D --dtype bf16] [--adapter …] [--webgpu deno|dawn|dawn-unchecked]`: a
 * quick health check of a GPU host: prints the adapter and its f32 FMA peak through WGSL (gpu/busy_load.ts's
 * register-only loop: the ceiling of every kernel here), then times the plain generated matmul (logits = E·Cᵀ into sharded
 * f32) for each GEMM tile, and one baseline forward+backward, at the given shape (default the
 * paper's). Effective TFLOP/s = 2·n·v·d / GPU time.
 * @module
 */
import { ADAPTER_FLAG, defineCommand, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { parseDtype, resolveOptions } from "../core/options.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine } from "../gpu/engine.ts";
import { FMA_LOOP_GROUP_FLOP, prepareBusyLoad } from "../gpu/busy_load.ts";
import { Recorder } from "../gpu/recorder.ts";
import { createTensor, upload } from "../gpu/tensor.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
import { TILE_LARGE, TILE_SMALL } from "../kernels/gemm_codegen.ts";
import { baseline } from "../methods/baseline.ts";
import { uploadGradOut } from "../methods/run.ts";

/** The command line of `gpu-smoke`. */
export const GPU_SMOKE_COMMAND = defineCommand({
  name: "./dev task gpu-smoke",
  summary: "A GPU host health check: the adapter, its f32 FMA peak, the plain matmul per GEMM " +
    "tile, one baseline " +
    "forward+backward at the given shape.",
  flags: {
    n: { type: "int", min: 1, help: "tokens", default: 8192 },
    v: { type: "int", min: 1, help: "vocabulary", default: 256000 },
    d: { type: "int", min: 1, help: "hidden size", default: 2304 },
    dtype: { type: "string", help: "input dtype", default: "bf16", arg: "bf16|f16|f32" },
    reps: { type: "int", min: 1, help: "timed repetitions", default: 3 },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
  },
});

await runCli(async () => {
  const parsed = GPU_SMOKE_COMMAND.parse(Deno.args);
  if (!parsed) return;
  const { n, v, d, reps } = parsed.values;
  const dtype = parseDtype(parsed.values.dtype);
  const ctx = await GpuContext.create({
    adapter: parsed.values.adapter as AdapterChoice,
    engine: parsed.values.webgpu as Engine,
  });
  const r = ctx.report;
  console.log(
    `adapter: ${r.description} (vendor ${r.vendor}, fallback ${r.isFallbackAdapter}); maxBinding ${r.maxBindingBytes}, maxBuffer ${r.limits.maxBufferSize}, wg mem ${r.limits.maxComputeWorkgroupStorageSize}; ${
      deviceSummary(r)
    }`,
  );
  console.log(
    `f32 FMA peak (register-only loop): ${(await _fmaPeakTflops(ctx)).toFixed(1)} TFLOP/s`,
  );
  const e = createTensor(ctx, { dtype, rows: n, cols: d, role: "input", label: "E" });
  const c = createTensor(ctx, { dtype, rows: v, cols: d, role: "input", label: "C" });
  // cheap deterministic data: a short pattern repeated (values only matter for NaN-freedom here)
  const rowE = new Float32Array(d).map((_, i) => Math.sin(i) / Math.sqrt(Math.sqrt(d)));
  const eh = new Float32Array(n * d);
  for (let i = 0; i < n; i++) eh.set(rowE.map((x) => x * Math.cos(i)), i * d);
  upload(ctx, e, eh);
  const ch = new Float32Array(v * d);
  for (let i = 0; i < v; i++) ch.set(rowE.map((x, k) => x * Math.cos(i + k)), i * d);
  upload(ctx, c, ch);
  const targets = createTensor(ctx, { dtype: "i32", rows: n, cols: 1, role: "input", label: "t" });
  upload(ctx, targets, new Int32Array(n).map((_, i) => (i * 7919) % v));
  const flop = 2 * n * v * d;
  for (const tile of [TILE_LARGE, TILE_SMALL]) {
    const mm = await prepareMatmul(ctx, {
      tile,
      aDtype: dtype,
      bDtype: dtype,
      aTrans: false,
      bTrans: false,
    });
    const out = createTensor(ctx, {
      dtype: "f32",
      rows: n,
      cols: v,
      role: "workspace",
      label: "logits",
    });
    const times: number[] = [];
    for (let i = 0; i < reps + 1; i++) {
      await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        mm.record(rec, {
          a: { tensor: e, trans: false },
          b: { tensor: c, trans: false },
          out,
          tile,
        });
        const t = await rec.finish();
        if (i > 0) times.push(t.gpuMs);
      });
    }
    out.destroy();
    const ms = times.sort((a, b) => a - b)[Math.floor(times.length / 2)];
    console.log(
      `matmul ${tile.bm}x${tile.bn}x${tile.bk} ${tile.tm}x${tile.tn}: ${ms.toFixed(2)} ms, ${
        (flop / ms / 1e9).toFixed(2)
      } TFLOP/s (${out.shards.length} logits shards)`,
    );
  }
  const opts = resolveOptions({ beta: 0.1 });
  const prep = await baseline.prepare(ctx, { n, v, d, dtype }, opts);
  const gradOut = uploadGradOut(ctx, n, opts, 1);
  for (let i = 0; i < 2; i++) {
    await ctx.scoped(async () => {
      ctx.resetPeak();
      const live = ctx.memory().liveBytes;
      const rec = new Recorder(ctx);
      const f = await prep.forward(rec, { e, c, targets });
      const g = await prep.backward(rec, { e, c, targets }, f.saved, gradOut);
      const t = await rec.finish();
      const peak = ctx.memory().peakBytes - live;
      console.log(
        `baseline fwd+bwd: ${t.gpuMs.toFixed(1)} ms GPU, ${t.wallMs.toFixed(1)} ms wall, peak ${
          (peak / 2 ** 20).toFixed(0)
        } MiB; passes ${t.passes.map((p) => `${p.label} ${p.gpuMs.toFixed(1)}`).join(", ")}`,
      );
      prep.dispose(f.saved);
      for (const x of [f.loss, g.dE, g.dC]) x.destroy();
    });
  }
});

/** The f32 FMA rate of gpu/busy_load.ts's loop: the median of 5 dispatches after one, TFLOP/s. */
async function _fmaPeakTflops(ctx: GpuContext): Promise<number> {
  // ~1.1 TFLOP a dispatch on a GPU (about 20 ms on an H100); a 128th of it on software adapters
  const groups = ctx.report.isFallbackAdapter ? 32 : 4096;
  const load = await prepareBusyLoad(ctx);
  await load.dispatch(groups);
  const ms: number[] = [];
  for (let i = 0; i < 5; i++) ms.push(await load.dispatch(groups));
  return groups * FMA_LOOP_GROUP_FLOP / ms.sort((a, b) => a - b)[2] / 1e9;
}
