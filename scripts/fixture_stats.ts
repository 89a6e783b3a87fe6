/**
 * Prints softmax statistics of the data fixtures as a Markdown table, one row per fixture.
 *
 * Usage: deno run -A scripts/fixture_stats.ts [--fixture NAME|all] [--n 1024] [--v 8192]
 *   [--d 256] [--dtype bf16|f16|f32] [--seed 0] [--tile 128] [--threshold 2^-12]
 *
 * Bad flags print one line `error: ...` on stderr and exit with status 2.
 * @module
 */
import { parseArgs } from "node:util";
import { check, InputError, oneLine } from "../core/errors.ts";
import { parseDtype } from "../core/options.ts";
import { type FixtureName, FIXTURES, makeFixture, parseFixtureName } from "../fixtures/mod.ts";
import { fixtureStats } from "../fixtures/stats.ts";

const USAGE = "usage: fixture_stats.ts [--fixture NAME|all] [--n N] [--v V] [--d D] " +
  "[--dtype bf16|f16|f32] [--seed S] [--tile T] [--threshold P]";

/** Parses a flag value as an integer ≥ `min`. */
function _int(flag: string, value: string, min: number): number {
  const x = Number(value);
  check(
    value.trim() !== "" && Number.isSafeInteger(x) && x >= min,
    `--${flag} must be an integer ≥ ${min}, got '${value}'`,
  );
  return x;
}

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
  fixtures: FixtureName[];
  n: number;
  v: number;
  d: number;
  dtype: ReturnType<typeof parseDtype>;
  seed: number;
  tile: number;
  threshold: number;
}

function _parse(argv: string[]): Args | "help" {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        fixture: { type: "string", default: "all" },
        n: { type: "string", default: "1024" },
        v: { type: "string", default: "8192" },
        d: { type: "string", default: "256" },
        dtype: { type: "string", default: "bf16" },
        seed: { type: "string", default: "0" },
        tile: { type: "string", default: "128" },
        threshold: { type: "string", default: "2^-12" },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
  } catch (err) {
    throw new InputError((err as Error).message.split("\n")[0]);
  }
  if (values.help) return "help";
  return {
    fixtures: values.fixture === "all" ? [...FIXTURES] : [parseFixtureName(values.fixture)],
    n: _int("n", values.n, 1),
    v: _int("v", values.v, 1),
    d: _int("d", values.d, 1),
    dtype: parseDtype(values.dtype),
    seed: _int("seed", values.seed, 0),
    tile: _int("tile", values.tile, 1),
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
  if (args === "help") {
    console.log(USAGE);
    return 0;
  }
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
    Deno.exit(1);
  }
}
