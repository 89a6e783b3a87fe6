/**
 * `deno task table3 [--n N] [--v V] [--d D] [--dtype bf16|f16|f32] [--beta B] [--methods a,b]
 * [--modes fwd,bwd,fwd+bwd] [--fixture cce] [--seed S] [--reduction mean|sum|none] [--reps R]
 * [--warmup W] [--out DIR] [--adapter auto|software|hardware]`: reproduces the paper's Table 3.
 *
 * Every method is measured at β = B (default 0.1) and at β = 0, in every mode; progress goes to
 * stderr, the table (Markdown) to stdout, and the reports (md, json, csv, svg) to DIR (default
 * `reports/`). The default shape is the paper's (8192 × 256,000 × 2304, bf16) on a hardware
 * adapter, and {@link SOFTWARE_SHAPE} on a software (fallback) one, where the paper's shape would
 * take hours; the report says so. Bad flags print one line `error: …` and exit 2 before anything
 * is measured or written; a method that fails gets its row marked and the run goes on (exit 0).
 * @module
 */
import { parseArgs } from "node:util";
import { paint, Progress } from "../core/progress.ts";
import { type ExternalRows, readExternalRows } from "../report/external.ts";
import { intFlag, numberFlag, runCli } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { type Dtype, parseDtype, type Reduction, resolveOptions } from "../core/options.ts";
import { type AdapterChoice, adapterFromEnv, GpuContext } from "../gpu/context.ts";
import { methodByName, METHODS } from "../methods/mod.ts";
import type { LceMethod } from "../methods/types.ts";
import { uploadGradOut } from "../methods/run.ts";
import { parseFixtureName } from "../fixtures/mod.ts";
import {
  defaultMemoryBudget,
  formatMiB,
  measureMethod,
  type MeasureRow,
  type Mode,
  MODES,
} from "../measure/measure.ts";
import { type DeviceInputs, makeDeviceInputs } from "../measure/inputs.ts";
import {
  collectEnv,
  formatCell,
  formatMarkdown,
  PAPER_SHAPE,
  type Table3Report,
  writeReport,
} from "../report/table3.ts";

/**
 * The default shape on a software adapter (Mesa llvmpipe at ~5–10 GFLOP/s on 2 cores): the whole
 * table — every method, both β, three modes, {@link SOFTWARE_REPS} repetitions after
 * {@link SOFTWARE_WARMUP} warm-up — in about two minutes.
 */
export const SOFTWARE_SHAPE = { n: 256, v: 4096, d: 128 } as const;
/** Measured repetitions on a software adapter. */
export const SOFTWARE_REPS = 3;
/** Warm-up repetitions on a software adapter. */
export const SOFTWARE_WARMUP = 1;
/**
 * Least measured repetitions per cell on a hardware adapter; a cell repeats until
 * {@link HARDWARE_TARGET_MS} of GPU time is measured, up to {@link HARDWARE_MAX_REPS} (fast cells
 * get more repetitions, slow ones at least this many).
 */
export const HARDWARE_REPS = 3;
/** GPU time per cell the repetitions aim at on a hardware adapter, ms (without `--reps`). */
export const HARDWARE_TARGET_MS = 1000;
/** Most measured repetitions per cell on a hardware adapter (without `--reps`). */
export const HARDWARE_MAX_REPS = 20;
/** Warm-up repetitions on a hardware adapter. */
export const HARDWARE_WARMUP = 1;

const USAGE = "usage: deno task table3 [--n N] [--v V] [--d D] [--dtype bf16|f16|f32] " +
  "[--beta B] [--methods a,b,...] [--modes fwd,bwd,fwd+bwd] [--fixture cce|llm|uniform|" +
  "nonzero-mean] [--seed S] [--reduction mean|sum|none] [--reps R] [--warmup W] [--out DIR] " +
  "[--adapter auto|software|hardware]";

/** The validated command line. */
interface _Flags {
  n?: number;
  v?: number;
  d?: number;
  dtype: Dtype;
  beta: number;
  /** Sections to run (default [beta, 0], or [0] when beta is 0). */
  betas: number[];
  /** JSON of external rows (scripts/torch_reference.py) to merge, or undefined. */
  external?: ExternalRows;
  methods: LceMethod[];
  modes: Mode[];
  fixture: string;
  seed: number;
  reduction: Reduction;
  reps?: number;
  warmup?: number;
  out: string;
  adapter: AdapterChoice;
}

function _list(name: string, value: string): string[] {
  const items = value.split(",").map((s) => s.trim());
  check(items.every((s) => s !== ""), `--${name} has an empty entry in '${value}'`);
  check(new Set(items).size === items.length, `--${name} lists an entry twice in '${value}'`);
  return items;
}

/** Parses and validates the flags (InputError for anything wrong; nothing is opened). */
function _parseFlags(args: string[]): _Flags | undefined {
  const { values } = parseArgs({
    args,
    options: {
      n: { type: "string" },
      v: { type: "string" },
      d: { type: "string" },
      dtype: { type: "string", default: "bf16" },
      beta: { type: "string", default: "0.1" },
      betas: { type: "string" },
      external: { type: "string" },
      methods: { type: "string" },
      modes: { type: "string" },
      fixture: { type: "string", default: "cce" },
      seed: { type: "string", default: "0" },
      reduction: { type: "string", default: "mean" },
      reps: { type: "string" },
      warmup: { type: "string" },
      out: { type: "string", default: "reports" },
      adapter: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) {
    console.log(USAGE);
    return undefined;
  }
  const shape = (k: "n" | "v" | "d") =>
    values[k] === undefined ? undefined : intFlag(k, values[k], 1);
  const beta = numberFlag("beta", values.beta, 0.1);
  check(beta >= 0 && beta <= 1, `--beta must be in [0, 1], got '${values.beta}'`);
  const reduction = values.reduction as Reduction;
  resolveOptions({ beta, reduction });
  const betas = values.betas === undefined
    ? (beta > 0 ? [beta, 0] : [0])
    : _list("betas", values.betas).map((b) => {
      const x = numberFlag("betas", b, 0);
      check(x >= 0 && x <= 1, `--betas entries must be in [0, 1], got '${b}'`);
      return x;
    });
  const external = values.external === undefined ? undefined : readExternalRows(values.external);
  const methods = values.methods === undefined
    ? [...METHODS]
    : _list("methods", values.methods).map(methodByName);
  const modes = values.modes === undefined ? [...MODES] : _list("modes", values.modes).map((m) => {
    check(
      (MODES as readonly string[]).includes(m),
      `unknown mode '${m}' (expected fwd, bwd or fwd+bwd)`,
    );
    return m as Mode;
  });
  const seed = numberFlag("seed", values.seed, 0);
  check(Number.isSafeInteger(seed), `--seed must be an integer, got '${values.seed}'`);
  const warmup = values.warmup === undefined ? undefined : numberFlag("warmup", values.warmup, 0);
  check(
    warmup === undefined || (Number.isInteger(warmup) && warmup >= 0),
    `--warmup must be a non-negative integer, got '${values.warmup}'`,
  );
  const adapter = values.adapter ?? adapterFromEnv();
  check(
    ["auto", "software", "hardware"].includes(adapter),
    `--adapter must be auto, software or hardware, got '${adapter}'`,
  );
  check(values.out !== "", "--out must name a directory");
  return {
    n: shape("n"),
    v: shape("v"),
    d: shape("d"),
    dtype: parseDtype(values.dtype!),
    beta,
    betas,
    external,
    methods,
    modes,
    fixture: parseFixtureName(values.fixture!),
    seed,
    reduction,
    reps: values.reps === undefined ? undefined : intFlag("reps", values.reps, 1),
    warmup,
    out: values.out!,
    adapter: adapter as AdapterChoice,
  };
}

/** GPU memory in bytes from nvidia-smi (first GPU), or undefined. */
async function _nvidiaMemoryBytes(): Promise<number | undefined> {
  try {
    const out = await new Deno.Command("nvidia-smi", {
      args: ["--query-gpu=memory.total", "--format=csv,noheader,nounits"],
      stdout: "piped",
      stderr: "null",
    }).output();
    const mib = Number(new TextDecoder().decode(out.stdout).split("\n")[0].trim());
    return out.success && Number.isFinite(mib) && mib > 0 ? mib * 2 ** 20 : undefined;
  } catch {
    return undefined;
  }
}

/** Runs the command with `args`. */
export async function table3Main(args: string[]): Promise<void> {
  const flags = _parseFlags(args);
  if (!flags) return;
  const started = performance.now();
  const progress = new Progress({
    label: "table3",
    total: flags.betas.length * flags.methods.length * flags.modes.length,
  });
  const _progress = (s: string) => progress.log(s);
  let ctx = await GpuContext.create({ adapter: flags.adapter });
  const software = ctx.report.isFallbackAdapter;
  const def = software ? { ...SOFTWARE_SHAPE, dtype: flags.dtype } : PAPER_SHAPE;
  const shape = {
    n: flags.n ?? def.n,
    v: flags.v ?? def.v,
    d: flags.d ?? def.d,
    dtype: flags.dtype,
  };
  const reduced = software &&
    (flags.n === undefined || flags.v === undefined || flags.d === undefined);
  const reducedShape = reduced
    ? `The paper's shape (8192 × 256,000 × 2304) would take hours on the software adapter ` +
      `${ctx.report.description}, so the unset dimensions default to ` +
      `${SOFTWARE_SHAPE.n} × ${SOFTWARE_SHAPE.v} × ${SOFTWARE_SHAPE.d}, sized so that the whole ` +
      `table (every method, both β, three modes) finishes in about two minutes there.`
    : undefined;
  const reps = flags.reps ?? (software ? SOFTWARE_REPS : HARDWARE_REPS);
  const warmup = flags.warmup ?? (software ? SOFTWARE_WARMUP : HARDWARE_WARMUP);
  const betas = flags.betas;
  const gpuBytes = software ? undefined : await _nvidiaMemoryBytes();
  _progress(
    `${ctx.report.description}${software ? " (software)" : ""}: N=${shape.n} V=${shape.v} ` +
      `D=${shape.d} ${shape.dtype}, fixture ${flags.fixture}, β ∈ {${betas.join(", ")}}, ` +
      `${flags.methods.length} method${flags.methods.length === 1 ? "" : "s"}, modes ${
        flags.modes.join(",")
      }, ${reps}${
        software || flags.reps !== undefined ? "" : `–${HARDWARE_MAX_REPS}`
      } reps after ` +
      `${warmup} warm-up${reduced ? " (reduced shape for the software adapter)" : ""}`,
  );

  const open = async () => {
    const x = await makeDeviceInputs(ctx, {
      fixture: flags.fixture,
      ...shape,
      seed: flags.seed,
    });
    _progress(`inputs (${x.generator}) ready in ${(x.ms / 1000).toFixed(1)} s`);
    return x;
  };
  let inputs: DeviceInputs = await open();
  const inputBytes = ctx.memory().liveBytes;
  const budget = gpuBytes !== undefined
    ? gpuBytes - inputBytes - 512 * 2 ** 20
    : defaultMemoryBudget(ctx);
  const rows: MeasureRow[] = [];
  const total = betas.length * flags.methods.length * flags.modes.length;
  for (const beta of betas) {
    const opts = resolveOptions({ beta, reduction: flags.reduction });
    for (const method of flags.methods) {
      if (ctx.lostReason) {
        _progress(`device lost (${ctx.lostReason}); opening a new one`);
        ctx = await GpuContext.create({ adapter: flags.adapter });
        inputs = await open();
      }
      const gradOut = uploadGradOut(ctx, shape.n, opts);
      await measureMethod(ctx, method, {
        spec: shape,
        opts,
        inputs: inputs.inputs,
        gradOut,
        modes: flags.modes,
        warmup,
        reps,
        ...(software || flags.reps !== undefined
          ? {}
          : { targetMs: HARDWARE_TARGET_MS, maxReps: HARDWARE_MAX_REPS }),
        budgetBytes: budget,
        onRow(row, ms) {
          rows.push(row);
          const cell = formatCell(row);
          progress.step(
            `[${rows.length}/${total}] ${row.method} β=${row.beta} ${row.mode}: ` +
              `${row.error ? paint("red", cell) : cell} (${(ms / 1000).toFixed(1)} s)`,
          );
        },
      });
      gradOut.destroy();
    }
  }
  inputs.destroy();
  const report: Table3Report = {
    env: await collectEnv(ctx),
    shape,
    fixture: flags.fixture,
    generator: inputs.generator,
    seed: flags.seed,
    betas,
    modes: flags.modes,
    reduction: flags.reduction,
    warmup,
    reps,
    timeSource: ctx.hasTimestamps ? "gpu" : "wall",
    reducedShape,
    durationS: (performance.now() - started) / 1000,
    rows,
    external: flags.external,
  };
  const paths = await writeReport(report, flags.out);
  progress.finish();
  const md = formatMarkdown(report);
  console.log(md.slice(0, md.indexOf("\n## Details")).trimEnd());
  const failed = rows.filter((r) => r.error !== undefined).length;
  _progress(
    `${failed === 0 ? "all rows measured" : `${failed} of ${rows.length} rows failed`}; ` +
      `${report.durationS!.toFixed(1)} s; inputs ${formatMiB(inputBytes)}; wrote ` +
      `${paths.md}, ${paths.json}, ${paths.csv}, ${paths.svg}`,
  );
  ctx.destroy();
}

if (import.meta.main) {
  await runCli(() => table3Main(Deno.args));
}
