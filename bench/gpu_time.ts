/**
 * GPU-time benchmarks of every method in METHODS: one group per shape and mode (fwd, bwd,
 * fwd+bwd), the baseline row marked, on whatever adapter the context opens (LCE_ADAPTER).
 *
 *     ./dev task bench-gpu                                  # CI-sized shape
 *     ./dev task bench-gpu --shape paper                    # 8192 × 256,000 × 2304
 *     ./dev task bench-gpu --shape 1024,32000,512 --methods fused,baseline --iterations 20
 *
 * Flags (`--help`): --shape, --dtype, --beta, --methods, --modes, --iterations, --warmup,
 * --adapter; each falls back to its environment variable (LCE_BENCH_SHAPE, LCE_BENCH_DTYPE,
 * LCE_BENCH_BETA, LCE_BENCH_METHODS, LCE_BENCH_MODES, LCE_BENCH_ITERATIONS, LCE_BENCH_WARMUP,
 * LCE_ADAPTER) when absent, with the same validation.
 *
 * Why tinybench and not Deno.bench: Deno.bench can only time the host between `b.start()` and
 * `b.end()`, which here would include recording the commands in JS, submitting them and the
 * latency of WebGPU's completion callback — on a fast GPU as long as a small kernel — and it
 * cannot be handed a duration measured elsewhere. tinybench takes each sample from the task
 * (`overriddenDuration`), so every sample is the GPU time of one call read from timestamp
 * queries (wall time only on an adapter without them, which the output says). Kernels are
 * compiled and inputs uploaded outside the samples (`beforeAll`), and the forward that a
 * backward needs runs before each sample (`beforeEach`).
 * @module
 */
import { Bench, type Task } from "tinybench";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { ADAPTER_FLAG, defineCommand, runCli } from "../core/cli.ts";
import { Recorder } from "../gpu/recorder.ts";
import { type Dtype, parseDtype, resolveOptions } from "../core/options.ts";
import { check, oneLine } from "../core/errors.ts";
import { parseMethods } from "../methods/mod.ts";
import type { ForwardOutput, LceMethod, PreparedMethod, ProblemSpec } from "../methods/types.ts";
import { uploadGradOut } from "../methods/run.ts";
import { defaultMemoryBudget, formatMiB } from "../measure/measure.ts";
import {
  defaultTimeSource,
  type Mode,
  parseModes,
  SPEED_RATIO_LEGEND,
  timeMode,
  timeOf,
  timesFaster,
} from "../measure/timing.ts";
import { makeDeviceInputs } from "../measure/inputs.ts";
import { PAPER_SHAPE } from "../measure/table3.ts";

/** The default (CI-sized) shape: a few seconds per group on a software adapter. */
export const CI_SHAPE = { n: 128, v: 2048, d: 64 } as const;

/** The benchmark shape from LCE_BENCH_SHAPE: `ci` (default), `paper`, or `n,v,d`. */
export function benchShape(
  value: string | undefined,
  label = "LCE_BENCH_SHAPE",
): { n: number; v: number; d: number } {
  if (value === undefined || value === "" || value === "ci") return { ...CI_SHAPE };
  if (value === "paper") return { n: PAPER_SHAPE.n, v: PAPER_SHAPE.v, d: PAPER_SHAPE.d };
  const parts = value.split(",");
  check(
    parts.length === 3 && parts.every((x) => /^\d+$/.test(x) && Number(x) >= 1),
    `${label} must be ci, paper or n,v,d with positive integers, got '${value}'`,
  );
  return { n: Number(parts[0]), v: Number(parts[1]), d: Number(parts[2]) };
}

/** The command line of `bench-gpu`. */
export const BENCH_GPU_COMMAND = defineCommand({
  name: "./dev task bench-gpu",
  summary: "GPU-time benchmarks of every method: one group per shape and mode, each sample the " +
    "GPU time of one call (tinybench), the baseline marked.",
  flags: {
    shape: {
      type: "string",
      arg: "ci|paper|n,v,d",
      help: "problem shape",
      default: "ci",
      env: "LCE_BENCH_SHAPE",
    },
    dtype: {
      type: "string",
      arg: "bf16|f16|f32",
      help: "input dtype",
      default: "bf16",
      env: "LCE_BENCH_DTYPE",
    },
    beta: {
      type: "number",
      min: 0,
      max: 1,
      help: "label smoothing",
      default: 0.1,
      env: "LCE_BENCH_BETA",
    },
    methods: {
      type: "string",
      arg: "a,b",
      help: "methods",
      defaultText: "all",
      env: "LCE_BENCH_METHODS",
    },
    modes: {
      type: "string",
      arg: "fwd,bwd,fwd+bwd",
      help: "modes",
      defaultText: "all three",
      env: "LCE_BENCH_MODES",
    },
    iterations: {
      type: "int",
      min: 1,
      help: "samples per task",
      default: 10,
      env: "LCE_BENCH_ITERATIONS",
    },
    warmup: {
      type: "int",
      min: 0,
      help: "warm-up calls per task",
      default: 2,
      env: "LCE_BENCH_WARMUP",
    },
    adapter: ADAPTER_FLAG,
  },
});

interface _State {
  prepared?: PreparedMethod;
  fwd?: ForwardOutput;
}

/** Registers `method` in `bench` for `mode`; every sample is one call's GPU (or wall) time. */
function _addTask(
  bench: Bench,
  ctx: GpuContext,
  method: LceMethod,
  mode: Mode,
  spec: ProblemSpec,
  x: Awaited<ReturnType<typeof makeDeviceInputs>>,
  gradOut: ReturnType<typeof uploadGradOut>,
  opts: ReturnType<typeof resolveOptions>,
): void {
  const s: _State = {};
  const name = method.name === "baseline" ? "baseline (baseline)" : method.name;
  const drop = (f: ForwardOutput | undefined) => {
    if (!f || !s.prepared) return;
    s.prepared.dispose(f.saved);
    f.loss.destroy();
  };
  bench.add(name, async () => {
    const t = await ctx.scoped(() =>
      timeMode(ctx, {
        mode,
        prepared: s.prepared!,
        inputs: x.inputs,
        gradOut,
        fwd: mode === "bwd" ? s.fwd : undefined,
      })
    );
    return { overriddenDuration: timeOf(t, defaultTimeSource(ctx)) };
  }, {
    async beforeAll() {
      if (s.prepared) return;
      const why = method.unsupported?.(ctx, spec, opts);
      if (why !== undefined) throw new Error(`unsupported: ${why}`);
      const est = method.estimateBytes?.(spec, opts);
      const bytes = typeof est === "number" ? est : est?.[mode];
      const budget = defaultMemoryBudget(ctx);
      if (bytes !== undefined && bytes > budget) {
        throw new Error(`OOM: needs ${formatMiB(bytes)} (estimated; budget ${formatMiB(budget)})`);
      }
      s.prepared = await ctx.scoped(() => method.prepare(ctx, spec, opts));
    },
    async beforeEach() {
      if (mode !== "bwd") return;
      s.fwd = await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        const f = await s.prepared!.forward(rec, x.inputs);
        await rec.finish();
        return f;
      });
    },
    afterEach() {
      if (mode === "bwd") drop(s.fwd);
      s.fwd = undefined;
    },
  });
}

/** A speed ratio as `2.31×`, or empty when there is none. */
function _times(x: number | null): string {
  return x === null ? "" : `${x.toFixed(2)}×`;
}

function _fmt(ms: number | undefined): string {
  if (ms === undefined || !Number.isFinite(ms)) return "";
  return ms >= 100 ? ms.toFixed(1) : ms >= 1 ? ms.toFixed(2) : ms.toPrecision(3);
}

/** Prints one group: median, mean ± relative margin of error, min, max, and the baseline ratio. */
function _print(bench: Bench, what: string): void {
  const rows: string[][] = [[
    "method",
    `median ${what} ms`,
    "mean ± rme",
    "min",
    "max",
    "samples",
    "× faster than baseline",
  ]];
  const base = bench.tasks.find((t) => t.name.startsWith("baseline"));
  const med = (t: Task) => t.result.state === "completed" ? t.result.latency.p50 : undefined;
  for (const t of bench.tasks) {
    const r = t.result;
    if (r.state === "errored") {
      rows.push([t.name, `failed: ${oneLine(r.error)}`, "", "", "", "", ""]);
      continue;
    }
    if (r.state !== "completed") {
      rows.push([t.name, r.state, "", "", "", "", ""]);
      continue;
    }
    const l = r.latency;
    const b = base ? med(base) : undefined;
    rows.push([
      t.name,
      _fmt(l.p50),
      `${_fmt(l.mean)} ± ${l.rme.toFixed(1)}%`,
      _fmt(l.min),
      _fmt(l.max),
      String(l.samplesCount),
      _times(timesFaster(b ?? null, l.p50 ?? null)),
    ]);
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  for (const r of rows) {
    console.log(
      r.map((
        c,
        i,
      ) => (i === 0 || c.startsWith("failed") ? c.padEnd(widths[i]) : c.padStart(widths[i])))
        .join("  ").trimEnd(),
    );
  }
}

/** Runs every group (see the module documentation) with the command line `args`. */
export async function runBench(args: string[] = []): Promise<void> {
  const parsed = BENCH_GPU_COMMAND.parse(args);
  if (!parsed) return;
  const f = parsed.values;
  const shape = benchShape(f.shape, "--shape (or LCE_BENCH_SHAPE)");
  const dtype: Dtype = parseDtype(f.dtype);
  const beta = f.beta;
  const opts = resolveOptions({ beta });
  const methods = parseMethods(f.methods);
  const modes = parseModes(f.modes);
  const iterations = f.iterations;
  const warmup = f.warmup;
  const ctx = await GpuContext.create({ adapter: f.adapter as AdapterChoice });
  const spec: ProblemSpec = { ...shape, dtype };
  const x = await makeDeviceInputs(ctx, { fixture: "cce", ...shape, dtype });
  const gradOut = uploadGradOut(ctx, shape.n, opts);
  const what = ctx.hasTimestamps ? "GPU" : "wall";
  console.log(
    `adapter: ${ctx.report.description}${ctx.report.isFallbackAdapter ? " (software)" : ""}; ` +
      `${what} time per call, ${iterations} samples after ${warmup} warm-up`,
  );
  for (const mode of modes) {
    const group = `${shape.n}x${shape.v}x${shape.d} ${dtype} β=${beta} ${mode}`;
    const bench = new Bench({
      name: group,
      iterations,
      time: 0,
      warmup: warmup > 0,
      warmupIterations: warmup,
      warmupTime: 0,
    });
    for (const method of methods) _addTask(bench, ctx, method, mode, spec, x, gradOut, opts);
    await bench.run();
    console.log(`\ngroup ${group}`);
    _print(bench, what);
  }
  if (methods.some((m) => m.name === "baseline")) console.log(`\n${SPEED_RATIO_LEGEND}.`);
  x.destroy();
  gradOut.destroy();
  ctx.destroy();
}

if (import.meta.main) await runCli(() => runBench(Deno.args));
