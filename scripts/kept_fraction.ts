/**
 * `./dev run -A scripts/kept_fraction.ts [--out DIR] A.json B.json ...`: the kept-fraction report
 * (report/kept_fraction.ts) of Table 3 JSON reports of one adapter and shape whose fixtures keep
 * different fractions of tiles, e.g. made by
 * `./dev task table3 --fixture llm:spread=S --n 4096 --v 24576 --betas 0.1 --methods fused,baseline`
 * for several S (docs/performance.md, "Time against the kept fraction").
 * @module
 */
import { defineCommand, runCli } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { readReportJson } from "../report/table3_files.ts";
import { writeKeptFractionReport } from "../report/kept_fraction.ts";
import { checkOutputDir } from "../io/outputs.ts";

/** The command line of `kept_fraction.ts`. */
export const KEPT_FRACTION_COMMAND = defineCommand({
  name: "./dev run -A scripts/kept_fraction.ts",
  summary: "Reads Table 3 JSON reports of one adapter and shape whose inputs keep different " +
    "fractions of tiles and writes each method's time against the kept fraction, beside the " +
    "floors, as kept_fraction_<adapter>_<shape>.{md,json,svg}.",
  flags: {
    out: { type: "string", arg: "DIR", help: "report directory", default: "out" },
  },
  positionals: "A.json B.json ...",
});

await runCli(async () => {
  const parsed = KEPT_FRACTION_COMMAND.parse(Deno.args);
  if (!parsed) return;
  const { values, positionals } = parsed;
  check(positionals.length >= 1, "give at least one table3 JSON report");
  const reports = positionals.map(readReportJson);
  checkOutputDir(values.out, `--out ${values.out}`);
  const paths = await writeKeptFractionReport(reports, values.out);
  console.log(`kept_fraction: wrote ${paths.md}, ${paths.json}, ${paths.svg}`);
});
