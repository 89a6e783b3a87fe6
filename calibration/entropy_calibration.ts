/**
 * Entropy calibration: does the model's predictive entropy match its log loss on the data?
 *
 * For a prediction p and a target y drawn from p itself, E_y[−log p_y] = H(p): a model whose
 * predictive distribution is right has, on average, a log loss (NLL) equal to its entropy. The
 * gap mean H − mean NLL (nats) is therefore a calibration measure on the whole distribution, not
 * only on the top-1 confidence: negative when the model is over-confident (it predicts less
 * uncertainty than its loss shows), positive when under-confident. The same gap per confidence
 * bin (the equal-width bins of {@link binIndex}) shows where it comes from.
 *
 * Under temperature scaling the gap is also the derivative of the mean NLL in log T: with logits
 * z/T, ∂NLL_n/∂log T = z_{n,t}/T − Σ_v p_nv·z_nv/T = H_n − NLL_n, so the NLL-optimal temperature
 * T* is where the mean gap is zero (calibration/temperature.ts uses this).
 *
 * Everything here is host arithmetic in float64 on per-token statistics (confidence, entropy,
 * NLL) that the fused forward streams (calibration/streaming.ts); no logits are involved.
 * @module
 */
import { check } from "../core/errors.ts";
import { binIndex, DEFAULT_BINS } from "./metrics.ts";

/** Per-token input of {@link entropyCalibration}: parallel arrays of the kept tokens. */
export interface EntropyCalibrationInput {
  /** Max softmax probability per token, in [0, 1] (selects the bin). */
  confidence: ArrayLike<number>;
  /** Predictive entropy per token in nats. */
  entropy: ArrayLike<number>;
  /** Negative log-likelihood of the target per token in nats (the β = 0 loss). */
  nll: ArrayLike<number>;
}

/** Entropy against NLL in one confidence bin (lo, hi]. */
export interface EntropyBin {
  /** Lower edge m/M. */
  lo: number;
  /** Upper edge (m+1)/M. */
  hi: number;
  /** Tokens in the bin. */
  count: number;
  /** Mean entropy in the bin, nats (NaN when empty). */
  entropy: number;
  /** Mean NLL in the bin, nats (NaN when empty). */
  nll: number;
  /** entropy − nll (NaN when empty): < 0 over-confident, > 0 under-confident. */
  gap: number;
}

/** What {@link entropyCalibration} returns. */
export interface EntropyCalibration {
  /** Tokens. */
  count: number;
  /** Mean predictive entropy, nats. */
  meanEntropy: number;
  /** Mean NLL, nats. */
  meanNll: number;
  /** meanEntropy − meanNll, nats: < 0 over-confident, > 0 under-confident. */
  gap: number;
  /** Per confidence bin, M entries in increasing confidence. */
  perBin: EntropyBin[];
}

/**
 * Mean entropy, mean NLL and their gap, overall and per equal-width confidence bin. Throws
 * InputError on empty input, mismatched lengths, a confidence outside [0, 1], a non-finite
 * entropy or NLL, or a bad bin count.
 */
export function entropyCalibration(
  input: EntropyCalibrationInput,
  opts: { bins?: number } = {},
): EntropyCalibration {
  const bins = opts.bins ?? DEFAULT_BINS;
  check(Number.isInteger(bins) && bins >= 1, `bins must be a positive integer, got ${bins}`);
  const n = input.confidence.length;
  check(n > 0, "entropy calibration needs at least one token");
  check(
    input.entropy.length === n && input.nll.length === n,
    `entropy (${input.entropy.length}) and nll (${input.nll.length}) need ${n} entries`,
  );
  const count = new Float64Array(bins), hSum = new Float64Array(bins);
  const lSum = new Float64Array(bins);
  let h = 0, l = 0;
  for (let i = 0; i < n; i++) {
    const c = input.confidence[i], hi = input.entropy[i], li = input.nll[i];
    check(c >= 0 && c <= 1, `confidence[${i}] must be in [0, 1], got ${c}`);
    check(Number.isFinite(hi) && Number.isFinite(li), `token ${i}: entropy ${hi}, nll ${li}`);
    const m = binIndex(c, bins);
    count[m]++;
    hSum[m] += hi;
    lSum[m] += li;
    h += hi;
    l += li;
  }
  const perBin: EntropyBin[] = [];
  for (let m = 0; m < bins; m++) {
    const k = count[m];
    const entropy = k > 0 ? hSum[m] / k : NaN, nll = k > 0 ? lSum[m] / k : NaN;
    perBin.push({ lo: m / bins, hi: (m + 1) / bins, count: k, entropy, nll, gap: entropy - nll });
  }
  return { count: n, meanEntropy: h / n, meanNll: l / n, gap: h / n - l / n, perBin };
}
