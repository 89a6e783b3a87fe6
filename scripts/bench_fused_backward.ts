/**
 * `deno run -A scripts/bench_fused_backward.ts [--fixture cce|llm] [--n N --v V --d D]
 * [--dtype bf16|f16|f32] [--beta B] [--reps R] [--warmup W] [--configs a,b,…]
 * [--adapter auto|software|hardware] [--webgpu deno|dawn]`: the fused
 * backward's configurations side by side, with the per-pass breakdown (GPU ms from timestamp
 * queries, median over R reps after W warm-ups; each rep's forward runs untimed before it), the
 * kept tiles and the peak bytes above the inputs and the forward's state.
 *
 * Configurations (`--configs`, default all): `ours` (the `fused` method: order decision, the kept
 * tiles' dE gathered: kernels/fused/gathered_de.ts, the dC pass's tile order:
 * kernels/fused/dc_order.ts), `always-sort` (sorted order always: the paper's rule), `nosort`
 * (`fused-nosort`), `s1r4` (ours with the dE layout before the splits: 1 split, 4 row slices),
 * `s8r1` (8 balanced splits where dC's storage holds them), `f32grad` (`fused-f32grad`), and any
 * `s<S>r<R>` (ours with S dE splits and R row slices; more splits than dC's storage holds get
 * slabs of their own, shown in the MiB column), `pertile` (ours with dE by the per-tile pass, not
 * the gathered products), `g1` (the backward tile's gradient products not widened), `dcseq` (the
 * dC pass in the vocabulary's order, not most kept tiles first), and any
 * `g<BN>k<BK>t<TM>x<TN>[smw][-kg[smw]]` (the gathered dE on another product tile, see `_config`).
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
import { uploadGradOut } from "../methods/run.ts";
import { fusedMethod, type FusedVariant } from "../methods/fused.ts";
import { BACKWARD_TILE_WIDE, defaultBackwardTile } from "../kernels/fused/backward_plan.ts";
import type { LceMethod } from "../methods/types.ts";
import { TILE_HW_WIDE } from "../kernels/gemm_codegen.ts";

const BASE: FusedVariant = {
  name: "bench",
  label: "bench",
  description: "bench",
  filter: true,
  sort: true,
  fusedForwardBackward: false,
  gradDtype: "input",
};

/** The configurations, by name. */
const CONFIGS: Record<string, (ctx: GpuContext) => Partial<FusedVariant>> = {
  ours: () => ({}),
  "always-sort": () => ({ decideOrder: false }),
  nosort: () => ({ sort: false }),
  s1r4: (ctx) => ({
    dESplits: 1,
    dERowSlices: defaultBackwardTile(ctx) === BACKWARD_TILE_WIDE ? 4 : undefined,
  }),
  s8r1: () => ({ dESplits: 8, dERowSlices: 1 }),
  f32grad: () => ({ gradDtype: "f32" }),
  // the filter pass on the 128×256 product tile (8×16 per thread)
  widefilter: () => ({ filterTile: TILE_HW_WIDE }),
  // dE by the per-tile pass instead of the gathered products
  pertile: () => ({ dEGather: false }),
  // the 128×64 backward tile with gradient products of its own columns (d chunks of 64/128)
  g1: () => ({ tile: { ...BACKWARD_TILE_WIDE, gradWiden: 1 } }),
  // the dC pass in the vocabulary's (sorted) order instead of most kept tiles first
  dcseq: () => ({ dCOrder: false }),
};

/**
 * A named configuration; `s<S>r<R>`: ours with S dE splits and R row slices; `g<BN>k<BK>t<TM>x<TN>`
 * with flags `s` (stage2d), `m` (thread-major), `w` (warp layout), optionally `-kg` and the flags
 * of the `kept g` pass's 128×64 tile: the gathered dE's product tile (128 rows, 16-byte loads).
 */
function _config(name: string): ((ctx: GpuContext) => Partial<FusedVariant>) | undefined {
  if (CONFIGS[name]) return CONFIGS[name];
  const m = /^s(\d+)r(\d+)$/.exec(name);
  if (m) return () => ({ dESplits: Number(m[1]), dERowSlices: Number(m[2]) });
  const g = /^g(\d+)k(\d+)t(\d+)x(\d+)([smw]*)(?:-kg([smw]*))?$/.exec(name);
  if (!g) return undefined;
  const flags = (f: string) => ({
    stage2d: f.includes("s") || undefined,
    threadMajor: f.includes("m") || undefined,
    warpTile: f.includes("w") || undefined,
  });
  const [bn, bk, tm, tn] = g.slice(1, 5).map(Number);
  const productTile = { bm: 128, bn, bk, tm, tn, vec: true, ...flags(g[5]) };
  const keptTile = g[6] === undefined
    ? undefined
    : { bm: 128, bn: 64, bk: 16, tm: 8, tn: 4, vec: true, ...flags(g[6]) };
  return () => ({ dEGather: { productTile, keptTile } });
}

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
      help: `configurations, of ${Object.keys(CONFIGS).join(", ")} or s<S>r<R>`,
      defaultText: "all named ones",
    },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
  },
});

async function main() {
  const parsed = BENCH_FUSED_BACKWARD_COMMAND.parse(Deno.args);
  if (!parsed) return;
  const values = parsed.values;
  const dtype: Dtype = parseDtype(values.dtype);
  const opts = resolveOptions({ beta: values.beta });
  const { reps, warmup } = values;
  const names = values.configs ? parseList("--configs", values.configs) : Object.keys(CONFIGS);
  for (const n of names) {
    if (!_config(n)) {
      throw new InputError(
        `--configs: unknown config '${n}' (${
          Object.keys(CONFIGS).join(", ")
        }, s<S>r<R>, g<BN>k<BK>t<TM>x<TN>…)`,
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
    for (const name of names) {
      const m: LceMethod = fusedMethod({ ...BASE, ..._config(name)!(ctx), name });
      try {
        const p = await m.prepare(ctx, spec, opts);
        let peak = 0;
        const r = await timeRepetitions({ warmup, reps }, async () => {
          const frec = new Recorder(ctx);
          const f = await p.forward(frec, di.inputs);
          await frec.finish();
          ctx.resetPeak();
          const live = ctx.memory().liveBytes;
          try {
            return await timeMode(ctx, {
              mode: "bwd",
              prepared: p,
              inputs: di.inputs,
              gradOut,
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
          ? `kept ${
            (st.tilesTotal as number) - (st.tilesSkipped as number)
          } of ${st.tilesTotal} tiles`
          : "";
        const mib = (peak / 2 ** 20).toFixed(1);
        console.log(`\n${name}: bwd ${r.median.toFixed(2)} ms, ${mib} MiB, ${kept}`);
        const rows = Object.entries(passMedians(r.passes))
          .sort((a, b) => b[1] - a[1]);
        for (const [k, ms] of rows) {
          if (ms >= 0.05) console.log(`  ${ms.toFixed(2).padStart(9)}  ${k}`);
        }
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
