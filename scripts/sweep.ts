/**
 * `deno task sweep --over v|n|d [--values a,b,c] [--n N] [--v V] [--d D] [--dtype bf16|f16|f32]
 * [--beta B | --betas a,b] [--methods a,b] [--modes fwd,bwd,fwd+bwd] [--fixture cce] [--seed S]
 * [--reduction mean|sum|none] [--reps R] [--warmup W] [--external F.json,…] [--out DIR]
 * [--adapter auto|software|hardware] [--resume]` (flags: {@link SWEEP_COMMAND}): measures the methods at each value of one size with the
 * others fixed, and writes `sweep_<adapter>_<over>.{csv,json}` and `…_time.svg`, `…_memory.svg`
 * under DIR (default `reports/`).
 *
 * The fixed sizes default to the paper's shape on a hardware adapter and to table3's reduced
 * shape on a software one; the values default to 4 doublings ending at that size. β defaults to
 * 0.1 only (one section; `--betas 0.1,0` for both, at twice the time). The JSON and CSV are
 * rewritten after every cell, so a killed run keeps what it measured; the charts are drawn at
 * the end. A method that fails at a size leaves a gap (its reason in the JSON) and the sweep goes
 * on. `--external` takes JSON files of scripts/torch_peers.py (one per size); those whose
 * fixed sizes match are drawn as dashed lines and added to the CSV. `--resume` keeps the cells
 * an earlier run of the same sweep measured in DIR. Bad flags print one line `error: …` and exit
 * 2 before anything is measured or written.
 * @module
 */
import {
  ADAPTER_FLAG,
  defineCommand,
  parseIntValue,
  parseList,
  parseNumberValue,
  runCli,
} from "../core/cli.ts";
import { check, InputError } from "../core/errors.ts";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type Dtype, parseDtype, type Reduction, resolveOptions } from "../core/options.ts";
import { formatDuration, paint, Progress } from "../core/progress.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { parseMethods } from "../methods/mod.ts";
import type { LceMethod } from "../methods/types.ts";
import { parseFixtureName } from "../fixtures/mod.ts";
import {
  defaultMemoryBudget,
  type Mode,
  nvidiaMemoryBytes,
  parseModes,
} from "../measure/measure.ts";
import {
  cellWeight,
  planWeight,
  runSweep,
  SWEEP_AXES,
  type SweepAxis,
  type SweepCell,
  type SweepPlan,
} from "../measure/sweep.ts";
import { type ExternalRows, readExternalRows } from "../report/external.ts";
import { collectEnv, formatCell, PAPER_SHAPE } from "../report/table3.ts";
import {
  externalMatches,
  sweepBaseName,
  type SweepReport,
  writeSweepData,
  writeSweepReport,
} from "../report/sweep.ts";
import { defaultRepetitions, repsText, SOFTWARE_SHAPE } from "./table3.ts";

/** The command line of `sweep`. */
export const SWEEP_COMMAND = defineCommand({
  name: "deno task sweep",
  summary: "Measures the methods at each value of one size (|V|, N or D) with the others fixed " +
    "and writes sweep_<adapter>_<over>.{csv,json} (long format; the JSON with raw samples, " +
    "rewritten after every cell) and two line charts, _time.svg and _memory.svg, into --out. A " +
    "method that fails at a size leaves a gap there (its reason in the JSON) and the sweep goes on.",
  flags: {
    over: { type: "string", help: "the swept size", choices: ["v", "n", "d"], required: true },
    values: {
      type: "string",
      arg: "a,b,c",
      help: "its values",
      defaultText: "four doublings ending at the default size",
    },
    n: { type: "int", min: 1, help: "tokens (fixed)", defaultText: "8192; 256 on software" },
    v: { type: "int", min: 1, help: "vocabulary (fixed)", defaultText: "256000; 4096 on software" },
    d: { type: "int", min: 1, help: "hidden size (fixed)", defaultText: "2304; 128 on software" },
    dtype: { type: "string", help: "input dtype", default: "bf16", arg: "bf16|f16|f32" },
    beta: { type: "number", min: 0, max: 1, help: "label smoothing", default: 0.1 },
    betas: { type: "string", arg: "B,B", help: "several β (e.g. 0.1,0)", defaultText: "B only" },
    methods: { type: "string", arg: "a,b", help: "methods (methods/mod.ts)", defaultText: "all" },
    modes: { type: "string", arg: "fwd,bwd,fwd+bwd", help: "modes", defaultText: "all three" },
    fixture: {
      type: "string",
      help: "input data (fixtures/mod.ts)",
      default: "cce",
      arg: "cce|llm|uniform|nonzero-mean",
    },
    seed: { type: "int", help: "seed of the inputs", default: 0 },
    reduction: { type: "string", help: "loss reduction", default: "mean", arg: "mean|sum|none" },
    reps: {
      type: "int",
      min: 1,
      help: "measured repetitions",
      defaultText: "as table3: 3 on software; on hardware until 0.6 s per cell (3 to 20)",
    },
    warmup: { type: "int", min: 0, help: "warm-up repetitions", defaultText: "1" },
    external: {
      type: "string",
      arg: "F.json,F.json",
      help: "same-card rows of scripts/torch_peers.py (one file per size); those whose fixed " +
        "sizes match are added",
    },
    out: { type: "string", arg: "DIR", help: "report directory", default: "reports" },
    adapter: ADAPTER_FLAG,
    resume: {
      type: "boolean",
      help: "keep the cells an earlier run of the same sweep measured in --out without error " +
        "and measure only the rest",
    },
  },
});

/** The validated command line. */
interface _Flags {
  over: SweepAxis;
  values?: number[];
  fixed: Partial<Record<SweepAxis, number>>;
  dtype: Dtype;
  betas: number[];
  external: ExternalRows[];
  methods: LceMethod[];
  modes: Mode[];
  fixture: string;
  seed: number;
  reduction: Reduction;
  reps?: number;
  warmup?: number;
  out: string;
  adapter: AdapterChoice;
  resume: boolean;
}

/**
 * Parses and validates the flags (InputError for anything wrong; nothing is opened). Returns
 * undefined after printing --help.
 */
function _parseFlags(args: string[]): _Flags | undefined {
  const parsed = SWEEP_COMMAND.parse(args);
  if (!parsed) return undefined;
  const f = parsed.values;
  const over = f.over as SweepAxis;
  check(
    !parsed.given.has(over),
    `--${over} is the swept size (--over ${over}): give its values with --values`,
  );
  const fixed: Partial<Record<SweepAxis, number>> = {};
  for (const k of SWEEP_AXES) if (f[k] !== undefined) fixed[k] = f[k];
  const sizes = f.values === undefined
    ? undefined
    : parseList("--values", f.values).map((x) => parseIntValue("--values entries", x, { min: 1 }));
  check(
    !(parsed.given.has("beta") && parsed.given.has("betas")),
    "give --beta or --betas, not both",
  );
  const betas = f.betas === undefined
    ? [f.beta]
    : parseList("--betas", f.betas).map((b) =>
      parseNumberValue("--betas entries", b, { min: 0, max: 1 })
    );
  const reduction = f.reduction as Reduction;
  resolveOptions({ beta: betas[0], reduction });
  const external = f.external === undefined
    ? []
    : parseList("--external", f.external).map(readExternalRows);
  const methods = parseMethods(f.methods);
  const modes = parseModes(f.modes);
  return {
    over,
    values: sizes,
    fixed,
    dtype: parseDtype(f.dtype),
    betas,
    external,
    methods,
    modes,
    fixture: parseFixtureName(f.fixture),
    seed: f.seed,
    reduction,
    reps: f.reps,
    warmup: f.warmup,
    out: f.out,
    adapter: f.adapter as AdapterChoice,
    resume: f.resume,
  };
}

/** Four doublings ending at `top` (rounded to integers): 32000, 64000, 128000, 256000. */
export function defaultValues(top: number): number[] {
  return [8, 4, 2, 1].map((k) => Math.max(1, Math.round(top / k)));
}

/** Runs the command with `args`. */
export async function sweepMain(args: string[]): Promise<void> {
  const flags = _parseFlags(args);
  if (!flags) return;
  const started = performance.now();
  let ctx = await GpuContext.create({ adapter: flags.adapter });
  const software = ctx.report.isFallbackAdapter;
  const def = software ? SOFTWARE_SHAPE : PAPER_SHAPE;
  const base = {
    n: flags.fixed.n ?? def.n,
    v: flags.fixed.v ?? def.v,
    d: flags.fixed.d ?? def.d,
    dtype: flags.dtype,
  };
  const values = flags.values ?? defaultValues(def[flags.over]);
  base[flags.over] = values[0];
  const reduced = software &&
    SWEEP_AXES.some((k) => k !== flags.over && flags.fixed[k] === undefined);
  const reducedShape = reduced
    ? `The paper's shape would take hours on the software adapter ${ctx.report.description}, ` +
      `so the fixed sizes default to table3's reduced shape ` +
      `${SOFTWARE_SHAPE.n} × ${SOFTWARE_SHAPE.v} × ${SOFTWARE_SHAPE.d}.`
    : undefined;
  const repetitions = defaultRepetitions(software, flags);
  const { reps, warmup } = repetitions;
  const plan: SweepPlan = {
    over: flags.over,
    values,
    base,
    betas: flags.betas,
    methods: flags.methods,
    modes: flags.modes,
    fixture: flags.fixture,
    seed: flags.seed,
    reduction: flags.reduction,
    // as table3: on hardware without --reps, each cell repeats until 0.6 s is measured (3 to 20)
    ...repetitions,
  };
  const progress = new Progress({ label: "sweep", total: planWeight(plan) });
  const fixedText = SWEEP_AXES.filter((k) => k !== flags.over).map((k) => `${k}=${base[k]}`)
    .join(" ");
  progress.log(
    `${ctx.report.description}${software ? " (software)" : ""}: ${flags.over} ∈ {${
      values.join(", ")
    }} at ${fixedText} ${base.dtype}, fixture ${flags.fixture}, β ∈ {${flags.betas.join(", ")}}, ` +
      `${flags.methods.length} method${flags.methods.length === 1 ? "" : "s"}, modes ${
        flags.modes.join(",")
      }, ${repsText(repetitions)} reps after ${warmup} warm-up${reduced ? " (reduced shape)" : ""}`,
  );
  const external = flags.external.filter((x) => {
    const ok = externalMatches(x, plan);
    if (!ok) {
      progress.log(
        `ignoring ${x.source}: shape ${x.shape.n}×${x.shape.v}×${x.shape.d} does not match the ` +
          `fixed sizes`,
      );
    }
    return ok;
  });
  const gpuBytes = software ? undefined : await nvidiaMemoryBytes();
  const report: SweepReport = {
    env: await collectEnv(ctx),
    over: flags.over,
    values,
    base,
    fixture: flags.fixture,
    seed: flags.seed,
    betas: flags.betas,
    modes: flags.modes,
    methods: flags.methods.map((m) => ({ name: m.name, label: m.label })),
    reduction: flags.reduction,
    warmup,
    reps,
    timeSource: ctx.hasTimestamps ? "gpu" : "wall",
    reducedShape,
    complete: false,
    cells: [],
    external: external.length > 0 ? external : undefined,
  };
  const previous = flags.resume ? _previousCells(report, flags.out) : new Map<string, SweepCell>();
  if (flags.resume) progress.log(`resuming: ${previous.size} cells measured before are kept`);
  writeSweepData(report, flags.out);
  let count = 0;
  const total = values.length * flags.betas.length * flags.methods.length * flags.modes.length;
  const result = await runSweep(ctx, plan, {
    onCell(cell, ms) {
      report.cells.push(cell);
      report.durationS = (performance.now() - started) / 1000;
      writeSweepData(report, flags.out);
      const r = cell.row;
      const text = formatCell(r);
      const resumed = previous.get(_key(cell.x, r.beta, r.method, r.mode)) === cell;
      progress.step(
        `[${++count}/${total}] ${flags.over}=${cell.x} ${r.method} β=${r.beta} ${r.mode}: ` +
          `${r.error ? paint("red", text) : text} (${
            resumed ? "from the earlier run" : `${(ms / 1000).toFixed(1)} s`
          })`,
        cellWeight(cell.shape, r.mode),
      );
    },
    onNote: (text) => progress.log(text),
    done: (x, beta, method, mode) => previous.get(_key(x, beta, method, mode)),
    reopen: () => GpuContext.create({ adapter: flags.adapter }),
    budgetBytes: (c, inputBytes) =>
      gpuBytes !== undefined ? gpuBytes - inputBytes - 512 * 2 ** 20 : defaultMemoryBudget(c),
  });
  ctx = result.ctx;
  report.complete = true;
  report.durationS = (performance.now() - started) / 1000;
  const paths = await writeSweepReport(report, flags.out);
  progress.finish();
  const failed = report.cells.filter((c) => c.row.error !== undefined).length;
  progress.log(
    `${failed === 0 ? "every cell measured" : `${failed} of ${report.cells.length} cells failed`}` +
      `; ${formatDuration(report.durationS)}; wrote ${paths.csv}, ${paths.json}, ` +
      `${paths.timeSvg}, ${paths.memorySvg}`,
  );
  ctx.destroy();
}

function _key(x: number, beta: number, method: string, mode: Mode): string {
  return `${x}|${beta}|${method}|${mode}`;
}

/**
 * The cells without error of an earlier run of the same sweep (same swept size, fixed sizes,
 * dtype, fixture, seed, reduction, repetitions and warm-up) in `dir`; an empty map when there is
 * none; InputError when the file there belongs to another sweep.
 */
function _previousCells(r: SweepReport, dir: string): Map<string, SweepCell> {
  const path = join(dir, `${sweepBaseName(r)}.json`);
  const out = new Map<string, SweepCell>();
  if (!existsSync(path)) return out;
  let old: SweepReport;
  try {
    old = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new InputError(`--resume: cannot read ${path}: ${(e as Error).message.split("\n")[0]}`);
  }
  const same = (k: string, a: unknown, b: unknown) =>
    check(
      JSON.stringify(a) === JSON.stringify(b),
      `--resume: ${path} was measured with another ${k} (${JSON.stringify(a)}, now ${
        JSON.stringify(b)
      }); give another --out or drop --resume`,
    );
  same("swept size", old.over, r.over);
  for (const k of SWEEP_AXES) if (k !== r.over) same(k, old.base?.[k], r.base[k]);
  same("dtype", old.base?.dtype, r.base.dtype);
  same("fixture", old.fixture, r.fixture);
  same("seed", old.seed, r.seed);
  same("reduction", old.reduction, r.reduction);
  same("reps", old.reps, r.reps);
  same("warmup", old.warmup, r.warmup);
  for (const c of old.cells ?? []) {
    if (c.row?.error !== undefined) continue;
    out.set(_key(c.x, c.row.beta, c.row.method, c.row.mode), c);
  }
  return out;
}

if (import.meta.main) {
  await runCli(() => sweepMain(Deno.args));
}
