/**
 * Training parity (the paper's Figure 6 in miniature): the linear LM head of the `llm` fixture
 * trained by mini-batch SGD (calibration/training.ts) with the fused method and with the
 * materialised baseline at the same β, from the same initial state on the same batches, plus a
 * fused β = 0 run; the agreement of their loss curves and gradient norms, the held-out
 * calibration of the trained heads, and the four report files (two figures and their JSON).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { HostInputs } from "../core/options.ts";
import { methodByName } from "../methods/mod.ts";
import { lineChartSpec, renderVegaLite, type TopLevelSpec } from "../report/svg.ts";
import type { CalibrationReport } from "./metrics.ts";
import { reliabilityDiagram } from "./reliability_svg.ts";
import { streamingCalibration } from "./streaming.ts";
import {
  compareCurves,
  type CurveAgreement,
  type StepRecord,
  trainLinearHead,
  type TrainResult,
} from "./training.ts";

/** The settings of a training-parity run. */
export interface TrainParityOptions {
  n: number;
  heldOut: number;
  v: number;
  d: number;
  seed: number;
  steps: number;
  lr: number;
  batch: number;
  beta: number;
  trainE: boolean;
  bins: number;
  tol: number;
}

/** The three training runs and what they show. */
export interface TrainParityResult {
  fused: TrainResult;
  baseline: TrainResult;
  fused0: TrainResult;
  agree: CurveAgreement;
  /** Whether the fused and baseline curves agree within the tolerance. */
  ok: boolean;
  /** Held-out calibration: the initial head, and the heads trained with β = 0, β, baseline β. */
  init: CalibrationReport;
  cal0: CalibrationReport;
  calB: CalibrationReport;
  calBase: CalibrationReport;
}

/** One training run, with a progress line every sixth of the steps. */
async function _train(
  ctx: GpuContext,
  o: TrainParityOptions,
  train: HostInputs,
  method: string,
  beta: number,
  log: (line: string) => void,
): Promise<TrainResult> {
  const label = `${method} β = ${beta}`;
  const every = Math.max(1, Math.round(o.steps / 6));
  const r = await trainLinearHead(ctx, {
    method: methodByName(method),
    data: train,
    beta,
    steps: o.steps,
    lr: o.lr,
    batchSize: o.batch,
    trainE: o.trainE,
    onStep: (s) => {
      if ((s.step + 1) % every === 0 || s.step === 0) {
        log(
          `  ${label}: step ${s.step + 1}/${o.steps}  loss ${s.loss.toFixed(5)}  ` +
            `‖∂L/∂C‖ ${s.gradNormC.toFixed(5)}  ‖∂L/∂E‖ ${s.gradNormE.toFixed(5)}`,
        );
      }
    },
  });
  log(`  ${label}: ${(r.wallMs / 1000).toFixed(1)} s`);
  return r;
}

/** Trains the three heads, compares the curves and measures held-out calibration. */
export async function trainParity(
  ctx: GpuContext,
  o: TrainParityOptions,
  data: { train: HostInputs; heldOut: HostInputs },
  log: (line: string) => void,
): Promise<TrainParityResult> {
  const { train, heldOut } = data;
  const fused = await _train(ctx, o, train, "fused", o.beta, log);
  const baseline = await _train(ctx, o, train, "baseline", o.beta, log);
  const fused0 = await _train(ctx, o, train, "fused", 0, log);
  const agree = compareCurves(fused.records, baseline.records);
  const ok = agree.maxRelLoss <= o.tol && agree.maxRelGradNormC <= o.tol &&
    agree.maxRelGradNormE <= o.tol;
  // held-out calibration: the trained heads on tokens never trained on (E as generated)
  const calib = async (c: Float32Array) =>
    (await streamingCalibration(ctx, { ...heldOut, c }, { bins: o.bins })).report;
  return {
    fused,
    baseline,
    fused0,
    agree,
    ok,
    init: await calib(heldOut.c),
    cal0: await calib(fused0.c),
    calB: await calib(fused.c),
    calBase: await calib(baseline.c),
  };
}

/** The lines printed after the runs: the curves' agreement and the held-out calibration. */
export function trainParityText(o: TrainParityOptions, r: TrainParityResult, heldOut: number) {
  const { agree, ok, init, cal0, calB, calBase } = r;
  const lines = [
    `max relative difference fused vs baseline over ${o.steps} steps: loss ` +
    `${agree.maxRelLoss.toExponential(2)} (step ${agree.worstLossStep}), ‖∂L/∂C‖ ` +
    `${agree.maxRelGradNormC.toExponential(2)}, ‖∂L/∂E‖ ` +
    `${agree.maxRelGradNormE.toExponential(2)} (tolerance ${o.tol.toExponential(0)}): ${
      ok ? "ok" : "FAIL"
    }`,
  ];
  const pct = (c: CalibrationReport) =>
    `ECE ${(100 * c.ece).toFixed(2)}%, RMSCE ${(100 * c.rmsce).toFixed(2)}%, accuracy ` +
    `${(100 * c.accuracy).toFixed(2)}%, mean confidence ${(100 * c.meanConfidence).toFixed(2)}%`;
  lines.push(`held-out calibration (${heldOut} tokens, ${o.bins} bins):`);
  const rows: [string, string][] = [
    ["initial head", pct(init)],
    ["trained, β = 0", pct(cal0)],
    [
      `trained, β = ${o.beta}`,
      `${pct(calB)} (baseline-trained head: ECE ${(100 * calBase.ece).toFixed(2)}%)`,
    ],
  ];
  const w = Math.max(...rows.map((x) => x[0].length)) + 1;
  for (const [k, text] of rows) lines.push(`  ${(k + ":").padEnd(w)} ${text}`);
  lines.push(
    `β = ${o.beta} ${calB.ece < cal0.ece ? "lowers" : "does not lower"} the held-out ECE ` +
      `against β = 0: ${(100 * cal0.ece).toFixed(2)}% → ${(100 * calB.ece).toFixed(2)}%`,
  );
  return lines.join("\n");
}

/** The four report files' names and contents: the two figures and their JSON. */
export async function trainParityFiles(
  o: TrainParityOptions,
  r: TrainParityResult,
  meta: { trainTokens: number; heldOutTokens: number; adapter: string },
): Promise<[string, string][]> {
  const { fused, baseline, fused0, agree, ok, init, cal0, calB, calBase } = r;
  const settings = {
    fixture: "llm",
    seed: o.seed,
    trainTokens: meta.trainTokens,
    heldOutTokens: meta.heldOutTokens,
    v: o.v,
    d: o.d,
    dtype: "f32",
    steps: o.steps,
    lr: o.lr,
    batch: o.batch,
    beta: o.beta,
    trainE: o.trainE,
    init: "the fixture's C (and E); the same for every run",
    adapter: meta.adapter,
  };
  const calSvg = await reliabilityDiagram({
    series: [
      { label: "β = 0", report: cal0 },
      { label: `β = ${o.beta}`, report: calB },
    ],
    title: `Held-out calibration after ${o.steps} SGD steps (${meta.heldOutTokens} tokens)`,
  });
  const columns = (t: TrainResult) => ({
    method: t.method,
    wallMs: t.wallMs,
    loss: t.records.map((s) => s.loss),
    gradNormC: t.records.map((s) => s.gradNormC),
    gradNormE: t.records.map((s) => s.gradNormE),
  });
  const lossJson = {
    description: "Training parity (Figure 6 in miniature): per-step mean batch loss and " +
      "gradient norms of mini-batch SGD on the llm fixture's LM head, fused vs baseline at the " +
      "same β, same initial state and batches; plus a fused β = 0 run.",
    settings,
    tolerance: o.tol,
    agreement: agree,
    ok,
    runs: { fused: columns(fused), baseline: columns(baseline), fusedBeta0: columns(fused0) },
  };
  const calJson = {
    description: "Held-out calibration (tokens never trained on) of the initial head and of " +
      "the heads trained with β = 0 and β, from the fused forward's streaming statistics.",
    settings,
    bins: o.bins,
    eceLowered: calB.ece < cal0.ece,
    eceBeta0: cal0.ece,
    eceBeta: calB.ece,
    eceBaselineBeta: calBase.ece,
    eceInitial: init.ece,
    initial: init,
    beta0: cal0,
    beta: calB,
  };
  return [
    ["train_parity_loss.svg", await _lossFigure(fused, baseline, agree, o)],
    ["train_parity_loss.json", JSON.stringify(lossJson, null, 1) + "\n"],
    ["train_parity_calibration.svg", calSvg],
    ["train_parity_calibration.json", JSON.stringify(calJson, null, 1) + "\n"],
  ];
}

/** Loss, gradient norms and relative differences per step, stacked in one SVG. */
async function _lossFigure(
  fused: TrainResult,
  baseline: TrainResult,
  agree: CurveAgreement,
  o: TrainParityOptions,
): Promise<string> {
  const steps = fused.records.map((r) => r.step + 1);
  const col = (r: TrainResult, k: keyof StepRecord) => r.records.map((s) => s[k]);
  const labelF = `fused (Ours), β = ${o.beta}`, labelB = `baseline, β = ${o.beta}`;
  const rel = (k: keyof StepRecord) =>
    fused.records.map((s, i) => {
      const b = baseline.records[i][k];
      const dlt = Math.abs(s[k] - b) / Math.abs(b);
      return dlt > 0 ? dlt : NaN; // exact agreement cannot be drawn on a log axis
    });
  const strip = (s: TopLevelSpec) => {
    const { $schema: _, ...rest } = s as unknown as Record<string, unknown>;
    return rest;
  };
  const loss = lineChartSpec({
    title: "Training loss (mean over the step's batch)",
    series: [
      { label: labelF, x: steps, y: col(fused, "loss") },
      { label: labelB, x: steps, y: col(baseline, "loss") },
    ],
    xLabel: "SGD step",
    yLabel: "loss",
    points: false,
    height: 220,
  });
  const norms = lineChartSpec({
    title: "Gradient norms",
    series: [
      { label: `‖∂L/∂C‖ ${labelF}`, x: steps, y: col(fused, "gradNormC") },
      { label: `‖∂L/∂C‖ ${labelB}`, x: steps, y: col(baseline, "gradNormC") },
      { label: `‖∂L/∂E‖ ${labelF}`, x: steps, y: col(fused, "gradNormE") },
      { label: `‖∂L/∂E‖ ${labelB}`, x: steps, y: col(baseline, "gradNormE") },
    ],
    xLabel: "SGD step",
    yLabel: "L2 norm (log)",
    logY: true,
    points: false,
    height: 220,
  });
  const diffs = [
    { label: "loss", x: steps, y: rel("loss") },
    { label: "‖∂L/∂C‖", x: steps, y: rel("gradNormC") },
    { label: "‖∂L/∂E‖", x: steps, y: rel("gradNormE") },
  ];
  const finite = diffs.flatMap((s) => s.y.filter(Number.isFinite));
  const lo = Math.min(o.tol / 10, ...finite);
  const diff = lineChartSpec({
    title: "Relative difference |fused − baseline| / |baseline| (gaps: exactly equal)",
    series: diffs,
    xLabel: "SGD step",
    yLabel: "relative difference (log)",
    logY: true,
    points: false,
    yDomain: [lo, o.tol * 10],
    yFormat: ".0e",
    rules: [{ x1: 1, y1: o.tol, x2: o.steps, y2: o.tol }],
    height: 180,
  });
  return await renderVegaLite(
    {
      $schema: "https://vega.github.io/schema/vega-lite/v6.json",
      title: {
        text: `Training parity: fused vs baseline, ${o.steps} SGD steps`,
        subtitle: [
          `llm fixture, ${o.n - o.heldOut} tokens in batches of ${o.batch}, |V| = ${o.v}, ` +
          `d = ${o.d}, f32, lr ${o.lr}; the curves overlap`,
          `max relative difference: loss ${agree.maxRelLoss.toExponential(2)}, ‖∂L/∂C‖ ` +
          `${agree.maxRelGradNormC.toExponential(2)}, ‖∂L/∂E‖ ` +
          `${agree.maxRelGradNormE.toExponential(2)} (dashed: tolerance ${o.tol.toExponential(0)})`,
        ],
      },
      vconcat: [strip(loss), strip(norms), strip(diff)],
      resolve: { scale: { color: "independent" } },
    } as unknown as TopLevelSpec,
  );
}
