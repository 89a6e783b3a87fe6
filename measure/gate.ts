/**
 * The regression gate of CI: a fixed small suite measured on every method of the registry and
 * compared with a committed baseline of the same adapter. It fails on any growth of memory, on
 * parity drift, and on significant slowdowns of time ratios.
 *
 * For every case (fixture × shape × dtype), method and β, a gate run measures:
 * - **memory**: `peakBytes` of {@link measureMethod} in each mode. Allocation is deterministic, so
 *   any growth over the baseline fails; a shrink is reported as an improvement.
 * - **parity**: loss, dE and dC of {@link runMethod} against the float64 oracle, each as
 *   max |got − want| / max |want| over the array. Each must stay below
 *   {@link GATE_THRESHOLDS}.parityMaxErr (5e-2) and below parityGrowth × the baseline's error +
 *   parityFloor (1.5× + 1e-5).
 * - **time**: absolute times drift with the load of a shared machine, so each mode's time is
 *   divided by a yardstick measured interleaved with it, the plain logits product E·Cᵀ
 *   (kernels/matmul.ts) of the same size: Y₀ M₁ Y₁ M₂ Y₂ … M_R Y_R, where M_i is one sample of
 *   every mode and Y_i the median of {@link YARDSTICK_CALLS} yardstick calls, and round i's ratio
 *   is t(M_i) / mean(Y_{i−1}, Y_i). A mode faster than the yardstick is sampled as the median of
 *   up to {@link MAX_CALLS_PER_SAMPLE} calls. With q_i = ratio_i / the baseline's median ratio, a
 *   mode regresses when (1) the median q exceeds `timeThreshold` (1.5), (2) the rounds are
 *   significantly slower than the baseline: a one-sided sign test of q_i > `timeSignBar` (1) at
 *   level `timeAlpha` (0.05; with 7 rounds: all 7), (3) the median ratio grew by at least
 *   `timeMinDelta` (0.1 yardsticks; smaller changes of the ~2 ms modes are noise), and (4) the
 *   same holds when the method is measured again ({@link runGate}).
 *
 * Times come from {@link gateTimeSource}: on a software adapter (Mesa lavapipe in CI) the process's
 * CPU time, not the adapter's timestamps. There the GPU is the CPU and the timestamps are
 * wall-clock: with other processes on the two cores, per-round ratios from timestamps had a
 * median spread (sd of log) of 0.46, from CPU time 0.12. On hardware, GPU timestamps.
 *
 * Absolute times are recorded and shown next to a baseline of the same adapter, never gated.
 * Against another adapter's baseline the time ratios are shown and not gated either (the ratio
 * of a kernel to a matrix product depends on the adapter as much as on the code); memory and
 * parity are gated.
 * @module
 */
import process from "node:process";
import type { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { createTensor, type DeviceTensor } from "../gpu/tensor.ts";
import { oneLine } from "../core/errors.ts";
import { type Dtype, type HostInputs, type LceOptions, resolveOptions } from "../core/options.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
import { defaultTile } from "../methods/_common.ts";
import { runMethod, uploadGradOut, uploadInputs } from "../methods/run.ts";
import type {
  ForwardOutput,
  Gradients,
  LceMethod,
  MethodInputs,
  PreparedMethod,
} from "../methods/types.ts";
import { lceReference, type LceReferenceResult } from "../reference/lce_reference.ts";
import { compareArrays } from "../reference/compare.ts";
import { measureMethod, type Mode, MODES, quantiles } from "./measure.ts";

/** One problem of the suite: fixture, shape and storage dtype. */
export interface GateCase {
  /** Fixture name (fixtures/mod.ts). */
  fixture: string;
  n: number;
  v: number;
  d: number;
  dtype: Dtype;
}

/** A suite: the cases, β values and rounds every method is measured with. */
export interface GateSuite {
  /** Name (`--suite`). */
  name: string;
  cases: readonly GateCase[];
  /** Label smoothing values; each method runs at each. */
  betas: readonly number[];
  /** Modes measured. */
  modes: readonly Mode[];
  /** Timed rounds per method and β (the baseline uses {@link UPDATE_ROUNDS_FACTOR} times more). */
  rounds: number;
}

/**
 * The CI suite: two fixtures at a small shape with odd sizes (no dimension a multiple of a tile),
 * every mode, β = 0.1 and β = 0, in bf16 (the paper's dtype). Every method of the registry, 7
 * timed rounds each: about three minutes on Mesa lavapipe with two shared cores.
 */
export const CI_SUITE: GateSuite = {
  name: "ci",
  cases: [
    { fixture: "cce", n: 96, v: 1000, d: 48, dtype: "bf16" },
    { fixture: "llm", n: 96, v: 1000, d: 48, dtype: "bf16" },
  ],
  betas: [0.1, 0],
  modes: MODES,
  rounds: 7,
};

/** A tiny suite for the gate's own tests: one case, β = 0.1, 5 rounds (seconds per method). */
export const TINY_SUITE: GateSuite = {
  name: "tiny",
  cases: [{ fixture: "cce", n: 24, v: 130, d: 16, dtype: "bf16" }],
  betas: [0.1],
  modes: MODES,
  rounds: 5,
};

/** The suites by name (`--suite`). */
export const SUITES: Readonly<Record<string, GateSuite>> = { ci: CI_SUITE, tiny: TINY_SUITE };

/** The baseline is measured with this many times the suite's rounds (a steadier median). */
export const UPDATE_ROUNDS_FACTOR = 2;

/** Seed of every fixture of the gate. */
export const GATE_SEED = 0;

/** Upstream gradient of the parity runs. */
const _GRAD_OUTPUT = 1;

/** The gate's limits (see the module documentation). */
export interface GateThresholds {
  /** A mode's time ratio regresses beyond this many times the baseline ratio. */
  timeThreshold: number;
  /**
   * The sign test's bar: the rounds must have q_i above it significantly often (1: slower than
   * the baseline at all; `timeThreshold`: beyond the threshold — stricter, less power).
   */
  timeSignBar: number;
  /** Significance level of the one-sided sign test over rounds. */
  timeAlpha: number;
  /** Least growth of the median ratio that counts (in yardsticks). */
  timeMinDelta: number;
  /** Largest parity error of any method (relative to the array's max |value|). */
  parityMaxErr: number;
  /** Parity error may grow to parityGrowth × the baseline's error + parityFloor. */
  parityGrowth: number;
  /** See parityGrowth. */
  parityFloor: number;
}

/**
 * The limits in force. Time: over 12 runs of the unchanged tree on lavapipe with two shared
 * cores, the 1296 per-mode median q had a log spread of 7.6% and a maximum of 1.49 (one cell;
 * three above 1.3), so 1.5 — with the sign test and the re-run behind it — passes noise, while a
 * 2× slowdown (median q ≈ 2) is caught in every cell. `parityMaxErr` is 5e-2 because the methods
 * that store logits in bf16 (chunked, compiled) have errors up to 1.7e-2 of the scale; the f32
 * methods sit near 1e-6, where the growth rule (1.5× + 1e-5) is what guards them.
 */
export const GATE_THRESHOLDS: GateThresholds = {
  timeThreshold: 1.5,
  timeSignBar: 1,
  timeAlpha: 0.05,
  timeMinDelta: 0.1,
  parityMaxErr: 5e-2,
  parityGrowth: 1.5,
  parityFloor: 1e-5,
};

/** Parity errors of one method run (max abs error over the array's max |value|). */
export interface ParityErrors {
  loss: number;
  dE: number;
  dC: number;
}

/** One mode of a measured method. */
export interface GateModeResult {
  /** Exact tracked peak bytes above the inputs (null when the mode failed). */
  peakBytes: number | null;
  /** Median of the per-round ratios method / yardstick. */
  timeRatio: number | null;
  /** The per-round ratios, in round order. */
  ratios: number[];
  /** Median time of the mode, ms (informational). */
  timeMs: number | null;
  /** Why the mode failed. */
  error?: string;
}

/** One method at one β on one case: its parity and every mode. */
export interface GateResult extends GateCase {
  method: string;
  beta: number;
  /** Parity errors, null when the method could not run. */
  parity: ParityErrors | null;
  /** Median yardstick time over the rounds, ms (informational). */
  yardstickMs: number | null;
  /** The modes measured. */
  modes: Partial<Record<Mode, GateModeResult>>;
  /** Why the method could not run at all (unsupported, failed parity run, ...). */
  error?: string;
}

/** The adapter a run or baseline was measured on. */
export interface GateAdapter {
  /** File-name slug of the adapter's description (report/table3.ts). */
  slug: string;
  description: string;
  isFallbackAdapter: boolean;
  /** Where times come from. */
  timeSource: TimeSource;
}

/**
 * Where the gate's times come from: `cpu` on a software adapter (the process's CPU time: there
 * the GPU is the CPU, and CPU time hardly moves when other processes compete for the cores, while
 * the adapter's timestamps are wall-clock), `gpu` (timestamp queries) on hardware, `wall` on
 * hardware without timestamp-query.
 */
export type TimeSource = "cpu" | "gpu" | "wall";

/** A gate run; the baseline file holds one (JSON). */
export interface GateRun {
  /** File format version. */
  version: 1;
  suite: string;
  adapter: GateAdapter;
  /** Deno version, OS, date (ISO 8601). */
  env: { deno: string; os: string; date: string };
  /** Timed rounds per method. */
  rounds: number;
  /** Thresholds in force when it was measured (informational). */
  thresholds: GateThresholds;
  results: GateResult[];
  /** False in the partial file of a `--update` that is still running or was interrupted. */
  complete?: boolean;
}

/** The key of a result: fixture, shape, dtype, method and β (the mode and adapter are outside). */
export function resultKey(r: GateCase & { method: string; beta: number }): string {
  return `${r.fixture} ${r.n}x${r.v}x${r.d} ${r.dtype} ${r.method} β=${r.beta}`;
}

// ---------------------------------------------------------------------------------------------
// Statistics (pure)

/** P(X ≥ k) for X ~ Binomial(n, ½). */
export function binomialTail(k: number, n: number): number {
  if (k <= 0) return 1;
  if (k > n) return 0;
  let c = 1, sum = 0; // c = C(n, i)
  for (let i = 0; i <= n; i++) {
    if (i >= k) sum += c;
    c = (c * (n - i)) / (i + 1);
  }
  return sum / 2 ** n;
}

/**
 * The least number of rounds out of `n` that must exceed the threshold for the one-sided sign
 * test to reject "the median is at most the threshold" at level `alpha`; n + 1 when no count can.
 */
export function signTestCount(n: number, alpha: number): number {
  for (let k = 0; k <= n; k++) if (binomialTail(k, n) <= alpha) return k;
  return n + 1;
}

/** The median of a non-empty list. */
export function median(xs: readonly number[]): number {
  return quantiles(xs).median;
}

/** What {@link judgeTime} decided for one mode. */
export interface TimeVerdict {
  /** Median ratio / baseline ratio. */
  q: number;
  /** Rounds with ratio / baseline ratio above the sign test's bar. */
  exceed: number;
  /** Rounds in all. */
  rounds: number;
  /** Sign-test p-value of `exceed` of `rounds`. */
  p: number;
  /** Significantly slower beyond the threshold. */
  regressed: boolean;
  /** Significantly faster beyond the threshold (1 / threshold). */
  improved: boolean;
}

/** Judges per-round ratios against a baseline ratio (see the module documentation). */
export function judgeTime(
  ratios: readonly number[],
  baseRatio: number,
  th: GateThresholds = GATE_THRESHOLDS,
): TimeVerdict {
  const n = ratios.length;
  if (n === 0 || !(baseRatio > 0)) {
    return { q: NaN, exceed: 0, rounds: n, p: 1, regressed: false, improved: false };
  }
  const qs = ratios.map((r) => r / baseRatio);
  const q = median(qs);
  const exceed = qs.filter((x) => x > th.timeSignBar).length;
  const below = qs.filter((x) => x < 1 / th.timeSignBar).length;
  const p = binomialTail(exceed, n);
  const regressed = q > th.timeThreshold && median(ratios) - baseRatio >= th.timeMinDelta &&
    p <= th.timeAlpha;
  const improved = q < 1 / th.timeThreshold && baseRatio - median(ratios) >= th.timeMinDelta &&
    binomialTail(below, n) <= th.timeAlpha;
  return { q, exceed, rounds: n, p, regressed, improved };
}

/** What {@link judgeParity} decided for one array. */
export interface ParityVerdict {
  /** The largest error allowed. */
  allowed: number;
  /** Over the allowance. */
  regressed: boolean;
}

/** The allowance of a parity error given the baseline's (undefined: none) and the thresholds. */
export function judgeParity(
  err: number,
  baseErr: number | undefined,
  th: GateThresholds = GATE_THRESHOLDS,
): ParityVerdict {
  const growth = baseErr === undefined || !Number.isFinite(baseErr)
    ? Infinity
    : th.parityGrowth * baseErr + th.parityFloor;
  const allowed = Math.min(th.parityMaxErr, growth);
  return { allowed, regressed: !(err <= allowed) };
}

// ---------------------------------------------------------------------------------------------
// Comparison (pure)

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

const _fmtErr = (x: number) => (Number.isFinite(x) ? x.toExponential(1) : String(x));
const _fmtRatio = (x: number | null) =>
  x === null ? "–" : x >= 10 ? x.toFixed(1) : x >= 0.1 ? x.toFixed(2) : x.toPrecision(2);

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
  const sameAdapter = current.adapter.slug === baseline.adapter.slug &&
    current.adapter.timeSource === baseline.adapter.timeSource;
  const notes: string[] = [];
  if (!sameAdapter) {
    notes.push(
      `baseline measured on another adapter (${baseline.adapter.description}; this is ` +
        `${current.adapter.description}): memory and parity are gated, time ratios and absolute ` +
        `times are shown but not compared`,
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
            baseline: baseErr === undefined ? "–" : _fmtErr(baseErr),
            current: _fmtErr(err),
            detail: `${arr} error above ${_fmtErr(v.allowed)} (` +
              (v.allowed === th.parityMaxErr
                ? `the limit ${_fmtErr(th.parityMaxErr)}`
                : `${th.parityGrowth}× baseline + ${_fmtErr(th.parityFloor)}`) +
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
      const what = `median ${_fmtRatio(v.q)}× the baseline ratio; ${v.exceed}/${v.rounds} ` +
        `rounds above ${th.timeSignBar}× (sign test p = ${v.p.toPrecision(2)})`;
      if (v.regressed) {
        if (sameAdapter) timeRegressed.push({ key, mode });
        add({
          mode,
          check: "time",
          status: sameAdapter ? "fail" : "info",
          baseline: _fmtRatio(bm.timeRatio),
          current: _fmtRatio(cm.timeRatio),
          detail: sameAdapter ? what : `${what}; not gated (other adapter)`,
        });
      } else if (v.improved) {
        add({
          mode,
          check: "time",
          status: "better",
          baseline: _fmtRatio(bm.timeRatio),
          current: _fmtRatio(cm.timeRatio),
          detail: `median ${_fmtRatio(v.q)}× the baseline ratio (faster)`,
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
      `note: the yardstick took ${_fmtRatio(c.machineSpeed)}× its baseline time ` +
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
    Number.isNaN(s.worstParity) ? "–" : _fmtErr(s.worstParity),
    Number.isNaN(s.medianQ) ? "–" : `${_fmtRatio(s.medianQ)}×`,
    Number.isNaN(s.worstQ) ? "–" : `${_fmtRatio(s.worstQ)}×`,
    Number.isNaN(s.medianAbs) ? "–" : `${_fmtRatio(s.medianAbs)}×`,
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
        _fmtErr(th.parityFloor)
      }).`,
  );
  out.push(
    c.passed
      ? `gate: passed (${c.summary.reduce((a, s) => a + s.results, 0)} results)`
      : `gate: FAILED (${fails.length} regressions)`,
  );
  return out.join("\n");
}

// ---------------------------------------------------------------------------------------------
// Measurement (GPU)

/** Where the gate's times come from on a context (see {@link GateAdapter.timeSource}). */
export function gateTimeSource(ctx: GpuContext): TimeSource {
  return ctx.report.isFallbackAdapter ? "cpu" : ctx.hasTimestamps ? "gpu" : "wall";
}

/** Milliseconds of CPU time (user + system) this process has used, every thread included. */
function _cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/**
 * Runs `record` (which records into the Recorder it is given) and returns its time in the
 * source's unit: the Recorder's GPU time, its wall time, or the process's CPU time from before
 * the recording to the completion of the work.
 */
async function _timed(
  ctx: GpuContext,
  source: TimeSource,
  record: (rec: Recorder) => Promise<void>,
): Promise<number> {
  const c0 = _cpuMs();
  const rec = new Recorder(ctx);
  await record(rec);
  const t = await rec.finish();
  const cpu = _cpuMs() - c0;
  return source === "cpu" ? cpu : source === "gpu" ? t.gpuMs : t.wallMs;
}

/** Options of {@link measureCase}. */
export interface MeasureCaseOptions {
  methods: readonly LceMethod[];
  betas: readonly number[];
  modes: readonly Mode[];
  rounds: number;
  /** Progress (one line per method and β). */
  onResult?: (r: GateResult, ms: number) => void;
  /** Method × β pairs already measured (a resumed run): not measured again. */
  skip?: (method: string, beta: number) => boolean;
}

/** Calls per yardstick sample (their median). */
export const YARDSTICK_CALLS = 3;
/**
 * Calls per sample of a mode faster than the yardstick: ⌈yardstick / mode⌉ (their median), at
 * most this many, so that a short call is not at the mercy of one hiccup.
 */
export const MAX_CALLS_PER_SAMPLE = 5;

/** Numbers to 4 significant digits (smaller baseline files, no false precision). */
const _round4 = (x: number) => Number(x.toPrecision(4));

/** The inputs of a case on the GPU, its yardstick, and the time source. */
interface _CaseData {
  c: GateCase;
  x: HostInputs;
  inputs: MethodInputs;
  source: TimeSource;
  /** One timed yardstick call. */
  yardstick: () => Promise<number>;
}

/**
 * Measures every method at every β on one case: parity (once), memory and failures
 * ({@link measureMethod}, one repetition of every mode, which also compiles and warms up), then
 * `rounds` timed rounds interleaved with the yardstick after a warm-up round.
 */
export async function measureCase(
  ctx: GpuContext,
  c: GateCase,
  o: MeasureCaseOptions,
): Promise<GateResult[]> {
  const x = makeFixture(c.fixture, { n: c.n, v: c.v, d: c.d, dtype: c.dtype, seed: GATE_SEED });
  const tile = defaultTile(ctx);
  const mm = await prepareMatmul(ctx, {
    tile,
    aDtype: c.dtype,
    bDtype: c.dtype,
    aTrans: false,
    bTrans: false,
  });
  const source = gateTimeSource(ctx);
  const inputs = uploadInputs(ctx, x, c.dtype);
  const yardOut = createTensor(ctx, {
    dtype: "f32",
    rows: c.n,
    cols: c.v,
    role: "workspace",
    label: "yardstick logits",
  });
  const data: _CaseData = {
    c,
    x,
    inputs,
    source,
    yardstick: () =>
      _timed(ctx, source, (rec) => {
        mm.record(rec, {
          a: { tensor: inputs.e, trans: false },
          b: { tensor: inputs.c, trans: false },
          out: yardOut,
          tile,
          label: "yardstick E·Cᵀ",
        });
        return Promise.resolve();
      }),
  };
  const results: GateResult[] = [];
  try {
    await data.yardstick(); // warm-up
    for (const beta of o.betas) {
      const opts = resolveOptions({ beta });
      const want = lceReference(x, opts, _GRAD_OUTPUT);
      const gradOut = uploadGradOut(ctx, c.n, opts, _GRAD_OUTPUT);
      try {
        for (const method of o.methods) {
          if (o.skip?.(method.name, beta)) continue;
          const t0 = performance.now();
          const r = await _measureMethod(ctx, method, data, { opts, want, gradOut }, o);
          results.push(r);
          o.onResult?.(r, performance.now() - t0);
        }
      } finally {
        gradOut.destroy();
      }
    }
  } finally {
    yardOut.destroy();
    for (const t of [inputs.e, inputs.c, inputs.targets]) t.destroy();
  }
  return results;
}

async function _measureMethod(
  ctx: GpuContext,
  method: LceMethod,
  data: _CaseData,
  b: { opts: LceOptions; want: LceReferenceResult; gradOut: DeviceTensor },
  o: MeasureCaseOptions,
): Promise<GateResult> {
  const { c } = data;
  const result: GateResult = {
    fixture: c.fixture,
    n: c.n,
    v: c.v,
    d: c.d,
    dtype: c.dtype,
    method: method.name,
    beta: b.opts.beta,
    parity: null,
    yardstickMs: null,
    modes: {},
  };
  const spec = { n: c.n, v: c.v, d: c.d, dtype: c.dtype };
  let why: string | undefined;
  try {
    why = method.unsupported?.(ctx, spec, b.opts);
  } catch (e) {
    why = oneLine(e);
  }
  if (why !== undefined) {
    result.error = `unsupported: ${why}`;
    return result;
  }
  try {
    const got = await runMethod(ctx, method, data.x, b.opts, {
      dtype: c.dtype,
      gradOutput: _GRAD_OUTPUT,
    });
    result.parity = {
      loss: _parityError(got.loss, b.want.loss),
      dE: _parityError(got.dE, b.want.dE),
      dC: _parityError(got.dC, b.want.dC),
    };
  } catch (e) {
    result.error = oneLine(e);
    return result;
  }
  const rows = await measureMethod(ctx, method, {
    spec,
    opts: b.opts,
    inputs: data.inputs,
    gradOut: b.gradOut,
    modes: o.modes,
    warmup: 0,
    reps: 1,
  });
  const timed = rows.filter((r) => r.error === undefined).map((r) => r.mode);
  const times = new Map<Mode, number[]>(timed.map((m) => [m, []]));
  const yards: number[] = [];
  if (timed.length > 0) {
    let prepared: PreparedMethod | undefined;
    try {
      prepared = await ctx.scoped(() => method.prepare(ctx, spec, b.opts));
      const p = prepared;
      const call = (mode: Mode) =>
        ctx.scoped(() => _timeMode(ctx, data.source, p, data.inputs, b.gradOut, mode));
      // one yardstick sample: the median of YARDSTICK_CALLS calls (one slow call is one outlier)
      const yard = async () => {
        const ys: number[] = [];
        for (let k = 0; k < YARDSTICK_CALLS; k++) ys.push(await data.yardstick());
        return median(ys);
      };
      // warm-up; a mode faster than the yardstick is sampled as the median of several calls
      const reps = new Map<Mode, number>();
      for (const mode of timed) reps.set(mode, await call(mode));
      yards.push(await yard());
      for (const [mode, t] of reps) {
        reps.set(mode, Math.min(MAX_CALLS_PER_SAMPLE, Math.max(1, Math.ceil(yards[0] / t))));
      }
      for (let i = 0; i < o.rounds; i++) {
        for (const mode of timed) {
          const ts: number[] = [];
          for (let k = 0; k < reps.get(mode)!; k++) ts.push(await call(mode));
          times.get(mode)!.push(median(ts));
        }
        yards.push(await yard());
      }
    } catch (e) {
      result.error = `timing failed: ${oneLine(e)}`;
      return result;
    } finally {
      prepared?.release?.();
    }
    result.yardstickMs = _round4(median(yards));
  }
  for (const row of rows) {
    if (row.error !== undefined) {
      result.modes[row.mode] = {
        peakBytes: null,
        timeRatio: null,
        ratios: [],
        timeMs: null,
        error: row.error,
      };
      continue;
    }
    const ts = times.get(row.mode)!;
    const ratios = ts.map((t, i) => _round4(t / ((yards[i] + yards[i + 1]) / 2)));
    result.modes[row.mode] = {
      peakBytes: row.peakBytes,
      timeRatio: _round4(median(ratios)),
      ratios,
      timeMs: _round4(median(ts)),
    };
  }
  return result;
}

/**
 * One timed call of a mode (fwd: the forward; bwd: the backward of a forward recorded and
 * finished before, untimed; fwd+bwd: both in one Recorder), everything it returned freed after.
 */
async function _timeMode(
  ctx: GpuContext,
  source: TimeSource,
  p: PreparedMethod,
  x: MethodInputs,
  gradOut: DeviceTensor,
  mode: Mode,
): Promise<number> {
  let f: ForwardOutput | undefined;
  let g: Gradients | undefined;
  try {
    if (mode === "bwd") {
      const rec = new Recorder(ctx);
      f = await p.forward(rec, x);
      await rec.finish();
    }
    return await _timed(ctx, source, async (rec) => {
      if (mode !== "bwd") f = await p.forward(rec, x);
      if (mode !== "fwd") g = await p.backward(rec, x, f!.saved, gradOut);
    });
  } finally {
    g?.dE.destroy();
    g?.dC.destroy();
    if (f) {
      p.dispose(f.saved);
      f.loss.destroy();
    }
  }
}

/** max |got − want| / max |want| (over 1 when want is all zero); Infinity for NaN or lengths. */
function _parityError(got: ArrayLike<number>, want: ArrayLike<number>): number {
  if (got.length !== want.length) return Infinity;
  let scale = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]));
  const r = compareArrays(got, want, { atol: 0, rtol: 0 });
  const e = r.maxAbsErr / (scale || 1);
  return Number.isNaN(e) ? Infinity : Number(e.toPrecision(3));
}

/** Options of {@link runGate}. */
export interface RunGateOptions {
  suite: GateSuite;
  /** Methods to measure (default: the registry's, in order). */
  methods: readonly LceMethod[];
  /** Timed rounds (default: the suite's). */
  rounds?: number;
  /** The adapter description and environment to record. */
  adapter: GateAdapter;
  env: GateRun["env"];
  /** The baseline to compare with; none for a plain measurement (--update). */
  baseline?: GateRun;
  /** Only some methods of the registry are measured. */
  partial?: boolean;
  thresholds?: GateThresholds;
  /** Progress lines. */
  onProgress?: (line: string) => void;
  /** Called after every measured result with the results so far (e.g. to save a partial run). */
  onResult?: (results: readonly GateResult[]) => void;
  /** Results of an interrupted run (the same suite): kept, and not measured again. */
  done?: readonly GateResult[];
}

/** A gate run, its comparison with the baseline, and what was measured again. */
export interface GateOutcome {
  run: GateRun;
  comparison?: GateComparison;
  /** Results and modes measured again because their time regressed on the first pass. */
  rerun: { key: string; mode: Mode }[];
}

/**
 * Measures the suite; with a baseline, compares, then measures every method whose time regressed
 * once more and compares again with the fresh rounds in place of the flagged modes' first ones: a
 * slowdown fails only when both measurements show it.
 */
export async function runGate(ctx: GpuContext, o: RunGateOptions): Promise<GateOutcome> {
  const rounds = o.rounds ?? o.suite.rounds;
  const results: GateResult[] = [...(o.done ?? [])];
  const doneKeys = new Set(results.map(resultKey));
  const total = o.suite.cases.length * o.suite.betas.length * o.methods.length;
  const progress = (prefix: string) => (r: GateResult, ms: number) => {
    const modes = Object.entries(r.modes).map(([m, x]) =>
      x.error !== undefined ? `${m} failed` : `${m} ${x.peakBytes} B ×${_fmtRatio(x.timeRatio)}`
    );
    const what = r.error ??
      `parity ${_fmtErr(Math.max(r.parity!.loss, r.parity!.dE, r.parity!.dC))}; ${
        modes.join(", ")
      }`;
    o.onProgress?.(`${prefix}${resultKey(r)}: ${what} (${(ms / 1000).toFixed(1)} s)`);
  };
  for (const c of o.suite.cases) {
    const skip = (method: string, beta: number) => doneKeys.has(resultKey({ ...c, method, beta }));
    if (o.methods.every((m) => o.suite.betas.every((b) => skip(m.name, b)))) continue;
    await measureCase(ctx, c, {
      methods: o.methods,
      betas: o.suite.betas,
      modes: o.suite.modes,
      rounds,
      skip,
      onResult: (r, ms) => {
        results.push(r);
        o.onResult?.(results); // saved before it is announced
        progress(`[${results.length}/${total}] `)(r, ms);
      },
    });
  }
  // the suite's order, whatever was resumed
  const rank = new Map<string, number>();
  for (const c of o.suite.cases) {
    for (const beta of o.suite.betas) {
      for (const m of o.methods) rank.set(resultKey({ ...c, method: m.name, beta }), rank.size);
    }
  }
  results.sort((a, b) =>
    (rank.get(resultKey(a)) ?? Infinity) - (rank.get(resultKey(b)) ?? Infinity)
  );
  const run: GateRun = {
    version: 1,
    suite: o.suite.name,
    adapter: o.adapter,
    env: o.env,
    rounds,
    thresholds: o.thresholds ?? GATE_THRESHOLDS,
    results,
  };
  if (!o.baseline) return { run, rerun: [] };
  const cmp = (r: GateRun) =>
    compareRuns(r, o.baseline!, { thresholds: o.thresholds, partial: o.partial });
  let comparison = cmp(run);
  const rerun = comparison.timeRegressed;
  for (const key of new Set(rerun.map((x) => x.key))) {
    const i = run.results.findIndex((r) => resultKey(r) === key);
    const r = run.results[i];
    const method = o.methods.find((m) => m.name === r.method)!;
    const modes = rerun.filter((x) => x.key === key).map((x) => x.mode);
    o.onProgress?.(`time regressed: measuring ${key} (${modes.join(", ")}) again`);
    const [again] = await measureCase(ctx, r, {
      methods: [method],
      betas: [r.beta],
      modes: o.suite.modes,
      rounds,
      onResult: progress("re-run: "),
    });
    const merged: GateResult = { ...r, modes: { ...r.modes } };
    for (const mode of modes) {
      const a = again.modes[mode];
      if (a && a.error === undefined) {
        merged.modes[mode] = {
          ...merged.modes[mode]!,
          ratios: a.ratios,
          timeRatio: a.timeRatio,
          timeMs: a.timeMs,
        };
      }
    }
    run.results[i] = merged;
  }
  if (rerun.length) comparison = cmp(run);
  return { run, comparison, rerun };
}
