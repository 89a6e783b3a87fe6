/**
 * The colour and marker of every series of a chart (a method, a same-card PyTorch row): each
 * series gets a pair no other series of the chart has, and the two reference rows keep theirs in
 * every chart — Ours (`fused`) in blue with circles, the Baseline in near-black with squares —
 * so that they read at a glance however many methods are drawn. The other series take the
 * remaining colours and the markers in turn; 19 colours and 8 markers (coprime counts) give 152
 * distinct pairs, and the first 19 series each have a colour of their own.
 * @module
 */
import { PALETTE } from "./svg.ts";

/** How one series is drawn. */
export interface SeriesStyle {
  /** CSS colour. */
  color: string;
  /** Vega-Lite point shape. */
  shape: string;
}

/** Colours: the project's Tableau 10, then ten darker ones. */
export const SERIES_COLORS: readonly string[] = [
  ...PALETTE,
  "#1b3a5c",
  "#8c4a00",
  "#7a1f1f",
  "#2f6b66",
  "#2c5e25",
  "#8a7000",
  "#5e3a56",
  "#b3475a",
  "#4f3a2c",
  "#555555",
];

/** Marker shapes Vega-Lite draws. */
export const SERIES_SHAPES: readonly string[] = [
  "circle",
  "square",
  "triangle-up",
  "diamond",
  "cross",
  "triangle-down",
  "triangle-right",
  "triangle-left",
];

/** The reference rows' styles, the same in every chart. */
export const REFERENCE_STYLES: Readonly<Record<string, SeriesStyle>> = {
  fused: { color: "#4e79a7", shape: "circle" },
  baseline: { color: "#262626", shape: "square" },
};

/**
 * The style of each series, keyed by series name (a method name for the reference rows): the
 * reference rows their own; the others the colours left after removing the references', in turn,
 * each with the next marker, so that no two series share both colour and marker.
 */
export function seriesStyles(series: readonly string[]): Map<string, SeriesStyle> {
  const reserved = new Set(Object.values(REFERENCE_STYLES).map((s) => s.color));
  const colors = SERIES_COLORS.filter((c) => !reserved.has(c));
  const out = new Map<string, SeriesStyle>();
  let i = 0;
  for (const s of series) {
    if (out.has(s)) continue;
    const ref = REFERENCE_STYLES[s];
    if (ref) {
      out.set(s, ref);
      continue;
    }
    out.set(s, {
      color: colors[i % colors.length],
      shape: SERIES_SHAPES[(i + 2) % SERIES_SHAPES.length],
    });
    i++;
  }
  return out;
}
