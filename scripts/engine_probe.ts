/**
 * `./dev task engine-probe [--engines deno,dawn] [--n N --v V --d D] [--fixture llm] [--beta B]
 * [--methods a,b] [--reps R] [--out DIR]`: the same forwards timed on each WebGPU engine, one
 * engine after the other in one process, to tell an engine's GPU time from what the host adds.
 * Per engine and method: the forward measured as table3 measures it (full load, 1 s of warm-up,
 * R repetitions), the same forward {@link BACK_TO_BACK} times in one recorder (no host work
 * between them: the engine's kernels alone), and the median SM clock meanwhile (`nvidia-smi`);
 * per engine, whether its timestamps are quantised. docs/engines.md says how to read it.
 * Defaults: 4096 × 32,000 × 1024 bf16, `llm`, β = 0.1 on hardware (about a minute for both
 * engines on an H100), 64 × 1024 × 64 on a software adapter.
 * @module
 */
import { join } from "node:path";
import { ADAPTER_FLAG, defineCommand, parseList, runCli } from "../core/cli.ts";
import { oneLine } from "../core/errors.ts";
import { type LceOptions, parseDtype, resolveOptions } from "../core/options.ts";
import { deviceFlags, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine, engineName, parseEngine } from "../gpu/engine.ts";
import { Recorder } from "../gpu/recorder.ts";
import { writeAtomic } from "../io/outputs.ts";
import { parseFixture } from "../fixtures/mod.ts";
import { makeDeviceInputs } from "../measure/inputs.ts";
import { IDLE_GPU_WARMUP_MS, measureMethod } from "../measure/measure.ts";
import { sampleSmClocks } from "../measure/nvidia_clocks.ts";
import { median } from "../measure/timing.ts";
import { type LceMethod, parseMethods, type ProblemSpec } from "../methods/mod.ts";
import type { MethodInputs } from "../methods/types.ts";
import { uploadGradOut } from "../methods/run.ts";

/** Forwards recorded into one recorder for the back-to-back time. */
export const BACK_TO_BACK = 5;
/** Dawn's timestamp quantum when `timestamp_quantization` is on: the low 16 bits of ns masked. */
export const QUANTUM_MS = 65536 / 1e6;

/** Ours, the identical forward of its no-filter row, and the Fused Version. */
const METHODS_DEFAULT = "fused,fused-nofilter,fused-fb";

/** The command line of `engine-probe`. */
export const ENGINE_PROBE_COMMAND = defineCommand({
  name: "./dev task engine-probe",
  summary: "Times the same forwards on each WebGPU engine (as table3 does, and back to back in " +
    "one recorder), with the SM clock while they ran and whether timestamps are quantised.",
  flags: {
    engines: { type: "string", arg: "a,b", help: "engines, in order", default: "deno,dawn" },
    n: { type: "int", min: 1, help: "tokens", defaultText: "4096 (64 on software)" },
    v: { type: "int", min: 1, help: "vocabulary", defaultText: "32000 (1024 on software)" },
    d: { type: "int", min: 1, help: "hidden size", defaultText: "1024 (64 on software)" },
    dtype: { type: "string", arg: "bf16|f16|f32", help: "input dtype", default: "bf16" },
    fixture: { type: "string", help: "input data (fixtures/mod.ts)", default: "llm" },
    beta: { type: "number", min: 0, max: 1, help: "label smoothing β", default: 0.1 },
    methods: { type: "string", arg: "a,b", help: "methods", default: METHODS_DEFAULT },
    reps: { type: "int", min: 1, help: "measured repetitions", default: 10 },
    out: { type: "string", arg: "DIR", help: "write engine_probe.json here" },
    adapter: ADAPTER_FLAG,
  },
});

/** One method on one engine. */
interface _Cell {
  method: string;
  timeMs: number | null;
  timeMsMin: number | null;
  timeMsMax: number | null;
  wallMs: number | null;
  samples: number[];
  backToBackMs: number | null;
  smClockMhz: number | null;
  error: string | undefined;
}

/** One engine's run; offGrid of passDurations back-to-back passes were off the 65.536 µs grid. */
interface _EngineRun {
  engine: Engine;
  device: string;
  webgpu: string;
  seconds: number;
  offGrid: number;
  passDurations: number;
  cells: _Cell[];
}

/** GPU ms per forward of {@link BACK_TO_BACK} forwards in one recorder, and every pass's ms. */
async function _backToBack(
  ctx: GpuContext,
  method: LceMethod,
  spec: ProblemSpec,
  opts: LceOptions,
  inputs: MethodInputs,
): Promise<{ ms: number; passMs: number[] }> {
  const p = await ctx.scoped(() => method.prepare(ctx, spec, opts));
  try {
    const t = await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      const outs = [];
      for (let i = 0; i < BACK_TO_BACK; i++) outs.push(await p.forward(rec, inputs));
      const t = await rec.finish();
      for (const o of outs) {
        p.dispose(o.saved);
        o.loss.destroy();
      }
      return t;
    });
    return {
      ms: t.gpuMs / BACK_TO_BACK,
      passMs: t.passes.map((q) => q.gpuMs).filter((ms) => ms > 0),
    };
  } finally {
    p.release?.();
  }
}

/** One engine: every method's forward, measured and back to back. */
async function _probeEngine(
  engine: Engine,
  f: NonNullable<ReturnType<typeof ENGINE_PROBE_COMMAND.parse>>["values"],
  methods: ReturnType<typeof parseMethods>,
): Promise<_EngineRun> {
  const t0 = performance.now();
  const ctx = await GpuContext.create({ ...deviceFlags({ ...f, webgpu: engine }) });
  const soft = ctx.report.isFallbackAdapter;
  const spec = {
    n: f.n ?? (soft ? 64 : 4096),
    v: f.v ?? (soft ? 1024 : 32000),
    d: f.d ?? (soft ? 64 : 1024),
    dtype: parseDtype(f.dtype),
  };
  const opts = resolveOptions({ beta: f.beta });
  console.error(`${engineName(engine)}: ${ctx.report.description}; ${deviceSummary(ctx.report)}`);
  const x = await makeDeviceInputs(ctx, { fixture: f.fixture, ...spec });
  const gradOut = uploadGradOut(ctx, spec.n, opts);
  const cells: _Cell[] = [];
  const durations: number[] = [];
  const clocks = sampleSmClocks();
  const spans: [number, number][] = [];
  try {
    for (const method of methods) {
      const s0 = performance.now();
      const [row] = await measureMethod(ctx, method, {
        spec,
        opts,
        inputs: x.inputs,
        gradOut,
        modes: ["fwd"],
        warmup: 1,
        reps: f.reps,
        warmupMs: soft ? undefined : IDLE_GPU_WARMUP_MS,
        busyLoad: !soft,
      });
      spans.push([s0, performance.now()]);
      const b2b = row.error === undefined
        ? await _backToBack(ctx, method, spec, opts, x.inputs).catch((e) => oneLine(e))
        : undefined;
      if (typeof b2b === "object") durations.push(...b2b.passMs);
      cells.push({
        method: method.name,
        timeMs: row.timeMs,
        timeMsMin: row.timeMsMin,
        timeMsMax: row.timeMsMax,
        wallMs: row.wallMsMedian,
        samples: row.timeMsSamples ?? [],
        backToBackMs: typeof b2b === "object" ? b2b.ms : null,
        smClockMhz: null,
        error: row.error ?? (typeof b2b === "string" ? `back to back: ${b2b}` : undefined),
      });
    }
  } finally {
    const samples = await clocks.stop();
    cells.forEach((c, i) => {
      const during = samples.filter(([t]) => t >= spans[i]?.[0] && t <= spans[i]?.[1]);
      c.smClockMhz = during.length > 0 ? median(during.map(([, mhz]) => mhz)) : null;
    });
    x.destroy();
    gradOut.destroy();
    ctx.destroy();
  }
  const offGrid = durations.filter((ms) => {
    const q = ms / QUANTUM_MS;
    return Math.abs(q - Math.round(q)) > 1e-3;
  }).length;
  return {
    engine,
    device: ctx.report.description,
    webgpu: deviceSummary(ctx.report),
    seconds: (performance.now() - t0) / 1000,
    offGrid,
    passDurations: durations.length,
    cells,
  };
}

const _ms = (x: number | null) => (x === null || Number.isNaN(x) ? "-" : x.toFixed(2));

/** Runs the command with `args`. */
export async function engineProbeMain(args: string[]): Promise<void> {
  const parsed = ENGINE_PROBE_COMMAND.parse(args);
  if (!parsed) return;
  const f = parsed.values;
  const engines = parseList("--engines", f.engines).map((e) => parseEngine(e, "--engines entries"));
  const methods = parseMethods(f.methods);
  parseDtype(f.dtype);
  parseFixture(f.fixture).spec;
  const runs: _EngineRun[] = [];
  for (const engine of engines) runs.push(await _probeEngine(engine, f, methods));
  console.log(
    "engine | method | fwd ms median (min–max) | wall ms | back-to-back ms/fwd | SM MHz | " +
      `vs ${engineName(runs[0].engine)} (median; back-to-back)`,
  );
  for (const r of runs) {
    for (const c of r.cells) {
      const base = runs[0].cells.find((b) => b.method === c.method);
      const ratio = (a: number | null, b: number | null | undefined) =>
        a === null || !b ? "-" : `${(a / b).toFixed(2)}×`;
      console.log(
        `${engineName(r.engine)} | ${c.method} | ${
          c.error ?? `${_ms(c.timeMs)} (${_ms(c.timeMsMin)}–${_ms(c.timeMsMax)})`
        } | ${_ms(c.wallMs)} | ${_ms(c.backToBackMs)} | ${c.smClockMhz ?? "-"} | ` +
          `${ratio(c.timeMs, base?.timeMs)}; ${ratio(c.backToBackMs, base?.backToBackMs)}`,
      );
    }
  }
  for (const r of runs) {
    const quantised = r.passDurations > 0 && r.offGrid === 0;
    console.log(
      `${engineName(r.engine)}: ${r.seconds.toFixed(1)} s; timestamps ${
        quantised ? "QUANTISED" : "not quantised"
      } (${r.offGrid} of ${r.passDurations} pass durations off the 65.536 µs grid); ${r.webgpu}`,
    );
  }
  if (f.out !== undefined) {
    const path = join(f.out, "engine_probe.json");
    writeAtomic(path, JSON.stringify({ date: new Date().toISOString(), runs }, null, 1) + "\n");
    console.log(`wrote ${path}`);
  }
}

if (import.meta.main) await runCli(() => engineProbeMain(Deno.args));
