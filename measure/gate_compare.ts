/**
 * Compares a gate run with a baseline (pure: no GPU, no files): memory, parity and time ratios
 * per result and mode, into findings and a per-method summary (rules in measure/gate.ts's module
 * documentation). A run and a baseline with no result in common are bad input (nothing would be
 * compared); a result on one side only fails unless its method is optional (or, new, it is one
 * the adapter cannot run: nothing to compare on either side); times are compared
 * only with a baseline of the same host (gate_suites.ts timeHostKey), and the comparison says
 * what it checked.
 * @module
 */
import { InputError } from "../core/errors.ts";
import { median, type Mode } from "./timing.ts";
import {
  GATE_THRESHOLDS,
  type GateResult,
  type GateRun,
  type GateSuite,
  type GateThresholds,
  hostText,
  resultKey,
  timeHostKey,
} from "./gate_suites.ts";
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
  /** Median over modes and results of q (current ratio / baseline ratio; > 1 slower). */
  medianQ: number;
  /** Largest q (the slowest mode). */
  worstQ: number;
  /**
   * Median over modes and results of the absolute time over the baseline's (same host only,
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
  /** Remarks for the reader (other host, time not gated, ...). */
  notes: string[];
  /** The results and modes whose time regressed (candidates for a re-run). */
  timeRegressed: { key: string; mode: Mode }[];
  /** Whether times were gated (a baseline of the same host). */
  timeGated: boolean;
  /** Why times were not compared (the two hosts), when they were not. */
  timeNotCompared?: string;
  /** Results present in both the run and the baseline: what was compared. */
  compared: number;
  /** Informational: median current yardstick / baseline yardstick (same host), or null. */
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
  /** Methods whose results may be on one side only (GateSuite.optionalMethods). */
  optional?: readonly string[];
}

/** The message of a run and a baseline with nothing in common, given their result keys. */
function _nothingInCommon(run: readonly string[], baseline: readonly string[]): string {
  const one = (ks: readonly string[]) => ks.length === 0 ? "none" : `${ks.length} (e.g. ${ks[0]})`;
  return `the run and the baseline have no result in common, so nothing can be compared: run ` +
    `${one(run)}, baseline ${one(baseline)}`;
}

/**
 * Throws InputError, before anything is measured, when none of the results a suite would measure
 * for `methods` is in the baseline (another shape, suite or method set): such a gate would pass
 * having compared nothing.
 */
export function checkComparable(
  suite: GateSuite,
  methods: readonly string[],
  baseline: GateRun,
): void {
  const planned: string[] = [];
  for (const c of suite.cases) {
    for (const beta of suite.betas) {
      for (const method of methods) planned.push(resultKey({ ...c, method, beta }));
    }
  }
  const have = new Set(baseline.results.map(resultKey));
  if (!planned.some((k) => have.has(k))) {
    throw new InputError(_nothingInCommon(planned, [...have]));
  }
}

/** What the comparison gathers while it walks the results. */
interface _Acc {
  th: GateThresholds;
  sameHost: boolean;
  optional: ReadonlySet<string>;
  findings: GateFinding[];
  timeRegressed: { key: string; mode: Mode }[];
  perMethod: Map<string, { r: number; parity: number; qs: number[]; abs: number[]; mem: number }>;
  yardRatios: number[];
}

/**
 * Compares a run with a baseline (see the module documentation for the rules). Pure: no GPU, no
 * files. InputError when they have no result in common.
 */
export function compareRuns(
  current: GateRun,
  baseline: GateRun,
  o: CompareOptions = {},
): GateComparison {
  const sameHost = timeHostKey(current.adapter) === timeHostKey(baseline.adapter);
  const base = new Map(baseline.results.map((r) => [resultKey(r), r]));
  const compared = current.results.filter((r) => base.has(resultKey(r))).length;
  if (compared === 0) {
    throw new InputError(
      _nothingInCommon(current.results.map(resultKey), baseline.results.map(resultKey)),
    );
  }
  const acc: _Acc = {
    th: o.thresholds ?? GATE_THRESHOLDS,
    sameHost,
    optional: new Set(o.optional ?? []),
    findings: [],
    timeRegressed: [],
    perMethod: new Map(),
    yardRatios: [],
  };
  for (const cur of current.results) _compareResult(acc, cur, base.get(resultKey(cur)));
  _missing(acc, current, baseline, o.partial ?? false);
  const notes: string[] = [];
  let timeNotCompared: string | undefined;
  if (!sameHost) {
    timeNotCompared = `baseline from ${hostText(baseline.adapter)}, this host ` +
      hostText(current.adapter);
    notes.push(
      `${timeNotCompared}: memory and parity are gated; time ratios and absolute times are ` +
        `shown but not compared (a kernel's time against a matrix product follows the host; ` +
        `./dev task gate --update writes this host's baseline beside the others)`,
    );
  }
  return {
    passed: !acc.findings.some((f) => f.status === "fail"),
    findings: acc.findings,
    summary: _summary(acc),
    notes,
    timeRegressed: acc.timeRegressed,
    timeGated: sameHost,
    timeNotCompared,
    compared,
    machineSpeed: sameHost && acc.yardRatios.length ? median(acc.yardRatios) : null,
  };
}

/** The per-method summary rows. */
function _summary(acc: _Acc): GateMethodSummary[] {
  return [...acc.perMethod].map(([method, pm]) => ({
    method,
    results: pm.r,
    worstParity: pm.parity,
    medianQ: pm.qs.length ? median(pm.qs) : NaN,
    worstQ: pm.qs.length ? Math.max(...pm.qs) : NaN,
    medianAbs: pm.abs.length ? median(pm.abs) : NaN,
    memoryDelta: pm.mem,
    failures: acc.findings.filter((f) => f.method === method && f.status === "fail").length,
  }));
}

/** Baseline results the run does not have: failures, unless partial or optional. */
function _missing(acc: _Acc, current: GateRun, baseline: GateRun, partial: boolean): void {
  const seen = new Set(current.results.map(resultKey));
  for (const b of baseline.results) {
    const key = resultKey(b);
    if (seen.has(key)) continue;
    if (partial && !current.results.some((r) => r.method === b.method)) continue;
    const optional = acc.optional.has(b.method);
    acc.findings.push({
      key,
      method: b.method,
      check: "missing",
      status: optional ? "info" : "fail",
      baseline: "measured",
      current: "–",
      detail: `in the baseline but not measured${optional ? " (optional method)" : ""} ` +
        "(removed or renamed? ./dev task gate --update)",
    });
  }
}

/** Compares one result of the run with the baseline's of the same key (if any). */
function _compareResult(acc: _Acc, cur: GateResult, b: GateResult | undefined): void {
  const key = resultKey(cur);
  const add = (f: Omit<GateFinding, "key" | "method">) =>
    acc.findings.push({ key, method: cur.method, ...f });
  const pm = acc.perMethod.get(cur.method) ?? { r: 0, parity: NaN, qs: [], abs: [], mem: 0 };
  acc.perMethod.set(cur.method, pm);
  pm.r++;
  if (!b) {
    if (cur.error?.startsWith("unsupported:")) {
      // not run on this adapter (tensor cores without subgroup matrices, ...): a baseline of
      // this adapter could hold no measurement of it either, so there is nothing to miss
      add({
        check: "new",
        status: "info",
        baseline: "–",
        current: "not run",
        detail: `not in the baseline and not run on this adapter (${cur.error})`,
      });
      return;
    }
    const optional = acc.optional.has(cur.method);
    add({
      check: "new",
      status: optional ? "info" : "fail",
      baseline: "–",
      current: cur.error === undefined ? "measured" : "failed",
      detail: `not in the baseline${optional ? " (optional method)" : ""}: nothing to compare ` +
        `it with (./dev task gate --update)`,
    });
    return;
  }
  if (cur.yardstickMs !== null && b.yardstickMs) {
    acc.yardRatios.push(cur.yardstickMs / b.yardstickMs);
  }
  if (cur.error !== undefined) {
    if (b.error !== undefined) return; // failed before too (e.g. unsupported)
    add({ check: "error", status: "fail", baseline: "ran", current: "failed", detail: cur.error });
    return;
  }
  _parity(acc, cur, b, pm, add);
  if (b.error !== undefined) {
    add({
      check: "new",
      status: "info",
      baseline: "failed",
      current: "runs",
      detail: `failed in the baseline (${b.error}): memory and time not compared`,
    });
    return;
  }
  for (const mode of Object.keys(cur.modes) as Mode[]) {
    _compareMode(acc, key, mode, cur, b, pm, add);
  }
  for (const mode of Object.keys(b.modes) as Mode[]) {
    if (cur.modes[mode] !== undefined) continue;
    add({
      mode,
      check: "missing",
      status: acc.optional.has(cur.method) ? "info" : "fail",
      baseline: "measured",
      current: "–",
      detail: "mode in the baseline but not measured (./dev task gate --update)",
    });
  }
}

type _Add = (f: Omit<GateFinding, "key" | "method">) => void;
type _PerMethod = { r: number; parity: number; qs: number[]; abs: number[]; mem: number };

/** Parity of loss, dE and dC against the limits and the baseline's errors. */
function _parity(acc: _Acc, cur: GateResult, b: GateResult, pm: _PerMethod, add: _Add): void {
  if (!cur.parity) return;
  const th = acc.th;
  for (const arr of ["loss", "dE", "dC"] as const) {
    const err = cur.parity[arr] ?? Infinity;
    pm.parity = Number.isNaN(pm.parity) ? err : Math.max(pm.parity, err);
    const baseErr = b.parity?.[arr] ?? undefined;
    const v = judgeParity(err, baseErr ?? undefined, th);
    if (!v.regressed) continue;
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

/** One mode: failures, memory (exact) and time (against the baseline's ratio). */
function _compareMode(
  acc: _Acc,
  key: string,
  mode: Mode,
  cur: GateResult,
  b: GateResult,
  pm: _PerMethod,
  add: _Add,
): void {
  const cm = cur.modes[mode]!;
  const bm = b.modes[mode];
  if (cm.error !== undefined) {
    if (bm?.error !== undefined) return;
    add({
      mode,
      check: "error",
      status: "fail",
      baseline: bm ? "ran" : "–",
      current: "failed",
      detail: cm.error,
    });
    return;
  }
  if (!bm) {
    add({
      mode,
      check: "new",
      status: acc.optional.has(cur.method) ? "info" : "fail",
      baseline: "–",
      current: "measured",
      detail: "mode not in the baseline (./dev task gate --update)",
    });
    return;
  }
  if (bm.error !== undefined || bm.peakBytes === null) return;
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
  if (acc.sameHost && cm.timeMs && bm.timeMs) pm.abs.push(cm.timeMs / bm.timeMs);
  if (bm.timeRatio === null || cm.timeRatio === null) return;
  const th = acc.th;
  const v = judgeTime(cm.ratios, bm.timeRatio, th);
  pm.qs.push(v.q);
  const what = `${fmtRatio(1 / v.q)}× faster than the baseline (median); ${v.exceed}/` +
    `${v.rounds} rounds slower than it (sign test p = ${v.p.toPrecision(2)})`;
  if (v.regressed) {
    if (acc.sameHost) acc.timeRegressed.push({ key, mode });
    add({
      mode,
      check: "time",
      status: acc.sameHost ? "fail" : "info",
      baseline: fmtRatio(bm.timeRatio),
      current: fmtRatio(cm.timeRatio),
      detail: acc.sameHost ? what : `${what}; not gated (another host)`,
    });
  } else if (v.improved) {
    add({
      mode,
      check: "time",
      status: "better",
      baseline: fmtRatio(bm.timeRatio),
      current: fmtRatio(cm.timeRatio),
      detail: `${fmtRatio(1 / v.q)}× faster than the baseline (median)`,
    });
  }
}
