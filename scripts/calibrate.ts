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
 * [--out DIR [--name NAME]] [--adapter auto|software|hardware]. Prints the metrics and the
 * non-empty bins; with --out writes DIR/calibration_NAME.svg (reliability diagram) and
 * DIR/calibration_NAME.json (NAME defaults to `reliability`), each under a temporary name first
 * and renamed once both are written. Bad flags or inputs print one line `error: …`, exit with
 * status 2 and write nothing.
 * @module
 */
import { join } from "node:path";
import { ADAPTER_FLAG, defineCommand, runCli } from "../core/cli.ts";
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
import { readNpy, toFloat32, toInt32Targets } from "../io/npy.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { streamingCalibration } from "../calibration/streaming.ts";
import type { CalibrationReport } from "../calibration/metrics.ts";
import { reliabilityDiagram } from "../calibration/reliability_svg.ts";

/** The command line of `calibrate`. */
export const CALIBRATE_COMMAND = defineCommand({
  name: "deno task calibrate",
  summary: "ECE, RMS calibration error and a reliability diagram from the fused forward's " +
    "streaming statistics, of .npy files (--e, --c, --targets) or of a fixture (--fixture).",
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
    out: { type: "string", arg: "DIR", help: "write the report and diagram here" },
    name: { type: "string", help: "file name stem with --out", defaultText: "reliability" },
    adapter: ADAPTER_FLAG,
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
}

/** Runs the command with `args` (throws InputError on bad flags or inputs; see runCli). */
export async function calibrateMain(args: string[]): Promise<void> {
  const job = await _parse(args);
  if (job === "help") return;
  const ctx = await GpuContext.create({ adapter: job.adapter });
  try {
    const { report, tokens } = await streamingCalibration(ctx, job.x, {
      dtype: job.dtype,
      beta: job.opts.beta,
      softcap: job.opts.softcap,
      ignoreIndex: job.opts.ignoreIndex,
      bins: job.bins,
    });
    const { n, v, d } = job.x;
    const what = job.source.kind === "fixture"
      ? `fixture ${job.source.fixture} (seed ${job.source.seed})`
      : `${job.source.e}, ${job.source.c}, ${job.source.targets}`;
    console.log(
      `calibration of ${what}: n = ${n}, |V| = ${v}, d = ${d}, ${job.dtype}, β = ${job.opts.beta}` +
        `${job.opts.softcap === undefined ? "" : `, softcap ${job.opts.softcap}`}; ` +
        `fused forward on ${ctx.report.description}`,
    );
    console.log(_summary(report, tokens.meanLoss));
    console.log(_binTable(report));
    if (job.out !== undefined) {
      const label = job.source.kind === "fixture" ? `${job.source.fixture} fixture` : "inputs";
      const svg = await reliabilityDiagram({
        series: [{ label, report }],
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
        adapter: ctx.report.description,
        meanLoss: tokens.meanLoss,
        ...report,
      };
      const base = join(job.out, `calibration_${job.name}`);
      await _writeAtomic([
        [`${base}.svg`, svg],
        [`${base}.json`, JSON.stringify(json, null, 1) + "\n"],
      ]);
      console.log(`wrote ${base}.svg and ${base}.json`);
    }
  } finally {
    ctx.destroy();
  }
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
  const adapter = v.adapter;
  check(v.name === undefined || v.out !== undefined, "--name needs --out");
  const name = v.name ?? "reliability";
  check(/^[A-Za-z0-9_.-]+$/.test(name), `--name must be letters, digits, _ . or -, got '${name}'`);
  const files = [v.e, v.c, v.targets].filter((f) => f !== undefined).length;
  const shapeFlags = (["n", "v", "d", "seed", "ignore-fraction"] as const).filter((k) =>
    v[k] !== undefined
  );
  let x: HostInputs;
  let source: Record<string, unknown>;
  if (v.fixture !== undefined) {
    check(files === 0, "give either --fixture or --e/--c/--targets, not both");
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
      files === 3,
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
  return {
    x,
    source,
    dtype,
    opts,
    bins,
    out: v.out,
    name,
    adapter: adapter as AdapterChoice | undefined,
  };
}

/** Reads E, C and the targets from .npy files and rounds E and C to `dtype`. */
async function _readInputs(
  ePath: string,
  cPath: string,
  tPath: string,
  dtype: Dtype,
): Promise<HostInputs> {
  const eNpy = await readNpy(ePath), cNpy = await readNpy(cPath), tNpy = await readNpy(tPath);
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

/** Writes every file under a temporary name, then renames them all; removes leftovers on error. */
async function _writeAtomic(files: [string, string][]): Promise<void> {
  const tag = `.tmp-${Deno.pid}`;
  const dir = files[0][0].replace(/[^/]*$/, "") || ".";
  await Deno.mkdir(dir, { recursive: true });
  try {
    for (const [path, text] of files) await Deno.writeTextFile(path + tag, text);
    for (const [path] of files) await Deno.rename(path + tag, path);
  } finally {
    for (const [path] of files) await Deno.remove(path + tag).catch(() => {});
  }
}

if (import.meta.main) await runCli(() => calibrateMain(Deno.args));
