/**
 * The CSV form of a Table 3 report: one line per method × β × mode with the adapter, shape and
 * fixture, the figures, the ratios against the section's baseline row, the statistics and the
 * error.
 * @module
 */
import { csvText } from "./csv.ts";
import { type Table3Report, vsBaseline } from "./table3.ts";

/** Columns of the CSV report. */
export const CSV_COLUMNS = [
  "adapter",
  "n",
  "v",
  "d",
  "dtype",
  "fixture",
  "method",
  "label",
  "beta",
  "mode",
  "peak_bytes",
  "peak_mib",
  "time_ms",
  "time_source",
  "time_ms_min",
  "time_ms_max",
  "time_ms_iqr",
  "wall_ms_median",
  "reps",
  "warmup",
  "peak_input_bytes",
  "peak_workspace_bytes",
  "peak_output_bytes",
  "peak_params_bytes",
  "speedup_vs_baseline",
  "memory_saving_vs_baseline",
  "stats",
  "error",
] as const;

/** The CSV report: a header and one line per row (RFC 4180 quoting). */
export function formatCsv(r: Table3Report): string {
  const lines: unknown[][] = [[...CSV_COLUMNS]];
  for (const x of r.rows) {
    const role = x.peakByRole;
    const vs = vsBaseline(r, x);
    lines.push(
      [
        r.env.adapter.description,
        r.shape.n,
        r.shape.v,
        r.shape.d,
        r.shape.dtype,
        r.fixture,
        x.method,
        x.label,
        x.beta,
        x.mode,
        x.peakBytes,
        x.peakBytes === null ? null : x.peakBytes / 2 ** 20,
        x.timeMs,
        x.timeSource,
        x.timeMsMin,
        x.timeMsMax,
        x.timeMsIqr,
        x.wallMsMedian,
        x.reps,
        x.warmup,
        role?.input,
        role?.workspace,
        role?.output,
        role?.params,
        vs.speedup,
        vs.memorySaving,
        x.stats && Object.keys(x.stats).length > 0 ? x.stats : null,
        x.error,
      ],
    );
  }
  return csvText(lines);
}
