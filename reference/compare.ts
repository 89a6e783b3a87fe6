/**
 * Element-wise comparison of a result with a reference, numpy `allclose` style
 * (|got − want| ≤ atol + rtol·|want|), with a one-line description of the worst element so that
 * parity tests fail with a useful message. NaN or ±Inf in `got` where `want` is finite fails.
 * @module
 */
import { check } from "../core/errors.ts";

/** Tolerances of {@link compareArrays}. */
export interface Tolerance {
  /** Absolute tolerance. */
  atol: number;
  /** Relative tolerance (of |want|). */
  rtol: number;
}

/** Result of {@link compareArrays}. */
export interface CompareResult {
  /** max |got − want| (Infinity where a NaN/Inf mismatches). */
  maxAbsErr: number;
  /** max |got − want| / |want| over elements with want ≠ 0 (Infinity where a NaN/Inf mismatches). */
  maxRelErr: number;
  /** Index of the element furthest out of tolerance (relative to its allowance); −1 when empty. */
  worstIndex: number;
  /** Number of elements out of tolerance. */
  failures: number;
  /** Whether every element is within tolerance. */
  ok: boolean;
  /** The absolute tolerance used. */
  atol: number;
  /** The relative tolerance used. */
  rtol: number;
}

/** How far element i is out of tolerance: ≤ 1 within; Infinity for a NaN/Inf mismatch. */
function _excess(g: number, w: number, tol: Tolerance): number {
  if (Object.is(g, w) || g === w) return 0;
  if (Number.isNaN(g) && Number.isNaN(w)) return 0;
  if (!Number.isFinite(g) || !Number.isFinite(w)) return Infinity;
  const diff = Math.abs(g - w);
  const allowed = tol.atol + tol.rtol * Math.abs(w);
  return allowed > 0 ? diff / allowed : Infinity;
}

/**
 * Compares `got` with `want` element-wise: element i passes when
 * |got_i − want_i| ≤ atol + rtol·|want_i|. Equal values (including equal infinities, or NaN in
 * both) pass; NaN or ±Inf on one side only fails. Throws InputError on a length mismatch.
 */
export function compareArrays(
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  tol: Tolerance,
): CompareResult {
  check(
    got.length === want.length,
    `length mismatch: got ${got.length} values, want ${want.length}`,
  );
  check(tol.atol >= 0 && tol.rtol >= 0, `tolerances must be ≥ 0, got ${tol.atol}, ${tol.rtol}`);
  let maxAbsErr = 0, maxRelErr = 0, worstIndex = -1, worst = -1, failures = 0;
  for (let i = 0; i < got.length; i++) {
    const g = got[i], w = want[i];
    const ex = _excess(g, w, tol);
    if (ex > 1) failures++;
    if (ex > worst) {
      worst = ex;
      worstIndex = i;
    }
    if (ex === 0) continue;
    const diff = Number.isFinite(g) && Number.isFinite(w) ? Math.abs(g - w) : Infinity;
    if (diff > maxAbsErr) maxAbsErr = diff;
    if (w !== 0) {
      const rel = diff / Math.abs(w);
      if (rel > maxRelErr || Number.isNaN(rel)) maxRelErr = Number.isNaN(rel) ? Infinity : rel;
    }
  }
  return {
    maxAbsErr,
    maxRelErr,
    worstIndex,
    failures,
    ok: failures === 0,
    atol: tol.atol,
    rtol: tol.rtol,
  };
}

/** Options of {@link describeWorst}. */
export interface DescribeOptions {
  /** Name of the array in the message (default "array"). */
  name?: string;
  /** Row length, to report the worst element as (row, col) of a row-major matrix. */
  cols?: number;
}

function _fmt(x: number): string {
  return Number.isFinite(x) ? x.toPrecision(7) : String(x);
}

function _short(x: number): string {
  return Number.isFinite(x) && x !== 0 ? x.toExponential(2) : String(x);
}

/**
 * One line describing a comparison: its worst element (index, row/column when `cols` is given,
 * got, want, error) and how many elements failed, e.g.
 * `dE[13] (row 3, col 1): got 0.1234567, want 0.1235000, abs err 4.33e-5, rel err 3.51e-4
 * (atol 1.00e-6, rtol 1.00e-4); 7 of 12 out of tolerance; max abs err 4.33e-5, max rel err 3.51e-4`.
 */
export function describeWorst(
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  result: CompareResult,
  opts: DescribeOptions = {},
): string {
  const name = opts.name ?? "array";
  const i = result.worstIndex;
  const summary = `${result.failures} of ${want.length} out of tolerance; ` +
    `max abs err ${_short(result.maxAbsErr)}, max rel err ${_short(result.maxRelErr)}`;
  if (i < 0) return `${name}: empty; ${summary}`;
  const where = opts.cols ? ` (row ${Math.floor(i / opts.cols)}, col ${i % opts.cols})` : "";
  const g = got[i], w = want[i];
  const abs = Math.abs(g - w);
  const rel = w !== 0 ? abs / Math.abs(w) : NaN;
  return `${name}[${i}]${where}: got ${_fmt(g)}, want ${_fmt(w)}, abs err ${_short(abs)}, ` +
    `rel err ${_short(rel)} (atol ${_short(result.atol)}, rtol ${_short(result.rtol)}); ${summary}`;
}

/**
 * Throws an Error carrying {@link describeWorst}'s line unless `got` matches `want` within
 * `tol`; returns the comparison otherwise.
 */
export function assertClose(
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  tol: Tolerance & DescribeOptions,
): CompareResult {
  const r = compareArrays(got, want, tol);
  if (!r.ok) throw new Error(describeWorst(got, want, r, tol));
  return r;
}
