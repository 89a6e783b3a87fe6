/**
 * Compares a gate run with a baseline (pure: no GPU, no files): memory, parity and time ratios
 * per result and mode, into findings and a per-method summary (rules in measure/gate.ts's module
 * documentation).
 * @module
 */
import { median, type Mode } from "./timing.ts";
import { GATE_THRESHOLDS, type GateRun, type GateThresholds, resultKey } from "./gate_suites.ts";
import { fmtErr, fmtRatio, judgeParity, judgeTime } from "./gate_stats.ts";

/** What a finding is about. */
export type GateCheck = "memory" | "time" | "parity" | "error" | "new" | "missing";

/** One line of the comparison. */
export interface GateFinding {
  /** {@link resultKey}. */
  key: string;
  method: string;
  /** The mode, for memory and time. */
  mode?: Mode;
  check: GateCheck;
  /** `fail` fails the gate; `better` and `info` do not. */
  status: "fail" | "better" | "info";
  /** Baseline value, as text. */
  baseline: string;
  /** Current value, as text. */
  current: string;
  /** Why, in a few words. */
  detail: string;
}

/** Per-method summary of a comparison. */
export interface GateMethodSummary {
  method: string;
  /** Results compared (cases × β). */
  results: number;
  /** Largest parity error of the method (any case, β, array); NaN when none was measured. */
  worstParity: number;
  /** Median over modes and results of q (current ratio / baseline ratio). */
  medianQ: number;
  /** Largest q. */
  worstQ: number;
  /**
   * Median over modes and results of the absolute time over the baseline's (same adapter only,
   * informational; NaN otherwise).
   */
  medianAbs: number;
  /** Sum of peak-bytes changes over modes and results. */
  memoryDelta: number;
  /** Findings that fail. */
  failures: number;
}

/** The outcome of comparing a run with a baseline. */
export interface GateComparison {
  /** Whether the gate passes. */
  passed: boolean;
  /** Every finding that is not plainly "unchanged". */
  findings: GateFinding[];
  /** One row per method. */
  summary: GateMethodSummary[];
  /** Remarks for the reader (other adapter, time not gated, ...). */
  notes: string[];
  /** The results and modes whose time regressed (candidates for a re-run). */
  timeRegressed: { key: string; mode: Mode }[];
  /** Whether times were gated (same adapter). */
  timeGated: boolean;
  /** Informational: median current yardstick / baseline yardstick (same adapter), or null. */
  machineSpeed: number | null;
}

/** Options of {@link compareRuns}. */
export interface CompareOptions {
  thresholds?: GateThresholds;
  /**
   * Only some methods were measured (`--methods`): baseline results of other methods are not
   * reported missing.
   */
  partial?: boolean;
}

/**
 * Compares a run with a baseline (see the module documentation for the rules). Pure: no GPU, no
 * files.
 */
export function compareRuns(
  current: GateRun,
  baseline: GateRun,
  o: CompareOptions = {},
): GateComparison {
  const th = o.thresholds ?? GATE_THRESHOLDS;
  const adapterMatch = current.adapter.slug === baseline.adapter.slug &&
    current.adapter.timeSource === baseline.adapter.timeSource;
  const sameAdapter = adapterMatch && current.adapter.host === baseline.adapter.host;
  const notes: string[] = [];
  if (!adapterMatch) {
    notes.push(
      `baseline measured on another adapter (${baseline.adapter.description}; this is ` +
        `${current.adapter.description}): memory and parity are gated, time ratios and absolute ` +
        `times are shown but not compared`,
    );
  } else if (!sameAdapter) {
    notes.push(
      `baseline measured on another host CPU (${baseline.adapter.host ?? "unknown"}; this is ` +
        `${current.adapter.host ?? "unknown"}), whose speed profile a software adapter's times ` +
        `follow: memory and parity are gated, time ratios and absolute times are shown but not ` +
        `compared`,
    );
  }
  const base = new Map(baseline.results.map((r) => [resultKey(r), r]));
  const seen = new Set<string>();
  const findings: GateFinding[] = [];
  const timeRegressed: { key: string; mode: Mode }[] = [];
  const perMethod = new Map<
    string,
    { r: number; parity: number; qs: number[]; abs: number[]; mem: number }
  >();
  const yardRatios: number[] = [];

  for (const cur of current.results) {
    const key = resultKey(cur);
    seen.add(key);
    const b = base.get(key);
    const add = (f: Omit<GateFinding, "key" | "method">) =>
      findings.push({ key, method: cur.method, ...f });
    const pm = perMethod.get(cur.method) ?? { r: 0, parity: NaN, qs: [], abs: [], mem: 0 };
    perMethod.set(cur.method, pm);
    pm.r++;
    if (cur.yardstickMs !== null && b?.yardstickMs) {
      yardRatios.push(cur.yardstickMs / b.yardstickMs);
    }

    if (cur.error !== undefined) {
      if (b?.error !== undefined) continue; // failed before too (e.g. unsupported)
      if (!b && cur.error.startsWith("unsupported:")) {
        add({
          check: "new",
          status: "info",
          baseline: "–",
          current: "unsupported",
          detail: cur.error,
        });
        continue;
      }
      add({
        check: "error",
        status: "fail",
        baseline: b ? "ran" : "–",
        current: "failed",
        detail: cur.error,
      });
      continue;
    }
    if (cur.parity) {
      for (const arr of ["loss", "dE", "dC"] as const) {
        const err = cur.parity[arr];
        pm.parity = Number.isNaN(pm.parity) ? err : Math.max(pm.parity, err);
        const baseErr = b?.parity?.[arr];
        const v = judgeParity(err, baseErr, th);
        if (v.regressed) {
          add({
            check: "parity",
            status: "fail",
            baseline: baseErr === undefined ? "–" : fmtErr(baseErr),
            current: fmtErr(err),
            detail: `${arr} error above ${fmtErr(v.allowed)} (` +
              (v.allowed === th.parityMaxErr
                ? `the limit ${fmtErr(th.parityMaxErr)}`
                : `${th.parityGrowth}× baseline + ${fmtErr(th.parityFloor)}`) +
              ")",
          });
        }
      }
    }
    if (!b) {
      add({
        check: "new",
        status: "info",
        baseline: "–",
        current: "measured",
        detail: "not in the baseline: memory and time not compared (deno task gate --update)",
      });
      continue;
    }
    if (b.error !== undefined) {
      add({
        check: "new",
        status: "info",
        baseline: "failed",
        current: "runs",
        detail: `failed in the baseline (${b.error}): memory and time not compared`,
      });
      continue;
    }
    for (const mode of Object.keys(cur.modes) as Mode[]) {
      const cm = cur.modes[mode]!;
      const bm = b.modes[mode];
      if (cm.error !== undefined) {
        if (bm?.error === undefined) {
          add({
            mode,
            check: "error",
            status: "fail",
            baseline: bm ? "ran" : "–",
            current: "failed",
            detail: cm.error,
          });
        }
        continue;
      }
      if (!bm || bm.error !== undefined || bm.peakBytes === null) continue;
      if (cm.peakBytes !== null && cm.peakBytes !== bm.peakBytes) {
        const delta = cm.peakBytes - bm.peakBytes;
        pm.mem += delta;
        add({
          mode,
          check: "memory",
          status: delta > 0 ? "fail" : "better",
          baseline: String(bm.peakBytes),
          current: String(cm.peakBytes),
          detail: `${delta > 0 ? "+" : ""}${delta} bytes (${
            delta > 0 ? "any growth fails" : "improvement"
          })`,
        });
      }
      if (sameAdapter && cm.timeMs && bm.timeMs) pm.abs.push(cm.timeMs / bm.timeMs);
      if (bm.timeRatio === null || cm.timeRatio === null) continue;
      const v = judgeTime(cm.ratios, bm.timeRatio, th);
      pm.qs.push(v.q);
      const what = `median ${fmtRatio(v.q)}× the baseline ratio; ${v.exceed}/${v.rounds} ` +
        `rounds above ${th.timeSignBar}× (sign test p = ${v.p.toPrecision(2)})`;
      if (v.regressed) {
        if (sameAdapter) timeRegressed.push({ key, mode });
        add({
          mode,
          check: "time",
          status: sameAdapter ? "fail" : "info",
          baseline: fmtRatio(bm.timeRatio),
          current: fmtRatio(cm.timeRatio),
          detail: sameAdapter ? what : `${what}; not gated (other adapter)`,
        });
      } else if (v.improved) {
        add({
          mode,
          check: "time",
          status: "better",
          baseline: fmtRatio(bm.timeRatio),
          current: fmtRatio(cm.timeRatio),
          detail: `median ${fmtRatio(v.q)}× the baseline ratio (faster)`,
        });
      }
    }
  }
  for (const [key, b] of base) {
    if (seen.has(key)) continue;
    if (o.partial && !current.results.some((r) => r.method === b.method)) continue;
    findings.push({
      key,
      method: b.method,
      check: "missing",
      status: o.partial ? "info" : "fail",
      baseline: "measured",
      current: "–",
      detail: "in the baseline but not measured (removed or renamed? deno task gate --update)",
    });
  }
  const summary: GateMethodSummary[] = [...perMethod].map(([method, pm]) => ({
    method,
    results: pm.r,
    worstParity: pm.parity,
    medianQ: pm.qs.length ? median(pm.qs) : NaN,
    worstQ: pm.qs.length ? Math.max(...pm.qs) : NaN,
    medianAbs: pm.abs.length ? median(pm.abs) : NaN,
    memoryDelta: pm.mem,
    failures: findings.filter((f) => f.method === method && f.status === "fail").length,
  }));
  return {
    passed: !findings.some((f) => f.status === "fail"),
    findings,
    summary,
    notes,
    timeRegressed,
    timeGated: sameAdapter,
    machineSpeed: sameAdapter && yardRatios.length ? median(yardRatios) : null,
  };
}
