/**
 * Redraws Figure 4 (reconstructed): the normalised entropy gap of the LM-head entropy lower bound
 * against the hidden size, one line per vocabulary size. Writes the SVG and, beside it, the
 * plotted numbers as JSON (same path with .json), each atomically (temp file, then rename).
 *
 *   deno run -A scripts/entropy_bound_figure.ts [--out reports/figure4_entropy_gap.svg]
 *     [--rho 0.1[,0.2…]] [--vocab 32000,128256,256000] [--d-min 64] [--d-max 8192] [--points 49]
 *
 * Bad flags print one line `error: …` and exit with status 2.
 * @module
 */
import { parseArgs } from "node:util";
import { dirname } from "node:path";
import { runCli } from "../core/cli.ts";
import { InputError } from "../core/errors.ts";
import { figure4Data, figure4Svg } from "../calibration/entropy_figure.ts";

const USAGE = "usage: entropy_bound_figure.ts [--out FILE.svg] [--rho R[,R…]] " +
  "[--vocab V[,V…]] [--d-min N] [--d-max N] [--points N]";

/** Runs the command with `args` (throws InputError on bad flags; see {@link runCli}). */
export async function main(args: string[]): Promise<void> {
  const opts = _parse(args);
  if (opts === "help") {
    console.log(USAGE);
    return;
  }
  const data = figure4Data(opts);
  const svg = await figure4Svg(data);
  const json = opts.out.replace(/\.svg$/i, "") + ".json";
  await _writeAtomic(opts.out, svg);
  await _writeAtomic(json, JSON.stringify(data, null, 1) + "\n");
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
  let parsed;
  try {
    parsed = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        out: { type: "string", default: "reports/figure4_entropy_gap.svg" },
        rho: { type: "string", default: "0.1" },
        vocab: { type: "string", default: "32000,128256,256000" },
        "d-min": { type: "string", default: "64" },
        "d-max": { type: "string", default: "8192" },
        points: { type: "string", default: "49" },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (err) {
    const msg = String(err instanceof Error ? err.message : err).split("\n")[0];
    throw new InputError(`${msg} (${USAGE})`);
  }
  const v = parsed.values;
  if (v.help) return "help";
  if (!/\.svg$/i.test(v.out)) throw new InputError(`--out must end in .svg, got ${v.out}`);
  const int = (name: string, s: string, min: number) => {
    const n = Number(s);
    if (!Number.isInteger(n) || n < min) {
      throw new InputError(`--${name} must be an integer ≥ ${min}, got ${s}`);
    }
    return n;
  };
  const list = (name: string, s: string, ok: (x: number) => boolean, what: string) =>
    s.split(",").map((t) => {
      const x = Number(t.trim());
      if (t.trim() === "" || !ok(x)) throw new InputError(`--${name}: ${what}, got "${t}"`);
      return x;
    });
  const opts = {
    out: v.out,
    rho: list("rho", v.rho, (x) => Number.isFinite(x) && x > 0, "each value must be > 0"),
    vocabSizes: list("vocab", v.vocab, (x) => Number.isInteger(x) && x >= 2, "integers ≥ 2"),
    dMin: int("d-min", v["d-min"], 1),
    dMax: int("d-max", v["d-max"], 1),
    points: int("points", v.points, 2),
  };
  if (opts.dMax < opts.dMin) {
    throw new InputError(`--d-max (${opts.dMax}) must be ≥ --d-min (${opts.dMin})`);
  }
  return opts;
}

async function _writeAtomic(path: string, text: string): Promise<void> {
  await Deno.mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.tmp-${Deno.pid}`;
  try {
    await Deno.writeTextFile(tmp, text);
    await Deno.rename(tmp, path);
  } catch (err) {
    await Deno.remove(tmp).catch(() => {});
    throw err;
  }
}

if (import.meta.main) await runCli(() => main(Deno.args));
