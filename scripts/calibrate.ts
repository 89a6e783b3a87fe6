/**
 * `./dev task calibrate`: ECE, RMS calibration error and the reliability diagram of a linear LM head
 * from the fused forward's streaming per-token statistics (calibration/streaming.ts), without
 * the n×|V| logits.
 *
 *   ./dev task calibrate --e E.npy --c C.npy --targets T.npy [options]
 *   ./dev task calibrate --fixture llm [--n 2048] [--v 4096] [--d 128] [--seed 0]
 *     [--ignore-fraction F] [options]
 *
 * Options: [--beta B] [--softcap S] [--bins M] [--dtype bf16|f16|f32] [--ignore-index I]
 * [--temperature T] [--fit-temperature] [--json FILE] [--out DIR [--name NAME]] [--adapter
 * auto|software|hardware] [--webgpu deno|dawn|dawn-unchecked]. Prints the metrics and the non-empty bins, then
 * entropy calibration (mean entropy against mean NLL, overall and per confidence bin); every
 * statistic is of the logits divided by T (default 1; calibration/temperature.ts: the fused forward
 * on E/T, softcap s/T). --fit-temperature also finds the NLL-optimal T* (one fused forward per
 * step, T* to a relative 1e-4, starting from T) and prints NLL, ECE, RMSCE, entropy and accuracy
 * before (at T) and after (at T*). --json FILE writes {temperature, before, after (only with the
 * fit), tokens, bins, env}. With --out writes DIR/calibration_NAME.svg (reliability diagram; with
 * the fit, before and after) and DIR/calibration_NAME.json (NAME defaults to `reliability`). The
 * flags are declared with core/cli.ts (`--help` lists them with their defaults). Every output path
 * is checked before any GPU work, and the files are written all or nothing (io/outputs.ts). The
 * `.npy` inputs are read bounded (io/npy.ts); a value of E or C that is not finite or overflows the
 * compute dtype is named by tensor, row and column. Bad flags or inputs, and a fit that cannot
 * bracket a minimum, print one line `error: …`, exit with status 2 and write nothing; a GPU failure
 * exits 1.
 * @module
 */
import { join } from "node:path";
import { ADAPTER_FLAG, defineCommand, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { checkInputs, type HostInputs, parseDtype, resolveOptions } from "../core/options.ts";
import { makeFixture, parseFixture } from "../fixtures/mod.ts";
import { readInputFiles } from "../io/npy_inputs.ts";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine, parseEngine } from "../gpu/engine.ts";
import { checkTemperature, checkTemperatureFor } from "../calibration/temperature.ts";
import { inputNeed } from "../measure/inputs.ts";
import { capAllocations, gpuBudget, npyInputsHostNeed, requireFits } from "../measure/memory.ts";
import {
  type CalibrateJob,
  calibrationFiles,
  calibrationText,
  runCalibration,
} from "../calibration/calibrate_run.ts";

/** The command line of `calibrate`. */
export const CALIBRATE_COMMAND = defineCommand({
  name: "./dev task calibrate",
  summary: "ECE, RMS calibration error, entropy calibration and a reliability diagram from the " +
    "fused forward's streaming statistics (no logits), of .npy files (--e, --c, --targets) or " +
    "of a fixture (--fixture); optionally at a temperature T or at the NLL-optimal T* " +
    "(--fit-temperature).",
  flags: {
    e: { type: "string", arg: "E.npy", help: "hidden states, n×d" },
    c: { type: "string", arg: "C.npy", help: "classifier, v×d" },
    targets: { type: "string", arg: "T.npy", help: "targets, n" },
    fixture: { type: "string", arg: "NAME", help: "a fixture instead of files" },
    n: { type: "int", min: 1, help: "fixture tokens", defaultText: "2048" },
    v: { type: "int", min: 1, help: "fixture vocabulary", defaultText: "4096" },
    d: { type: "int", min: 1, help: "fixture hidden size", defaultText: "128" },
    seed: { type: "int", help: "fixture seed", defaultText: "0" },
    "ignore-fraction": {
      type: "number",
      help: "fixture share of ignored targets",
      defaultText: "0",
    },
    beta: { type: "number", help: "label smoothing", default: 0 },
    softcap: { type: "number", help: "logit softcap (> 0), none when absent" },
    bins: { type: "int", min: 1, help: "calibration bins", default: 15 },
    dtype: { type: "string", arg: "bf16|f16|f32", help: "compute dtype", default: "f32" },
    "ignore-index": { type: "int", help: "target value ignored", default: -100 },
    temperature: {
      type: "number",
      arg: "T",
      help: "divide the logits by T (> 0) before every statistic",
      default: 1,
    },
    "fit-temperature": {
      type: "boolean",
      help: "also find the NLL-optimal T* (starting from T) and print before and after",
    },
    json: {
      type: "string",
      arg: "FILE",
      help: "write {temperature, before, after, tokens, bins, env} here",
    },
    out: { type: "string", arg: "DIR", help: "write the report and diagram here" },
    name: { type: "string", help: "file name stem with --out", defaultText: "reliability" },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
  },
});
const USAGE = CALIBRATE_COMMAND.usage();

/** Default fixture shape: small enough for a software adapter in a few seconds. */
const FIXTURE_DEFAULTS = { n: 2048, v: 4096, d: 128 };

/** The validated command line: the job and the adapter to run it on. */
interface _Job extends CalibrateJob {
  adapter?: AdapterChoice;
  engine?: Engine;
}

/** Runs the command with `args` (throws InputError on bad flags or inputs; see runCli). */
export async function calibrateMain(args: string[]): Promise<void> {
  const job = await _parse(args);
  if (job === "help") return;
  const ctx = await GpuContext.create({ adapter: job.adapter, engine: job.engine });
  const device = `${ctx.report.description} (${deviceSummary(ctx.report)})`;
  try {
    // the inputs on the GPU (f32 at most) and the per-token statistics
    const { n, v, d } = job.x;
    const need = { hostBytes: 0, gpuBytes: (n + v) * d * 4 + n * 64 + 2 ** 20 };
    const free = await requireFits(ctx, need, `calibration at ${n} × ${v} × ${d}`);
    const limit = ctx.memory().liveBytes + gpuBudget(free);
    const r = await capAllocations(ctx, limit, () => runCalibration(ctx, job));
    console.log(calibrationText(job, r, device));
    const files = await calibrationFiles(job, r, device);
    if (files.length > 0) {
      await writeAllOrNothing(files);
      console.log(`wrote ${files.map((f) => f.path).join(", ")}`);
    }
  } finally {
    ctx.destroy();
  }
}

async function _parse(args: string[]): Promise<_Job | "help"> {
  const parsed = CALIBRATE_COMMAND.parse(args);
  if (!parsed) return "help";
  const v = parsed.values;
  const dtype = parseDtype(v.dtype);
  const opts = resolveOptions({
    beta: v.beta,
    softcap: v.softcap,
    ignoreIndex: v["ignore-index"],
    reduction: "mean",
  });
  const bins = v.bins;
  const temperature = v.temperature;
  checkTemperature(temperature, "--temperature");
  check(v.json === undefined || v.json.trim() !== "", `--json needs a file name, got '${v.json}'`);
  check(v.name === undefined || v.out !== undefined, "--name needs --out");
  const name = v.name ?? "reliability";
  check(/^[A-Za-z0-9_.-]+$/.test(name), `--name must be letters, digits, _ . or -, got '${name}'`);
  const inputs = [v.e, v.c, v.targets].filter((f) => f !== undefined);
  // every output can be written, before anything is read (nothing is written on a failure)
  const outputs = v.out === undefined
    ? []
    : ["svg", "json"].map((ext) => join(v.out!, `calibration_${name}.${ext}`));
  if (v.json !== undefined) outputs.push(v.json);
  checkOutputs(outputs, inputs);
  const shapeFlags = (["n", "v", "d", "seed", "ignore-fraction"] as const).filter((k) =>
    v[k] !== undefined
  );
  let x: HostInputs;
  let source: Record<string, unknown>;
  if (v.fixture !== undefined) {
    check(inputs.length === 0, "give either --fixture or --e/--c/--targets, not both");
    const fixture = parseFixture(v.fixture).spec;
    const seed = v.seed ?? 0;
    const shape = {
      n: v.n ?? FIXTURE_DEFAULTS.n,
      v: v.v ?? FIXTURE_DEFAULTS.v,
      d: v.d ?? FIXTURE_DEFAULTS.d,
    };
    const ignoreFraction = v["ignore-fraction"] ?? 0;
    const need = inputNeed({ ...shape, dtype, fixture: "host" });
    await requireFits(undefined, { hostBytes: need.hostBytes, gpuBytes: 0 }, "the fixture");
    x = makeFixture(fixture, { ...shape, dtype, seed, ignoreFraction });
    source = { kind: "fixture", fixture, seed, ignoreFraction };
  } else {
    check(
      inputs.length === 3,
      `give --e, --c and --targets (or --fixture NAME) (${USAGE})`,
    );
    check(
      shapeFlags.length === 0,
      `--${shapeFlags[0]} applies only with --fixture`,
    );
    const files = { e: v.e!, c: v.c!, targets: v.targets! };
    await requireFits(
      undefined,
      { hostBytes: npyInputsHostNeed(files), gpuBytes: 0 },
      "the inputs",
    );
    x = await readInputFiles(files, dtype);
    source = { kind: "files", e: v.e, c: v.c, targets: v.targets };
  }
  checkInputs(x, opts);
  checkTemperatureFor(x, temperature, "--temperature");
  return {
    x,
    source,
    dtype,
    opts,
    bins,
    out: v.out,
    name,
    adapter: v.adapter as AdapterChoice,
    engine: parseEngine(v.webgpu),
    temperature,
    fit: v["fit-temperature"],
    json: v.json,
  };
}

if (import.meta.main) await runCli(() => calibrateMain(Deno.args));
