/**
 * The gate's statistics (pure): the one-sided sign test over rounds and the verdicts on a mode's
 * time ratios and on a parity error (rules in measure/gate.ts's module documentation).
 * @module
 */
import { median } from "./timing.ts";
import { GATE_THRESHOLDS, type GateThresholds } from "./gate_suites.ts";

/** A parity error as text (`1.2e-3`). */
export const fmtErr = (x: number): string => Number.isFinite(x) ? x.toExponential(1) : String(x);
/** A time ratio as text, `–` for none. */
export const fmtRatio = (x: number | null): string =>
  x === null ? "–" : x >= 10 ? x.toFixed(1) : x >= 0.1 ? x.toFixed(2) : x.toPrecision(2);

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
