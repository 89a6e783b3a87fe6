/**
 * `deno task calibrate`: ECE, RMS calibration error and the reliability diagram of a linear LM head
 * from the fused forward's streaming per-token statistics (calibration/streaming.ts), without
 * the n×|V| logits.
 *
 *   deno run -A scripts/calibrate.ts --e E.npy --c C.npy --targets T.npy [options]
 *   deno run -A scripts/calibrate.ts --fixture llm [--n 2048] [--v 4096] [--d 128] [--seed 0]
 *     [--ignore-fraction F] [options]
 *
 * Options: [--beta B] [--softcap S] [--bins M] [--dtype bf16|f16|f32] [--ignore-index I]
 * [--temperature T] [--fit-temperature] [--json FILE] [--out DIR [--name NAME]]
 * [--adapter auto|software|hardware]. Prints the metrics and the non-empty bins, then entropy
 * calibration (mean entropy against mean NLL, overall and per confidence bin); every statistic is
 * of the logits divided by T (default 1; calibration/temperature.ts: the fused forward on E/T,
 * softcap s/T). --fit-temperature also finds the NLL-optimal T* (one fused forward per step, T*
 * to a relative 1e-4, starting from T) and prints NLL, ECE, RMSCE, entropy and accuracy before
 * (at T) and after (at T*). --json FILE writes {temperature, before, after (only with the fit),
 * tokens, bins, env}. With --out writes DIR/calibration_NAME.svg (reliability diagram; with the
 * fit, before and after) and DIR/calibration_NAME.json (NAME defaults to `reliability`). The flags
 * are declared with core/cli.ts (`--help` lists them with their defaults). Every output path is
 * checked before any GPU work, and the files are written all or nothing (io/outputs.ts). The
 * `.npy` inputs are read bounded (io/npy.ts); a value of E or C that is not finite or overflows
 * the compute dtype is named by tensor, row and column. Bad flags or inputs, and a fit that
 * cannot bracket a minimum, print one line `error: …`, exit with status 2 and write nothing; a
 * GPU failure exits 1.
 * @module
 */
import { join } from "node:path";
import { ADAPTER_FLAG, defineCommand, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { roundInput } from "../core/dtype.ts";
import {
  checkInputs,
  type Dtype,
  type HostInputs,
  type LceOptions,
  parseDtype,
  resolveOptions,
} from "../core/options.ts";
import { makeFixture, parseFixtureName } from "../fixtures/mod.ts";
import { readNpy, type ReadNpyOptions, toFloat32, toInt32Targets } from "../io/npy.ts";
import { checkOutputs, type OutputFile, writeAllOrNothing } from "../io/outputs.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine } from "../gpu/engine.ts";
import { streamingCalibration } from "../calibration/streaming.ts";
import type { CalibrationReport } from "../calibration/metrics.ts";
import {
  checkTemperature,
  FIT_RTOL,
  prepareTemperatureScan,
  scaledInputs,
  type TemperatureFit,
  type TemperaturePoint,
} from "../calibration/temperature.ts";
import { reliabilityDiagram } from "../calibration/reliability_svg.ts";

/** The command line of `calibrate`. */
export const CALIBRATE_COMMAND = defineCommand({
  name: "deno task calibrate",
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

/** What was measured, for the report. */
interface _Job {
  x: HostInputs;
  source: Record<string, unknown>;
  dtype: Dtype;
  opts: LceOptions;
  bins: number;
  out?: string;
  name: string;
  adapter?: AdapterChoice;
  engine?: Engine;
  temperature: number;
  fit: boolean;
  json?: string;
}

/** Runs the command with `args` (throws InputError on bad flags or inputs; see runCli). */
export async function calibrateMain(args: string[]): Promise<void> {
  const job = await _parse(args);
  if (job === "help") return;
  const ctx = await GpuContext.create({ adapter: job.adapter, engine: job.engine });
  try {
    const t = job.temperature;
    // the label-smoothed loss of the summary line needs a pass with β; the rest is β = 0 (NLL)
    let smoothedLoss: number | undefined;
    if (job.opts.beta !== 0) {
      const at = scaledInputs(job.x, t, job.opts.softcap);
      smoothedLoss = (await streamingCalibration(ctx, at.x, {
        dtype: job.dtype,
        beta: job.opts.beta,
        softcap: at.softcap,
        ignoreIndex: job.opts.ignoreIndex,
        bins: job.bins,
      })).tokens.meanLoss;
    }
    const scan = await prepareTemperatureScan(ctx, job.x, {
      dtype: job.dtype,
      softcap: job.opts.softcap,
      ignoreIndex: job.opts.ignoreIndex,
      bins: job.bins,
    });
    let before: TemperaturePoint, fit: TemperatureFit<TemperaturePoint> | undefined;
    try {
      before = await scan.at(t);
      if (job.fit) fit = await scan.fit({ start: t });
    } finally {
      scan.destroy();
    }
    const report = before.report;
    const { n, v, d } = job.x;
    const what = job.source.kind === "fixture"
      ? `fixture ${job.source.fixture} (seed ${job.source.seed})`
      : `${job.source.e}, ${job.source.c}, ${job.source.targets}`;
    console.log(
      `calibration of ${what}: n = ${n}, |V| = ${v}, d = ${d}, ${job.dtype}, β = ${job.opts.beta}` +
        `${job.opts.softcap === undefined ? "" : `, softcap ${job.opts.softcap}`}` +
        `${t === 1 ? "" : `, temperature ${t}`}; fused forward on ${ctx.report.description} (${
          deviceSummary(ctx.report)
        })`,
    );
    console.log(_summary(report, smoothedLoss ?? before.nll));
    console.log(_binTable(report));
    const after = fit?.point;
    console.log(_entropyLines(before, after));
    if (fit !== undefined) console.log(_fitLines(before, fit));
    const files: OutputFile[] = [];
    if (job.out !== undefined) {
      const label = job.source.kind === "fixture" ? `${job.source.fixture} fixture` : "inputs";
      const tag = (p: TemperaturePoint) => `T = ${p.temperature.toPrecision(5)}`;
      const series = after === undefined
        ? [{ label, report }]
        : [{ label: `${label}, ${tag(before)}`, report }, {
          label: `${label}, fitted ${tag(after)}`,
          report: after.report,
        }];
      const svg = await reliabilityDiagram({
        series,
        title: `Reliability diagram (fused forward, no logits): n = ${n}, |V| = ${v}, d = ${d}`,
      });
      const json = {
        description: "Calibration from the fused forward's per-token statistics (confidence = " +
          "exp(max logit − LSE), correct = argmax == target, entropy = LSE − Σ p·z); the n×|V| " +
          "logits are never materialised. Ignored targets are left out.",
        source: job.source,
        shape: { n, v, d },
        dtype: job.dtype,
        beta: job.opts.beta,
        softcap: job.opts.softcap ?? null,
        ignoreIndex: job.opts.ignoreIndex,
        temperature: t,
        adapter: ctx.report.description,
        webgpu: deviceSummary(ctx.report),
        meanLoss: smoothedLoss ?? before.nll,
        ...report,
      };
      const base = join(job.out, `calibration_${job.name}`);
      files.push({ path: `${base}.svg`, bytes: svg }, {
        path: `${base}.json`,
        bytes: JSON.stringify(json, null, 1) + "\n",
      });
    }
    if (job.json !== undefined) {
      const doc = _jsonDocument(
        job,
        ctx.report.description,
        before,
        fit,
        deviceSummary(ctx.report),
      );
      files.push({ path: job.json, bytes: JSON.stringify(doc, null, 1) + "\n" });
    }
    if (files.length > 0) {
      await writeAllOrNothing(files);
      console.log(`wrote ${files.map((f) => f.path).join(", ")}`);
    }
  } finally {
    ctx.destroy();
  }
}

/** The five headline numbers of one temperature, as in the --json document. */
function _headline(p: TemperaturePoint) {
  return {
    nll: p.nll,
    ece: p.report.ece,
    rmsce: p.report.rmsce,
    entropy: p.report.meanEntropy,
    accuracy: p.report.accuracy,
  };
}

/** Per-bin statistics of one temperature: reliability and entropy calibration. */
function _binStats(p: TemperaturePoint, m: number) {
  const r = p.report.perBin[m], h = p.entropy.perBin[m];
  const num = (x: number) => (Number.isNaN(x) ? null : x);
  return {
    count: r.count,
    accuracy: num(r.accuracy),
    confidence: num(r.confidence),
    entropy: num(h.entropy),
    nll: num(h.nll),
    gap: num(h.gap),
  };
}

/** The --json document: {temperature, before, after?, tokens, bins, env}. */
function _jsonDocument(
  job: _Job,
  adapter: string,
  before: TemperaturePoint,
  fit: TemperatureFit<TemperaturePoint> | undefined,
  webgpu: string,
) {
  const after = fit?.point;
  return {
    temperature: after?.temperature ?? before.temperature,
    before: _headline(before),
    ...(after === undefined ? {} : { after: _headline(after) }),
    tokens: before.report.count,
    bins: before.report.perBin.map((b, m) => ({
      lo: b.lo,
      hi: b.hi,
      before: _binStats(before, m),
      ...(after === undefined ? {} : { after: _binStats(after, m) }),
    })),
    env: {
      description: "before: statistics of the logits divided by the temperature given " +
        "(--temperature, default 1); after: at the fitted T* (mean NLL minimised, β = 0). " +
        "nll and entropy in nats; gap = entropy − nll (< 0: over-confident); ece, rmsce and " +
        "accuracy as fractions; bins: equal-width confidence bins (lo, hi] of the tokens at " +
        "each temperature. Computed from the fused forward's per-token statistics, without " +
        "the n×|V| logits.",
      adapter,
      webgpu,
      deno: Deno.version.deno,
      os: `${Deno.build.os}-${Deno.build.arch}`,
      source: job.source,
      shape: { n: job.x.n, v: job.x.v, d: job.x.d },
      dtype: job.dtype,
      beta: job.opts.beta,
      softcap: job.opts.softcap ?? null,
      ignoreIndex: job.opts.ignoreIndex,
      bins: job.bins,
      startTemperature: job.temperature,
      fit: fit === undefined ? null : {
        rtol: FIT_RTOL,
        forwards: fit.evaluations,
        bracket: fit.bracket,
        trace: fit.trace,
      },
    },
  };
}

/** Entropy calibration: mean entropy against mean NLL, overall and per non-empty bin. */
function _entropyLines(before: TemperaturePoint, after?: TemperaturePoint): string {
  const f = (x: number) => x.toFixed(4);
  const sgn = (x: number) => (x >= 0 ? "+" : "−") + f(Math.abs(x));
  const one = (p: TemperaturePoint) =>
    `mean entropy ${f(p.entropy.meanEntropy)} nats, mean NLL ${f(p.entropy.meanNll)} nats, ` +
    `gap (entropy − NLL) ${sgn(p.entropy.gap)} nats (${
      Math.abs(p.entropy.gap) < 5e-5
        ? "balanced"
        : p.entropy.gap < 0
        ? "over-confident"
        : "under-confident"
    })`;
  const lines = [`entropy calibration at T = ${before.temperature}: ${one(before)}`];
  if (after !== undefined) {
    lines.push(`entropy calibration at T* = ${after.temperature.toPrecision(6)}: ${one(after)}`);
  }
  const head = after === undefined ? "" : "   gap at T*";
  lines.push(`  bin            tokens   entropy       NLL       gap${head}`);
  before.entropy.perBin.forEach((b, m) => {
    if (b.count === 0) return;
    const a = after?.entropy.perBin[m];
    const tail = a === undefined ? "" : a.count === 0 ? "           -" : sgn(a.gap).padStart(12);
    lines.push(
      `  (${b.lo.toFixed(3)}, ${b.hi.toFixed(3)}]  ${String(b.count).padStart(6)}  ` +
        `${f(b.entropy).padStart(8)}  ${f(b.nll).padStart(8)}  ${sgn(b.gap).padStart(8)}${tail}`,
    );
  });
  if (after !== undefined) {
    lines.push("  (bins hold the tokens by their confidence at T; at T* they move to other bins)");
  }
  return lines.join("\n");
}

/** The fit's result: T* and the headline numbers before and after. */
function _fitLines(before: TemperaturePoint, fit: TemperatureFit<TemperaturePoint>): string {
  const pct = (x: number) => `${(100 * x).toFixed(2)}%`.padStart(8);
  const row = (label: string, p: TemperaturePoint) =>
    `  ${label.padEnd(20)} ${p.nll.toFixed(5).padStart(9)}  ${pct(p.report.ece)}  ` +
    `${pct(p.report.rmsce)}  ${p.report.meanEntropy.toFixed(5).padStart(9)}  ` +
    `${pct(p.report.accuracy)}`;
  return [
    `temperature fit: T* = ${fit.temperature.toPrecision(6)} minimises the mean NLL ` +
    `(relative tolerance ${FIT_RTOL}, ${fit.evaluations} fused forwards, bracket ` +
    `[${fit.bracket.map((x) => x.toPrecision(4)).join(", ")}])`,
    `  ${"".padEnd(20)} ${"NLL".padStart(9)}  ${"ECE".padStart(8)}  ${"RMSCE".padStart(8)}  ` +
    `${"entropy".padStart(9)}  ${"accuracy".padStart(8)}`,
    row(`before (T = ${before.temperature})`, before),
    row(`after (T* = ${fit.temperature.toPrecision(4)})`, fit.point),
  ].join("\n");
}

/** One-line summary of a report. */
function _summary(r: CalibrationReport, meanLoss: number): string {
  const pct = (x: number) => `${(100 * x).toFixed(2)}%`;
  return `ECE ${pct(r.ece)} (${r.bins} bins), RMSCE ${pct(r.rmsce)}, accuracy ${
    pct(r.accuracy)
  }, ` +
    `mean confidence ${pct(r.meanConfidence)}, N = ${r.count} tokens, ` +
    `mean entropy ${r.meanEntropy.toFixed(4)} nats, mean loss ${meanLoss.toFixed(4)}`;
}

/** The non-empty bins as a small table. */
function _binTable(r: CalibrationReport): string {
  const lines = ["  bin            tokens  accuracy  confidence"];
  for (const b of r.perBin) {
    if (b.count === 0) continue;
    lines.push(
      `  (${b.lo.toFixed(3)}, ${b.hi.toFixed(3)}]  ${String(b.count).padStart(6)}  ` +
        `${b.accuracy.toFixed(4).padStart(8)}  ${b.confidence.toFixed(4).padStart(10)}`,
    );
  }
  return lines.join("\n");
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
  const shapeFlags = (["n", "v", "d", "seed", "ignore-fraction"] as const).filter((k) =>
    v[k] !== undefined
  );
  let x: HostInputs;
  let source: Record<string, unknown>;
  if (v.fixture !== undefined) {
    check(inputs.length === 0, "give either --fixture or --e/--c/--targets, not both");
    const fixture = parseFixtureName(v.fixture);
    const seed = v.seed ?? 0;
    const shape = {
      n: v.n ?? FIXTURE_DEFAULTS.n,
      v: v.v ?? FIXTURE_DEFAULTS.v,
      d: v.d ?? FIXTURE_DEFAULTS.d,
    };
    const ignoreFraction = v["ignore-fraction"] ?? 0;
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
    x = await _readInputs(v.e!, v.c!, v.targets!, dtype);
    source = { kind: "files", e: v.e, c: v.c, targets: v.targets };
  }
  checkInputs(x, opts);
  // every output can be written, before any GPU work (nothing is written on a failure)
  const outputs = v.out === undefined
    ? []
    : ["svg", "json"].map((ext) => join(v.out!, `calibration_${name}.${ext}`));
  if (v.json !== undefined) outputs.push(v.json);
  checkOutputs(outputs, inputs);
  return {
    x,
    source,
    dtype,
    opts,
    bins,
    out: v.out,
    name,
    adapter: v.adapter as AdapterChoice,
    engine: v.webgpu as Engine,
    temperature,
    fit: v["fit-temperature"],
    json: v.json,
  };
}

/**
 * Reads E, C and the targets from .npy files (bounded: regular files whose headers declare no
 * more data than they hold and than this machine's memory) and rounds E and C to `dtype`,
 * refusing non-finite values and values that overflow it.
 */
async function _readInputs(
  ePath: string,
  cPath: string,
  tPath: string,
  dtype: Dtype,
): Promise<HostInputs> {
  const limits: ReadNpyOptions = {
    boundItemBytes: 4,
    maxBytes: Deno.systemMemoryInfo().total,
    maxBytesWhat: "bytes of this machine's memory",
  };
  const eNpy = await readNpy(ePath, limits), cNpy = await readNpy(cPath, limits);
  const tNpy = await readNpy(tPath, limits);
  check(eNpy.shape.length === 2, `${ePath}: E must be 2-D (n×d), got shape (${eNpy.shape})`);
  check(cNpy.shape.length === 2, `${cPath}: C must be 2-D (v×d), got shape (${cNpy.shape})`);
  check(tNpy.shape.length === 1, `${tPath}: targets must be 1-D (n), got shape (${tNpy.shape})`);
  const [n, d] = eNpy.shape, [v, dc] = cNpy.shape;
  check(dc === d, `hidden sizes differ: E is ${n}×${d}, C is ${v}×${dc}`);
  check(tNpy.shape[0] === n, `targets has ${tNpy.shape[0]} entries, E has ${n} rows`);
  return {
    n,
    v,
    d,
    e: roundInput(toFloat32(eNpy, ePath), dtype, { tensor: "E", cols: d }),
    c: roundInput(toFloat32(cNpy, cPath), dtype, { tensor: "C", cols: d }),
    targets: toInt32Targets(tNpy, tPath),
  };
}

if (import.meta.main) await runCli(() => calibrateMain(Deno.args));
