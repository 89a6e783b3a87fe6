/**
 * `deno task train-parity`: the paper's Figure 6 in miniature. Trains the linear LM head C of the
 * `llm` fixture (an over-confident "pretrained" head: the fixture's own C) by plain mini-batch SGD
 * (calibration/training.ts), once with the fused method and once with the materialised baseline,
 * at the same β from the same initial state on the same batches, and checks that their loss
 * curves and gradient norms agree at every step. A third run (fused, β = 0) gives the comparison
 * for calibration: the last `--held-out` tokens are never trained on, and their ECE under the
 * β = 0 and the β head is measured with the streaming calibration (calibration/streaming.ts).
 *
 *   deno run -A scripts/train_parity.ts [--n 10240] [--held-out 2048] [--v 256] [--d 64]
 *     [--seed 0] [--steps 300] [--lr 0.1] [--batch 128] [--beta 0.1] [--train-e] [--bins 15]
 *     [--tol 1e-5] [--out reports] [--adapter auto|software|hardware]
 *
 * Writes OUT/train_parity_loss.svg (loss, gradient norms and their relative difference per step),
 * OUT/train_parity_loss.json (the curves), OUT/train_parity_calibration.svg (held-out reliability
 * diagram, β = 0 vs β) and OUT/train_parity_calibration.json, all under temporary names first and
 * renamed once all four are written. Prints the maximum relative difference of the curves and the
 * held-out ECEs. Bad flags print one line `error: …` and exit 2 with nothing written; curves that
 * differ beyond --tol exit 1 (after writing the reports, so the difference can be looked at).
 * @module
 */
import { join } from "node:path";
import { ADAPTER_FLAG, defineCommand, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine } from "../gpu/engine.ts";
import { methodByName } from "../methods/mod.ts";
import { lineChartSpec, renderVegaLite, type TopLevelSpec } from "../report/svg.ts";
import type { CalibrationReport } from "../calibration/metrics.ts";
import { reliabilityDiagram } from "../calibration/reliability_svg.ts";
import { streamingCalibration } from "../calibration/streaming.ts";
import {
  compareCurves,
  type CurveAgreement,
  splitTokens,
  type StepRecord,
  trainLinearHead,
  type TrainResult,
} from "../calibration/training.ts";

/** The command line of `train-parity`. */
export const TRAIN_PARITY_COMMAND = defineCommand({
  name: "deno task train-parity",
  summary: "Figure 6 in miniature: SGD on the llm fixture with the fused kernel and the " +
    "baseline (loss curves, gradient norms), and held-out ECE for β against β = 0.",
  flags: {
    n: { type: "int", min: 1, help: "tokens", default: 10240 },
    "held-out": { type: "int", min: 1, help: "held-out tokens", default: 2048 },
    v: { type: "int", min: 1, help: "vocabulary", default: 256 },
    d: { type: "int", min: 1, help: "hidden size", default: 64 },
    seed: { type: "int", help: "seed", default: 0 },
    steps: { type: "int", min: 1, help: "SGD steps", default: 300 },
    lr: { type: "number", help: "learning rate", default: 0.1 },
    batch: { type: "int", min: 1, help: "batch size", default: 128 },
    beta: { type: "number", help: "label smoothing of the compared run", default: 0.1 },
    "train-e": { type: "boolean", help: "train E as well as C" },
    bins: { type: "int", min: 1, help: "calibration bins", default: 15 },
    tol: { type: "number", help: "relative tolerance of the curves", default: 1e-5 },
    out: { type: "string", arg: "DIR", help: "report directory", default: "reports" },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
  },
});

interface _Options {
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
  out: string;
  adapter?: AdapterChoice;
  engine?: Engine;
}

/** Runs the command with `args` (throws InputError on bad flags; see runCli). */
export async function trainParityMain(args: string[]): Promise<void> {
  const o = _parse(args);
  if (o === "help") return;
  const x = makeFixture("llm", { n: o.n, v: o.v, d: o.d, seed: o.seed });
  const { train, heldOut } = splitTokens(x, o.heldOut);
  const ctx = await GpuContext.create({ adapter: o.adapter, engine: o.engine });
  try {
    const what = o.trainE ? "C and E trained" : "C trained, E fixed";
    console.log(
      `train parity on ${ctx.report.description} (${
        deviceSummary(ctx.report)
      }): llm fixture (seed ${o.seed}), ${train.n} ` +
        `training tokens in batches of ${o.batch}, |V| = ${o.v}, d = ${o.d}, f32; ${o.steps} ` +
        `SGD steps, lr ${o.lr}, β = ${o.beta} (${what}); ${heldOut.n} held-out tokens`,
    );
    const run = async (method: string, beta: number): Promise<TrainResult> => {
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
            console.log(
              `  ${label}: step ${s.step + 1}/${o.steps}  loss ${s.loss.toFixed(5)}  ` +
                `‖∂L/∂C‖ ${s.gradNormC.toFixed(5)}  ‖∂L/∂E‖ ${s.gradNormE.toFixed(5)}`,
            );
          }
        },
      });
      console.log(`  ${label}: ${(r.wallMs / 1000).toFixed(1)} s`);
      return r;
    };
    const fused = await run("fused", o.beta);
    const baseline = await run("baseline", o.beta);
    const fused0 = await run("fused", 0);
    const agree = compareCurves(fused.records, baseline.records);
    const ok = agree.maxRelLoss <= o.tol && agree.maxRelGradNormC <= o.tol &&
      agree.maxRelGradNormE <= o.tol;
    console.log(
      `max relative difference fused vs baseline over ${o.steps} steps: loss ` +
        `${agree.maxRelLoss.toExponential(2)} (step ${agree.worstLossStep}), ‖∂L/∂C‖ ` +
        `${agree.maxRelGradNormC.toExponential(2)}, ‖∂L/∂E‖ ` +
        `${agree.maxRelGradNormE.toExponential(2)} (tolerance ${o.tol.toExponential(0)}): ${
          ok ? "ok" : "FAIL"
        }`,
    );
    // held-out calibration: the trained heads on tokens never trained on (E as generated)
    const calib = async (c: Float32Array) =>
      (await streamingCalibration(ctx, { ...heldOut, c }, { bins: o.bins })).report;
    const init = await calib(heldOut.c);
    const cal0 = await calib(fused0.c);
    const calB = await calib(fused.c);
    const calBase = await calib(baseline.c);
    const pct = (r: CalibrationReport) =>
      `ECE ${(100 * r.ece).toFixed(2)}%, RMSCE ${(100 * r.rmsce).toFixed(2)}%, accuracy ` +
      `${(100 * r.accuracy).toFixed(2)}%, mean confidence ${(100 * r.meanConfidence).toFixed(2)}%`;
    console.log(`held-out calibration (${heldOut.n} tokens, ${o.bins} bins):`);
    const rows: [string, string][] = [
      ["initial head", pct(init)],
      ["trained, β = 0", pct(cal0)],
      [
        `trained, β = ${o.beta}`,
        `${pct(calB)} (baseline-trained head: ECE ${(100 * calBase.ece).toFixed(2)}%)`,
      ],
    ];
    const w = Math.max(...rows.map((r) => r[0].length)) + 1;
    for (const [k, text] of rows) console.log(`  ${(k + ":").padEnd(w)} ${text}`);
    const lowered = calB.ece < cal0.ece;
    const verdict = `β = ${o.beta} ${lowered ? "lowers" : "does not lower"} the held-out ECE ` +
      `against β = 0: ${(100 * cal0.ece).toFixed(2)}% → ${(100 * calB.ece).toFixed(2)}%`;
    console.log(verdict);

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
      beta: o.beta,
      trainE: o.trainE,
      init: "the fixture's C (and E); the same for every run",
      adapter: ctx.report.description,
      webgpu: deviceSummary(ctx.report),
    };
    const lossSvg = await _lossFigure(fused, baseline, agree, o);
    const calSvg = await reliabilityDiagram({
      series: [
        { label: "β = 0", report: cal0 },
        { label: `β = ${o.beta}`, report: calB },
      ],
      title: `Held-out calibration after ${o.steps} SGD steps (${heldOut.n} tokens)`,
    });
    const columns = (r: TrainResult) => ({
      method: r.method,
      wallMs: r.wallMs,
      loss: r.records.map((s) => s.loss),
      gradNormC: r.records.map((s) => s.gradNormC),
      gradNormE: r.records.map((s) => s.gradNormE),
    });
    const lossJson = {
      description: "Training parity (Figure 6 in miniature): per-step mean batch loss and " +
        "gradient norms of mini-batch SGD on the llm fixture's LM head, fused vs baseline at the " +
        "same β, same initial state and batches; plus a fused β = 0 run.",
      settings,
      tolerance: o.tol,
      agreement: agree,
      ok,
      runs: {
        fused: columns(fused),
        baseline: columns(baseline),
        fusedBeta0: columns(fused0),
      },
    };
    const calJson = {
      description: "Held-out calibration (tokens never trained on) of the initial head and of " +
        "the heads trained with β = 0 and β, from the fused forward's streaming statistics.",
      settings,
      bins: o.bins,
      eceLowered: lowered,
      eceBeta0: cal0.ece,
      eceBeta: calB.ece,
      eceBaselineBeta: calBase.ece,
      eceInitial: init.ece,
      initial: init,
      beta0: cal0,
      beta: calB,
    };
    const files: [string, string][] = [
      [join(o.out, "train_parity_loss.svg"), lossSvg],
      [join(o.out, "train_parity_loss.json"), JSON.stringify(lossJson, null, 1) + "\n"],
      [join(o.out, "train_parity_calibration.svg"), calSvg],
      [join(o.out, "train_parity_calibration.json"), JSON.stringify(calJson, null, 1) + "\n"],
    ];
    await _writeAtomic(o.out, files);
    console.log(`wrote ${files.map((f) => f[0]).join(", ")}`);
    if (!ok) {
      throw new Error(
        `the fused and baseline curves differ by more than the tolerance ${o.tol} ` +
          `(loss ${agree.maxRelLoss.toExponential(2)})`,
      );
    }
  } finally {
    ctx.destroy();
  }
}

/** Loss, gradient norms and relative differences per step, stacked in one SVG. */
async function _lossFigure(
  fused: TrainResult,
  baseline: TrainResult,
  agree: CurveAgreement,
  o: _Options,
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

function _parse(args: string[]): _Options | "help" {
  const parsed = TRAIN_PARITY_COMMAND.parse(args);
  if (!parsed) return "help";
  const v = parsed.values;
  const o: _Options = {
    n: v.n,
    heldOut: v["held-out"],
    v: v.v,
    d: v.d,
    seed: v.seed,
    steps: v.steps,
    lr: v.lr,
    batch: v.batch,
    beta: v.beta,
    trainE: v["train-e"],
    bins: v.bins,
    tol: v.tol,
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
  check(o.beta > 0 && o.beta <= 1, `--beta must be in (0, 1] (β = 0 is the comparison run)`);
  check(o.tol > 0, `--tol must be > 0, got ${o.tol}`);
  check(
    o.adapter === undefined || ["auto", "software", "hardware"].includes(o.adapter),
    `--adapter must be auto, software or hardware, got '${o.adapter}'`,
  );
  return o;
}

/** Writes every file under a temporary name, then renames them all; removes leftovers on error. */
async function _writeAtomic(dir: string, files: [string, string][]): Promise<void> {
  const tag = `.tmp-${Deno.pid}`;
  await Deno.mkdir(dir, { recursive: true });
  try {
    for (const [path, text] of files) await Deno.writeTextFile(path + tag, text);
    for (const [path] of files) await Deno.rename(path + tag, path);
  } finally {
    for (const [path] of files) await Deno.remove(path + tag).catch(() => {});
  }
}

if (import.meta.main) await runCli(() => trainParityMain(Deno.args));
