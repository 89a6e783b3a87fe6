/**
 * A kernel's history across commits: one long-format CSV (Liger-Kernel's benchmark keeps one
 * too) into which `table3 --history FILE.csv` and `sweep --history FILE.csv` upsert every cell
 * they measured. A row is keyed by commit, engine, adapter, shape, dtype, fixture, reduction,
 * method, β and mode; a cell measured again on the same commit replaces its row, anything else
 * is appended. The time columns are the p20, p50, p80, min and max of the cell's repetitions in
 * ms, with the peak bytes, the correctness check, the run's timestamp and the harness version.
 * The file is rewritten whole through a temporary file, so an interrupted write leaves the old one.
 * @module
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import { check, InputError, oneLine } from "../core/errors.ts";
import { HARNESS_VERSION } from "../core/version.ts";
import { writeAtomic } from "../io/outputs.ts";
import { type ReportCells, reportCells } from "./compare_cells.ts";
import { percentile } from "./timing.ts";

/** The columns, in order; the first {@link HISTORY_KEY} of them are the key. */
export const HISTORY_COLUMNS = [
  "commit",
  "engine",
  "adapter",
  "n",
  "v",
  "d",
  "dtype",
  "fixture",
  "reduction",
  "method",
  "beta",
  "mode",
  "time_ms_p20",
  "time_ms_p50",
  "time_ms_p80",
  "time_ms_min",
  "time_ms_max",
  "peak_bytes",
  "unit",
  "time_source",
  "reps",
  "check_ok",
  "check_error",
  "error",
  "label",
  "timestamp",
  "harness_version",
] as const;

/** How many leading columns form the key. */
export const HISTORY_KEY = 12;

/** A column name. */
export type HistoryColumn = typeof HISTORY_COLUMNS[number];
/** One row: every column as text (empty for none). */
export type HistoryRow = Record<HistoryColumn, string>;

/** The key of a row. */
export function historyKey(r: HistoryRow): string {
  return HISTORY_COLUMNS.slice(0, HISTORY_KEY).map((c) => r[c]).join("|");
}

/** The commit as the history names it: the hash, `+dirty` for a tree with changes. */
function _commit(r: ReportCells): string {
  return r.commit === null ? "unknown" : `${r.commit}${r.dirty ? "+dirty" : ""}`;
}

const _text = (x: number | null | undefined) =>
  x === null || x === undefined || !Number.isFinite(x) ? "" : String(x);

/** The history rows of a report's cells. */
export function historyRows(r: ReportCells, version = HARNESS_VERSION): HistoryRow[] {
  return r.cells.map((c) => {
    const s = c.samples;
    const q = (
      p: number,
    ) => (s.length > 0 && c.error === undefined ? String(percentile(s, p)) : "");
    return {
      commit: _commit(r),
      engine: r.engine,
      adapter: r.adapter,
      n: String(c.n),
      v: String(c.v),
      d: String(c.d),
      dtype: c.dtype,
      fixture: c.fixture,
      reduction: c.reduction,
      method: c.method,
      beta: String(c.beta),
      mode: c.mode,
      time_ms_p20: q(0.2),
      time_ms_p50: q(0.5),
      time_ms_p80: q(0.8),
      time_ms_min: q(0),
      time_ms_max: q(1),
      peak_bytes: c.error === undefined ? _text(c.peakBytes) : "",
      unit: "ms",
      time_source: c.timeSource,
      reps: String(s.length),
      check_ok: c.check === undefined ? "" : String(c.check.ok),
      check_error: c.check === undefined ? "" : String(c.check.error),
      error: c.error ?? "",
      label: c.label,
      timestamp: r.date,
      harness_version: version,
    };
  });
}

/** RFC 4180 field. */
function _field(s: string): string {
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** The CSV text of rows (header first, CRLF line ends). */
export function formatHistory(rows: readonly HistoryRow[]): string {
  const lines = [HISTORY_COLUMNS.join(",")];
  for (const r of rows) lines.push(HISTORY_COLUMNS.map((c) => _field(r[c])).join(","));
  return lines.join("\r\n") + "\r\n";
}

/** Splits RFC 4180 text into records of fields (quoted fields may hold commas, quotes, newlines). */
export function parseCsv(text: string): string[][] {
  const out: string[][] = [];
  let rec: string[] = [], field = "", quoted = false;
  const endRecord = () => {
    rec.push(field);
    out.push(rec);
    rec = [];
    field = "";
  };
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted) {
      if (ch !== '"') field += ch;
      else if (text[i + 1] === '"') {
        field += '"';
        i++;
      } else quoted = false;
    } else if (ch === '"' && field === "") quoted = true;
    else if (ch === ",") {
      rec.push(field);
      field = "";
    } else if (ch === "\n") endRecord();
    else if (ch === "\r") {
      endRecord();
      if (text[i + 1] === "\n") i++;
    } else field += ch;
  }
  if (field !== "" || rec.length > 0) endRecord();
  return out;
}

/**
 * The rows of a history file; [] when it does not exist. InputError when it cannot be read, is a
 * directory, or is not a history of this harness (another header, a row of another width).
 */
export function readHistory(path: string): HistoryRow[] {
  if (!existsSync(path)) return [];
  check(!statSync(path).isDirectory(), `${path}: a directory, not a history file`);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new InputError(`${path}: cannot read it: ${oneLine(e)}`);
  }
  const recs = parseCsv(text);
  check(
    recs.length > 0 && recs[0].join(",") === HISTORY_COLUMNS.join(","),
    `${path}: not a history file of this harness (its first line must be the header ` +
      `${HISTORY_COLUMNS.slice(0, 3).join(",")},…)`,
  );
  return recs.slice(1).map((f, i) => {
    check(
      f.length === HISTORY_COLUMNS.length,
      `${path}: line ${i + 2} has ${f.length} fields, expected ${HISTORY_COLUMNS.length}`,
    );
    return Object.fromEntries(HISTORY_COLUMNS.map((c, j) => [c, f[j]])) as HistoryRow;
  });
}

/** What an upsert did. */
export interface UpsertResult {
  added: number;
  replaced: number;
  /** Rows in the file now. */
  total: number;
}

/**
 * Upserts the cells of a report into the history at `path` (created if missing): rows with the
 * same key are replaced in place, new ones appended. InputError as {@link readHistory}.
 */
export function upsertHistory(path: string, r: ReportCells): UpsertResult {
  const rows = readHistory(path);
  const at = new Map(rows.map((x, i) => [historyKey(x), i]));
  let added = 0, replaced = 0;
  for (const row of historyRows(r)) {
    const k = historyKey(row);
    const i = at.get(k);
    if (i === undefined) {
      at.set(k, rows.length);
      rows.push(row);
      added++;
    } else {
      rows[i] = row;
      replaced++;
    }
  }
  writeAtomic(path, formatHistory(rows));
  return { added, replaced, total: rows.length };
}

/** The `--history` flag of table3 and sweep. */
export const HISTORY_FLAG = {
  type: "string",
  arg: "FILE.csv",
  help: "upsert every cell into this history CSV (docs/harness.md; `./dev task history` draws it)",
} as const;

/**
 * Checks a `--history` path before a run measures anything: InputError when it is a directory or
 * an existing file that is not a history (so a bad path is refused with nothing measured).
 */
export function checkHistoryPath(path: string): void {
  readHistory(path);
}

/**
 * Upserts the cells of a table3 or sweep report object (as its JSON would read) into the history
 * at `path`; returns the line a command prints.
 */
export function upsertReportHistory(path: string, report: unknown, jsonPath: string): string {
  const h = upsertHistory(path, reportCells(JSON.parse(JSON.stringify(report)), jsonPath));
  return `history ${path}: ${h.added} cells added, ${h.replaced} replaced (${h.total} rows)`;
}
