/**
 * `deno task history FILE.csv --method NAME [--mode fwd|bwd|fwd+bwd] [--beta B] [--out FILE.svg]`:
 * draws a method's time across commits from a history CSV that `table3 --history` and
 * `sweep --history` keep (measure/history.ts, report/history_svg.ts), and prints the p50 of each
 * commit. The SVG goes to --out, by default beside the CSV as `<name>_<method>.svg`. Bad input
 * (no such file, not a history, no row of the method, a bad flag): one line, exit 2, nothing
 * written.
 * @module
 */
import { basename, dirname, join } from "node:path";
import { defineCommand, runCli } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { existsSync } from "node:fs";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import { readHistory } from "../measure/history.ts";
import { parseModes } from "../measure/timing.ts";
import { historySvg, selectHistory } from "../report/history_svg.ts";

/** The command line of `history`. */
export const HISTORY_COMMAND = defineCommand({
  name: "deno task history",
  summary: "Draws a method's time across commits (p50, bar p20–p80) from a history CSV that " +
    "table3 --history and sweep --history keep, as SVG, and prints each commit's p50.",
  positionals: "FILE.csv",
  flags: {
    method: { type: "string", help: "the method to draw", required: true },
    mode: { type: "string", arg: "fwd|bwd|fwd+bwd", help: "only this mode", defaultText: "all" },
    beta: { type: "number", min: 0, max: 1, help: "only this β", defaultText: "all" },
    out: { type: "string", arg: "FILE.svg", help: "the SVG", defaultText: "<csv>_<method>.svg" },
  },
});

/** Runs the command with `args`. */
export async function historyMain(args: string[]): Promise<void> {
  const parsed = HISTORY_COMMAND.parse(args);
  if (!parsed) return;
  const f = parsed.values;
  check(parsed.positionals.length === 1, "give one history file, FILE.csv");
  const path = parsed.positionals[0];
  const mode = f.mode === undefined ? undefined : parseModes(f.mode);
  check(mode === undefined || mode.length === 1, "--mode takes one mode");
  check(existsSync(path), `${path}: no such file`);
  const all = readHistory(path);
  const rows = selectHistory(all, { method: f.method, mode: mode?.[0], beta: f.beta });
  if (rows.length === 0) {
    const methods = [...new Set(all.map((r) => r.method))];
    check(
      false,
      `${path}: no measured row of method '${f.method}'${mode ? ` in mode ${mode[0]}` : ""}${
        f.beta === undefined ? "" : ` at β = ${f.beta}`
      } (methods there: ${methods.join(", ") || "none"})`,
    );
  }
  const out = f.out ??
    join(dirname(path), `${basename(path).replace(/\.csv$/i, "")}_${f.method}.svg`);
  checkOutputs([out], [path]);
  const svg = await historySvg(rows, f.method);
  await writeAllOrNothing([{ path: out, bytes: svg }]);
  console.log(`| commit | mode | β | shape | p50 ms |\n| --- | --- | --- | --- | ---: |`);
  for (const r of rows) {
    console.log(
      `| ${r.commit.slice(0, 12)} | ${r.mode} | ${r.beta} | ${r.n}×${r.v}×${r.d} ${r.dtype} | ` +
        `${Number(r.time_ms_p50).toPrecision(4)} |`,
    );
  }
  console.error(`wrote ${out} (${rows.length} cells)`);
}

if (import.meta.main) {
  await runCli(() => historyMain(Deno.args));
}
