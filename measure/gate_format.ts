/**
 * The gate's comparison as text for the terminal: notes, the table of what failed or changed for
 * the better, and the per-method summary.
 * @module
 */
import { GATE_THRESHOLDS, type GateThresholds } from "./gate_suites.ts";
import type { GateComparison, GateFinding } from "./gate_compare.ts";
import { fmtErr, fmtRatio } from "./gate_stats.ts";

/** Markdown-style table rows with padded columns. */
function _table(head: string[], rows: string[][]): string {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(w[i])).join(" | ")} |`;
  return [line(head), `| ${w.map((x) => "-".repeat(x)).join(" | ")} |`, ...rows.map(line)].join(
    "\n",
  );
}

/**
 * The comparison for the terminal: notes, a table of what failed (or changed for the better), and
 * the per-method summary table.
 */
export function formatComparison(c: GateComparison, th: GateThresholds = GATE_THRESHOLDS): string {
  const out: string[] = [];
  for (const n of c.notes) out.push(`note: ${n}`);
  if (c.machineSpeed !== null) {
    out.push(
      `note: the yardstick took ${fmtRatio(c.machineSpeed)}× its baseline time ` +
        `(machine load; informational, absolute times are not gated)`,
    );
  }
  const fails = c.findings.filter((f) => f.status === "fail");
  const others = c.findings.filter((f) => f.status !== "fail");
  const rows = (fs: GateFinding[]) =>
    fs.map((f) => [f.check, f.key, f.mode ?? "", f.baseline, f.current, f.detail]);
  const head = ["check", "case / method / β", "mode", "baseline", "now", "why"];
  if (fails.length) {
    out.push(`\nREGRESSIONS (${fails.length}):\n${_table(head, rows(fails))}`);
  }
  if (others.length) out.push(`\nother changes (not failing):\n${_table(head, rows(others))}`);
  const sum = c.summary.map((s) => [
    s.method,
    String(s.results),
    Number.isNaN(s.worstParity) ? "–" : fmtErr(s.worstParity),
    Number.isNaN(s.medianQ) ? "–" : `${fmtRatio(s.medianQ)}×`,
    Number.isNaN(s.worstQ) ? "–" : `${fmtRatio(s.worstQ)}×`,
    Number.isNaN(s.medianAbs) ? "–" : `${fmtRatio(s.medianAbs)}×`,
    s.memoryDelta === 0 ? "=" : `${s.memoryDelta > 0 ? "+" : ""}${s.memoryDelta} B`,
    s.failures ? `FAIL (${s.failures})` : "ok",
  ]);
  out.push(
    `\n${
      _table([
        "method",
        "results",
        "worst parity err",
        "time q (median)",
        "time q (worst)",
        "abs time (info)",
        "memory",
        "status",
      ], sum)
    }`,
  );
  out.push(
    `\nq = time ratio (method / E·Cᵀ yardstick, interleaved) over the baseline's; time fails at ` +
      `median q > ${th.timeThreshold} with q > ${th.timeSignBar} in a significant share of ` +
      `rounds (sign test, α = ${th.timeAlpha}), twice` +
      `${c.timeGated ? "" : " — not gated here (other adapter)"}; abs time = time over the ` +
      `baseline's (same adapter only, never gated); memory fails on any growth; ` +
      `parity fails above min(${th.parityMaxErr}, ${th.parityGrowth}× baseline + ${
        fmtErr(th.parityFloor)
      }).`,
  );
  out.push(
    c.passed
      ? `gate: passed (${c.summary.reduce((a, s) => a + s.results, 0)} results)`
      : `gate: FAILED (${fails.length} regressions)`,
  );
  return out.join("\n");
}
