/**
 * `deno task beta-curve`: the paper's central claim in miniature — does label smoothing (β > 0)
 * give a better-calibrated LM head? Trains the linear head C of the `llm` fixture (an
 * over-confident "pretrained" head; E fixed) by mini-batch SGD with the fused kernel
 * (calibration/training.ts), once per β, every run from the same initial C on the same batches
 * (same seed), and measures on the held-out tokens (the last --held-out, never trained on), from
 * the fused forward's streaming statistics (no logits): NLL (β = 0 loss), ECE, RMSCE, accuracy,
 * mean entropy and the entropy gap (entropy − NLL), then the NLL-optimal temperature T* and the
 * NLL and ECE after temperature scaling (calibration/temperature.ts).
 *
 *   deno run -A scripts/beta_curve.ts [--betas 0,0.05,0.1,0.2,0.3] [--n 10240]
 *     [--held-out 2048] [--v 256] [--d 64] [--seed 0] [--steps 300] [--lr 0.1] [--batch 128]
 *     [--bins 15] [--out reports] [--adapter auto|software|hardware]
 *
 * Writes OUT/beta_curve.svg (held-out ECE, NLL and entropy gap against β, before and after
 * temperature scaling) and OUT/beta_curve.json (settings, adapter, one row per β and the initial
 * head), all or nothing (io/outputs.ts; the paths are checked before any GPU work). The flags
 * are declared with core/cli.ts (`--help` lists them with their defaults). Bad flags print one
 * line `error: …`, exit 2 and write nothing; a GPU failure exits 1.
 * @module
 */
import { join } from "node:path";
import { ADAPTER_FLAG, defineCommand, parseNumberValue, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { check, InputError } from "../core/errors.ts";
import type { HostInputs } from "../core/options.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine } from "../gpu/engine.ts";
import { methodByName } from "../methods/mod.ts";
import { lineChartSpec, renderVegaLite, type TopLevelSpec } from "../report/svg.ts";
import { splitTokens, trainLinearHead } from "../calibration/training.ts";
import { prepareTemperatureScan } from "../calibration/temperature.ts";
import { checkOutputs, type OutputFile, writeAllOrNothing } from "../io/outputs.ts";

/** The paper's sweep in miniature. */
const DEFAULT_BETAS = [0, 0.05, 0.1, 0.2, 0.3];

/** The command line of `beta-curve`. */
export const BETA_CURVE_COMMAND = defineCommand({
  name: "deno task beta-curve",
  summary: "The paper's claim in miniature: the llm fixture's head trained by SGD with the " +
    "fused kernel once per β, from the same start on the same batches; held-out NLL, ECE, " +
    "entropy gap and the NLL-optimal T* against β (OUT/beta_curve.svg and .json).",
  flags: {
    betas: {
      type: "string",
      arg: "B1,B2,...",
      help: "label smoothing values, each in [0, 1]",
      default: DEFAULT_BETAS.join(","),
    },
    n: { type: "int", min: 1, help: "tokens (training and held out)", default: 10240 },
    "held-out": { type: "int", min: 1, help: "held-out tokens (the last ones)", default: 2048 },
    v: { type: "int", min: 1, help: "vocabulary", default: 256 },
    d: { type: "int", min: 1, help: "hidden size", default: 64 },
    seed: { type: "int", help: "fixture and batch seed", default: 0 },
    steps: { type: "int", min: 1, help: "SGD steps", default: 300 },
    lr: { type: "number", help: "learning rate (> 0)", default: 0.1 },
    batch: { type: "int", min: 1, help: "batch size", default: 128 },
    bins: { type: "int", min: 1, help: "calibration bins", default: 15 },
    out: { type: "string", arg: "DIR", help: "report directory", default: "reports" },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
  },
});

interface _Options {
  betas: number[];
  n: number;
  heldOut: number;
  v: number;
  d: number;
  seed: number;
  steps: number;
  lr: number;
  batch: number;
  bins: number;
  out: string;
  adapter: AdapterChoice;
  engine: Engine;
}

/** Held-out statistics of one head. */
export interface HeldOutRow {
  /** β the head was trained with (null: the initial head). */
  beta: number | null;
  /** Final training loss (mean over the last step's batch, with the run's β). */
  trainLoss: number | null;
  nll: number;
  ece: number;
  rmsce: number;
  accuracy: number;
  meanConfidence: number;
  entropy: number;
  /** entropy − nll, nats (< 0: over-confident). */
  entropyGap: number;
  /** NLL-optimal temperature on the held-out tokens. */
  temperature: number;
  /** NLL, ECE and entropy gap at T*. */
  nllAfter: number;
  eceAfter: number;
  entropyGapAfter: number;
  /** Training wall time, ms (null for the initial head). */
  trainMs: number | null;
  /** Why T* is missing (NaN above, null in the JSON), when the fit found no minimum. */
  fitError?: string;
}

/** Held-out statistics of head `c` (NLL, ECE, entropy gap, T* and the values at T*). */
async function _heldOut(
  ctx: GpuContext,
  heldOut: HostInputs,
  c: Float32Array,
  bins: number,
): Promise<Omit<HeldOutRow, "beta" | "trainLoss" | "trainMs">> {
  const scan = await prepareTemperatureScan(ctx, { ...heldOut, c }, { bins });
  try {
    const p = await scan.at(1);
    let fit;
    try {
      fit = await scan.fit();
    } catch (e) {
      // no minimum to bracket: reported in the row (NaN, null in the JSON), the curve goes on
      if (!(e instanceof InputError)) throw e;
      return {
        nll: p.nll,
        ece: p.report.ece,
        rmsce: p.report.rmsce,
        accuracy: p.report.accuracy,
        meanConfidence: p.report.meanConfidence,
        entropy: p.report.meanEntropy,
        entropyGap: p.entropy.gap,
        temperature: NaN,
        nllAfter: NaN,
        eceAfter: NaN,
        entropyGapAfter: NaN,
        fitError: e.message,
      };
    }
    return {
      nll: p.nll,
      ece: p.report.ece,
      rmsce: p.report.rmsce,
      accuracy: p.report.accuracy,
      meanConfidence: p.report.meanConfidence,
      entropy: p.report.meanEntropy,
      entropyGap: p.entropy.gap,
      temperature: fit.temperature,
      nllAfter: fit.point.nll,
      eceAfter: fit.point.report.ece,
      entropyGapAfter: fit.point.entropy.gap,
    };
  } finally {
    scan.destroy();
  }
}

/** Runs the command with `args` (throws InputError on bad flags; see runCli). */
export async function betaCurveMain(args: string[]): Promise<void> {
  const o = _parse(args);
  if (o === "help") return;
  const x = makeFixture("llm", { n: o.n, v: o.v, d: o.d, seed: o.seed });
  const { train, heldOut } = splitTokens(x, o.heldOut);
  const ctx = await GpuContext.create({ adapter: o.adapter, engine: o.engine });
  try {
    console.log(
      `β curve on ${ctx.report.description} (${
        deviceSummary(ctx.report)
      }): llm fixture (seed ${o.seed}), ${train.n} training ` +
        `tokens in batches of ${o.batch}, |V| = ${o.v}, d = ${o.d}, f32; ${o.steps} SGD steps, ` +
        `lr ${o.lr}, C trained (E fixed), fused kernel; ${heldOut.n} held-out tokens`,
    );
    const rows: HeldOutRow[] = [];
    const init = await _heldOut(ctx, heldOut, heldOut.c, o.bins);
    rows.push({ beta: null, trainLoss: null, trainMs: null, ...init });
    for (const beta of o.betas) {
      const r = await trainLinearHead(ctx, {
        method: methodByName("fused"),
        data: train,
        beta,
        steps: o.steps,
        lr: o.lr,
        batchSize: o.batch,
      });
      const h = await _heldOut(ctx, heldOut, r.c, o.bins);
      const trainLoss = r.records[r.records.length - 1].loss;
      rows.push({ beta, trainLoss, trainMs: r.wallMs, ...h });
      console.log(
        `  β = ${beta}: trained in ${(r.wallMs / 1000).toFixed(1)} s (last batch loss ` +
          `${trainLoss.toFixed(4)}); held-out ECE ${(100 * h.ece).toFixed(2)}%, NLL ` +
          `${h.nll.toFixed(4)}, T* ${h.temperature.toFixed(4)}`,
      );
    }
    console.log(_table(rows));
    const curve = rows.filter((r) => r.beta !== null);
    const best = (k: "ece" | "nll" | "eceAfter" | "nllAfter") =>
      curve.reduce((a, b) => (b[k] < a[k] ? b : a)).beta;
    const summary = {
      lowestEce: best("ece"),
      lowestNll: best("nll"),
      lowestEceAfterScaling: best("eceAfter"),
      lowestNllAfterScaling: best("nllAfter"),
    };
    console.log(
      `lowest held-out ECE at β = ${summary.lowestEce}, lowest NLL at β = ${summary.lowestNll}; ` +
        `after temperature scaling: ECE at β = ${summary.lowestEceAfterScaling}, NLL at β = ` +
        `${summary.lowestNllAfterScaling}`,
    );
    const settings = {
      fixture: "llm",
      seed: o.seed,
      trainTokens: train.n,
      heldOutTokens: heldOut.n,
      v: o.v,
      d: o.d,
      dtype: "f32",
      steps: o.steps,
      lr: o.lr,
      batch: o.batch,
      bins: o.bins,
      method: "fused",
      trained: "C (E fixed)",
      init: "the fixture's C; the same for every β, same batches in the same order",
      adapter: ctx.report.description,
      webgpu: deviceSummary(ctx.report),
      deno: Deno.version.deno,
    };
    const json = {
      description: "Held-out calibration of the llm fixture's LM head trained with label " +
        "smoothing β (fused kernel), from the fused forward's streaming statistics: NLL (β = 0 " +
        "loss, nats), ECE/RMSCE (15 equal-width bins, fractions), mean entropy and the entropy " +
        "gap entropy − NLL (nats, < 0 over-confident), the NLL-optimal temperature T* on the " +
        "held-out tokens and NLL, ECE and gap at T*. The first row (beta null) is the initial " +
        "head.",
      settings,
      summary,
      rows,
    };
    const svg = await _figure(curve, init, o, ctx.report.description);
    const files: OutputFile[] = [
      { path: _outputs(o.out)[0], bytes: svg },
      { path: _outputs(o.out)[1], bytes: JSON.stringify(json, null, 1) + "\n" },
    ];
    await writeAllOrNothing(files);
    console.log(`wrote ${files.map((f) => f.path).join(", ")}`);
  } finally {
    ctx.destroy();
  }
}

/** The per-β table. */
function _table(rows: HeldOutRow[]): string {
  const pct = (x: number) => `${(100 * x).toFixed(2)}%`;
  const cols = ["β", "NLL", "ECE", "RMSCE", "acc.", "entropy", "H − NLL", "T*", "NLL@T*", "ECE@T*"];
  const body = rows.map((r) => [
    r.beta === null ? "initial" : String(r.beta),
    r.nll.toFixed(4),
    pct(r.ece),
    pct(r.rmsce),
    pct(r.accuracy),
    r.entropy.toFixed(4),
    r.entropyGap.toFixed(4),
    r.temperature.toFixed(4),
    r.nllAfter.toFixed(4),
    pct(r.eceAfter),
  ]);
  const w = cols.map((c, i) => Math.max(c.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]) => "  " + cells.map((c, i) => c.padStart(w[i])).join("  ");
  return [`held-out (${"tokens never trained on"}):`, line(cols), ...body.map(line)].join("\n");
}

/** ECE, NLL and entropy gap against β, before and after temperature scaling, stacked. */
async function _figure(
  curve: HeldOutRow[],
  init: Omit<HeldOutRow, "beta" | "trainLoss" | "trainMs">,
  o: _Options,
  adapter: string,
): Promise<string> {
  const betas = curve.map((r) => r.beta as number);
  const lo = Math.min(...betas), hi = Math.max(...betas);
  const strip = (s: TopLevelSpec) => {
    const { $schema: _, ...rest } = s as unknown as Record<string, unknown>;
    return rest;
  };
  const panel = (
    title: string,
    yLabel: string,
    before: number[],
    after: number[],
    initial: number,
    afterLabel: string,
  ) =>
    strip(lineChartSpec({
      title,
      series: [
        { label: "trained, T = 1", x: betas, y: before },
        { label: afterLabel, x: betas, y: after },
      ],
      xLabel: "label smoothing β of the training loss",
      yLabel,
      rules: [{ x1: lo, y1: initial, x2: hi, y2: initial }],
      points: true,
      height: 190,
    }));
  const ece = panel(
    "Held-out ECE (15 bins); dashed: the initial head",
    "ECE (%)",
    curve.map((r) => 100 * r.ece),
    curve.map((r) => 100 * r.eceAfter),
    100 * init.ece,
    "trained, at its T*",
  );
  const nll = panel(
    "Held-out NLL; dashed: the initial head",
    "NLL (nats)",
    curve.map((r) => r.nll),
    curve.map((r) => r.nllAfter),
    init.nll,
    "trained, at its T*",
  );
  const gap = strip(lineChartSpec({
    title: "Entropy calibration: mean entropy − mean NLL (< 0: over-confident); and T*",
    series: [
      { label: "H − NLL at T = 1 (nats)", x: betas, y: curve.map((r) => r.entropyGap) },
      { label: "T* (NLL-optimal temperature)", x: betas, y: curve.map((r) => r.temperature) },
    ],
    xLabel: "label smoothing β of the training loss",
    yLabel: "nats / temperature",
    rules: [{ x1: lo, y1: 0, x2: hi, y2: 0 }],
    points: true,
    height: 150,
  }));
  return await renderVegaLite(
    {
      $schema: "https://vega.github.io/schema/vega-lite/v6.json",
      title: {
        text:
          "Label smoothing β against held-out calibration (LM head trained with the fused kernel)",
        subtitle: [
          `llm fixture (seed ${o.seed}), ${o.n - o.heldOut} training tokens in batches of ` +
          `${o.batch}, ${o.steps} SGD steps, lr ${o.lr}, |V| = ${o.v}, d = ${o.d}, f32; ` +
          `${o.heldOut} held-out tokens`,
          `one run per β from the same initial head; ${adapter}`,
        ],
      },
      vconcat: [ece, nll, gap],
      resolve: { scale: { color: "independent" } },
    } as unknown as TopLevelSpec,
  );
}

/** The two files written under `out`. */
function _outputs(out: string): [string, string] {
  return [join(out, "beta_curve.svg"), join(out, "beta_curve.json")];
}

/** Parses the comma-separated β list: each a plain decimal number in [0, 1], no repeats, sorted. */
function _betas(value: string): number[] {
  const out = value.split(",").map((p) => {
    let b = NaN;
    try {
      b = parseNumberValue("--betas", p, { min: 0, max: 1 });
    } catch {
      // the message below names the entry
    }
    check(!Number.isNaN(b), `--betas: each β must be a number in [0, 1], got '${p}'`);
    return b;
  });
  check(new Set(out).size === out.length, `--betas has a repeated value: '${value}'`);
  return out.sort((a, b) => a - b);
}

function _parse(args: string[]): _Options | "help" {
  const parsed = BETA_CURVE_COMMAND.parse(args);
  if (!parsed) return "help";
  const v = parsed.values;
  const o: _Options = {
    betas: _betas(v.betas),
    n: v.n,
    heldOut: v["held-out"],
    v: v.v,
    d: v.d,
    seed: v.seed,
    steps: v.steps,
    lr: v.lr,
    batch: v.batch,
    bins: v.bins,
    out: v.out,
    adapter: v.adapter as AdapterChoice,
    engine: v.webgpu as Engine,
  };
  check(o.heldOut < o.n, `--held-out (${o.heldOut}) must be smaller than --n (${o.n})`);
  check(
    o.batch <= o.n - o.heldOut,
    `--batch (${o.batch}) must be at most the ${o.n - o.heldOut} training tokens`,
  );
  check(o.lr > 0, `--lr must be > 0, got ${o.lr}`);
  checkOutputs(_outputs(o.out));
  return o;
}

if (import.meta.main) await runCli(() => betaCurveMain(Deno.args));
