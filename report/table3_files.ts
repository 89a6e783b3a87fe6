/**
 * Writes a Table 3 report's four files under one directory as
 * `table3_<adapter-slug>_<n>x<v>x<d>_<dtype>.{md,json,csv,svg}`, atomically.
 * @module
 */
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { InputError } from "../core/errors.ts";
import { join } from "node:path";
import { formatMarkdown, reportBaseName, type Table3Report } from "./table3.ts";
import { formatCsv } from "./table3_csv.ts";
import { renderSvg } from "./table3_svg.ts";

/** The JSON report (pretty-printed, long format). */
export function formatJson(r: Table3Report): string {
  return JSON.stringify(r, null, 2) + "\n";
}

/** Reads a Table 3 JSON report; InputError naming the file when it cannot be read or parsed. */
export function readReportJson(path: string): Table3Report {
  try {
    return JSON.parse(readFileSync(path, "utf8")) as Table3Report;
  } catch (e) {
    throw new InputError(`${path}: ${(e as Error).message.split("\n")[0]}`);
  }
}

/** Paths written by {@link writeReport}. */
export interface ReportPaths {
  md: string;
  json: string;
  csv: string;
  svg: string;
}

/**
 * Writes the four reports under `dir` (created if missing) as `<reportBaseName>.{md,json,csv,svg}`
 * (only the JSON with `o.jsonOnly`, as a run does after every cell): each goes to a temporary
 * name first and all are renamed once every one is written, so a failure leaves no half-written
 * file.
 */
export async function writeReport(
  r: Table3Report,
  dir: string,
  o: { jsonOnly?: boolean } = {},
): Promise<ReportPaths> {
  const contents: Partial<Record<keyof ReportPaths, string>> = o.jsonOnly
    ? { json: formatJson(r) }
    : { md: formatMarkdown(r), json: formatJson(r), csv: formatCsv(r), svg: await renderSvg(r) };
  mkdirSync(dir, { recursive: true });
  const base = join(dir, reportBaseName(r));
  const paths = {} as ReportPaths;
  const temps: [string, string][] = [];
  try {
    for (const ext of ["md", "json", "csv", "svg"] as const) {
      paths[ext] = `${base}.${ext}`;
      if (contents[ext] === undefined) continue;
      const tmp = `${base}.${ext}.tmp-${Deno.pid}`;
      temps.push([tmp, paths[ext]]);
      writeFileSync(tmp, contents[ext]!);
    }
    for (const [tmp, final] of temps) renameSync(tmp, final);
  } catch (e) {
    for (const [tmp] of temps) rmSync(tmp, { force: true });
    throw e;
  }
  return paths;
}
