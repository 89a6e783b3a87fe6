/**
 * `deno task compare A.json B.json [--threshold PCT] [--across adapter|engine]
 * [--explain-above RATIO] [--out FILE.json]`: two table3 or sweep runs compared cell by cell
 * (measure/compare.ts): for every cell both measured (method, β, mode, shape, dtype, fixture,
 * reduction), B's median time over A's with a bootstrap interval from the stored samples, and a
 * verdict (faster, slower, within noise); for every cell whose B/A exceeds RATIO (default 1.15,
 * 0: off), each pass in both runs sorted by B − A (measure/compare_passes.ts). Markdown on
 * stdout, JSON with --out. Exit 0; 1 when a cell is slower past the threshold (or
 * fails the correctness check it passed in A); 2 for bad input (a file that is not a report, no
 * cell in common, different adapters or engines without --across), with nothing written.
 * @module
 */
import { defineCommand, parseList, runCli } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import { readReportCells } from "../measure/compare_cells.ts";
import {
  type Across,
  COMPARE_THRESHOLD,
  compareReports,
  comparisonExitCode,
  formatComparison,
} from "../measure/compare.ts";
import { COMPARE_EXPLAIN_ABOVE } from "../measure/compare_passes.ts";

/** The command line of `compare`. */
export const COMPARE_COMMAND = defineCommand({
  name: "deno task compare",
  summary: "Compares two table3 or sweep JSON reports cell by cell: B's median time over A's " +
    "with a bootstrap interval from the stored samples, and a verdict. Exit 1 when a cell is " +
    "slower past the threshold.",
  positionals: "A.json B.json",
  flags: {
    threshold: {
      type: "number",
      min: 0,
      max: 1000,
      arg: "PCT",
      help: "change in percent a verdict needs besides an interval that excludes 1",
      default: COMPARE_THRESHOLD * 100,
    },
    across: {
      type: "string",
      arg: "adapter,engine",
      help: "what may differ between the reports (default: nothing)",
    },
    "explain-above": {
      type: "number",
      min: 0,
      max: 1000,
      arg: "RATIO",
      help: "list each pass, in both runs and sorted by B − A, of every cell whose B/A exceeds " +
        "RATIO (0: off)",
      default: COMPARE_EXPLAIN_ABOVE,
    },
    out: { type: "string", arg: "FILE.json", help: "also write the comparison as JSON" },
  },
});

/** Runs the command with `args`; returns the exit code. */
export async function compareMain(args: string[]): Promise<number> {
  const parsed = COMPARE_COMMAND.parse(args);
  if (!parsed) return 0;
  const f = parsed.values;
  check(
    parsed.positionals.length === 2,
    `give two reports, A.json and B.json (got ${parsed.positionals.length})`,
  );
  const across = f.across === undefined ? [] : parseList("--across", f.across).map((x) => {
    check(x === "adapter" || x === "engine", `--across must list adapter or engine, got '${x}'`);
    return x as Across;
  });
  if (f.out !== undefined) checkOutputs([f.out], parsed.positionals);
  const [a, b] = parsed.positionals.map(readReportCells);
  const c = compareReports(a, b, {
    threshold: f.threshold / 100,
    across,
    explainAbove: f["explain-above"],
  });
  if (f.out !== undefined) {
    await writeAllOrNothing([{ path: f.out, bytes: JSON.stringify(c, null, 2) + "\n" }]);
  }
  console.log(formatComparison(c).trimEnd());
  return comparisonExitCode(c);
}

if (import.meta.main) {
  await runCli(() => compareMain(Deno.args));
}
