/**
 * `deno bench` (or `./dev task bench`): one Deno.bench group per shape and mode (fwd, bwd,
 * fwd+bwd), every method in METHODS, the materialised baseline marked `baseline: true` (so
 * Deno's summary says how many times faster or slower than it each method is), on whatever
 * adapter opens. Each sample is one call from recording to GPU completion (`b.start()`/`b.end()`
 * around recording, submission and the wait), so it is wall time including WebGPU's submission
 * overhead; for GPU time from timestamp queries run `./dev task bench-gpu` (bench/gpu_time.ts).
 * Kernels are compiled and inputs uploaded before any sample; the forward a backward needs runs
 * outside the timed part. Shape: LCE_BENCH_SHAPE=ci (default, 128×2048×64) | paper | n,v,d;
 * LCE_BENCH_DTYPE, LCE_BENCH_BETA. Run without permissions (a plain `deno bench`), the variables
 * cannot be read: the defaults are used, and a line says so.
 * @module
 */
import { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { parseDtype, resolveOptions } from "../core/options.ts";
import { parseNumberValue } from "../core/cli.ts";
import { METHODS } from "../methods/mod.ts";
import type { PreparedMethod, ProblemSpec } from "../methods/types.ts";
import { uploadGradOut } from "../methods/run.ts";
import { makeDeviceInputs } from "../measure/inputs.ts";
import { defaultMemoryBudget } from "../measure/measure.ts";
import { benchShape } from "./gpu_time.ts";

/** A variable of the environment, or undefined where env access is not granted. */
function _env(name: string): string | undefined {
  if (Deno.permissions.querySync({ name: "env", variable: name }).state !== "granted") {
    return undefined;
  }
  return Deno.env.get(name);
}

if (Deno.permissions.querySync({ name: "env" }).state !== "granted") {
  console.error(
    "lce_bench: no env access, so LCE_BENCH_SHAPE, LCE_BENCH_DTYPE and LCE_BENCH_BETA are not " +
      "read (defaults: ci, bf16, 0.1); ./dev task bench runs with them",
  );
}
const shape = benchShape(_env("LCE_BENCH_SHAPE"));
const dtype = parseDtype(_env("LCE_BENCH_DTYPE") ?? "bf16");
const opts = resolveOptions({
  beta: parseNumberValue("LCE_BENCH_BETA", _env("LCE_BENCH_BETA") ?? "0.1"),
});
const ctx = await GpuContext.create();
const spec: ProblemSpec = { ...shape, dtype };
const x = await makeDeviceInputs(ctx, { fixture: "cce", ...shape, dtype });
const gradOut = uploadGradOut(ctx, shape.n, opts);
const budget = defaultMemoryBudget(ctx);

for (const method of METHODS) {
  const est = method.estimateBytes?.(spec, opts);
  const bytes = typeof est === "number" ? est : est ? Math.max(...Object.values(est)) : 0;
  const ignore = method.unsupported?.(ctx, spec, opts) !== undefined || bytes > budget;
  let prepared: PreparedMethod | undefined;
  const prep = async () => prepared ??= await method.prepare(ctx, spec, opts);
  for (const mode of ["fwd", "bwd", "fwd+bwd"] as const) {
    Deno.bench({
      name: method.name,
      group: `${shape.n}x${shape.v}x${shape.d} ${dtype} β=${opts.beta} ${mode}`,
      baseline: method.name === "baseline",
      ignore,
      permissions: "inherit",
      async fn(b) {
        const p = await prep();
        await ctx.scoped(async () => {
          let saved;
          if (mode === "bwd") {
            const r0 = new Recorder(ctx);
            saved = await p.forward(r0, x.inputs);
            await r0.finish();
          }
          b.start();
          const rec = new Recorder(ctx);
          const f = saved ?? await p.forward(rec, x.inputs);
          const g = mode === "fwd" ? undefined : await p.backward(rec, x.inputs, f.saved, gradOut);
          await rec.finish();
          b.end();
          g?.dE.destroy(); // destroy() is idempotent: gradients handed over from saved state are safe
          g?.dC.destroy();
          p.dispose(f.saved);
          f.loss.destroy();
        });
      },
    });
  }
}
