/**
 * The cells of a saved table3 or sweep JSON report, read without trusting it: what `compare` and
 * the history (measure/history.ts) work on. A cell is one method × β × mode at one shape, dtype,
 * fixture and reduction, with its per-repetition time samples. Anything that is not such a report
 * is an InputError naming the file.
 * @module
 */
import { readFileSync } from "node:fs";
import { check, InputError, oneLine } from "../core/errors.ts";

/** One cell of a report. */
export interface ReportCell {
  method: string;
  label: string;
  beta: number;
  mode: string;
  n: number;
  v: number;
  d: number;
  dtype: string;
  fixture: string;
  reduction: string;
  /** Median time, ms (null when the cell failed). */
  timeMs: number | null;
  /** Every measured repetition's time, ms (empty when failed or absent). */
  samples: number[];
  /** Where the times come from (gpu, wall, cpu). */
  timeSource: string;
  /** Peak bytes above the inputs (null when failed). */
  peakBytes: number | null;
  /** Median GPU ms of each pass label, when the report has a per-pass breakdown. */
  passMs?: Record<string, number>;
  /** Why the cell failed, when it did. */
  error?: string;
  /** The correctness check's verdict and error, when the report has one. */
  check?: { ok: boolean; error: number; worst?: string };
}

/** A report's cells and where they were measured. */
export interface ReportCells {
  /** The file read. */
  path: string;
  kind: "table3" | "sweep";
  /** The adapter's description. */
  adapter: string;
  /** The WebGPU implementation (`deno` in reports older than the engine field). */
  engine: string;
  /** The git commit, or null when unknown. */
  commit: string | null;
  /** Whether the tree had uncommitted changes (null when unknown). */
  dirty: boolean | null;
  /** When it was measured (ISO 8601). */
  date: string;
  cells: ReportCell[];
}

/** The identity of a cell across reports: method, β, mode, shape, dtype, fixture, reduction. */
export function cellKey(c: ReportCell): string {
  return `${c.method}|${c.beta}|${c.mode}|${c.n}x${c.v}x${c.d}|${c.dtype}|${c.fixture}|${c.reduction}`;
}

/** Reads a report file (InputError when it cannot be read or is not a table3 or sweep report). */
export function readReportCells(path: string): ReportCells {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new InputError(`${path}: cannot read it: ${oneLine(e)}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new InputError(`${path}: not JSON (give a table3 or sweep .json report)`);
  }
  return reportCells(json, path);
}

const _num = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x);

/** The cells of a parsed report (see {@link readReportCells}). */
export function reportCells(json: unknown, path: string): ReportCells {
  const r = json as Record<string, unknown> | null;
  const env = (r && typeof r === "object" ? r.env : undefined) as
    | Record<string, unknown>
    | undefined;
  const adapter = env?.adapter as Record<string, unknown> | undefined;
  const table3 = Array.isArray(r?.rows) && typeof r?.shape === "object";
  const sweep = Array.isArray(r?.cells) && typeof r?.base === "object";
  check(
    r !== null && typeof r === "object" && (table3 || sweep) && typeof adapter?.description ===
        "string",
    `${path}: not a table3 or sweep report (no rows or cells with an environment)`,
  );
  const git = env!.git as { commit?: unknown; dirty?: unknown } | undefined;
  const base = {
    fixture: String(r.fixture ?? "?"),
    reduction: String(r.reduction ?? "mean"),
    timeSource: String(r.timeSource ?? "gpu"),
  };
  const raw: { row: unknown; shape: unknown }[] = table3
    ? (r.rows as unknown[]).map((row) => ({ row, shape: r.shape }))
    : (r.cells as { row: unknown; shape: unknown }[]).map((c) => ({
      row: c?.row,
      shape: c?.shape,
    }));
  const cells = raw.map(({ row, shape }, i) => _cell(row, shape, base, `${path}: cell ${i}`));
  return {
    path,
    kind: table3 ? "table3" : "sweep",
    adapter: adapter!.description as string,
    engine: typeof adapter!.engine === "string" ? adapter!.engine : "deno",
    commit: typeof git?.commit === "string" ? git.commit : null,
    dirty: typeof git?.dirty === "boolean" ? git.dirty : null,
    date: typeof env!.date === "string" ? env!.date : "",
    cells,
  };
}

function _cell(
  row: unknown,
  shape: unknown,
  base: { fixture: string; reduction: string; timeSource: string },
  what: string,
): ReportCell {
  const x = row as Record<string, unknown> | null;
  const s = shape as Record<string, unknown> | null;
  check(
    x !== null && typeof x === "object" && typeof x.method === "string" && _num(x.beta) &&
      typeof x.mode === "string" && s !== null && typeof s === "object" && _num(s.n) &&
      _num(s.v) && _num(s.d) && typeof s.dtype === "string",
    `${what} is not a measured row (method, beta, mode, shape)`,
  );
  const samples = Array.isArray(x.timeMsSamples) ? x.timeMsSamples.filter(_num) : [];
  const ck = x.check as Record<string, unknown> | undefined;
  const cell: ReportCell = {
    method: x.method as string,
    label: typeof x.label === "string" ? x.label : x.method as string,
    beta: x.beta as number,
    mode: x.mode as string,
    n: s.n as number,
    v: s.v as number,
    d: s.d as number,
    dtype: s.dtype as string,
    fixture: base.fixture,
    reduction: base.reduction,
    timeMs: _num(x.timeMs) ? x.timeMs : null,
    samples,
    timeSource: typeof x.timeSource === "string" ? x.timeSource : base.timeSource,
    peakBytes: _num(x.peakBytes) ? x.peakBytes : null,
  };
  if (typeof x.error === "string") cell.error = x.error;
  if (x.passMs !== null && typeof x.passMs === "object") {
    const passes = Object.entries(x.passMs as Record<string, unknown>).filter(([, ms]) => _num(ms));
    if (passes.length > 0) cell.passMs = Object.fromEntries(passes) as Record<string, number>;
  }
  if (ck && typeof ck.ok === "boolean") {
    cell.check = {
      ok: ck.ok,
      error: typeof ck.error === "number" ? ck.error : Infinity, // JSON writes Infinity as null
      worst: typeof ck.worst === "string" ? ck.worst : undefined,
    };
  }
  return cell;
}
