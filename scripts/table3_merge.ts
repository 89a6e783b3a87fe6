/**
 * `./dev run -A scripts/table3_merge.ts --out DIR [--external torch.json] A.json B.json ...`:
 * merges Table 3 JSON reports of the same adapter, shape and dtype (e.g. the β > 0 and β = 0
 * sections measured in separate GPU sessions) into one report, and writes its four files. A
 * row (method, β, mode) measured in several reports is taken from the last one given, so a
 * re-measurement of some methods can be laid over a full table.
 * @module
 */
import { defineCommand, runCli } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import type { Table3Report } from "../report/table3.ts";
import { readReportJson, writeReport } from "../report/table3_files.ts";
import { readExternalRows } from "../report/external.ts";
import { checkOutputDir } from "../io/outputs.ts";

/** The command line of `table3_merge.ts`. */
export const TABLE3_MERGE_COMMAND = defineCommand({
  name: "./dev run -A scripts/table3_merge.ts",
  summary: "Merges Table 3 JSON reports of one adapter, shape and dtype into one report; a " +
    "cell measured in several comes from the last one given.",
  flags: {
    out: { type: "string", arg: "DIR", help: "report directory", default: "out" },
    external: { type: "string", arg: "FILE.json", help: "same-card rows to merge" },
  },
  positionals: "A.json B.json ...",
});

await runCli(async () => {
  const parsed = TABLE3_MERGE_COMMAND.parse(Deno.args);
  if (!parsed) return;
  const { values, positionals } = parsed;
  check(positionals.length >= 1, "give at least one table3 JSON report to merge");
  const reports = positionals.map(readReportJson);
  checkOutputDir(values.out, `--out ${values.out}`);
  const [first] = reports;
  for (const [i, r] of reports.entries()) {
    check(
      JSON.stringify(r.shape) === JSON.stringify(first.shape) &&
        r.env.adapter.description === first.env.adapter.description &&
        r.fixture === first.fixture,
      `${positionals[i]}: shape, adapter or fixture differs from ${positionals[0]}`,
    );
  }
  const merged: Table3Report = {
    ...first,
    betas: [...new Set(reports.flatMap((r) => r.betas))],
    rows: _latestRows(reports),
    durationS: reports.reduce((s, r) => s + (r.durationS ?? 0), 0),
    external: values.external ? readExternalRows(values.external) : first.external,
    // complete when every part is; a merged report has no single plan to resume
    complete: reports.every((r) => r.complete !== false),
    plan: undefined,
  };
  const paths = await writeReport(merged, values.out);
  console.log(`merged ${reports.length} reports (${merged.rows.length} rows): ${paths.md}`);
});

/** Rows of all reports; for a (method, β, mode) in several, the last report's row, in first-seen order. */
function _latestRows(reports: Table3Report[]): Table3Report["rows"] {
  const byKey = new Map<string, Table3Report["rows"][number]>();
  for (const r of reports) for (const x of r.rows) byKey.set(`${x.method}|${x.beta}|${x.mode}`, x);
  return [...byKey.values()];
}
