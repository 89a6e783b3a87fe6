/**
 * `./dev task beta-curve`: the paper's central claim in miniature — does label smoothing (β > 0)
 * give a better-calibrated LM head? Trains the linear head C of the `llm` fixture (an
 * over-confident "pretrained" head; E fixed) by mini-batch SGD with the fused kernel
 * (calibration/training.ts), once per β, every run from the same initial C on the same batches
 * (same seed), and measures on the held-out tokens (the last --held-out, never trained on), from
 * the fused forward's streaming statistics (no logits): NLL (β = 0 loss), ECE, RMSCE, accuracy,
 * mean entropy and the entropy gap (entropy − NLL), then the NLL-optimal temperature T* and the
 * NLL and ECE after temperature scaling (calibration/temperature.ts).
 *
 *   ./dev task beta-curve [--betas 0,0.05,0.1,0.2,0.3] [--n 10240]
 *     [--held-out 2048] [--v 256] [--d 64] [--seed 0] [--steps 300] [--lr 0.1] [--batch 128]
 *     [--bins 15] [--out out] [--adapter auto|software|hardware] [--webgpu deno|dawn|dawn-unchecked]
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
import { check } from "../core/errors.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine, parseEngine } from "../gpu/engine.ts";
import { splitTokens } from "../calibration/training.ts";
import {
  betaCurve,
  betaCurveFigure,
  type BetaCurveOptions,
  betaCurveTable,
} from "../calibration/beta_curve.ts";
import { checkOutputs, type OutputFile, writeAllOrNothing } from "../io/outputs.ts";

/** The paper's sweep in miniature. */
const DEFAULT_BETAS = [0, 0.05, 0.1, 0.2, 0.3];

/** The command line of `beta-curve`. */
export const BETA_CURVE_COMMAND = defineCommand({
  name: "./dev task beta-curve",
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
    out: { type: "string", arg: "DIR", help: "report directory", default: "out" },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
  },
});

interface _Options extends BetaCurveOptions {
  out: string;
  adapter: AdapterChoice;
  engine: Engine;
}

/** Runs the command with `args` (throws InputError on bad flags; see runCli). */
export async function betaCurveMain(args: string[]): Promise<void> {
  const o = _parse(args);
  if (o === "help") return;
  const x = makeFixture("llm", { n: o.n, v: o.v, d: o.d, seed: o.seed });
  const { train, heldOut } = splitTokens(x, o.heldOut);
  const ctx = await GpuContext.create({ adapter: o.adapter, engine: o.engine });
  const device = `${ctx.report.description} (${deviceSummary(ctx.report)})`;
  try {
    console.log(
      `β curve on ${device}: llm fixture (seed ${o.seed}), ${train.n} training ` +
        `tokens in batches of ${o.batch}, |V| = ${o.v}, d = ${o.d}, f32; ${o.steps} SGD steps, ` +
        `lr ${o.lr}, C trained (E fixed), fused kernel; ${heldOut.n} held-out tokens`,
    );
    const { rows, init, curve, summary } = await betaCurve(
      ctx,
      o,
      { train, heldOut },
      (line) => console.log(line),
    );
    console.log(betaCurveTable(rows));
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
      adapter: device,
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
    const svg = await betaCurveFigure(curve, init, o, device);
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
    engine: parseEngine(v.webgpu),
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
