/**
 * Reliability diagram as SVG: per-bin accuracy against mean confidence for one or more series
 * (e.g. β = 0 vs β = 0.1), the diagonal of perfect calibration, and below it the share of tokens
 * per confidence bin as a grouped histogram. ECE (and RMSCE, accuracy, N) of every series are
 * printed under the title and in the legend.
 * @module
 */
import { check } from "../core/errors.ts";
import { PALETTE, renderVegaLite, type TopLevelSpec } from "../report/svg.ts";
import type { CalibrationReport } from "./metrics.ts";

/** One calibrated model / setting. */
export interface ReliabilitySeries {
  /** Legend label, e.g. "β = 0.1" (unique within a diagram). */
  label: string;
  /** Its metrics, from calibrationMetrics. */
  report: CalibrationReport;
}

/** Options of {@link reliabilityDiagram}. */
export interface ReliabilityOptions {
  /** Series, coloured in this order; all must use the same number of bins. */
  series: readonly ReliabilitySeries[];
  /** Title (default "Reliability diagram"). */
  title?: string;
  /** Width of the plot in px (default 420). */
  width?: number;
  /** Height of the accuracy panel in px (default 320; the histogram is a third of it). */
  height?: number;
}

/** The ECE summary line of one series, as printed in the diagram. */
export function eceSummary(s: ReliabilitySeries): string {
  const r = s.report;
  const pct = (x: number) => `${(100 * x).toFixed(2)}%`;
  return `${s.label}: ECE ${pct(r.ece)}, RMSCE ${pct(r.rmsce)}, accuracy ${pct(r.accuracy)}, ` +
    `N = ${r.count.toLocaleString("en-US")}`;
}

/** The reliability diagram of the series as an SVG string. */
export async function reliabilityDiagram(o: ReliabilityOptions): Promise<string> {
  return await renderVegaLite(reliabilitySpec(o));
}

/** The Vega-Lite spec of {@link reliabilityDiagram}. */
export function reliabilitySpec(o: ReliabilityOptions): TopLevelSpec {
  check(o.series.length > 0, "a reliability diagram needs at least one series");
  const bins = o.series[0].report.bins;
  const labels = o.series.map((s) => s.label);
  check(new Set(labels).size === labels.length, "reliability series labels must be unique");
  for (const s of o.series) {
    check(s.report.bins === bins, `series "${s.label}" has ${s.report.bins} bins, not ${bins}`);
  }
  const legendLabels = o.series.map((s) => `${s.label} (ECE ${(100 * s.report.ece).toFixed(2)}%)`);
  const k = o.series.length;
  const points: Record<string, unknown>[] = [];
  const hist: Record<string, unknown>[] = [];
  o.series.forEach((s, si) => {
    for (const b of s.report.perBin) {
      const w = (b.hi - b.lo) / k;
      hist.push({
        series: legendLabels[si],
        x: b.lo + si * w,
        x2: b.lo + (si + 1) * w,
        share: b.count / s.report.count,
      });
      if (b.count > 0) {
        points.push({
          series: legendLabels[si],
          confidence: b.confidence,
          accuracy: b.accuracy,
          count: b.count,
        });
      }
    }
  });
  const width = o.width ?? 420;
  const height = o.height ?? 320;
  const unit = { type: "quantitative", scale: { domain: [0, 1], nice: false, zero: true } };
  const color = {
    field: "series",
    type: "nominal",
    scale: { domain: legendLabels, range: legendLabels.map((_, i) => PALETTE[i % PALETTE.length]) },
    legend: { title: null, orient: "bottom", direction: "vertical" },
  };
  return {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: { text: o.title ?? "Reliability diagram", subtitle: o.series.map(eceSummary) },
    vconcat: [
      {
        width,
        height,
        layer: [
          {
            data: { values: [{ x: 0, y: 0, x2: 1, y2: 1 }] },
            mark: { type: "rule", strokeDash: [4, 4], color: "#888888" },
            encoding: {
              x: { field: "x", ...unit, axis: null },
              y: { field: "y", ...unit },
              x2: { field: "x2" },
              y2: { field: "y2" },
            },
          },
          {
            data: { values: points },
            mark: { type: "line", point: true, strokeWidth: 2 },
            encoding: {
              x: { field: "confidence", ...unit, axis: { title: null, labels: false } },
              y: { field: "accuracy", ...unit, axis: { title: "accuracy" } },
              color,
              order: { field: "confidence", type: "quantitative" },
            },
          },
        ],
      },
      {
        width,
        height: Math.round(height / 3),
        data: { values: hist },
        mark: { type: "bar" },
        encoding: {
          x: { field: "x", ...unit, axis: { title: "confidence (max softmax probability)" } },
          x2: { field: "x2" },
          y: {
            field: "share",
            type: "quantitative",
            axis: { title: "share of tokens", format: "~%" },
          },
          y2: { datum: 0 },
          color,
        },
      },
    ],
    resolve: { scale: { color: "shared" } },
  } as TopLevelSpec;
}
