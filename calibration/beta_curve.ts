/**
 * The β curve (the paper's central claim in miniature): the `llm` fixture's LM head trained by
 * mini-batch SGD with the fused kernel once per β (calibration/training.ts), every run from the
 * same initial head on the same batches; the held-out NLL, ECE, entropy gap and NLL-optimal
 * temperature of each head (calibration/temperature.ts), and their table, figure and JSON.
 * @module
 */
import { InputError } from "../core/errors.ts";
import type { HostInputs } from "../core/options.ts";
import type { GpuContext } from "../gpu/context.ts";
import { methodByName } from "../methods/mod.ts";
import { lineChartSpec, renderVegaLite, type TopLevelSpec } from "../report/svg.ts";
import { trainLinearHead } from "./training.ts";
import { prepareTemperatureScan } from "./temperature.ts";

/** The settings of a β curve. */
export interface BetaCurveOptions {
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
export async function heldOutStats(
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

/** The rows of a β curve: the initial head, then one per β, and which β is best at what. */
export async function betaCurve(
  ctx: GpuContext,
  o: BetaCurveOptions,
  data: { train: HostInputs; heldOut: HostInputs },
  log: (line: string) => void,
) {
  const { train, heldOut } = data;
  const rows: HeldOutRow[] = [];
  const init = await heldOutStats(ctx, heldOut, heldOut.c, o.bins);
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
    const h = await heldOutStats(ctx, heldOut, r.c, o.bins);
    const trainLoss = r.records[r.records.length - 1].loss;
    rows.push({ beta, trainLoss, trainMs: r.wallMs, ...h });
    log(
      `  β = ${beta}: trained in ${(r.wallMs / 1000).toFixed(1)} s (last batch loss ` +
        `${trainLoss.toFixed(4)}); held-out ECE ${(100 * h.ece).toFixed(2)}%, NLL ` +
        `${h.nll.toFixed(4)}, T* ${h.temperature.toFixed(4)}`,
    );
  }
  const curve = rows.filter((r) => r.beta !== null);
  const best = (k: "ece" | "nll" | "eceAfter" | "nllAfter") =>
    curve.reduce((a, b) => (b[k] < a[k] ? b : a)).beta;
  const summary = {
    lowestEce: best("ece"),
    lowestNll: best("nll"),
    lowestEceAfterScaling: best("eceAfter"),
    lowestNllAfterScaling: best("nllAfter"),
  };
  return { rows, init, curve, summary };
}

/** The per-β table. */
export function betaCurveTable(rows: HeldOutRow[]): string {
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
export async function betaCurveFigure(
  curve: HeldOutRow[],
  init: Omit<HeldOutRow, "beta" | "trainLoss" | "trainMs">,
  o: BetaCurveOptions,
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
