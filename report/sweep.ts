/**
 * Scaling-sweep reports: the cells of a sweep (measure/sweep.ts) as
 * - `sweep_<adapter>_<over>.csv`: long format, one line per method × β × mode × metric × value
 *   ({@link SWEEP_CSV_COLUMNS}; metric `timeMs` in ms or `peakBytes` in bytes, p20/p50/p80/min/max
 *   over the measured repetitions), failed cells with empty figures and their error;
 * - `sweep_<adapter>_<over>.json`: the environment (adapter, driver, Deno, date, git commit) and
 *   every cell with its raw per-repetition samples and failures;
 * - `sweep_<adapter>_<over>_time.svg` and `…_memory.svg`: one line per method against the swept
 *   size, one panel per mode (and per β), min–max error bars, a gap where a method failed, the
 *   memory lower bound as a dashed black line, log axes where the values span more than 10×.
 * Same-card PyTorch rows (scripts/torch_peers.py) whose fixed sizes match are added as
 * dashed lines and CSV rows with method `torch-…`.
 * @module
 */
import { mkdirSync } from "node:fs";
import { writeAtomic } from "../io/outputs.ts";
import { join } from "node:path";
import type { ExternalRow, ExternalRows } from "./external.ts";
import { lowerBoundBytes, METHOD_ORDER, reportSlug, type Table3Env } from "./table3.ts";
import { logTicks, renderVegaLite, type TopLevelSpec } from "./svg.ts";
import { type SeriesStyle, seriesStyles } from "./styles.ts";
import { csvText } from "./csv.ts";
import type { Reduction } from "../core/options.ts";
import type { ProblemSpec } from "../methods/types.ts";
import { type Mode, MODES, percentile, type TimeSource } from "../measure/timing.ts";
import type { SweepAxis, SweepCell } from "../measure/sweep.ts";

/** Everything a sweep report holds (also its JSON form). */
export interface SweepReport {
  /** Where it was measured (with the git commit). */
  env: Table3Env;
  /** The swept size. */
  over: SweepAxis;
  /** Its values, in the order measured. */
  values: number[];
  /** The fixed sizes and dtype (the swept size holds its first value). */
  base: ProblemSpec;
  fixture: string;
  /** How the inputs were generated (`cce-fast`, `fixtures`). */
  generator?: string;
  seed: number;
  betas: number[];
  modes: Mode[];
  /** The methods measured, in order, with their table labels. */
  methods: { name: string; label: string }[];
  reduction: Reduction;
  warmup: number;
  reps: number;
  timeSource: TimeSource;
  /** Why the fixed sizes differ from the paper's, when they were reduced by default. */
  reducedShape?: string;
  /** Seconds the run took so far. */
  durationS?: number;
  /** False while the sweep runs (the JSON is rewritten after every cell), true at the end. */
  complete: boolean;
  /** Every measured or failed cell, with raw samples. */
  cells: SweepCell[];
  /** The failed cells in short: method, β, mode, value and why. */
  failures?: { method: string; beta: number; mode: Mode; x: number; error: string }[];
  /** External (PyTorch) rows whose fixed sizes match, one entry per file. */
  external?: ExternalRows[];
}

/** Columns of the long-format CSV, in order. */
export const SWEEP_CSV_COLUMNS = [
  "adapter",
  "n",
  "v",
  "d",
  "dtype",
  "fixture",
  "method",
  "beta",
  "mode",
  "metric",
  "x_name",
  "x_value",
  "p20",
  "p50",
  "p80",
  "min",
  "max",
  "reps",
  "unit",
  "error",
] as const;

/** The metrics of the long format with their units. */
export const SWEEP_METRICS = [
  { metric: "timeMs", unit: "ms" },
  { metric: "peakBytes", unit: "bytes" },
] as const;

/** `sweep_<adapter-slug>_<over>` for a report. */
export function sweepBaseName(r: Pick<SweepReport, "env" | "over">): string {
  return `sweep_${reportSlug(r.env.adapter)}_${r.over}`;
}

/** Whether an external file's fixed sizes (all but the swept one) and dtype match the sweep's. */
export function externalMatches(
  x: ExternalRows,
  r: Pick<SweepReport, "over" | "base">,
): boolean {
  return (["n", "v", "d"] as const).every((k) => k === r.over || x.shape[k] === r.base[k]);
}

/** The failed cells in short. */
export function sweepFailures(cells: readonly SweepCell[]): NonNullable<SweepReport["failures"]> {
  return cells.filter((c) => c.row.error !== undefined).map((c) => ({
    method: c.row.method,
    beta: c.row.beta,
    mode: c.row.mode,
    x: c.x,
    error: c.row.error!,
  }));
}

/** One line of the long format before CSV encoding. */
export interface SweepLongRow {
  adapter: string;
  n: number;
  v: number;
  d: number;
  dtype: string;
  fixture: string;
  method: string;
  beta: number;
  mode: Mode;
  metric: "timeMs" | "peakBytes";
  x_name: SweepAxis;
  x_value: number;
  p20: number | null;
  p50: number | null;
  p80: number | null;
  min: number | null;
  max: number | null;
  reps: number;
  unit: "ms" | "bytes";
  error: string | null;
}

function _stats(samples: readonly number[] | undefined, fallback: number | null) {
  if (samples && samples.length > 0) {
    return {
      p20: percentile(samples, 0.2),
      p50: percentile(samples, 0.5),
      p80: percentile(samples, 0.8),
      min: Math.min(...samples),
      max: Math.max(...samples),
    };
  }
  return { p20: null, p50: fallback, p80: null, min: fallback, max: fallback };
}

/** The long-format rows of a report: cells × metrics, then the matching external rows. */
export function sweepLongRows(r: SweepReport): SweepLongRow[] {
  const out: SweepLongRow[] = [];
  const adapter = r.env.adapter.description;
  for (const c of r.cells) {
    for (const { metric, unit } of SWEEP_METRICS) {
      const ok = c.row.error === undefined;
      const s = !ok
        ? { p20: null, p50: null, p80: null, min: null, max: null }
        : metric === "timeMs"
        ? _stats(c.row.timeMsSamples, c.row.timeMs)
        : _stats(c.row.peakBytesSamples, c.row.peakBytes);
      if (ok && metric === "timeMs" && !c.row.timeMsSamples?.length) {
        s.min = c.row.timeMsMin;
        s.max = c.row.timeMsMax;
      }
      out.push({
        adapter,
        ...c.shape,
        fixture: r.fixture,
        method: c.row.method,
        beta: c.row.beta,
        mode: c.row.mode,
        metric,
        x_name: r.over,
        x_value: c.x,
        ...s,
        reps: c.row.reps,
        unit,
        error: c.row.error ?? null,
      });
    }
  }
  for (const x of r.external ?? []) {
    const dev = `${String(x.env.device ?? "?")} (external: ${x.source})`;
    for (const e of x.rows) {
      for (const { metric, unit } of SWEEP_METRICS) {
        const value = metric === "timeMs" ? e.timeMs : e.peakBytes;
        const ok = e.error === undefined && typeof value === "number";
        const samples = metric === "timeMs"
          ? _samples(e, "timeMsSamples") ?? _samples(e, "samplesMs")
          : undefined;
        const s = ok ? _stats(samples, value!) : _stats(undefined, null);
        if (ok && metric === "timeMs" && !samples) {
          s.min = e.timeMsMin ?? value!;
          s.max = e.timeMsMax ?? value!;
        }
        out.push({
          adapter: dev,
          ...x.shape,
          dtype: _externalDtype(x, e),
          fixture: x.fixture,
          method: e.method,
          beta: e.beta,
          mode: e.mode,
          metric,
          x_name: r.over,
          x_value: x.shape[r.over],
          ...s,
          reps: typeof (e as { reps?: unknown }).reps === "number"
            ? (e as unknown as { reps: number }).reps
            : 0,
          unit,
          error: e.error ?? (ok ? null : "not measured"),
        });
      }
    }
  }
  return out;
}

function _samples(e: ExternalRow, key: string): number[] | undefined {
  const s = (e as unknown as Record<string, unknown>)[key];
  return Array.isArray(s) && s.length > 0 && s.every((v) => typeof v === "number") ? s : undefined;
}

function _externalDtype(x: ExternalRows, e: ExternalRow): string {
  const d = (e as unknown as { dtype?: unknown }).dtype;
  return typeof d === "string" ? d : x.shape.dtype;
}

/** The long-format CSV (RFC 4180 quoting). */
export function formatSweepCsv(r: SweepReport): string {
  const lines: unknown[][] = [[...SWEEP_CSV_COLUMNS]];
  for (const row of sweepLongRows(r)) lines.push(SWEEP_CSV_COLUMNS.map((k) => row[k]));
  return csvText(lines);
}

/** The JSON report (pretty-printed), with the failures summarised. */
export function formatSweepJson(r: SweepReport): string {
  return JSON.stringify({ ...r, failures: sweepFailures(r.cells) }, null, 1) + "\n";
}

const _AXIS_NAME: Record<SweepAxis, string> = {
  n: "N (tokens)",
  v: "|V| (vocabulary)",
  d: "D (hidden size)",
};

/** One point of a chart. */
interface _Point {
  series: string;
  x: number;
  y: number | null;
  lo: number | null;
  hi: number | null;
  /** `measured`, `external` or `bound`. */
  kind: string;
  mode: Mode;
  beta: number;
}

/** The series of a chart in legend order: methods, external rows, then the lower bound. */
function _seriesOrder(points: readonly _Point[]): string[] {
  const order = (
    k: string,
  ) => [...new Set(points.filter((p) => p.kind === k).map((p) => p.series))];
  const rank = (m: string) => {
    const i = METHOD_ORDER.indexOf(m);
    return i < 0 ? METHOD_ORDER.length : i;
  };
  const measured = order("measured").map((m, i) => ({ m, i }))
    .sort((a, b) => rank(a.m) - rank(b.m) || a.i - b.i).map((x) => x.m);
  return [...measured, ...order("external"), ...order("bound")];
}

function _points(r: SweepReport, metric: "timeMs" | "peakBytes"): _Point[] {
  const scale = metric === "timeMs" ? 1 : 1 / 2 ** 20;
  const pts: _Point[] = [];
  for (const c of r.cells) {
    const x = c.row;
    const ok = x.error === undefined;
    const samples = metric === "timeMs" ? x.timeMsSamples : x.peakBytesSamples;
    const y = ok ? (metric === "timeMs" ? x.timeMs : x.peakBytes) : null;
    const lo = ok
      ? (samples?.length ? Math.min(...samples) : metric === "timeMs" ? x.timeMsMin : y)
      : null;
    const hi = ok
      ? (samples?.length ? Math.max(...samples) : metric === "timeMs" ? x.timeMsMax : y)
      : null;
    pts.push({
      series: x.method,
      x: c.x,
      y: y === null ? null : y * scale,
      lo: lo === null ? null : lo * scale,
      hi: hi === null ? null : hi * scale,
      kind: "measured",
      mode: x.mode,
      beta: x.beta,
    });
  }
  for (const f of r.external ?? []) {
    for (const e of f.rows) {
      const v = metric === "timeMs" ? e.timeMs : e.peakBytes;
      const dt = _externalDtype(f, e);
      const ok = e.error === undefined && typeof v === "number";
      pts.push({
        series: `${e.method}${dt !== r.base.dtype ? ` ${dt}` : ""} (PyTorch)`,
        x: f.shape[r.over],
        y: ok ? v! * scale : null,
        lo: ok && metric === "timeMs" ? (e.timeMsMin ?? v!) * scale : null,
        hi: ok && metric === "timeMs" ? (e.timeMsMax ?? v!) * scale : null,
        kind: "external",
        mode: e.mode,
        beta: e.beta,
      });
    }
  }
  if (metric === "peakBytes") {
    for (const x of r.values) {
      for (const mode of r.modes) {
        for (const beta of r.betas) {
          const shape = { ...r.base, [r.over]: x } as ProblemSpec;
          const b = lowerBoundBytes(shape, mode, r.reduction) * scale;
          pts.push({
            series: "lower bound",
            x,
            y: b,
            lo: null,
            hi: null,
            kind: "bound",
            mode,
            beta,
          });
        }
      }
    }
  }
  // a log axis cannot show 0: such points become gaps (the JSON keeps them)
  return pts;
}

/** Whether values spanning [lo, hi] ask for a log axis (more than 10×). */
export function wantsLogAxis(lo: number, hi: number): boolean {
  return lo > 0 && hi / lo > 10;
}

function _panel(
  points: readonly _Point[],
  o: {
    title: string;
    xTitle: string;
    yTitle: string;
    series: readonly string[];
    styles: readonly SeriesStyle[];
    xValues: readonly number[];
    logX: boolean;
    logY: boolean;
    yDomain: [number, number];
    yTicks?: number[];
  },
): Record<string, unknown> {
  const values = points.map((p) => ({ ...p }));
  const x = {
    field: "x",
    type: "quantitative",
    title: o.xTitle,
    scale: o.logX
      ? { type: "log", base: 2, domain: [o.xValues[0] / 1.15, o.xValues.at(-1)! * 1.15] }
      : { type: "linear", zero: false },
    axis: {
      values: [...o.xValues],
      format: o.xValues.every((v) => v % 1000 === 0) ? "~s" : ",",
      grid: true,
    },
  };
  const yScale: Record<string, unknown> = o.logY
    ? { type: "log", domain: o.yDomain }
    : { type: "linear", zero: true, domain: [0, o.yDomain[1]] };
  const yAxis: Record<string, unknown> = { title: o.yTitle, grid: true };
  if (o.yTicks) {
    yAxis.values = o.yTicks;
    yAxis.format = ",~g";
  }
  const y = { field: "y", type: "quantitative", scale: yScale, axis: yAxis };
  const color = {
    field: "series",
    type: "nominal",
    scale: { domain: [...o.series], range: o.styles.map((s) => s.color) },
    legend: { title: "method", symbolStrokeWidth: 2 },
  };
  const shape = {
    field: "series",
    type: "nominal",
    scale: {
      domain: [...o.series],
      range: o.styles.map((s) => s.shape),
    },
    legend: { title: "method" },
  };
  const dash = {
    field: "kind",
    type: "nominal",
    scale: { domain: ["measured", "external", "bound"], range: [[1, 0], [6, 3], [2, 2]] },
    legend: null,
  };
  return {
    title: o.title,
    width: 260,
    height: 200,
    data: { values },
    layer: [
      {
        transform: [{ filter: "datum.lo != null && datum.hi != null && datum.lo > 0" }],
        mark: { type: "rule", strokeWidth: 1.2, opacity: 0.8, clip: true },
        encoding: { x, y: { ...y, field: "lo" }, y2: { field: "hi" }, color },
      },
      {
        mark: {
          type: "line",
          strokeWidth: 1.6,
          clip: true,
          invalid: "break-paths-filter-domains",
          point: { filled: true, size: 26 },
        },
        encoding: {
          x,
          y,
          color,
          shape,
          strokeDash: dash,
          order: { field: "x", type: "quantitative" },
        },
      },
    ],
  };
}

/**
 * One chart of a sweep as a Vega-Lite spec: `metric` (timeMs or peakBytes) against the swept
 * size, one panel per mode (columns) and β (rows), one line per method.
 */
export function sweepChartSpec(r: SweepReport, metric: "timeMs" | "peakBytes"): TopLevelSpec {
  const all = _points(r, metric);
  const series = _seriesOrder(all);
  // every method and PyTorch row its own colour and marker (Ours and the baseline fixed); the
  // lower bound black
  const bySeries = seriesStyles(series.filter((s) => s !== "lower bound"));
  const styles = series.map((s) =>
    s === "lower bound" ? { color: "#000000", shape: "stroke" } : bySeries.get(s)!
  );
  const xs = [...new Set(all.map((p) => p.x))].sort((a, b) => a - b);
  const logX = xs.length >= 2 && xs[0] > 0 && xs.at(-1)! / xs[0] >= 4;
  const positive = (ps: readonly _Point[]) =>
    ps.flatMap((p) => [p.y, p.lo, p.hi]).filter((v): v is number => v !== null && v > 0);
  const ys = positive(all);
  const logY = ys.length > 0 && wantsLogAxis(Math.min(...ys), Math.max(...ys));
  // non-positive values cannot sit on a log axis: gaps there (the JSON has them)
  const points = logY ? all.map((p) => (p.y !== null && p.y <= 0 ? { ...p, y: null } : p)) : all;
  /** Each panel's own y range (modes differ by decades: the fwd lower bound is 4 bytes). */
  const yAxis = (ps: readonly _Point[]) => {
    const v = positive(ps);
    const lo = v.length ? Math.min(...v) : 1, hi = v.length ? Math.max(...v) : 1;
    if (!logY) return { yDomain: [0, hi * 1.05] as [number, number], yTicks: undefined };
    const ticks = logTicks(lo, hi);
    return {
      yDomain: [Math.min(ticks[0], lo), Math.max(ticks.at(-1)!, hi)] as [number, number],
      yTicks: ticks,
    };
  };
  const what = metric === "timeMs"
    ? `median ${r.timeSource === "gpu" ? "GPU" : "wall"} time (ms${logY ? ", log" : ""})`
    : `peak memory (MiB${logY ? ", log" : ""})`;
  const modes = MODES.filter((m) => r.modes.includes(m));
  const rows = r.betas.map((beta) => ({
    hconcat: modes.map((mode) => {
      const ps = points.filter((p) => p.mode === mode && p.beta === beta);
      return _panel(ps, {
        title: r.betas.length > 1 ? `${mode}, β = ${beta}` : mode,
        xTitle: _AXIS_NAME[r.over],
        yTitle: what,
        series,
        styles,
        xValues: xs,
        logX,
        logY,
        ...yAxis(ps),
      });
    }),
  }));
  const fixed = (["n", "v", "d"] as const).filter((k) => k !== r.over)
    .map((k) => `${k === "v" ? "|V|" : k.toUpperCase()} = ${r.base[k].toLocaleString("en-US")}`)
    .join(", ");
  const failed = r.cells.filter((c) => c.row.error !== undefined).length;
  const subtitle = [
    `${fixed}, ${r.base.dtype}, fixture ${r.fixture}${
      r.betas.length === 1 ? `, β = ${r.betas[0]}` : ""
    }; ${r.env.adapter.description}${r.reducedShape ? " (reduced shape)" : ""}`,
    `line: median of ${r.reps} repetition${r.reps === 1 ? "" : "s"}; bar: min–max` +
    (metric === "peakBytes" ? "; black dotted: lower bound" : "") +
    ((r.external?.length ?? 0) > 0 ? "; dashed: same-card PyTorch" : "") +
    `; gap: failed (${failed} cell${failed === 1 ? "" : "s"}, reasons in the JSON)`,
  ];
  return {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: {
      text: `${metric === "timeMs" ? "Time" : "Memory"} against ${_AXIS_NAME[r.over]}`,
      subtitle,
    },
    vconcat: rows,
    resolve: { scale: { color: "shared", shape: "shared", strokeDash: "shared" } },
  } as unknown as TopLevelSpec;
}

/** Paths written by {@link writeSweepReport}. */
export interface SweepPaths {
  csv: string;
  json: string;
  timeSvg?: string;
  memorySvg?: string;
}

/**
 * Writes the JSON and CSV of `r` under `dir` (created if missing), each through a temporary
 * file renamed over the old one, so a run killed at any moment leaves the last complete pair.
 * Cheap: called after every cell.
 */
export function writeSweepData(r: SweepReport, dir: string): SweepPaths {
  mkdirSync(dir, { recursive: true });
  const base = join(dir, sweepBaseName(r));
  const paths = { csv: `${base}.csv`, json: `${base}.json` };
  writeAtomic(paths.json, formatSweepJson(r));
  writeAtomic(paths.csv, formatSweepCsv(r));
  return paths;
}

/** Writes the JSON, the CSV and the two SVG charts of `r` under `dir`. */
export async function writeSweepReport(r: SweepReport, dir: string): Promise<SweepPaths> {
  const time = await renderVegaLite(sweepChartSpec(r, "timeMs"));
  const memory = await renderVegaLite(sweepChartSpec(r, "peakBytes"));
  const paths: SweepPaths = writeSweepData(r, dir);
  const base = join(dir, sweepBaseName(r));
  paths.timeSvg = `${base}_time.svg`;
  paths.memorySvg = `${base}_memory.svg`;
  writeAtomic(paths.timeSvg, time);
  writeAtomic(paths.memorySvg, memory);
  return paths;
}
