/**
 * The kept-fraction report: Table 3 reports of one adapter and shape whose inputs differ in how
 * many tiles a gradient filter keeps (fixture parameters such as `llm:spread=2`, fixtures/llm.ts),
 * read side by side. For each report, at its first β:
 *
 * - k, the fraction of (token tile, vocab tile) pairs the `fused` row's backward kept (its stats);
 * - P, the plain product E·Cᵀ of the same run: the `baseline` forward's product pass;
 * - the floors of a memory-bounded fused loss whose filter recomputes every tile, whose kept tiles
 *   are recomputed once for dE and once for dC, against a dense backward of the same memory:
 *   F(k) = min((2 + 3k)·P, 4·P) for fwd+bwd, and the aim (2 + 2k)·P (a filter that keeps what the
 *   kept tiles need);
 * - every method's fwd+bwd time (bwd and fwd beside it), and each one's ratio to F(k).
 *
 * Outputs (`kept_fraction_<adapter>[_dawn]_<n>x<v>x<d>_<dtype>`): Markdown (the table, the
 * reports it read, their commits), JSON (the points) and an SVG chart of fwd+bwd time against k
 * with F(k) and the aim drawn as lines.
 * @module
 */
import { join } from "node:path";
import { writeAllOrNothing } from "../io/outputs.ts";
import type { Mode } from "../measure/measure.ts";
import { check } from "../core/errors.ts";
import { lineChart, type LineSeries } from "./svg.ts";
import { engineName, isDawn } from "../gpu/engine.ts";
import { engineTag, plainProductMs, reportSlug, type Table3Report } from "./table3.ts";
import { BASELINE_PRODUCT_PASS } from "../methods/baseline.ts";

/** One method's times at one point (ms; absent where not measured or failed). */
export interface KeptFractionTimes {
  fwd?: number;
  bwd?: number;
  fwdBwd?: number;
  /** False when the cell's correctness check failed. */
  ok: boolean;
}

/** One input (one report) of the kept-fraction report. */
export interface KeptFractionPoint {
  /** The fixture spec of the report (fixtures/mod.ts). */
  fixture: string;
  /** The fraction of tiles the `fused` backward kept, in [0, 1]. */
  k: number;
  /**
   * k is the estimate of the filter's sample (its first eighth of the rows): the backward stopped
   * its filter there, both gradients dense (kernels/fused/filter_sample.ts).
   */
  sampled: boolean;
  /** The plain product P (ms). */
  pMs: number;
  /** min((2 + 3k)·P, 4·P) (ms). */
  floorMs: number;
  /** (2 + 2k)·P (ms). */
  aimMs: number;
  /** Each method's times, by method name. */
  times: Record<string, KeptFractionTimes>;
  /** The report's git commit (short) and whether its tree was dirty. */
  commit: string;
}

/** A point's k, three decimals, marked ≈ where it is the sample's estimate. */
function _k(p: KeptFractionPoint): string {
  return `${p.sampled ? "≈" : ""}${p.k.toFixed(3)}`;
}

/** The floors at kept fraction k for a product time P: [min((2 + 3k)P, 4P), (2 + 2k)P]. */
export function keptFloors(k: number, pMs: number): [number, number] {
  return [Math.min((2 + 3 * k) * pMs, 4 * pMs), (2 + 2 * k) * pMs];
}

/**
 * The points of reports of one adapter, shape and dtype (InputError otherwise, or where a report
 * lacks the `fused` backward's filter counts or the baseline forward's product pass), sorted by k.
 */
export function keptFractionPoints(reports: readonly Table3Report[]): KeptFractionPoint[] {
  check(reports.length > 0, "no reports to read");
  const [first] = reports;
  const points = reports.map((r) => {
    check(
      JSON.stringify(r.shape) === JSON.stringify(first.shape) &&
        r.env.adapter.description === first.env.adapter.description,
      `report of fixture ${r.fixture}: shape or adapter differs from fixture ${first.fixture}'s`,
    );
    const beta = r.betas[0];
    const rows = r.rows.filter((x) => x.beta === beta);
    const row = (method: string, mode: Mode) =>
      rows.find((x) => x.method === method && x.mode === mode && x.error === undefined);
    const filtered = row("fused", "bwd") ?? row("fused", "fwd+bwd");
    const skipped = Number(filtered?.stats?.tilesSkipped),
      total = Number(filtered?.stats?.tilesTotal);
    check(
      total > 0 && skipped >= 0,
      `report of fixture ${r.fixture}: no fused backward with its filter counts`,
    );
    const pMs = plainProductMs(r, beta);
    check(
      pMs !== undefined && pMs > 0,
      `report of fixture ${r.fixture}: no baseline forward with its '${BASELINE_PRODUCT_PASS}' pass`,
    );
    const k = 1 - skipped / total;
    const sampled = filtered?.stats?.filterSampled === 1;
    const [floorMs, aimMs] = keptFloors(k, pMs);
    const times: Record<string, KeptFractionTimes> = {};
    for (const x of rows) {
      const t = times[x.method] ??= { ok: true };
      if (x.error !== undefined || x.timeMs === null) continue;
      t[x.mode === "fwd+bwd" ? "fwdBwd" : x.mode] = x.timeMs;
      if (x.check && !x.check.ok) t.ok = false;
    }
    const git = r.env.git;
    const commit = git?.commit
      ? `${git.commit.slice(0, 7)}${git.dirty ? " (dirty)" : ""}`
      : "unknown";
    return { fixture: r.fixture, k, sampled, pMs, floorMs, aimMs, times, commit };
  });
  return points.sort((a, b) => a.k - b.k);
}

const _ms = (x: number | undefined) => x === undefined ? "–" : x.toFixed(1);

/** The report's Markdown. */
export function keptFractionMarkdown(
  r: Table3Report,
  points: readonly KeptFractionPoint[],
): string {
  const methods = [...new Set(points.flatMap((p) => Object.keys(p.times)))];
  const { n, v, d, dtype } = r.shape;
  const lines = [
    `# Time against the kept fraction: ${r.env.adapter.description}${
      isDawn(r.env.adapter.engine) ? ` (${engineName(r.env.adapter.engine)})` : ""
    }, ${n.toLocaleString("en-US")} × ${v.toLocaleString("en-US")} × ${
      d.toLocaleString("en-US")
    }, ${dtype}, β = ${r.betas[0]}`,
    "",
    "k: the fraction of (token tile, vocab tile) pairs Ours' backward kept. P: the plain product " +
    "E·Cᵀ of the same run (the baseline forward's product pass). Floor F(k) = min((2 + 3k)·P, 4·P) " +
    "(a filter recomputing every tile, the kept ones recomputed for dE and for dC, against a dense " +
    "backward of the same memory); aim (2 + 2k)·P. fwd+bwd in ms, then its ratio to F(k); an " +
    "incorrect cell is marked ✗. A k marked ≈ is the estimate of the filter's sample (its first " +
    "eighth of the rows), where Ours' backward stopped its filter there and took dense products " +
    "for both gradients.",
    "",
    `| fixture | k | P | F(k) | aim | ${methods.map((m) => `${m} fwd+bwd (×F)`).join(" | ")} |`,
    `| --- | --- | --- | --- | --- | ${methods.map(() => "---").join(" | ")} |`,
    ...points.map((p) =>
      `| ${p.fixture} | ${_k(p)} | ${_ms(p.pMs)} | ${_ms(p.floorMs)} | ${_ms(p.aimMs)} | ${
        methods.map((m) => {
          const t = p.times[m];
          if (t?.fwdBwd === undefined) return "–";
          return `${_ms(t.fwdBwd)} (${(t.fwdBwd / p.floorMs).toFixed(2)})${t.ok ? "" : " ✗"}`;
        }).join(" | ")
      } |`
    ),
    "",
    "bwd (ms) by method:",
    "",
    `| fixture | k | ${methods.join(" | ")} |`,
    `| --- | --- | ${methods.map(() => "---").join(" | ")} |`,
    ...points.map((p) =>
      `| ${p.fixture} | ${_k(p)} | ${methods.map((m) => _ms(p.times[m]?.bwd)).join(" | ")} |`
    ),
    "",
    `Source: the Table 3 reports of these fixtures (${_commits(points.map((p) => p.commit))}), ${
      r.env.date.slice(0, 10)
    }; driver ${r.env.driver?.version ?? "unknown"}.`,
    "",
  ];
  return lines.join("\n");
}

/** "commit a" or "commits a, b": the distinct commits of the points. */
function _commits(all: string[]): string {
  const c = [...new Set(all)];
  return `${c.length === 1 ? "commit" : "commits"} ${c.join(", ")}`;
}

/** The chart: fwd+bwd time against k, one line per method, F(k) and the aim. */
export async function keptFractionSvg(
  r: Table3Report,
  points: readonly KeptFractionPoint[],
): Promise<string> {
  const methods = [...new Set(points.flatMap((p) => Object.keys(p.times)))];
  const ks = points.map((p) => p.k);
  const series: LineSeries[] = [
    ...methods.map((m) => ({
      label: m,
      x: ks,
      y: points.map((p) => p.times[m]?.fwdBwd ?? NaN),
    })),
    { label: "floor min((2 + 3k)·P, 4·P)", x: ks, y: points.map((p) => p.floorMs) },
    { label: "aim (2 + 2k)·P", x: ks, y: points.map((p) => p.aimMs) },
  ];
  const { n, v, d, dtype } = r.shape;
  return await lineChart({
    series,
    xLabel: "kept fraction k",
    yLabel: `fwd+bwd, median ${r.timeSource === "gpu" ? "GPU" : "wall"} time (ms)`,
    title: "Time against the kept fraction",
    subtitle: [
      `${n} × ${v} × ${d} ${dtype}, β = ${r.betas[0]}; ${r.env.adapter.description}${
        isDawn(r.env.adapter.engine) ? ` (${engineName(r.env.adapter.engine)})` : ""
      }`,
      `fixtures: ${points.map((p) => p.fixture).join(", ")}`,
    ],
    xDomain: [0, 1],
  });
}

/** The base name of the report's files. */
export function keptFractionBaseName(r: Table3Report): string {
  const { n, v, d, dtype } = r.shape;
  const slug = reportSlug(r.env.adapter) + engineTag(r.env.adapter.engine);
  return `kept_fraction_${slug}_${n}x${v}x${d}_${dtype}`;
}

/** Paths written by {@link writeKeptFractionReport}. */
export interface KeptFractionPaths {
  md: string;
  json: string;
  svg: string;
}

/**
 * Reads `reports` ({@link keptFractionPoints}) and writes the Markdown, JSON and SVG under `dir`
 * (created if missing), all or nothing (io/outputs.ts).
 */
export async function writeKeptFractionReport(
  reports: readonly Table3Report[],
  dir: string,
): Promise<KeptFractionPaths> {
  const points = keptFractionPoints(reports);
  const [r] = reports;
  const contents = {
    md: keptFractionMarkdown(r, points),
    json: JSON.stringify(
      {
        adapter: r.env.adapter.description,
        engine: r.env.adapter.engine ?? "deno",
        driver: r.env.driver,
        shape: r.shape,
        beta: r.betas[0],
        points,
      },
      null,
      2,
    ) + "\n",
    svg: await keptFractionSvg(r, points),
  };
  const base = join(dir, keptFractionBaseName(r));
  const paths = { md: `${base}.md`, json: `${base}.json`, svg: `${base}.svg` };
  await writeAllOrNothing(
    (["md", "json", "svg"] as const).map((ext) => ({ path: paths[ext], bytes: contents[ext] })),
  );
  return paths;
}
