/**
 * Where the difference between two runs is: for a compared cell whose B/A time ratio exceeds a
 * target ({@link COMPARE_EXPLAIN_ABOVE}), each pass of its per-pass breakdown (`passMs`, the
 * median GPU ms of each pass label) in both runs, sorted by B − A, so that the kernels carrying
 * the difference come first.
 *
 * Passes are matched by name after per-chunk passes are summed under one label, as table3's
 * "Where the time goes" section writes them: `logits[3] = E[chunk]·Cᵀ` and `dC += Gᵀ·E[chunk 3]`
 * are parts of `logits[chunk ×64] = E[chunk]·Cᵀ` and `dC += Gᵀ·E[chunk ×64]`. A pass of one run
 * only has no time (null) on the other side, and its B − A counts that side as 0, so the
 * differences of a cell add up to the difference of its pass sums.
 * @module
 */
import type { CellComparison } from "./compare.ts";

/** Default target of the per-pass section: cells whose B/A exceeds 1.15. */
export const COMPARE_EXPLAIN_ABOVE = 1.15;

/** One pass of a cell in both runs. */
export interface PassDiff {
  /** The pass label, per-chunk passes summed (`dC += Gᵀ·E[chunk ×64]`). */
  pass: string;
  /** Median GPU ms in A and in B (null where that run has no such pass). */
  aMs: number | null;
  bMs: number | null;
  /** bMs / aMs (null where a side is missing or A's time is 0). */
  ratio: number | null;
  /** bMs − aMs, a missing side counted as 0. */
  diffMs: number;
}

/** One pass label of a run, per-chunk passes summed. */
interface PassTotal {
  ms: number;
  count: number;
}

/**
 * The per-pass times of a run with per-chunk passes (`[3]`, `[chunk 3]`) summed under one key in
 * which the index reads `[chunk]`; `count` is how many passes each key sums.
 */
export function passTotals(passMs: Readonly<Record<string, number>>): Map<string, PassTotal> {
  const out = new Map<string, PassTotal>();
  for (const [k, ms] of Object.entries(passMs)) {
    const key = k.replace(/\[(?:chunk )?\d+\]/g, "[chunk]");
    const e = out.get(key) ?? { ms: 0, count: 0 };
    out.set(key, { ms: e.ms + ms, count: e.count + 1 });
  }
  return out;
}

/** The label of a summed key: `[chunk ×N]` (`×N in A, ×M in B` when the runs differ). */
function _label(key: string, a?: PassTotal, b?: PassTotal): string {
  const ca = a?.count, cb = b?.count;
  if (ca !== undefined && cb !== undefined && ca !== cb) {
    return key.replace("[chunk]", `[chunk ×${ca} in A, ×${cb} in B]`);
  }
  const n = ca ?? cb ?? 1;
  return n > 1 ? key.replace("[chunk]", `[chunk ×${n}]`) : key;
}

/**
 * Each pass of a cell in A and in B (either breakdown may be absent), matched by name, sorted by
 * B − A descending (then by name); empty when neither run has a breakdown.
 */
export function passDiffs(
  a: Readonly<Record<string, number>> | undefined,
  b: Readonly<Record<string, number>> | undefined,
): PassDiff[] {
  const ta = passTotals(a ?? {}), tb = passTotals(b ?? {});
  const keys = [...new Set([...ta.keys(), ...tb.keys()])];
  const out = keys.map((key): PassDiff => {
    const pa = ta.get(key), pb = tb.get(key);
    const aMs = pa?.ms ?? null, bMs = pb?.ms ?? null;
    return {
      pass: _label(key, pa, pb),
      aMs,
      bMs,
      ratio: aMs !== null && bMs !== null && aMs > 0 ? bMs / aMs : null,
      diffMs: (bMs ?? 0) - (aMs ?? 0),
    };
  });
  return out.sort((x, y) => y.diffMs - x.diffMs || (x.pass < y.pass ? -1 : 1));
}

/** A pass time: `241.4`, `7.27`, `0.020`. */
function _ms(x: number): string {
  const a = Math.abs(x);
  return a >= 100 ? x.toFixed(1) : a >= 1 ? x.toFixed(2) : a === 0 ? "0" : x.toPrecision(2);
}

const _signed = (x: number) => `${x > 0 ? "+" : x < 0 ? "−" : "±"}${_ms(Math.abs(x))}`;
const _cellMs = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toPrecision(2));

/**
 * The section "Where the difference is (per pass)" of a comparison: a table for each cell with
 * `passes` (those past the target `explainAbove`), or one line where neither run has a breakdown;
 * one line when no cell is past the target; nothing when the target is 0 (off).
 */
export function formatPassSection(
  cells: readonly CellComparison[],
  explainAbove: number,
): string[] {
  if (!(explainAbove > 0)) return [];
  const target = `${+explainAbove.toFixed(3)}`;
  const lines = ["", "## Where the difference is (per pass)", ""];
  const explained = cells.filter((x) => x.passes !== undefined);
  if (explained.length === 0) {
    lines.push(`No compared cell's B/A exceeds ${target}.`);
    return lines;
  }
  lines.push(
    `Each cell whose B/A exceeds ${target}: the median GPU ms of each of its passes in A and in ` +
      `B (per-chunk passes summed, as in table3's "Where the time goes"), sorted by B − A; – ` +
      "where a run has no such pass (its B − A counts that side as 0).",
  );
  for (const x of explained) {
    const head = `**${x.method}, β = ${x.beta}, ${x.mode}** (${x.shape} ${x.dtype}; ` +
      `${_cellMs(x.aMs)} → ${_cellMs(x.bMs)} ms, B/A ${x.ratio.toFixed(3)})`;
    if (x.passes!.length === 0) {
      lines.push("", `${head}: neither run has a per-pass breakdown.`);
      continue;
    }
    lines.push(
      "",
      head,
      "",
      "| pass | A ms | B ms | B/A | B−A ms |",
      "| --- | ---: | ---: | ---: | ---: |",
    );
    for (const p of x.passes!) {
      const show = (v: number | null) => (v === null ? "–" : _ms(v));
      lines.push(
        `| ${p.pass.replaceAll("|", "\\|")} | ${show(p.aMs)} | ${show(p.bMs)} | ` +
          `${p.ratio === null ? "–" : p.ratio.toFixed(3)} | ${_signed(p.diffMs)} |`,
      );
    }
  }
  return lines;
}
