/**
 * `deno bench -A bench/`: one Deno.bench group per shape and mode (fwd, bwd, fwd+bwd), every method
 * in METHODS, the materialised baseline marked `baseline: true`, on whatever adapter opens.
 * Each sample is one call from recording to GPU completion (`b.start()`/`b.end()` around recording,
 * submission and the wait), so it is wall time including WebGPU's submission overhead; for GPU time
 * from timestamp queries run `deno task bench` (bench/gpu_time.ts). Kernels are compiled and inputs
 * uploaded before any sample; the forward a backward needs runs outside the timed part.
 * Shape: LCE_BENCH_SHAPE=ci (default, 128×2048×64) | paper | n,v,d; LCE_BENCH_DTYPE, LCE_BENCH_BETA.
 * Your own methods join with `deno bench -A bench/ -- --method-module PATH` (repeatable; see
 * docs/harness.md).
 * @module
 */
import { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { parseDtype, resolveOptions } from "../core/options.ts";
import { benchMethods } from "./bench_args.ts";
import type { PreparedMethod, ProblemSpec } from "../methods/types.ts";
import { uploadGradOut } from "../methods/run.ts";
import { makeDeviceInputs } from "../measure/inputs.ts";
import { defaultMemoryBudget } from "../measure/measure.ts";
import { benchShape } from "./gpu_time.ts";

const shape = benchShape(Deno.env.get("LCE_BENCH_SHAPE"));
const dtype = parseDtype(Deno.env.get("LCE_BENCH_DTYPE") ?? "bf16");
const opts = resolveOptions({ beta: Number(Deno.env.get("LCE_BENCH_BETA") ?? "0.1") });
const ctx = await GpuContext.create();
const spec: ProblemSpec = { ...shape, dtype };
const x = await makeDeviceInputs(ctx, { fixture: "cce", ...shape, dtype });
const gradOut = uploadGradOut(ctx, shape.n, opts);
const budget = defaultMemoryBudget(ctx);

for (const method of await benchMethods()) {
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
