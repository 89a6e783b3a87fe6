/**
 * Two runs compared cell by cell (`deno task compare A.json B.json`): cells are matched by method,
 * β, mode, shape, dtype, fixture and reduction (measure/compare_cells.ts), from reports of the
 * same adapter and WebGPU engine unless told to compare across them. For every matched cell:
 * the ratio of B's median time to A's, a confidence interval of that ratio from the stored
 * per-repetition samples, and a verdict.
 *
 * The interval is a percentile bootstrap of the ratio of medians: A's and B's samples are each
 * resampled with replacement ({@link COMPARE_RESAMPLES} times, seeded, so the same reports give
 * the same interval) and the median ratio of each resample is taken; the interval is the central
 * {@link COMPARE_CONFIDENCE} of those ratios. With few repetitions it is wide (three samples a
 * side span about the range from B's fastest over A's slowest to B's slowest over A's fastest),
 * as it should be. A cell is `slower` only when the interval lies above 1 and the ratio exceeds
 * 1 + threshold, `faster` only when it lies below 1 and the ratio is under 1 − threshold, else
 * `within noise`; a cell that passed the correctness check in A and fails it in B is `incorrect`.
 * Cells with fewer than two samples on a side, or failed on a side, are listed as not compared.
 * A cell whose ratio exceeds a target (default 1.15) also gets each pass of its per-pass
 * breakdown in both runs, sorted by B − A (measure/compare_passes.ts): where the difference is.
 * @module
 */
import { check } from "../core/errors.ts";
import { slug } from "../core/slug.ts";
import { Rng } from "../fixtures/rng.ts";
import { cellKey, type ReportCell, type ReportCells } from "./compare_cells.ts";
import {
  COMPARE_EXPLAIN_ABOVE,
  formatPassSection,
  type PassDiff,
  passDiffs,
} from "./compare_passes.ts";
import { median } from "./timing.ts";

/** Resamples of the bootstrap. */
export const COMPARE_RESAMPLES = 2000;
/** Confidence of the interval. */
export const COMPARE_CONFIDENCE = 0.95;
/** Default threshold of a verdict: a change of 5%. */
export const COMPARE_THRESHOLD = 0.05;

/** What may differ between the two reports. */
export type Across = "adapter" | "engine";

/** The verdict on one cell. */
export type Verdict = "faster" | "slower" | "within noise" | "incorrect";

/** One matched cell. */
export interface CellComparison {
  method: string;
  label: string;
  beta: number;
  mode: string;
  shape: string;
  dtype: string;
  fixture: string;
  reduction: string;
  /** Median times, ms. */
  aMs: number;
  bMs: number;
  /** Repetitions on each side. */
  aReps: number;
  bReps: number;
  /** bMs / aMs and its interval. */
  ratio: number;
  lo: number;
  hi: number;
  verdict: Verdict;
  /**
   * Only for a cell whose ratio exceeds the comparison's `explainAbove`: each pass in A and B,
   * sorted by B − A descending (empty when neither run has a per-pass breakdown).
   */
  passes?: PassDiff[];
}

/** Where a report came from, as the comparison shows it. */
export interface CompareSide {
  path: string;
  kind: string;
  adapter: string;
  engine: string;
  commit: string | null;
  dirty: boolean | null;
  date: string;
}

/** The comparison of two reports. */
export interface Comparison {
  a: CompareSide;
  b: CompareSide;
  /** Fraction: 0.05 is 5%. */
  threshold: number;
  confidence: number;
  /** How the interval is made, in words. */
  interval: string;
  /** What was allowed to differ. */
  across: Across[];
  /** Cells whose B/A exceeds this get their passes listed (0: none). */
  explainAbove: number;
  cells: CellComparison[];
  /** Cells matched but not compared, and why. */
  notCompared: { key: string; why: string }[];
  /** Cells of one report only. */
  onlyA: string[];
  onlyB: string[];
  counts: Record<Verdict, number>;
}

/** Options of {@link compareReports}. */
export interface CompareOptions {
  /** Fraction (default {@link COMPARE_THRESHOLD}). */
  threshold?: number;
  across?: readonly Across[];
  /** Bootstrap resamples (default {@link COMPARE_RESAMPLES}). */
  resamples?: number;
  /**
   * List the passes of every cell whose B/A exceeds this ratio (default
   * {@link COMPARE_EXPLAIN_ABOVE}; 0: none).
   */
  explainAbove?: number;
}

/**
 * The central `confidence` interval of median(B*)/median(A*) over `resamples` bootstrap
 * resamples (see the module doc), seeded by `seed`.
 */
export function ratioInterval(
  a: readonly number[],
  b: readonly number[],
  o: { resamples?: number; confidence?: number; seed?: number } = {},
): [number, number] {
  const k = o.resamples ?? COMPARE_RESAMPLES, conf = o.confidence ?? COMPARE_CONFIDENCE;
  const rng = new Rng(o.seed ?? 0, 29);
  const pick = (xs: readonly number[]) => {
    const s = new Array<number>(xs.length);
    for (let i = 0; i < xs.length; i++) s[i] = xs[rng.int(xs.length)];
    return median(s);
  };
  const ratios = new Float64Array(k);
  for (let i = 0; i < k; i++) ratios[i] = pick(b) / pick(a);
  ratios.sort();
  const at = (p: number) => ratios[Math.min(k - 1, Math.max(0, Math.round(p * (k - 1))))];
  return [at((1 - conf) / 2), at(1 - (1 - conf) / 2)];
}

function _side(r: ReportCells): CompareSide {
  const { path, kind, adapter, engine, commit, dirty, date } = r;
  return { path, kind, adapter, engine, commit, dirty, date };
}

/**
 * Compares `b` against `a` (InputError when their adapters or engines differ without `across`
 * saying so, or when they have no cell in common).
 */
export function compareReports(a: ReportCells, b: ReportCells, o: CompareOptions = {}): Comparison {
  const threshold = o.threshold ?? COMPARE_THRESHOLD;
  check(threshold >= 0 && Number.isFinite(threshold), `threshold must be ≥ 0, got ${threshold}`);
  const explainAbove = o.explainAbove ?? COMPARE_EXPLAIN_ABOVE;
  check(
    explainAbove >= 0 && Number.isFinite(explainAbove),
    `the per-pass target must be ≥ 0, got ${explainAbove}`,
  );
  const across = [...new Set(o.across ?? [])];
  check(
    // one card under two engines may be described two ways ("NVIDIA H200", "nvidia-h200"): the
    // adapter is the one its report file is named by
    slug(a.adapter) === slug(b.adapter) || across.includes("adapter"),
    `the reports come from different adapters (${a.adapter}; ${b.adapter}): give --across ` +
      "adapter to compare them",
  );
  check(
    a.engine === b.engine || across.includes("engine"),
    `the reports come from different WebGPU engines (${a.engine}; ${b.engine}): give --across ` +
      "engine to compare them",
  );
  const mapA = new Map(a.cells.map((c) => [cellKey(c), c]));
  const mapB = new Map(b.cells.map((c) => [cellKey(c), c]));
  const common = [...mapA.keys()].filter((k) => mapB.has(k));
  check(
    common.length > 0,
    `${a.path} and ${b.path} have no cell in common (method, β, mode, shape, dtype, fixture and ` +
      "reduction must match)",
  );
  const out: Comparison = {
    a: _side(a),
    b: _side(b),
    threshold,
    confidence: COMPARE_CONFIDENCE,
    interval: `percentile bootstrap of the ratio of medians (${
      o.resamples ?? COMPARE_RESAMPLES
    } resamples of each side's per-repetition samples, seeded)`,
    across,
    explainAbove,
    cells: [],
    notCompared: [],
    onlyA: [...mapA.keys()].filter((k) => !mapB.has(k)),
    onlyB: [...mapB.keys()].filter((k) => !mapA.has(k)),
    counts: { faster: 0, slower: 0, "within noise": 0, incorrect: 0 },
  };
  common.forEach((key, i) => {
    const ca = mapA.get(key)!, cb = mapB.get(key)!;
    const why = _why(ca, "A") ?? _why(cb, "B");
    if (why) {
      out.notCompared.push({ key, why });
      return;
    }
    const aMs = median(ca.samples), bMs = median(cb.samples), ratio = bMs / aMs;
    const [lo, hi] = ratioInterval(ca.samples, cb.samples, { resamples: o.resamples, seed: i });
    const verdict: Verdict = ca.check?.ok !== false && cb.check?.ok === false
      ? "incorrect"
      : lo > 1 && ratio > 1 + threshold
      ? "slower"
      : hi < 1 && ratio < 1 - threshold
      ? "faster"
      : "within noise";
    out.counts[verdict]++;
    out.cells.push({
      method: ca.method,
      label: cb.label,
      beta: ca.beta,
      mode: ca.mode,
      shape: `${ca.n}×${ca.v}×${ca.d}`,
      dtype: ca.dtype,
      fixture: ca.fixture,
      reduction: ca.reduction,
      aMs,
      bMs,
      aReps: ca.samples.length,
      bReps: cb.samples.length,
      ratio,
      lo,
      hi,
      verdict,
      ...(explainAbove > 0 && ratio > explainAbove
        ? { passes: passDiffs(ca.passMs, cb.passMs) }
        : {}),
    });
  });
  return out;
}

function _why(c: ReportCell, side: string): string | undefined {
  if (c.error !== undefined) return `failed in ${side}: ${c.error}`;
  if (c.samples.length < 2) {
    return `${c.samples.length} repetition${c.samples.length === 1 ? "" : "s"} in ${side}: no ` +
      "interval (at least 2 needed)";
  }
  return undefined;
}

/** 1 when a cell is slower past the threshold or became incorrect, else 0. */
export function comparisonExitCode(c: Comparison): 0 | 1 {
  return c.counts.slower > 0 || c.counts.incorrect > 0 ? 1 : 0;
}

const _ms = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toPrecision(2));
const _r = (x: number) => x.toFixed(3);

function _sideLine(name: string, s: CompareSide): string {
  const commit = s.commit === null
    ? "commit unknown"
    : `commit ${s.commit.slice(0, 12)}${s.dirty ? " (dirty)" : ""}`;
  return `- ${name}: \`${s.path}\` (${s.kind}; ${s.adapter}, ${s.engine}; ${commit}; ${s.date})`;
}

/**
 * The comparison as Markdown: both sides, the rule, a table of every cell, the passes of the
 * cells past the per-pass target, the leftovers.
 */
export function formatComparison(c: Comparison): string {
  const pct = `${+(c.threshold * 100).toFixed(3)}%`;
  const lines = [
    "# Comparison of two runs: B against A",
    "",
    _sideLine("A", c.a),
    _sideLine("B", c.b),
    `- Ratio: B's median time / A's; ${Math.round(c.confidence * 100)}% interval: ${c.interval}.`,
    `- Verdict: slower (faster) when the interval lies above (below) 1 and the ratio is past ` +
    `1 ± ${pct}; otherwise within noise; incorrect when B fails the correctness check A passed.`,
    `- ${c.cells.length} cells compared: ${c.counts.slower} slower, ${c.counts.faster} faster, ` +
    `${c.counts["within noise"]} within noise, ${c.counts.incorrect} incorrect.`,
    "",
    "| method | β | mode | shape | dtype | fixture | A ms | B ms | B/A | interval | verdict |",
    "| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |",
  ];
  for (const x of c.cells) {
    const verdict = x.verdict === "within noise" ? x.verdict : `**${x.verdict}**`;
    lines.push(
      `| ${x.method} | ${x.beta} | ${x.mode} | ${x.shape} | ${x.dtype} | ${x.fixture} | ` +
        `${_ms(x.aMs)} | ${_ms(x.bMs)} | ${_r(x.ratio)} | [${_r(x.lo)}, ${_r(x.hi)}] | ` +
        `${verdict} |`,
    );
  }
  lines.push(...formatPassSection(c.cells, c.explainAbove));
  if (c.notCompared.length > 0) {
    lines.push("", `## Not compared (${c.notCompared.length})`, "");
    for (const x of c.notCompared) lines.push(`- ${x.key.replaceAll("|", " ")}: ${x.why}`);
  }
  for (const [side, keys] of [["A", c.onlyA], ["B", c.onlyB]] as const) {
    if (keys.length === 0) continue;
    lines.push("", `## Only in ${side} (${keys.length})`, "");
    for (const k of keys) lines.push(`- ${k.replaceAll("|", " ")}`);
  }
  return lines.join("\n") + "\n";
}
