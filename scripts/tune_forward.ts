/**
 * `deno run -A scripts/tune_forward.ts [--n N --v V --d D --dtype bf16|f16|f32] [--beta B]
 * [--softcap S] [--reps R] [--warmup W] [--splits 8,16,32] [--streams 132,264] [--quick]
 * [--no-plain] [--out DIR]`:
 * the tuning harness of the fused forward (kernels/fused/forward.ts).
 *
 * Phase 1 times every candidate GEMM tile (tile sizes, K-step, threads per tile) at the default
 * vocab split S, next to the plain matmul (kernels/matmul.ts, logits into an f32 tensor) with the
 * same tile; phase 2 sweeps S for the best tile, and the stream split's workgroups W
 * (kernels/fused/forward_stream.ts); then the best configuration is timed with the
 * token stats and (β > 0, no softcap) with the in-kernel smoothing sum, to show what the options
 * cost. Times are GPU times from timestamp queries (median of R reps after W warm-ups, and on a
 * hardware adapter after 400 ms of full load, as before a table's cells) of the
 * whole forward (column sum, tiles, merge); effective TFLOP/s = 2·n·v·d / time. Last, the best
 * configuration's lse and loss rows are checked against the materialised path (plain logits +
 * row_softmax_stats). Prints a table and writes `tune_forward_<adapter-slug>.json|md` into --out.
 * The candidates, the timing and the phases: tuning/forward_tuner.ts.
 *
 * Defaults: the paper's shape (n 8192, |V| 256000, d 2304, bf16, β 0.1) on a hardware adapter, a
 * small one (256 × 4096 × 128) with fewer candidates on a software adapter (< 1 min on lavapipe).
 * @module
 */
import { join } from "node:path";
import { writeAtomic } from "../io/outputs.ts";
import {
  ADAPTER_FLAG,
  defineCommand,
  parseIntValue,
  parseList,
  runCli,
  WEBGPU_FLAG,
} from "../core/cli.ts";
import { InputError } from "../core/errors.ts";
import { type Dtype, type LceOptions, parseDtype, resolveOptions } from "../core/options.ts";
import { deviceFlags, GpuContext } from "../gpu/context.ts";
import { createTensor, type DeviceTensor, upload } from "../gpu/tensor.ts";
import {
  FORWARD_TILES_HW,
  FORWARD_TILES_SW,
  ForwardTuner,
  readResume,
  runnableTiles,
  tunePhases,
  type TuneTensors,
} from "../tuning/forward_tuner.ts";
import { checkBest, type TuneHeader, tuneJson, tuneMarkdown } from "../tuning/forward_report.ts";
import { fillRandom } from "../tuning/fill_random.ts";

/** The command line of `tune-forward`. */
export const TUNE_FORWARD_COMMAND = defineCommand({
  name: "deno task tune-forward",
  summary: "Times the fused forward's tile configurations on this adapter and writes " +
    "tune_forward_<adapter>.json|md into --out. The JSON is rewritten after every timed " +
    'configuration ("complete": false until the end); --resume FILE.json re-uses the ' +
    "configurations it holds and times only the others.",
  flags: {
    n: { type: "int", min: 1, help: "tokens", defaultText: "8192; 256 on a software adapter" },
    v: { type: "int", min: 1, help: "vocabulary", defaultText: "256000; 4096 on software" },
    d: { type: "int", min: 1, help: "hidden size", defaultText: "2304; 128 on software" },
    dtype: { type: "string", help: "input dtype", default: "bf16", arg: "bf16|f16|f32" },
    beta: { type: "number", help: "label smoothing", default: 0.1 },
    softcap: { type: "number", help: "logit softcap (> 0), none when absent" },
    reps: { type: "int", min: 1, help: "measured repetitions", defaultText: "5; 3 on software" },
    warmup: { type: "int", min: 0, help: "warm-up repetitions", defaultText: "2; 1 on software" },
    splits: {
      type: "string",
      arg: "S,S",
      help: "vocab splits of phase 2",
      defaultText: "4,8,16,24,32,48,64; 1,2,4,8 on software",
    },
    streams: {
      type: "string",
      arg: "W,W",
      help: "stream split workgroups of phase 2",
      defaultText: "132,264,396,528; 3,7 on software",
    },
    quick: { type: "boolean", help: "only the first two tiles" },
    tile: {
      type: "int",
      min: 0,
      help: "only this candidate tile (0-based, in the listed order) and its variants",
    },
    "no-plain": { type: "boolean", help: "skip the plain matmul comparison" },
    out: { type: "string", arg: "DIR", help: "report directory", default: "out" },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
    resume: {
      type: "string",
      arg: "FILE.json",
      help: "re-use the configurations of an interrupted run's JSON",
    },
  },
});

if (import.meta.main) {
  await runCli(() => tuneForwardMain(Deno.args));
}

/** Lower-case letters and digits joined by '-', for file names. */
function _adapterSlug(description: string): string {
  return description.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "") || "adapter";
}

/** E, C (filled on the GPU), targets, the outputs and, unless --no-plain, the plain logits. */
async function _tensors(
  ctx: GpuContext,
  s: { n: number; v: number; d: number; dtype: Dtype },
  plain: boolean,
): Promise<TuneTensors> {
  const { n, v, d, dtype } = s;
  const e = createTensor(ctx, { dtype, rows: n, cols: d, role: "input", label: "E" });
  const c = createTensor(ctx, { dtype, rows: v, cols: d, role: "input", label: "C" });
  const targets = createTensor(ctx, { dtype: "i32", rows: n, cols: 1, role: "input", label: "t" });
  const scale = 2 / Math.sqrt(Math.sqrt(d));
  await fillRandom(ctx, e, 11, scale);
  await fillRandom(ctx, c, 12, scale);
  upload(ctx, targets, new Int32Array(n).map((_, i) => (i * 7919) % v));
  const vec = (cols: number, label: string) =>
    createTensor(ctx, { dtype: "f32", rows: n, cols, role: "output", label });
  let logits: DeviceTensor | undefined;
  if (plain) {
    try {
      logits = createTensor(ctx, {
        dtype: "f32",
        rows: n,
        cols: v,
        role: "workspace",
        label: "logits",
      });
    } catch (err) {
      console.log(`plain matmul skipped: ${(err as Error).message}`);
    }
  }
  const lse = vec(1, "lse"), lossRows = vec(1, "loss rows"), stats = vec(4, "token stats");
  return { e, c, targets, lse, lossRows, stats, logits };
}

/** Runs the command with `args`. */
export async function tuneForwardMain(args: string[]): Promise<void> {
  const parsed = TUNE_FORWARD_COMMAND.parse(args);
  if (!parsed) return;
  const values = parsed.values;
  const dtype: Dtype = parseDtype(values.dtype);
  const softcap = values.softcap;
  const opts: LceOptions = resolveOptions({ beta: values.beta, softcap, reduction: "none" });
  const splitFlag = values.splits === undefined
    ? undefined
    : parseList("--splits", values.splits).map((x) => parseIntValue("--splits", x, { min: 1 }));
  const ctx = await GpuContext.create(deviceFlags(values));
  const hw = !ctx.report.isFallbackAdapter;
  const n = values.n ?? (hw ? 8192 : 256);
  const v = values.v ?? (hw ? 256000 : 4096);
  const d = values.d ?? (hw ? 2304 : 128);
  const reps = values.reps ?? (hw ? 5 : 3);
  const warmup = values.warmup ?? (hw ? 2 : 1);
  const spec = { n, v, d, dtype };
  const r = ctx.report;
  console.log(
    `adapter: ${r.description} (${r.vendor} ${r.architecture}, fallback ${r.isFallbackAdapter}); ` +
      `shape n=${n} v=${v} d=${d} ${dtype}, β=${opts.beta}${
        softcap ? `, softcap ${softcap}` : ""
      }; ${warmup} warm-up + ${reps} reps`,
  );
  if (!ctx.hasTimestamps) console.log("warning: no timestamp-query: times are NaN");
  const tensors = await _tensors(ctx, spec, !values["no-plain"]);
  let tiles = runnableTiles(hw ? FORWARD_TILES_HW : FORWARD_TILES_SW, ctx.device.limits);
  if (values.quick) tiles = tiles.slice(0, 2);
  if (values.tile !== undefined) {
    if (values.tile >= tiles.length) {
      throw new InputError(`--tile ${values.tile}: there are ${tiles.length} candidate tiles`);
    }
    tiles = [tiles[values.tile]];
  }
  const base = join(values.out, `tune_forward_${_adapterSlug(r.description)}`);
  const options = { beta: opts.beta, softcap: opts.softcap ?? null };
  const header = (): TuneHeader => ({
    adapter: {
      description: r.description,
      vendor: r.vendor,
      architecture: r.architecture,
      isFallbackAdapter: r.isFallbackAdapter,
    },
    date: new Date().toISOString(),
    shape: spec,
    options,
    warmup,
    reps,
  });
  const prior = values.resume === undefined
    ? []
    : readResume(values.resume, { adapter: r.description, shape: spec, options, warmup, reps });
  const tuner: ForwardTuner = new ForwardTuner(ctx, {
    spec,
    opts,
    softcap,
    warmup,
    reps,
    tensors,
    prior,
    // the JSON after every configuration, marked incomplete until the end
    save: () =>
      writeAtomic(
        `${base}.json`,
        JSON.stringify(tuneJson(header(), tuner.rows, null, null), null, 2) + "\n",
      ),
  });
  const splits = splitFlag ?? (hw ? [4, 8, 16, 24, 32, 48, 64] : [1, 2, 4, 8]);
  const streams = values.streams === undefined
    ? (hw ? [132, 264, 396, 528] : [3, 7])
    : parseList("--streams", values.streams).map((x) => parseIntValue("--streams", x, { min: 1 }));
  const best = await tunePhases(tuner, tiles, splits, streams);
  const check = tensors.logits ? await checkBest(ctx, { spec, opts, best, tensors }) : undefined;
  const h = header();
  writeAtomic(`${base}.md`, tuneMarkdown(h, { opts, softcap, rows: tuner.rows, best, check }));
  writeAtomic(
    `${base}.json`,
    JSON.stringify(tuneJson(h, tuner.rows, best, check ?? null), null, 2) + "\n",
  );
  console.log(
    `\nbest: ${best.config}, ${best.ms.toFixed(3)} ms, ${best.tflops.toPrecision(3)} TFLOP/s; ` +
      Object.entries(best.passes ?? {}).map(([k, x]) => `${k} ${x.toFixed(3)} ms`).join(", "),
  );
  console.log(`wrote ${base}.json and ${base}.md`);
  ctx.destroy();
}
