/**
 * Prints softmax statistics of the data fixtures as a Markdown table, one row per fixture.
 *
 * Usage: ./dev task fixture-stats [--fixture NAME|all] [--n 1024] [--v 8192]
 *   [--d 256] [--dtype bf16|f16|f32] [--seed 0] [--tile 128] [--threshold 2^-12]
 *
 * Bad flags print one line `error: ...` on stderr and exit with status 2.
 * @module
 */
import { defineCommand, exitCodeOf } from "../core/cli.ts";
import { check, InputError, oneLine } from "../core/errors.ts";
import { parseDtype } from "../core/options.ts";
import { FIXTURES, makeFixture, parseFixture } from "../fixtures/mod.ts";
import { fixtureStats } from "../fixtures/stats.ts";

/** The command line of `fixture-stats`. */
export const FIXTURE_STATS_COMMAND = defineCommand({
  name: "./dev task fixture-stats",
  summary: "Statistics of the data fixtures: max probability, entropy, top-1 accuracy and the " +
    "share of tiles the gradient filter could skip.",
  flags: {
    fixture: { type: "string", help: "fixture, or all", default: "all", arg: "NAME|all" },
    n: { type: "int", min: 1, help: "tokens", default: 1024 },
    v: { type: "int", min: 1, help: "vocabulary", default: 8192 },
    d: { type: "int", min: 1, help: "hidden size", default: 256 },
    dtype: { type: "string", help: "dtype", default: "bf16", arg: "bf16|f16|f32" },
    seed: { type: "int", min: 0, help: "seed", default: 0 },
    tile: { type: "int", min: 1, help: "tile size (tokens and vocabulary)", default: 128 },
    threshold: {
      type: "string",
      arg: "P",
      help: "filter threshold in (0, 1], or 2^-k",
      default: "2^-12",
    },
  },
});

/** Parses a probability, also written as 2^-k. */
function _probability(flag: string, value: string): number {
  const m = /^2\^(-?\d+)$/.exec(value.trim());
  const x = m ? 2 ** Number(m[1]) : Number(value);
  check(
    value.trim() !== "" && x > 0 && x <= 1,
    `--${flag} must be in (0, 1] (e.g. 2^-12), got '${value}'`,
  );
  return x;
}

function _formatThreshold(p: number): string {
  const k = Math.log2(p);
  return Number.isInteger(k) ? `2^${k}` : String(p);
}

/** Parsed command line. */
interface Args {
  fixtures: string[];
  n: number;
  v: number;
  d: number;
  dtype: ReturnType<typeof parseDtype>;
  seed: number;
  tile: number;
  threshold: number;
}

function _parse(argv: string[]): Args | "help" {
  const parsed = FIXTURE_STATS_COMMAND.parse(argv);
  if (!parsed) return "help";
  const values = parsed.values;
  return {
    fixtures: values.fixture === "all" ? [...FIXTURES] : [parseFixture(values.fixture).spec],
    n: values.n,
    v: values.v,
    d: values.d,
    dtype: parseDtype(values.dtype),
    seed: values.seed,
    tile: values.tile,
    threshold: _probability("threshold", values.threshold),
  };
}

/** Runs the command on `argv`; returns the exit status. */
export function main(argv: string[]): number {
  let args;
  try {
    args = _parse(argv);
  } catch (err) {
    if (!(err instanceof InputError)) throw err;
    console.error(`error: ${oneLine(err)}`);
    return 2;
  }
  if (args === "help") return 0;
  const { n, v, d, dtype, seed, tile, threshold } = args;
  const th = _formatThreshold(threshold);
  console.log(`Fixture statistics: n=${n}, v=${v}, d=${d}, ${dtype}, seed ${seed}\n`);
  console.log(
    `| fixture | mean max p | mean entropy (nats) | top-1 accuracy | ` +
      `${tile}×${tile} tiles with every p < ${th} |`,
  );
  console.log("|---|---:|---:|---:|---:|");
  for (const name of args.fixtures) {
    const x = makeFixture(name, { n, v, d, dtype, seed });
    const s = fixtureStats(x, { tile, threshold });
    console.log(
      `| ${name} | ${s.meanMaxProb.toPrecision(4)} | ${s.meanEntropy.toFixed(3)} | ` +
        `${s.top1Accuracy.toFixed(3)} | ${(100 * s.tileFractionBelow).toFixed(1)}% |`,
    );
  }
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(main(Deno.args));
  } catch (err) {
    console.error(`error: ${oneLine(err)}`);
    Deno.exit(exitCodeOf(err));
  }
}
