/**
 * The SVG chart of a Table 3 report: time and memory per method, one panel per mode, grouped by
 * β, each method with its own colour and marker (report/styles.ts), min–max error bars, the lower
 * bound of each mode, log axes where values span more than 10×.
 * @module
 */
import type { MeasureRow } from "../measure/measure.ts";
import { type Bar, groupedBarChartSpec, renderVegaLite } from "./svg.ts";
import { seriesStyles } from "./styles.ts";
import {
  betaOrder,
  formatMB,
  lowerBoundBytes,
  sectionMethods,
  type Table3Report,
} from "./table3.ts";

/** A short note for a failed bar: the error's first word (OOM, unsupported, leak, ...). */
function _note(error: string): string {
  const m = /^([A-Za-z][\w ]*?):/.exec(error);
  return m ? m[1] : "failed";
}

/** The SVG report: time (linear) and memory (log axis) per method, one panel per mode. */
export async function renderSvg(r: Table3Report): Promise<string> {
  const betas = betaOrder(r);
  const group = (b: number) => `β = ${b}`;
  const methods: string[] = [];
  for (const b of betas) {
    for (const m of sectionMethods(r, b)) if (!methods.includes(m)) methods.push(m);
  }
  const labelOf = (m: string) => r.rows.find((x) => x.method === m)?.label ?? m;
  const series = methods.map(labelOf);
  const styles = seriesStyles(methods);
  const bars = (
    value: (x: MeasureRow) => number | null,
    zeroNote: string,
    range?: (x: MeasureRow) => [number | null, number | null],
  ): Bar[] =>
    r.rows.map((x) => {
      const v = x.error === undefined ? value(x) : null;
      const bar: Bar = { facet: x.mode, group: group(x.beta), series: x.label, value: v };
      if (x.error !== undefined) bar.note = _note(x.error);
      else if (v === null || v <= 0) {
        bar.value = null;
        bar.note = zeroNote;
      } else if (range) {
        const [lo, hi] = range(x);
        if (lo !== null && hi !== null && lo > 0) [bar.lo, bar.hi] = [lo, hi];
      }
      return bar;
    });
  const common = {
    facetOrder: r.modes.filter((m) => r.rows.some((x) => x.mode === m)),
    groupOrder: betas.map(group),
    seriesOrder: series,
    styles: methods.map((m) => styles.get(m)!),
  };
  const what = r.timeSource === "gpu" ? "GPU" : "wall";
  /** Log axis where the values span more than 10× (bars of 0.2 ms beside seconds stay visible). */
  const wantsLog = (f: (x: MeasureRow) => number | null) => {
    const v = r.rows.filter((x) => x.error === undefined).map(f)
      .filter((y): y is number => y !== null && y > 0);
    return v.length > 0 && Math.max(...v) / Math.min(...v) > 10;
  };
  const timeLog = wantsLog((x) => x.timeMs);
  const memoryLog = wantsLog((x) => x.peakBytes);
  const time = groupedBarChartSpec({
    ...common,
    bars: bars((x) => x.timeMs, "0 ms", (x) => [x.timeMsMin, x.timeMsMax]),
    valueLabel: `median ${what} time (ms${timeLog ? ", log" : ""}); bar: min–max`,
    logY: timeLog,
    title: "Time",
  });
  const memory = groupedBarChartSpec({
    ...common,
    bars: bars((x) => (x.peakBytes === null ? null : x.peakBytes / 2 ** 20), "0 B"),
    valueLabel: `peak memory (MiB${memoryLog ? ", log" : ""})`,
    logY: memoryLog,
    title: "Memory",
    rules: common.facetOrder.map((mode) => {
      const b = lowerBoundBytes(r.shape, mode, r.reduction);
      return { facet: mode, value: b / 2 ** 20, label: `lower bound ${formatMB(b)}` };
    }),
  });
  const { n, v, d, dtype } = r.shape;
  const strip = (s: object) => {
    const { $schema: _, ...rest } = s as Record<string, unknown>;
    return rest;
  };
  return await renderVegaLite(
    {
      $schema: "https://vega.github.io/schema/vega-lite/v6.json",
      title: {
        text: `Table 3 — ${r.env.adapter.description}`,
        subtitle: `N = ${n}, |V| = ${v}, D = ${d}, ${dtype}, fixture ${r.fixture}` +
          (r.reducedShape ? " (reduced shape)" : ""),
      },
      vconcat: [strip(time), strip(memory)],
    } as unknown as Parameters<typeof renderVegaLite>[0],
  );
}
