/**
 * The project's plotting layer: line charts (training-loss curves, Figure 4), grouped bar charts
 * (time and memory per method, faceted by mode, grouped by β) and a renderer for any Vega-Lite
 * spec (the reliability diagram), all returned as standalone SVG strings.
 *
 * Built on Vega-Lite → Vega rendered headlessly (`new vega.View(…, {renderer: "none"}).toSVG()`):
 * no canvas, no DOM, no network (data is inline; text widths are estimated from font size when no
 * canvas is present). Vega escapes all text it writes, so labels may contain `& < > " '`.
 * Log axes get explicit ticks: decades (see {@link logTicks}) unless ticks are given.
 * @module
 */
// Pinned here, the only file that imports them. Once deno.json maps "vega" and "vega-lite",
// these become bare specifiers and the lint ignores go.
import * as vega from "vega";
import * as vl from "vega-lite";
import type { TopLevelSpec } from "vega-lite";
import { check } from "../core/errors.ts";

/** A Vega-Lite specification (re-exported so callers need not import vega-lite). */
export type { TopLevelSpec };

/** Series colours (Tableau 10), assigned in the order series are given. */
export const PALETTE: readonly string[] = [
  "#4e79a7",
  "#f28e2b",
  "#e15759",
  "#76b7b2",
  "#59a14f",
  "#edc948",
  "#b07aa1",
  "#ff9da7",
  "#9c755f",
  "#bab0ac",
];

const _CONFIG = {
  background: "white",
  font: "sans-serif",
  title: { fontSize: 14, subtitleFontSize: 11, anchor: "start" as const, offset: 8 },
  axis: { labelFontSize: 11, titleFontSize: 12, gridColor: "#e6e6e6" },
  legend: { labelFontSize: 11, titleFontSize: 11, labelLimit: 400 },
  header: { labelFontSize: 12, titleFontSize: 12 },
};

/**
 * Renders a Vega-Lite spec to an SVG string (project defaults for fonts and background are
 * applied under the spec's own `config`).
 */
export async function renderVegaLite(spec: TopLevelSpec): Promise<string> {
  const withConfig = { ...spec, config: { ..._CONFIG, ...(spec.config ?? {}) } } as TopLevelSpec;
  const compiled = vl.compile(withConfig).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: "none", logLevel: vega.Error });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/**
 * Tick values for a log axis over [min, max] (0 < min ≤ max): every power of ten from the decade
 * at or below min to the one at or above max; when that gives fewer than three ticks, the
 * 1-2-5 multiples inside that range. Thinned to every 2nd/3rd… decade past 12 decades.
 */
export function logTicks(min: number, max: number): number[] {
  check(
    min > 0 && max >= min && max < Infinity,
    `log axis needs 0 < min ≤ max, got ${min}, ${max}`,
  );
  const lo = Math.floor(Math.log10(min) + 1e-9);
  const hi = Math.ceil(Math.log10(max) - 1e-9);
  const decades = Math.max(hi, lo + 1) - lo;
  if (decades >= 2) {
    const step = Math.ceil(decades / 12);
    const out: number[] = [];
    for (let e = lo; e <= lo + decades; e += step) out.push(_pow10(e));
    return out;
  }
  const out: number[] = [];
  for (let e = lo; e <= lo + decades; e++) {
    for (const m of [1, 2, 5]) {
      const t = m * _pow10(e);
      if (t >= _pow10(lo) && t <= _pow10(lo + decades)) out.push(t);
    }
  }
  return out;
}

/** 10^e without the rounding of 10 ** e for negative e (1e-3, not 0.0010000000000000002). */
function _pow10(e: number): number {
  return e >= 0 ? 10 ** e : Number(`1e${e}`);
}

/** One line of a {@link lineChart}. */
export interface LineSeries {
  /** Legend label (unique within a chart). */
  label: string;
  /** x values. */
  x: ArrayLike<number>;
  /** y values (same length as x); points with a non-finite x or y are left out. */
  y: ArrayLike<number>;
}

/** A straight reference segment drawn dashed under the data (e.g. the diagonal y = x). */
export interface RuleSpec {
  /** Start x. */
  x1: number;
  /** Start y. */
  y1: number;
  /** End x. */
  x2: number;
  /** End y. */
  y2: number;
}

/** Options of {@link lineChart}. */
export interface LineChartOptions {
  /** The lines, drawn and coloured in this order. */
  series: readonly LineSeries[];
  /** x-axis title. */
  xLabel: string;
  /** y-axis title. */
  yLabel: string;
  /** Chart title. */
  title?: string;
  /** Line(s) under the title. */
  subtitle?: string | readonly string[];
  /** Legend title (default none). */
  legendTitle?: string;
  /** Log-scale x axis. */
  logX?: boolean;
  /** Log-scale y axis. */
  logY?: boolean;
  /** Explicit x tick values (default: decades on a log axis, automatic otherwise). */
  xTicks?: readonly number[];
  /** Explicit y tick values. */
  yTicks?: readonly number[];
  /** d3 format of x tick labels (default: "~s" for decades ≥ 1, "," for integer ticks). */
  xFormat?: string;
  /** d3 format of y tick labels. */
  yFormat?: string;
  /** x domain (default: from the data, widened to decades on a log axis). */
  xDomain?: readonly [number, number];
  /** y domain. */
  yDomain?: readonly [number, number];
  /** Draw point markers (default: when every series has at most 60 points). */
  points?: boolean;
  /** Dashed reference segments. */
  rules?: readonly RuleSpec[];
  /** Plot width in px (default 480). */
  width?: number;
  /** Plot height in px (default 300). */
  height?: number;
}

/** A line chart with several series, optional log axes, as an SVG string. */
export async function lineChart(o: LineChartOptions): Promise<string> {
  return await renderVegaLite(lineChartSpec(o));
}

/** The Vega-Lite spec of {@link lineChart} (for composing into larger figures). */
export function lineChartSpec(o: LineChartOptions): TopLevelSpec {
  check(o.series.length > 0, "lineChart needs at least one series");
  _checkUnique(o.series.map((s) => s.label), "series label");
  const rows: { x: number; y: number; series: string; i: number }[] = [];
  let maxLen = 0;
  for (const s of o.series) {
    check(s.x.length === s.y.length, `series "${s.label}": ${s.x.length} x but ${s.y.length} y`);
    maxLen = Math.max(maxLen, s.x.length);
    for (let i = 0; i < s.x.length; i++) {
      const x = s.x[i];
      const y = s.y[i];
      if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
      check(!o.logX || x > 0, `series "${s.label}": x[${i}] = ${x} on a log axis`);
      check(!o.logY || y > 0, `series "${s.label}": y[${i}] = ${y} on a log axis`);
      rows.push({ x, y, series: s.label, i });
    }
  }
  const labels = o.series.map((s) => s.label);
  const xs = rows.map((r) => r.x);
  const ys = rows.map((r) => r.y);
  const layers: unknown[] = [];
  if (o.rules && o.rules.length > 0) {
    layers.push({
      data: { values: o.rules.map((r) => ({ ...r })) },
      mark: { type: "rule", strokeDash: [4, 4], color: "#888888", strokeWidth: 1 },
      encoding: {
        x: { field: "x1", type: "quantitative" },
        y: { field: "y1", type: "quantitative" },
        x2: { field: "x2" },
        y2: { field: "y2" },
      },
    });
  }
  layers.push({
    data: { values: rows },
    mark: { type: "line", point: o.points ?? maxLen <= 60, strokeWidth: 2, clip: true },
    encoding: {
      x: _axisEncoding("x", o.xLabel, xs, o.logX, o.xTicks, o.xDomain, false, o.xFormat),
      y: _axisEncoding("y", o.yLabel, ys, o.logY, o.yTicks, o.yDomain, false, o.yFormat),
      color: {
        field: "series",
        type: "nominal",
        scale: { domain: labels, range: _colors(labels.length) },
        legend: { title: o.legendTitle ?? null },
      },
      order: { field: "i", type: "quantitative" },
    },
  });
  return {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    ..._title(o.title, o.subtitle),
    width: o.width ?? 480,
    height: o.height ?? 300,
    layer: layers,
  } as TopLevelSpec;
}

/** One bar of a {@link groupedBarChart}. */
export interface Bar {
  /** Panel (e.g. mode fwd / bwd / fwd+bwd); omit for a single panel. */
  facet?: string;
  /** Position on the x axis (e.g. "β = 0.1"). */
  group: string;
  /** Bar within the group, coloured (e.g. the method). */
  series: string;
  /** Height, or null for a missing bar (then `note` is printed in its slot, e.g. "OOM"). */
  value: number | null;
  /** Text printed at the base of a missing bar. */
  note?: string;
  /** Lower end of an error bar drawn over the bar (e.g. the fastest repetition). */
  lo?: number;
  /** Upper end of the error bar (e.g. the slowest repetition). */
  hi?: number;
}

/** A horizontal reference line of a {@link groupedBarChart} (e.g. a lower bound). */
export interface BarRule {
  /** Panel it is drawn in; omit for every panel. */
  facet?: string;
  /** Height of the line. */
  value: number;
  /** Text printed above its left end. */
  label?: string;
}

/** Options of {@link groupedBarChart}. */
export interface GroupedBarChartOptions {
  /** The bars; facets, groups and series keep their first-appearance order unless given. */
  bars: readonly Bar[];
  /** y-axis title (the measured quantity with its unit). */
  valueLabel: string;
  /** x-axis title (default none). */
  groupLabel?: string;
  /** Legend title (default none). */
  seriesLabel?: string;
  /** Title above the panels (default none). */
  facetLabel?: string;
  /** Chart title. */
  title?: string;
  /** Line(s) under the title. */
  subtitle?: string | readonly string[];
  /** Log-scale y axis (values must be > 0). */
  logY?: boolean;
  /** Explicit y tick values (default: decades on a log axis). */
  yTicks?: readonly number[];
  /** Print each value above its bar, with this d3 format (e.g. ".3~g"); default no labels. */
  valueFormat?: string;
  /** Horizontal reference lines, dashed black (e.g. the lower bound of each panel). */
  rules?: readonly BarRule[];
  /** Facet order. */
  facetOrder?: readonly string[];
  /** Group order. */
  groupOrder?: readonly string[];
  /** Series order (also the colour order). */
  seriesOrder?: readonly string[];
  /**
   * Colour and marker of each series, in series order (report/styles.ts): each bar gets its
   * series' colour and a marker of its shape on top. Default: palette colours, no markers.
   */
  styles?: readonly { color: string; shape: string }[];
  /** Width of one panel in px (default 60 per group, at least 160). */
  width?: number;
  /** Height in px (default 260). */
  height?: number;
}

/**
 * Bars grouped on the x axis by `group`, coloured by `series`, one panel per `facet`, sharing a
 * (log or linear) y axis; returned as an SVG string.
 */
export async function groupedBarChart(o: GroupedBarChartOptions): Promise<string> {
  return await renderVegaLite(groupedBarChartSpec(o));
}

/** The data rows of a grouped bar chart: the bars, then one row per rule and panel. */
function _barRows(o: GroupedBarChartOptions, values: number[]): Record<string, unknown>[] {
  const rows: Record<string, unknown>[] = o.bars.map((b, i) => {
    const v = b.value;
    check(v === null || Number.isFinite(v), `bar ${i} (${b.series}, ${b.group}): value ${v}`);
    check(!o.logY || v === null || v > 0, `bar ${i} (${b.series}, ${b.group}): ${v} on a log axis`);
    if (v !== null) values.push(v);
    const bar = v !== null && b.lo !== undefined && b.hi !== undefined &&
      Number.isFinite(b.lo) && Number.isFinite(b.hi) && (!o.logY || b.lo > 0);
    if (bar) values.push(b.lo!, b.hi!);
    return {
      facet: b.facet ?? "",
      group: b.group,
      series: b.series,
      value: v,
      note: v === null ? (b.note ?? "n/a") : null,
      lo: bar ? b.lo : null,
      hi: bar ? b.hi : null,
      rule: null,
    };
  });
  const facetNames = _unique(o.bars.map((b) => b.facet ?? ""));
  for (const r of o.rules ?? []) {
    check(Number.isFinite(r.value) && (!o.logY || r.value > 0), `rule value ${r.value}`);
    values.push(r.value);
    for (const f of r.facet === undefined ? facetNames : [r.facet]) {
      rows.push({
        facet: f,
        group: null,
        series: null,
        value: null,
        note: null,
        lo: null,
        hi: null,
        rule: r.value,
        ruleLabel: r.label ?? "",
      });
    }
  }
  return rows;
}

/**
 * The layers of a grouped bar chart: bars, notes in the slots of missing bars, a marker on each
 * bar (with `styles`), error bars, rules and value labels.
 */
function _barLayers(
  o: GroupedBarChartOptions,
  rows: readonly Record<string, unknown>[],
  enc: { x: unknown; y: Record<string, unknown>; base: number; series: readonly string[] },
): unknown[] {
  const { x, y, base, series } = enc;
  const xOffset = { field: "series", type: "nominal", sort: series };
  const styles = o.styles;
  const legend = { title: o.seriesLabel ?? null };
  const color = {
    field: "series",
    type: "nominal",
    scale: { domain: series, range: styles ? styles.map((s) => s.color) : _colors(series.length) },
    legend,
  };
  const layers: unknown[] = [
    {
      transform: [{ filter: "datum.value != null" }],
      mark: { type: "bar" },
      encoding: { x, xOffset, y, y2: { datum: base }, color },
    },
    {
      transform: [{ filter: "datum.note != null" }],
      mark: { type: "text", angle: 270, align: "left", dx: 3, fontSize: 9, color: "#555555" },
      encoding: { x, xOffset, y: { datum: base, type: "quantitative" }, text: { field: "note" } },
    },
  ];
  if (styles) {
    // the series' marker just above its bar: colour and shape tell every series apart
    const shape = {
      field: "series",
      type: "nominal",
      scale: { domain: series, range: styles.map((s) => s.shape) },
      legend,
    };
    layers.push({
      transform: [{ filter: "datum.value != null" }],
      mark: {
        type: "point",
        filled: true,
        size: 36,
        yOffset: -6,
        stroke: "white",
        strokeWidth: 0.6,
      },
      encoding: { x, xOffset, y, color, shape, opacity: { value: 1 } },
    });
  }
  if (rows.some((r) => r.lo !== null && r.lo !== undefined)) {
    layers.push({
      transform: [{ filter: "datum.lo != null && datum.hi != null" }],
      mark: { type: "rule", color: "#222222", strokeWidth: 1 },
      encoding: { x, xOffset, y: { ...y, field: "lo" }, y2: { field: "hi" } },
    });
  }
  if ((o.rules ?? []).length > 0) {
    layers.push(
      {
        transform: [{ filter: "datum.rule != null" }],
        mark: { type: "rule", color: "#000000", strokeDash: [5, 3], strokeWidth: 1.2 },
        encoding: { y: { ...y, field: "rule" } },
      },
      {
        transform: [{ filter: "datum.rule != null && datum.ruleLabel != ''" }],
        mark: { type: "text", align: "left", baseline: "bottom", dy: -2, fontSize: 9, x: 2 },
        encoding: { y: { ...y, field: "rule" }, text: { field: "ruleLabel" } },
      },
    );
  }
  if (o.valueFormat !== undefined) {
    layers.push({
      transform: [{ filter: "datum.value != null" }],
      mark: { type: "text", dy: -4, fontSize: 9, baseline: "bottom" },
      encoding: {
        x,
        xOffset,
        y,
        text: { field: "value", type: "quantitative", format: o.valueFormat },
      },
    });
  }
  return layers;
}

/** The Vega-Lite spec of {@link groupedBarChart}. */
export function groupedBarChartSpec(o: GroupedBarChartOptions): TopLevelSpec {
  check(o.bars.length > 0, "groupedBarChart needs at least one bar");
  const facets = o.facetOrder ?? _unique(o.bars.map((b) => b.facet).filter(_defined));
  const groups = o.groupOrder ?? _unique(o.bars.map((b) => b.group));
  const series = o.seriesOrder ?? _unique(o.bars.map((b) => b.series));
  check(
    o.styles === undefined || o.styles.length === series.length,
    `${o.styles?.length} styles for ${series.length} series`,
  );
  const faceted = o.bars.some((b) => b.facet !== undefined);
  const values: number[] = [];
  const rows = _barRows(o, values);
  check(!o.logY || values.length > 0, "a log-scale bar chart needs at least one value");
  const y = _axisEncoding(
    "value",
    o.valueLabel,
    values,
    o.logY,
    o.yTicks,
    undefined,
    !o.logY,
    undefined,
    true,
  );
  const base = o.logY ? (y.scale as { domain: number[] }).domain[0] : 0;
  const x = {
    field: "group",
    type: "nominal",
    sort: groups,
    title: o.groupLabel ?? null,
    axis: { labelAngle: 0 },
  };
  const layers = _barLayers(o, rows, { x, y, base, series });
  const width = o.width ?? Math.max(160, 60 * groups.length);
  const height = o.height ?? 260;
  const head = {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    ..._title(o.title, o.subtitle),
    data: { values: rows },
  };
  if (!faceted) return { ...head, width, height, layer: layers } as TopLevelSpec;
  return {
    ...head,
    facet: {
      column: { field: "facet", type: "nominal", sort: facets, title: o.facetLabel ?? null },
    },
    spec: { width, height, layer: layers },
    resolve: { scale: { y: "shared" } },
  } as TopLevelSpec;
}

function _axisEncoding(
  field: string,
  title: string,
  data: readonly number[],
  log: boolean | undefined,
  ticks: readonly number[] | undefined,
  domain: readonly [number, number] | undefined,
  zero = false,
  format?: string,
  /** Log axes of bars: start a decade lower when the smallest value sits near the first tick. */
  barFloor = false,
): Record<string, unknown> {
  const scale: Record<string, unknown> = log ? { type: "log" } : { type: "linear", zero };
  const axis: Record<string, unknown> = { title, grid: true };
  if (domain) scale.domain = [...domain];
  if (ticks) axis.values = [...ticks];
  if (log) {
    const lo = domain?.[0] ?? data.reduce((a, b) => Math.min(a, b), Infinity);
    const hi = domain?.[1] ?? data.reduce((a, b) => Math.max(a, b), -Infinity);
    if (data.length > 0 || domain) {
      const t = ticks ? [...ticks] : logTicks(lo, hi);
      // a bar rises from the axis floor: one whose value is close to it would be invisible
      if (!ticks && barFloor && lo < 3 * t[0]) t.unshift(t[0] / 10);
      if (!ticks) axis.values = t;
      if (!domain) scale.domain = [Math.min(t[0], lo), Math.max(t[t.length - 1], hi)];
      axis.format = t.every((v) => v >= 1) ? "~s" : "~g";
    }
  }
  if (ticks && ticks.every(Number.isInteger)) axis.format = ",";
  if (format !== undefined) axis.format = format;
  return { field, type: "quantitative", scale, axis };
}

function _title(title?: string, subtitle?: string | readonly string[]): Record<string, unknown> {
  if (title === undefined && subtitle === undefined) return {};
  const t: Record<string, unknown> = { text: title ?? "" };
  if (subtitle !== undefined) t.subtitle = typeof subtitle === "string" ? subtitle : [...subtitle];
  return { title: t };
}

function _colors(n: number): string[] {
  return Array.from({ length: n }, (_, i) => PALETTE[i % PALETTE.length]);
}

function _unique(xs: readonly string[]): string[] {
  return [...new Set(xs)];
}

function _checkUnique(xs: readonly string[], what: string): void {
  const seen = new Set<string>();
  for (const x of xs) {
    check(!seen.has(x), `duplicate ${what} "${x}"`);
    seen.add(x);
  }
}

function _defined<T>(x: T | undefined): x is T {
  return x !== undefined;
}
