/**
 * Redraws Figure 4 (reconstructed): the normalised entropy gap of the LM-head entropy lower bound
 * against the hidden size, one line per vocabulary size. Writes the SVG and, beside it, the
 * plotted numbers as JSON (same path with .json), both or neither (io/outputs.ts; the paths are
 * checked first).
 *
 *   ./dev task entropy-figure [--out out/figure4_entropy_gap.svg]
 *     [--rho 0.1[,0.2…]] [--vocab 32000,128256,256000] [--d-min 64] [--d-max 8192] [--points 49]
 *
 * Bad flags print one line `error: …` and exit with status 2.
 * @module
 */
import { defineCommand, parseIntValue, parseList, parseNumberValue, runCli } from "../core/cli.ts";
import { InputError } from "../core/errors.ts";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import { figure4Data, figure4Svg } from "../calibration/entropy_figure.ts";

/** The command line of `entropy-figure`. */
export const ENTROPY_FIGURE_COMMAND = defineCommand({
  name: "./dev task entropy-figure",
  summary: "Figure 4: the LM-head entropy lower bound against hidden size (SVG and JSON).",
  flags: {
    out: {
      type: "string",
      arg: "FILE.svg",
      help: "figure",
      default: "out/figure4_entropy_gap.svg",
    },
    rho: { type: "string", arg: "R,R", help: "bounds ρ, each > 0", default: "0.1" },
    vocab: {
      type: "string",
      arg: "V,V",
      help: "vocabulary sizes, integers ≥ 2",
      default: "32000,128256,256000",
    },
    "d-min": { type: "int", min: 1, help: "smallest hidden size", default: 64 },
    "d-max": { type: "int", min: 1, help: "largest hidden size", default: 8192 },
    points: { type: "int", min: 2, help: "points per curve", default: 49 },
  },
});

/** Runs the command with `args` (throws InputError on bad flags; see {@link runCli}). */
export async function main(args: string[]): Promise<void> {
  const opts = _parse(args);
  if (opts === "help") return;
  const json = opts.out.replace(/\.svg$/i, "") + ".json";
  checkOutputs([opts.out, json]);
  const data = figure4Data(opts);
  const svg = await figure4Svg(data);
  await writeAllOrNothing([
    { path: opts.out, bytes: svg },
    { path: json, bytes: JSON.stringify(data, null, 1) + "\n" },
  ]);
  console.log(`wrote ${opts.out} and ${json}`);
}

interface _Options {
  out: string;
  rho: number[];
  vocabSizes: number[];
  dMin: number;
  dMax: number;
  points: number;
}

function _parse(args: string[]): _Options | "help" {
  const parsed = ENTROPY_FIGURE_COMMAND.parse(args);
  if (!parsed) return "help";
  const v = parsed.values;
  if (!/\.svg$/i.test(v.out)) throw new InputError(`--out must end in .svg, got ${v.out}`);
  const list = (name: string, s: string, ok: (x: number) => boolean, what: string) =>
    parseList(`--${name}`, s).map((t) => {
      const x = name === "vocab"
        ? parseIntValue(`--${name}`, t, { min: 2 })
        : parseNumberValue(`--${name}`, t);
      if (!ok(x)) throw new InputError(`--${name}: ${what}, got "${t}"`);
      return x;
    });
  const opts = {
    out: v.out,
    rho: list("rho", v.rho, (x) => Number.isFinite(x) && x > 0, "each value must be > 0"),
    vocabSizes: list("vocab", v.vocab, (x) => Number.isInteger(x) && x >= 2, "integers ≥ 2"),
    dMin: v["d-min"],
    dMax: v["d-max"],
    points: v.points,
  };
  if (opts.dMax < opts.dMin) {
    throw new InputError(`--d-max (${opts.dMax}) must be ≥ --d-min (${opts.dMin})`);
  }
  return opts;
}

if (import.meta.main) await runCli(() => main(Deno.args));
