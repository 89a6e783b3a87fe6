/**
 * The gate's comparison as text for the terminal: notes, the table of what failed or changed for
 * the better, the per-method summary, the legend, and a last line that says exactly what was
 * checked.
 * @module
 */
import { GATE_THRESHOLDS, type GateThresholds } from "./gate_suites.ts";
import type { GateComparison, GateFinding } from "./gate_compare.ts";
import { fmtErr, fmtRatio } from "./gate_stats.ts";
import { SPEED_RATIO_LEGEND } from "./timing.ts";

/** Markdown-style table rows with padded columns. */
function _table(head: string[], rows: string[][]): string {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(w[i])).join(" | ")} |`;
  return [line(head), `| ${w.map((x) => "-".repeat(x)).join(" | ")} |`, ...rows.map(line)].join(
    "\n",
  );
}

/** `1/q` as a speed ratio (× faster than the baseline), `–` for none. */
function _speed(q: number): string {
  return Number.isNaN(q) ? "–" : `${fmtRatio(1 / q)}×`;
}

/**
 * The last line: `gate: FAILED (n regressions)`, or what passed — memory, parity and time of N
 * results, or memory and parity only with the reason time was not compared.
 */
export function gateVerdict(c: GateComparison): string {
  const fails = c.findings.filter((f) => f.status === "fail").length;
  if (!c.passed) return `gate: FAILED (${fails} regression${fails === 1 ? "" : "s"})`;
  const n = `${c.compared} result${c.compared === 1 ? "" : "s"}`;
  return c.timeGated
    ? `gate: passed: memory, parity and time of ${n}`
    : `gate: passed: memory and parity of ${n}; time not compared: ${c.timeNotCompared}`;
}

/**
 * The comparison for the terminal: notes, a table of what failed (or changed for the better), the
 * per-method summary table, the legend and the verdict.
 */
export function formatComparison(c: GateComparison, th: GateThresholds = GATE_THRESHOLDS): string {
  const out: string[] = [];
  for (const n of c.notes) out.push(`note: ${n}`);
  if (c.machineSpeed !== null) {
    out.push(
      `note: the yardstick ran ${fmtRatio(1 / c.machineSpeed)}× as fast as in the baseline ` +
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
    _speed(s.medianQ),
    _speed(s.worstQ),
    _speed(s.medianAbs),
    s.memoryDelta === 0 ? "=" : `${s.memoryDelta > 0 ? "+" : ""}${s.memoryDelta} B`,
    s.failures ? `FAIL (${s.failures})` : "ok",
  ]);
  out.push(
    `\n${
      _table([
        "method",
        "results",
        "worst parity err",
        "speed (median)",
        "speed (slowest)",
        "abs speed (info)",
        "memory",
        "status",
      ], sum)
    }`,
  );
  out.push(
    `\nspeed: ${SPEED_RATIO_LEGEND}; here the baseline is the baseline file's run, and a time is ` +
      `a mode's time over the E·Cᵀ yardstick's, measured interleaved (the time columns of the ` +
      `table above: time / yardstick). Time fails at a median speed below ` +
      `${fmtRatio(1 / th.timeThreshold)}× with rounds slower than the baseline in a significant ` +
      `share (sign test, α = ${th.timeAlpha}), twice` +
      `${c.timeGated ? "" : " — not gated here (another host)"}; abs speed = the baseline's ` +
      `absolute time over this one (same host only, never gated); memory fails on any growth; ` +
      `parity fails above min(${th.parityMaxErr}, ${th.parityGrowth}× baseline + ${
        fmtErr(th.parityFloor)
      }); a result or mode on one side only fails.`,
  );
  out.push(gateVerdict(c));
  return out.join("\n");
}
