/**
 * `deno run -A scripts/bench_fused_backward.ts [--fixture cce|llm] [--n N --v V --d D]
 * [--dtype bf16|f16|f32] [--beta B] [--reps R] [--warmup W] [--configs a,b,…]
 * [--adapter auto|software|hardware] [--webgpu deno|dawn|dawn-unchecked]`: the fused
 * backward's configurations side by side, with the per-pass breakdown (GPU ms from timestamp
 * queries, median over R reps after W warm-ups; each rep's forward runs untimed before it), the
 * kept tiles and the peak bytes above the inputs and the forward's state. On a hardware adapter
 * each configuration starts after measure/measure.ts's full load (IDLE_GPU_BUSY_MS), as a table's
 * cells do: compiling it idles the GPU, whose clock then drops. The configurations (`--configs`,
 * default all named ones): tuning/fused_backward_configs.ts.
 *
 * Defaults: the paper's shape (8192 × 256000 × 2304, bf16, β 0.1, cce) on a hardware adapter,
 * 512 × 8192 × 256 on a software one.
 * @module
 */
import { ADAPTER_FLAG, defineCommand, parseList, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { InputError } from "../core/errors.ts";
import { type Dtype, parseDtype, resolveOptions } from "../core/options.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine } from "../gpu/engine.ts";
import { Recorder } from "../gpu/recorder.ts";
import { makeDeviceInputs } from "../measure/inputs.ts";
import { passMedians, timeMode, timeRepetitions } from "../measure/timing.ts";
import { IDLE_GPU_BUSY_MS } from "../measure/measure.ts";
import { type BusyLoad, prepareBusyLoad } from "../gpu/busy_load.ts";
import { uploadGradOut } from "../methods/run.ts";
import { fusedMethod } from "../methods/fused.ts";
import type { LceMethod, PreparedMethod } from "../methods/types.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import { BENCH_BASE, BENCH_CONFIGS, benchConfig } from "../tuning/fused_backward_configs.ts";

/** The command line of the fused backward's configuration bench. */
export const BENCH_FUSED_BACKWARD_COMMAND = defineCommand({
  name: "deno run -A scripts/bench_fused_backward.ts",
  summary: "Times the fused backward's configurations (order, dE splits and row slices) pass by " +
    "pass by GPU timestamps, at one shape (default the paper's on hardware, 512×8192×256 on a " +
    "software adapter).",
  flags: {
    fixture: { type: "string", arg: "NAME", help: "data fixture", default: "cce" },
    n: { type: "int", min: 1, help: "tokens", defaultText: "8192 (512 on software)" },
    v: { type: "int", min: 1, help: "vocabulary", defaultText: "256000 (8192 on software)" },
    d: { type: "int", min: 1, help: "hidden size", defaultText: "2304 (256 on software)" },
    dtype: { type: "string", arg: "bf16|f16|f32", help: "input dtype", default: "bf16" },
    beta: { type: "number", min: 0, max: 1, help: "label smoothing β", default: 0.1 },
    reps: { type: "int", min: 1, help: "timed repetitions", default: 3 },
    warmup: { type: "int", min: 0, help: "warm-up repetitions", default: 1 },
    configs: {
      type: "string",
      arg: "C1,C2,...",
      help: `configurations, of ${Object.keys(BENCH_CONFIGS).join(", ")} or s<S>r<R>`,
      defaultText: "all named ones",
    },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
  },
});

/** Times one configuration's backward and prints its passes. */
async function _benchOne(
  ctx: GpuContext,
  name: string,
  x: {
    spec: { n: number; v: number; d: number; dtype: Dtype };
    opts: ReturnType<typeof resolveOptions>;
    inputs: Awaited<ReturnType<typeof makeDeviceInputs>>["inputs"];
    gradOut: DeviceTensor;
    reps: number;
    warmup: number;
    /** The full load, after the compilations and before the first repetition. */
    warm: () => Promise<void>;
  },
): Promise<void> {
  const cfg = benchConfig(name)!(ctx);
  const m: LceMethod = fusedMethod({ ...BENCH_BASE, ...cfg.variant, name }, cfg.kernels);
  const p: PreparedMethod = await m.prepare(ctx, x.spec, x.opts);
  await x.warm();
  let peak = 0;
  const r = await timeRepetitions({ warmup: x.warmup, reps: x.reps }, async () => {
    const frec = new Recorder(ctx);
    const f = await p.forward(frec, x.inputs);
    await frec.finish();
    ctx.resetPeak();
    const live = ctx.memory().liveBytes;
    try {
      return await timeMode(ctx, {
        mode: "bwd",
        prepared: p,
        inputs: x.inputs,
        gradOut: x.gradOut,
        fwd: f,
        afterFinish: () => {
          peak = Math.max(peak, ctx.memory().peakBytes - live);
        },
      });
    } finally {
      f.loss.destroy();
      p.dispose(f.saved);
    }
  });
  const st = await p.stats?.();
  p.release?.();
  const kept = st && "tilesTotal" in st
    ? `kept ${(st.tilesTotal as number) - (st.tilesSkipped as number)} of ${st.tilesTotal} tiles${
      st.sortSkipped === undefined ? "" : st.sortSkipped ? ", sort skipped" : ", sort ran"
    }`
    : "";
  console.log(
    `\n${name}: bwd ${r.median.toFixed(2)} ms, ${(peak / 2 ** 20).toFixed(1)} MiB, ${kept}`,
  );
  const rows = Object.entries(passMedians(r.passes)).sort((a, b) => b[1] - a[1]);
  for (const [k, ms] of rows) if (ms >= 0.05) console.log(`  ${ms.toFixed(2).padStart(9)}  ${k}`);
}

async function main() {
  const parsed = BENCH_FUSED_BACKWARD_COMMAND.parse(Deno.args);
  if (!parsed) return;
  const values = parsed.values;
  const dtype: Dtype = parseDtype(values.dtype);
  const opts = resolveOptions({ beta: values.beta });
  const { reps, warmup } = values;
  const names = values.configs
    ? parseList("--configs", values.configs)
    : Object.keys(BENCH_CONFIGS);
  for (const n of names) {
    if (!benchConfig(n)) {
      throw new InputError(
        `--configs: unknown config '${n}' (${
          Object.keys(BENCH_CONFIGS).join(", ")
        }, s<S>r<R>, g<BN>k<BK>t<TM>x<TN>…, bt<TPT>x<VPT>k<BK>w<W>[-kgwide])`,
      );
    }
  }
  const ctx = await GpuContext.create({
    adapter: values.adapter as AdapterChoice,
    engine: values.webgpu as Engine,
  });
  try {
    const soft = ctx.report.isFallbackAdapter;
    const shape = {
      n: values.n ?? (soft ? 512 : 8192),
      v: values.v ?? (soft ? 8192 : 256000),
      d: values.d ?? (soft ? 256 : 2304),
    };
    console.log(
      `${ctx.report.description} (${
        deviceSummary(ctx.report)
      }): fused backward, ${values.fixture} ${shape.n}×${shape.v}×${shape.d} ` +
        `${dtype}, β ${opts.beta}, median of ${reps} after ${warmup}`,
    );
    const di = await makeDeviceInputs(ctx, { ...shape, dtype, fixture: values.fixture });
    const gradOut = uploadGradOut(ctx, shape.n, opts, 1);
    const spec = { ...shape, dtype };
    let busy: BusyLoad | undefined;
    const warm = async () => {
      if (!soft) await (busy ??= await prepareBusyLoad(ctx)).run(IDLE_GPU_BUSY_MS);
    };
    for (const name of names) {
      try {
        await _benchOne(ctx, name, { spec, opts, inputs: di.inputs, gradOut, reps, warmup, warm });
      } catch (e) {
        console.log(`\n${name}: failed: ${(e as Error).message}`);
      }
    }
    gradOut.destroy();
    di.destroy();
  } finally {
    ctx.destroy();
  }
}

if (import.meta.main) await runCli(main);
