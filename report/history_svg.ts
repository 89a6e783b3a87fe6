/**
 * A method's time across commits, drawn from a history CSV (measure/history.ts): one line per
 * cell that stays the same across commits (mode and β, and whatever else varies among the rows
 * drawn: shape, dtype, fixture, reduction, adapter, engine), the p50 as the point and p20–p80 as
 * its bar; commits in the order of their first measurement. Rendered by report/svg.ts.
 * @module
 */
import { check } from "../core/errors.ts";
import { type HistoryColumn, type HistoryRow } from "../measure/history.ts";
import { renderVegaLite, type TopLevelSpec } from "./svg.ts";

/** Columns that name a line besides mode and β, when they vary. */
const _SERIES: HistoryColumn[] = [
  "n",
  "v",
  "d",
  "dtype",
  "fixture",
  "reduction",
  "adapter",
  "engine",
];

/** The rows of `method` with a time (optionally of one mode and β), for {@link historySvg}. */
export function selectHistory(
  rows: readonly HistoryRow[],
  o: { method: string; mode?: string; beta?: number },
): HistoryRow[] {
  return rows.filter((r) =>
    r.method === o.method && r.time_ms_p50 !== "" && (o.mode === undefined || r.mode === o.mode) &&
    (o.beta === undefined || Number(r.beta) === o.beta)
  );
}

/** The label of a row's line: mode, β, and the series columns that vary among `rows`. */
function _label(r: HistoryRow, varying: HistoryColumn[]): string {
  const shape = varying.some((c) => c === "n" || c === "v" || c === "d")
    ? [`${r.n}×${r.v}×${r.d}`]
    : [];
  const rest = varying.filter((c) => c !== "n" && c !== "v" && c !== "d").map((c) => r[c]);
  return [r.mode, `β=${r.beta}`, ...shape, ...rest].join(" ");
}

/** The SVG of `rows` (already selected; at least one). */
export async function historySvg(rows: readonly HistoryRow[], method: string): Promise<string> {
  check(rows.length > 0, `no measured row of method '${method}' to draw`);
  const varying = _SERIES.filter((c) => new Set(rows.map((r) => r[c])).size > 1);
  const first = new Map<string, string>();
  for (const r of rows) {
    const t = first.get(r.commit);
    if (t === undefined || r.timestamp < t) first.set(r.commit, r.timestamp);
  }
  const commits = [...first].sort((a, b) => (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
    .map(([c]) => c);
  const short = (c: string) => c.replace(/^([0-9a-f]{10})[0-9a-f]*/, "$1");
  const points = rows.map((r) => ({
    commit: short(r.commit),
    series: _label(r, varying),
    p50: Number(r.time_ms_p50),
    p20: Number(r.time_ms_p20),
    p80: Number(r.time_ms_p80),
  }));
  const ys = points.flatMap((p) => [p.p20, p.p80]).filter((y) => y > 0);
  const log = ys.length > 0 && Math.max(...ys) / Math.min(...ys) > 10;
  const x = {
    field: "commit",
    type: "ordinal",
    sort: commits.map(short),
    title: "commit (in the order first measured)",
    axis: { labelAngle: -40 },
  };
  const y = {
    field: "p50",
    type: "quantitative",
    title: `time (ms${log ? ", log" : ""}): p50, bar p20–p80`,
    scale: log ? { type: "log" } : { zero: false },
  };
  const color = { field: "series", type: "nominal", legend: { title: null } };
  const a = rows[0];
  const spec = {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: {
      text: `${method}: time across commits`,
      subtitle: `${rows.length} cells, ${commits.length} commits` +
        (varying.length === 0
          ? `; ${a.n}×${a.v}×${a.d} ${a.dtype}, fixture ${a.fixture}, ${a.adapter} (${a.engine})`
          : ""),
    },
    width: Math.max(240, 60 * commits.length),
    height: 280,
    data: { values: points },
    layer: [
      {
        mark: { type: "rule" },
        encoding: { x, y: { ...y, field: "p20" }, y2: { field: "p80" }, color },
      },
      { mark: { type: "line", point: true }, encoding: { x, y, color } },
    ],
  };
  return await renderVegaLite(spec as unknown as TopLevelSpec);
}
