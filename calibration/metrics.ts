/**
 * Calibration metrics of next-token predictions: expected calibration error (ECE), RMS calibration
 * error, mean confidence, accuracy, mean entropy and the per-bin statistics of a reliability
 * diagram; plus the float64 per-token statistics from a row of logits (the CPU reference).
 *
 * Binning (equal width, M bins, as in Guo et al. 2017): bin m (0-based) is the right-closed
 * interval (m/M, (m+1)/M], compared against the double m/M exactly, so a confidence equal to an
 * inner edge goes to the lower bin. A confidence of exactly 1.0 falls in the last bin; a confidence
 * of exactly 0 (impossible for a softmax, whose maximum is ≥ 1/|V|) is put in the first bin.
 * @module
 */
import { check } from "../core/errors.ts";

/** Per-token statistics of one prediction. */
export interface TokenStats {
  /** Maximum softmax probability, exp(max z − LSE(z)). */
  confidence: number;
  /** Whether the argmax (first index of the maximum) equals the target. */
  correct: boolean;
  /** Entropy of softmax(z) in nats, LSE(z) − Σ p·z. */
  entropy: number;
}

/** Per-token statistics of many rows, as parallel arrays (the input of {@link calibrationMetrics}). */
export interface TokenStatsArrays {
  /** Maximum softmax probability per token. */
  confidence: Float64Array;
  /** 1 where the argmax equals the target, else 0. */
  correct: Uint8Array;
  /** Entropy per token in nats. */
  entropy: Float64Array;
}

/** Input of {@link calibrationMetrics}: one entry per token, all arrays of the same length. */
export interface CalibrationInput {
  /** Confidence (max softmax probability) per token, in [0, 1]. */
  confidence: ArrayLike<number>;
  /** Correctness per token: true/1 when the argmax equals the target. */
  correct: ArrayLike<number | boolean>;
  /** Entropy per token in nats (optional; mean entropy is NaN without it). */
  entropy?: ArrayLike<number>;
}

/** Options of {@link calibrationMetrics}. */
export interface CalibrationOptions {
  /** Number of equal-width confidence bins M (default 15). */
  bins?: number;
}

/** Statistics of one confidence bin (lo, hi]. */
export interface BinStats {
  /** Lower edge m/M (exclusive, except 0 for the first bin). */
  lo: number;
  /** Upper edge (m+1)/M (inclusive). */
  hi: number;
  /** Tokens in the bin. */
  count: number;
  /** Fraction of correct tokens in the bin (NaN when empty). */
  accuracy: number;
  /** Mean confidence in the bin (NaN when empty). */
  confidence: number;
}

/** Calibration summary of a set of tokens. */
export interface CalibrationReport {
  /** Number of tokens N. */
  count: number;
  /** Number of bins M. */
  bins: number;
  /** ECE = Σ_b |B_b|/N · |acc_b − conf_b|. */
  ece: number;
  /** RMS calibration error = sqrt(Σ_b |B_b|/N · (acc_b − conf_b)²). */
  rmsce: number;
  /** Mean confidence over all tokens. */
  meanConfidence: number;
  /** Fraction of correct tokens. */
  accuracy: number;
  /** Mean entropy in nats (NaN when no entropies were given). */
  meanEntropy: number;
  /** Per-bin statistics, M entries in increasing confidence. */
  perBin: BinStats[];
}

/** Default number of ECE bins. */
export const DEFAULT_BINS = 15;

/**
 * The 0-based bin of a confidence c ∈ [0, 1] among M equal-width right-closed bins
 * (m/M, (m+1)/M]; 0 goes to bin 0 and 1.0 to bin M − 1.
 */
export function binIndex(c: number, bins: number): number {
  let m = Math.ceil(c * bins) - 1;
  if (m < 0) return 0;
  if (m > bins - 1) m = bins - 1;
  // c·M can round across an edge: settle against the edges exactly as they are reported.
  if (m > 0 && c <= m / bins) m--;
  else if (m < bins - 1 && c > (m + 1) / bins) m++;
  return m;
}

/**
 * ECE, RMS calibration error, mean confidence, accuracy, mean entropy and per-bin statistics.
 * Throws InputError on empty input, mismatched lengths, a confidence outside [0, 1] (or NaN) or a
 * bad bin count.
 */
export function calibrationMetrics(
  input: CalibrationInput,
  opts: CalibrationOptions = {},
): CalibrationReport {
  const bins = opts.bins ?? DEFAULT_BINS;
  check(Number.isInteger(bins) && bins >= 1, `bins must be a positive integer, got ${bins}`);
  const n = input.confidence.length;
  check(n > 0, "calibration needs at least one token");
  check(
    input.correct.length === n,
    `correct has ${input.correct.length} entries, confidence has ${n}`,
  );
  check(
    input.entropy === undefined || input.entropy.length === n,
    `entropy has ${input.entropy?.length} entries, confidence has ${n}`,
  );
  const count = new Float64Array(bins);
  const hits = new Float64Array(bins);
  const confSum = new Float64Array(bins);
  let totalConf = 0;
  let totalHits = 0;
  for (let i = 0; i < n; i++) {
    const c = input.confidence[i];
    check(c >= 0 && c <= 1, `confidence[${i}] must be in [0, 1], got ${c}`);
    const m = binIndex(c, bins);
    const ok = input.correct[i] ? 1 : 0;
    count[m]++;
    hits[m] += ok;
    confSum[m] += c;
    totalConf += c;
    totalHits += ok;
  }
  let ece = 0;
  let sq = 0;
  const perBin: BinStats[] = [];
  for (let m = 0; m < bins; m++) {
    const k = count[m];
    const accuracy = k > 0 ? hits[m] / k : NaN;
    const confidence = k > 0 ? confSum[m] / k : NaN;
    if (k > 0) {
      const gap = accuracy - confidence;
      ece += (k / n) * Math.abs(gap);
      sq += (k / n) * gap * gap;
    }
    perBin.push({ lo: m / bins, hi: (m + 1) / bins, count: k, accuracy, confidence });
  }
  let meanEntropy = NaN;
  if (input.entropy !== undefined) {
    let s = 0;
    for (let i = 0; i < n; i++) s += input.entropy[i];
    meanEntropy = s / n;
  }
  return {
    count: n,
    bins,
    ece,
    rmsce: Math.sqrt(sq),
    meanConfidence: totalConf / n,
    accuracy: totalHits / n,
    meanEntropy,
    perBin,
  };
}

/**
 * Confidence, correctness and entropy of softmax(z) for one row of logits, in float64:
 * confidence = exp(max z − LSE), entropy = LSE − Σ p·z (computed as Σ p·(LSE − z), skipping
 * p = 0). The argmax is the first index of the maximum, as torch.argmax. −Infinity logits
 * (masked tokens) are allowed; NaN and +Infinity throw InputError, as does a target outside
 * [0, z.length).
 */
export function tokenStatsFromLogits(z: ArrayLike<number>, target: number): TokenStats {
  const v = z.length;
  check(v > 0, "logits row is empty");
  check(
    Number.isInteger(target) && target >= 0 && target < v,
    `target must be an integer in [0, ${v}), got ${target}`,
  );
  let max = -Infinity;
  let arg = 0;
  for (let i = 0; i < v; i++) {
    const x = z[i];
    check(!Number.isNaN(x) && x !== Infinity, `logit ${i} is ${x}`);
    if (x > max) {
      max = x;
      arg = i;
    }
  }
  check(max > -Infinity, "all logits are -Infinity");
  let sum = 0;
  for (let i = 0; i < v; i++) sum += Math.exp(z[i] - max);
  const lse = max + Math.log(sum);
  let entropy = 0;
  for (let i = 0; i < v; i++) {
    const p = Math.exp(z[i] - lse);
    if (p > 0) entropy += p * (lse - z[i]);
  }
  return { confidence: Math.exp(max - lse), correct: arg === target, entropy };
}

/** Options of {@link tokenStatsFromLogitRows}. */
export interface LogitRowsOptions {
  /** Rows whose target equals this are skipped (default −100, as PyTorch). */
  ignoreIndex?: number;
}

/**
 * {@link tokenStatsFromLogits} for every row of a row-major n×v logits matrix; rows whose target
 * is the ignore index are left out, so the arrays have one entry per kept row.
 */
export function tokenStatsFromLogitRows(
  logits: ArrayLike<number>,
  vocabSize: number,
  targets: ArrayLike<number>,
  opts: LogitRowsOptions = {},
): TokenStatsArrays {
  const ignore = opts.ignoreIndex ?? -100;
  check(
    Number.isInteger(vocabSize) && vocabSize > 0,
    `vocabSize must be a positive integer, got ${vocabSize}`,
  );
  const n = targets.length;
  check(
    logits.length === n * vocabSize,
    `logits has ${logits.length} values, expected ${n}×${vocabSize}`,
  );
  let kept = 0;
  for (let r = 0; r < n; r++) if (targets[r] !== ignore) kept++;
  const out: TokenStatsArrays = {
    confidence: new Float64Array(kept),
    correct: new Uint8Array(kept),
    entropy: new Float64Array(kept),
  };
  const row = new Float64Array(vocabSize);
  let k = 0;
  for (let r = 0; r < n; r++) {
    if (targets[r] === ignore) continue;
    for (let j = 0; j < vocabSize; j++) row[j] = logits[r * vocabSize + j];
    const s = tokenStatsFromLogits(row, targets[r]);
    out.confidence[k] = s.confidence;
    out.correct[k] = s.correct ? 1 : 0;
    out.entropy[k] = s.entropy;
    k++;
  }
  return out;
}
