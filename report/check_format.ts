/**
 * How the correctness check (measure/check.ts) shows in every report format: a row's check as
 * text (`err 3.6e-6`, or `incorrect: dC err 1.0 > tol 0.031`), whether a row is ranked (an
 * incorrect one gets no speed ratio), its CSV columns, its SVG note, and the run's note on what
 * the check compared and cost.
 * @module
 */
import { type CellCheck, type CheckSummary, describeCheck, formatError } from "../measure/check.ts";

/** A row as the check sees it. */
export interface CheckedRow {
  error?: string;
  check?: CellCheck;
}

/** Whether a measured row failed its correctness check. */
export function isIncorrect(row: CheckedRow): boolean {
  return row.error === undefined && row.check !== undefined && !row.check.ok;
}

/** The row's check in words, or "" when it carries none (failed, or not checked). */
export function checkText(row: CheckedRow): string {
  return row.error === undefined && row.check ? describeCheck(row.check) : "";
}

/**
 * A table cell with the check: `1.1 MB, 24.3 ms, err 3.6e-6`, or for a row that failed its check
 * `**incorrect** (dC err 1.0 > tol 0.031): 1.1 MB, 24.3 ms`. `cell` is the cell without it.
 */
export function withCheck(cell: string, row: CheckedRow): string {
  if (row.error !== undefined || !row.check) return cell;
  if (isIncorrect(row)) {
    return `**incorrect** (${checkText(row).replace(/^incorrect: /, "")}): ${cell}`;
  }
  return `${cell}, ${checkText(row)}`;
}

/** CSV columns of the check. */
export const CHECK_CSV_COLUMNS = ["check_ok", "check_error", "check_worst", "check_tol"] as const;

/** The row's values of {@link CHECK_CSV_COLUMNS} (nulls where it carries no check). */
export function checkCsvFields(row: CheckedRow): (string | number | boolean | null)[] {
  const c = row.error === undefined ? row.check : undefined;
  if (!c) return [null, null, null, null];
  const err = Number.isFinite(c.error) ? c.error : String(c.error);
  return [c.ok, err, c.worst, c.tol[c.worst] ?? null];
}

/** The note of a bar in the SVG: `incorrect` for a row that failed its check. */
export function checkNote(row: CheckedRow): string | undefined {
  return isIncorrect(row) ? "incorrect" : undefined;
}

/** The report's line on the check: what it compared, its tolerance, what it cost. */
export function formatCheckSummary(s: CheckSummary | undefined, durationS?: number): string {
  if (!s) return "Correctness: not checked.";
  const cost = `the reference took ${(s.referenceMs / 1000).toFixed(1)} s and the cells' checks ` +
    `${(s.checkMs / 1000).toFixed(1)} s${
      durationS
        ? ` (${((100 * (s.referenceMs + s.checkMs)) / (durationS * 1000)).toFixed(1)}% of the run)`
        : ""
    }, outside every timed region`;
  const what = `each cell's loss, the dE rows of ${s.tokens} sampled tokens and the dC rows of ` +
    `${s.vocab} sampled vocabulary entries (every token's contribution), read from its first ` +
    `repetition, against a reference kernel with compensated sums; error = max |got − want| / ` +
    `max |want|, tolerance ${formatError(s.tol)} for this dtype plus a method's reported 16-bit ` +
    `roundings. A row that fails is marked incorrect and not ranked`;
  return `Correctness: ${what}; ${cost}.${
    s.unavailable ? ` Not checked where ${s.unavailable}.` : ""
  }`;
}
