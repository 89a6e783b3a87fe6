/**
 * `./dev task train-parity`: the paper's Figure 6 in miniature. Trains the linear LM head C of the
 * `llm` fixture (an over-confident "pretrained" head: the fixture's own C) by plain mini-batch SGD
 * (calibration/training.ts), once with the fused method and once with the materialised baseline,
 * at the same β from the same initial state on the same batches, and checks that their loss
 * curves and gradient norms agree at every step. A third run (fused, β = 0) gives the comparison
 * for calibration: the last `--held-out` tokens are never trained on, and their ECE under the
 * β = 0 and the β head is measured with the streaming calibration (calibration/streaming.ts).
 *
 *   ./dev task train-parity [--n 10240] [--held-out 2048] [--v 256] [--d 64]
 *     [--seed 0] [--steps 300] [--lr 0.1] [--batch 128] [--beta 0.1] [--train-e] [--bins 15]
 *     [--tol 1e-5] [--out out] [--adapter auto|software|hardware] [--webgpu deno|dawn|dawn-unchecked]
 *
 * Writes OUT/train_parity_loss.svg (loss, gradient norms and their relative difference per step),
 * OUT/train_parity_loss.json (the curves), OUT/train_parity_calibration.svg (held-out reliability
 * diagram, β = 0 vs β) and OUT/train_parity_calibration.json, all under temporary names first and
 * renamed once all four are written (io/outputs.ts; the paths are checked before any work).
 * Prints the maximum relative difference of the curves and the held-out ECEs. Bad flags print
 * one line `error: …` and exit 2 with nothing written; curves that differ beyond --tol exit 1
 * (after writing the reports, so the difference can be looked at).
 * @module
 */
import { join } from "node:path";
import { ADAPTER_FLAG, defineCommand, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine, parseEngine } from "../gpu/engine.ts";
import { splitTokens } from "../calibration/training.ts";
import {
  trainParity,
  trainParityFiles,
  type TrainParityOptions,
  trainParityText,
} from "../calibration/train_parity.ts";

/** The command line of `train-parity`. */
export const TRAIN_PARITY_COMMAND = defineCommand({
  name: "./dev task train-parity",
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
    out: { type: "string", arg: "DIR", help: "report directory", default: "out" },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
  },
});

interface _Options extends TrainParityOptions {
  out: string;
  adapter?: AdapterChoice;
  engine?: Engine;
}

/** The four files this command writes under --out. */
const _FILES = [
  "train_parity_loss.svg",
  "train_parity_loss.json",
  "train_parity_calibration.svg",
  "train_parity_calibration.json",
];

/** Runs the command with `args`; returns the exit code (1 when the curves differ). */
export async function trainParityMain(args: string[]): Promise<number> {
  const o = _parse(args);
  if (o === "help") return 0;
  checkOutputs(_FILES.map((f) => join(o.out, f)));
  const x = makeFixture("llm", { n: o.n, v: o.v, d: o.d, seed: o.seed });
  const { train, heldOut } = splitTokens(x, o.heldOut);
  const ctx = await GpuContext.create({ adapter: o.adapter, engine: o.engine });
  const device = `${ctx.report.description} (${deviceSummary(ctx.report)})`;
  try {
    const what = o.trainE ? "C and E trained" : "C trained, E fixed";
    console.log(
      `train parity on ${device}: llm fixture (seed ${o.seed}), ${train.n} ` +
        `training tokens in batches of ${o.batch}, |V| = ${o.v}, d = ${o.d}, f32; ${o.steps} ` +
        `SGD steps, lr ${o.lr}, β = ${o.beta} (${what}); ${heldOut.n} held-out tokens`,
    );
    const r = await trainParity(ctx, o, { train, heldOut }, (line) => console.log(line));
    console.log(trainParityText(o, r, heldOut.n));
    const files = await trainParityFiles(o, r, {
      trainTokens: train.n,
      heldOutTokens: heldOut.n,
      adapter: device,
    });
    await writeAllOrNothing(
      files.map(([name, text]) => ({ path: join(o.out, name), bytes: text })),
    );
    console.log(`wrote ${files.map(([name]) => join(o.out, name)).join(", ")}`);
    if (!r.ok) {
      console.error(
        `error: the fused and baseline curves differ by more than the tolerance ${o.tol} ` +
          `(loss ${r.agree.maxRelLoss.toExponential(2)})`,
      );
      return 1;
    }
    return 0;
  } finally {
    ctx.destroy();
  }
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
    engine: parseEngine(v.webgpu),
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

if (import.meta.main) await runCli(() => trainParityMain(Deno.args));
