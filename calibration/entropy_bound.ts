/**
 * The LM-head entropy lower bound (the paper's Theorem 4.2, as reconstructed here) and a direct
 * numerical minimisation of the softmax entropy that checks it.
 *
 * Source: the text of Theorem 4.2 of Huang, Lu & Zeng, "Calibrated Language Models and How to
 * Find Them with Label Smoothing" (ICML 2025, arXiv 2508.00264) was not reachable from this
 * project (only its abstract and a third-party summary, which names ρ = σ_C·σ_h and the logit
 * bound σ_C·σ_h·√D). What follows is therefore a RECONSTRUCTION, not the paper's verbatim
 * statement; it keeps the paper's ingredients (a norm bound ρ, hidden size D, vocabulary |V|) and
 * is proved below.
 *
 * Setting. Logits z = W h with W ∈ ℝ^{|V|×D} (rows w_v: the token embeddings of the LM head) and
 * a hidden state h ∈ ℝ^D. Assumptions: every row has ‖w_v‖₂ ≤ σ_W, and the hidden state has RMS
 * at most σ_h, i.e. ‖h‖₂ ≤ σ_h·√D (what an RMSNorm/LayerNorm with gains ≤ σ_h produces). Write
 * ρ = σ_W·σ_h.
 *
 * Theorem (reconstruction). Let a = ρ·√D. Then every logit satisfies |z_v| ≤ a, and
 *
 *   H(softmax(W h)) ≥ B(a, |V|) := min_{1≤k≤|V|} H_k(2a),
 *   H_k(g) = log k + log(1 + q) + g·q/(1 + q),   q = ((|V| − k)/k)·e^{−g},
 *
 * where H_k(g) is the entropy of k logits at +a and |V| − k at −a (gap g = 2a). For large a the
 * minimum is at k = 1 (one confident token: B = log(1 + (|V|−1)e^{−2a}) + 2a·q/(1+q) with
 * q = (|V|−1)e^{−2a}); for small a it is near k = |V|/2 (a half/half split has the largest logit
 * variance, and H ≈ log|V| − Var(z)/2), so the minimum over k is taken explicitly.
 *
 * Proof. |z_v| = |w_v·h| ≤ ‖w_v‖‖h‖ ≤ σ_W·σ_h√D = a (Cauchy–Schwarz). Along one coordinate z_i
 * with the others fixed, ∂H/∂z_i = −p_i·f with f = z_i − E_p[z], and ∂f/∂z_i = 1 − p_i(f + 1),
 * which is 1 − p_i > 0 wherever f = 0; so f changes sign at most once, from − to +, and H rises
 * then falls along the coordinate: its minimum over [−a, a] is at an endpoint. Moving the
 * coordinates to endpoints one at a time never increases H, so the minimum over the box
 * [−a, a]^{|V|} is at a vertex (k logits at +a, the rest at −a), whose entropy is H_k(2a). ∎
 *
 * Properties: B = log|V| at ρ = 0; B decreases strictly in ρ and in D (a grows) and tends to 0;
 * B increases with |V|. The bound is attained (tight over the class) by W with w_v = σ_W·u for
 * the k minimising tokens and w_v = −σ_W·u for the rest, and h = σ_h√D·u, for any unit u and any
 * D ≥ 1. Note what it does NOT
 * use: the rank of W (≤ D) plays no role here; D enters only through the RMS normalisation of h,
 * so the bound says a small hidden size caps how confident a normalised LM head can become.
 * @module
 */
import { check } from "../core/errors.ts";
import { Rng } from "../fixtures/rng.ts";

/** Options of {@link twoLevelEntropy}. */
export interface TwoLevelOptions {
  /** Vocabulary size |V| ≥ 1. */
  vocabSize: number;
  /** Tokens at the upper level, 1 ≤ k ≤ |V|. */
  topCount: number;
  /** Logit gap g ≥ 0 between the two levels. */
  gap: number;
}

/**
 * Entropy (nats) of softmax of k logits at g and |V| − k at 0:
 * log k + log(1+q) + g·q/(1+q) with q = ((|V|−k)/k)·e^{−g} (stable for any g ≥ 0).
 */
export function twoLevelEntropy(o: TwoLevelOptions): number {
  const { vocabSize: v, topCount: k, gap: g } = o;
  if (k >= v) return Math.log(v);
  const q = Math.exp(Math.log(v - k) - Math.log(k) - g);
  const tail = q === 0 ? 0 : g * (q / (1 + q));
  return Math.log(k) + Math.log1p(q) + tail;
}

/** Options of {@link boxMinEntropy}. */
export interface BoxOptions {
  /** Bound a ≥ 0 on every |z_v|. */
  logitBound: number;
  /** Vocabulary size |V| ≥ 1. */
  vocabSize: number;
}

/** The minimum entropy over the logit box and where it is attained. */
export interface BoxMinEntropy {
  /** min over |z_v| ≤ a of H(softmax(z)), in nats. */
  entropy: number;
  /** Number k of logits at +a in the minimising vertex. */
  topCount: number;
}

/**
 * Exact minimum of the softmax entropy over the box |z_v| ≤ a: the best vertex, min over k of
 * {@link twoLevelEntropy} with gap 2a (see the module proof). Stops early once log k exceeds the
 * best value, since H_k ≥ log k.
 */
export function boxMinEntropy(o: BoxOptions): BoxMinEntropy {
  const { logitBound: a, vocabSize: v } = o;
  _checkVocab(v);
  check(a >= 0 && a < Infinity, `logitBound must be finite and ≥ 0, got ${a}`);
  let best = twoLevelEntropy({ vocabSize: v, topCount: 1, gap: 2 * a });
  let arg = 1;
  for (let k = 2; k <= v && Math.log(k) < best; k++) {
    const h = twoLevelEntropy({ vocabSize: v, topCount: k, gap: 2 * a });
    if (h < best) {
      best = h;
      arg = k;
    }
  }
  return { entropy: best, topCount: arg };
}

/** Parameters of the theorem. */
export interface EntropyBoundOptions {
  /** ρ = σ_W·σ_h ≥ 0: bound on row norms of W times bound on the RMS of h. */
  rho: number;
  /** Hidden size D ≥ 1. */
  hiddenSize: number;
  /** Vocabulary size |V| ≥ 1. */
  vocabSize: number;
}

/** The theorem's lower bound B(ρ√D, |V|) on the LM-head output entropy, in nats. */
export function entropyLowerBound(o: EntropyBoundOptions): number {
  check(o.rho >= 0 && o.rho < Infinity, `rho must be finite and ≥ 0, got ${o.rho}`);
  check(
    Number.isInteger(o.hiddenSize) && o.hiddenSize >= 1,
    `hiddenSize must be a positive integer, got ${o.hiddenSize}`,
  );
  return boxMinEntropy({ logitBound: o.rho * Math.sqrt(o.hiddenSize), vocabSize: o.vocabSize })
    .entropy;
}

/**
 * Normalised entropy gap (log|V| − B)/log|V| ∈ [0, 1] of Figure 4: 0 when the head cannot move
 * away from uniform, 1 when it can become fully confident. Needs |V| ≥ 2.
 */
export function normalizedEntropyGap(o: EntropyBoundOptions): number {
  check(o.vocabSize >= 2, `vocabSize must be ≥ 2 for a normalised gap, got ${o.vocabSize}`);
  const logV = Math.log(o.vocabSize);
  return (logV - entropyLowerBound(o)) / logV;
}

/** Options of {@link randomClassifier}. */
export interface RandomClassifierOptions {
  /** Rows |V|. */
  vocabSize: number;
  /** Columns D. */
  hiddenSize: number;
  /** PRNG seed (default 1). */
  seed?: number;
  /** Norm of every row (default 1). */
  rowNorm?: number;
}

/** A |V|×D row-major matrix whose rows are uniform random directions of norm rowNorm. */
export function randomClassifier(o: RandomClassifierOptions): Float64Array {
  const { vocabSize: v, hiddenSize: d } = o;
  _checkVocab(v);
  check(Number.isInteger(d) && d >= 1, `hiddenSize must be a positive integer, got ${d}`);
  const rand = _gaussian(o.seed ?? 1);
  const w = new Float64Array(v * d);
  const norm = o.rowNorm ?? 1;
  for (let r = 0; r < v; r++) {
    const row = w.subarray(r * d, (r + 1) * d);
    _randomUnit(row, rand);
    for (let j = 0; j < d; j++) row[j] *= norm;
  }
  return w;
}

/** Options of {@link minimizeEntropy}. */
export interface MinimizeEntropyOptions {
  /** Row-major |V|×D classifier W (default: {@link randomClassifier} with unit rows and seed). */
  weights?: ArrayLike<number>;
  /** |V|. */
  vocabSize: number;
  /** D. */
  hiddenSize: number;
  /** Radius r of the ball ‖h‖₂ ≤ r searched (in the theorem's terms r = σ_h·√D). */
  hiddenNorm: number;
  /** Random starting points on the sphere ‖h‖ = r (default 8). */
  restarts?: number;
  /** Also start from h = r·w_v/‖w_v‖ for every token v (default true when |V| ≤ 512). */
  tokenStarts?: boolean;
  /** Maximum projected-gradient steps per start (default 2000). */
  steps?: number;
  /** Seed of the random classifier and starting points (default 1). */
  seed?: number;
}

/** Result of {@link minimizeEntropy}. */
export interface MinimizeEntropyResult {
  /** Smallest entropy found, in nats. */
  entropy: number;
  /** The hidden state attaining it. */
  hidden: Float64Array;
  /** The classifier used (row-major |V|×D). */
  weights: Float64Array;
  /** a = r·max_v ‖w_v‖: the logit bound the theorem uses for this W and r. */
  logitBound: number;
  /** The theorem's bound for this W and r, B(a, |V|) ≤ entropy. */
  bound: number;
  /** Starting points tried. */
  starts: number;
  /** Accepted steps over all starts. */
  iterations: number;
}

/**
 * Minimises H(softmax(W h)) over the ball ‖h‖₂ ≤ r by projected gradient descent with
 * backtracking (Armijo) steps from several starts, in float64. Meant for small |V| and D (cost
 * O(|V|·D) per step) to check the bound: `bound ≤ entropy` must hold, and `entropy − bound`
 * shows how tight the bound is for this W.
 */
export function minimizeEntropy(o: MinimizeEntropyOptions): MinimizeEntropyResult {
  const { vocabSize: v, hiddenSize: d, hiddenNorm: r } = o;
  _checkVocab(v);
  check(Number.isInteger(d) && d >= 1, `hiddenSize must be a positive integer, got ${d}`);
  check(r >= 0 && r < Infinity, `hiddenNorm must be finite and ≥ 0, got ${r}`);
  const seed = o.seed ?? 1;
  const w = o.weights === undefined
    ? randomClassifier({ vocabSize: v, hiddenSize: d, seed })
    : Float64Array.from(o.weights);
  check(w.length === v * d, `weights has ${w.length} values, expected ${v}×${d}`);
  let maxRow = 0;
  for (let i = 0; i < v; i++) maxRow = Math.max(maxRow, _norm(w.subarray(i * d, (i + 1) * d)));
  const logitBound = r * maxRow;
  const bound = boxMinEntropy({ logitBound, vocabSize: v }).entropy;

  const starts: Float64Array[] = [];
  if (o.tokenStarts ?? v <= 512) {
    for (let i = 0; i < v; i++) {
      const row = w.subarray(i * d, (i + 1) * d);
      const n = _norm(row);
      if (n > 0) starts.push(row.map((x) => (x / n) * r));
    }
  }
  const rand = _gaussian(seed ^ 0x5bd1e995);
  for (let s = 0; s < (o.restarts ?? 8); s++) {
    const h = new Float64Array(d);
    _randomUnit(h, rand);
    for (let j = 0; j < d; j++) h[j] *= r;
    starts.push(h);
  }
  if (starts.length === 0) starts.push(new Float64Array(d));

  const ws = new _Workspace(v, d);
  let best = Infinity;
  let bestH: Float64Array = new Float64Array(d);
  let iterations = 0;
  for (const h0 of starts) {
    const run = _descend(w, v, d, r, h0, o.steps ?? 2000, ws);
    iterations += run.iterations;
    if (run.entropy < best) {
      best = run.entropy;
      bestH = run.hidden;
    }
  }
  return {
    entropy: best,
    hidden: bestH,
    weights: w,
    logitBound,
    bound,
    starts: starts.length,
    iterations,
  };
}

class _Workspace {
  z: Float64Array;
  g: Float64Array;
  grad: Float64Array;
  cand: Float64Array;
  constructor(v: number, d: number) {
    this.z = new Float64Array(v);
    this.g = new Float64Array(v);
    this.grad = new Float64Array(d);
    this.cand = new Float64Array(d);
  }
}

/** Entropy at h; when `grad` is given, also ∂H/∂h = Wᵀ(−p ⊙ (z − E_p z)). */
function _entropyAt(
  w: Float64Array,
  v: number,
  d: number,
  h: Float64Array,
  ws: _Workspace,
  grad?: Float64Array,
): number {
  const { z, g } = ws;
  let max = -Infinity;
  for (let i = 0; i < v; i++) {
    let s = 0;
    const o = i * d;
    for (let j = 0; j < d; j++) s += w[o + j] * h[j];
    z[i] = s;
    if (s > max) max = s;
  }
  let sum = 0;
  for (let i = 0; i < v; i++) sum += Math.exp(z[i] - max);
  const lse = max + Math.log(sum);
  let mean = 0;
  let entropy = 0;
  for (let i = 0; i < v; i++) {
    const p = Math.exp(z[i] - lse);
    g[i] = p;
    mean += p * z[i];
    entropy += p * (lse - z[i]);
  }
  if (grad) {
    grad.fill(0);
    for (let i = 0; i < v; i++) {
      const gi = -g[i] * (z[i] - mean);
      if (gi === 0) continue;
      const o = i * d;
      for (let j = 0; j < d; j++) grad[j] += gi * w[o + j];
    }
  }
  return entropy;
}

function _descend(
  w: Float64Array,
  v: number,
  d: number,
  r: number,
  h0: Float64Array,
  steps: number,
  ws: _Workspace,
): { entropy: number; hidden: Float64Array; iterations: number } {
  const h = Float64Array.from(h0);
  _project(h, r);
  const { grad, cand } = ws;
  let f = _entropyAt(w, v, d, h, ws, grad);
  let eta = 1;
  let it = 0;
  for (; it < steps; it++) {
    let accepted = false;
    let moved = 0;
    for (let tries = 0; tries < 60; tries++) {
      for (let j = 0; j < d; j++) cand[j] = h[j] - eta * grad[j];
      _project(cand, r);
      moved = 0;
      for (let j = 0; j < d; j++) moved += (cand[j] - h[j]) ** 2;
      const fc = _entropyAt(w, v, d, cand, ws);
      if (fc <= f - (1e-4 / eta) * moved) {
        h.set(cand);
        f = _entropyAt(w, v, d, h, ws, grad);
        eta *= 2;
        accepted = true;
        break;
      }
      eta *= 0.5;
    }
    if (!accepted || Math.sqrt(moved) <= 1e-13 * Math.max(r, 1e-300)) break;
  }
  return { entropy: f, hidden: h, iterations: it };
}

function _project(h: Float64Array, r: number): void {
  const n = _norm(h);
  if (n > r) {
    const s = n > 0 ? r / n : 0;
    for (let j = 0; j < h.length; j++) h[j] *= s;
  }
}

function _norm(x: ArrayLike<number>): number {
  let s = 0;
  for (let j = 0; j < x.length; j++) s += x[j] * x[j];
  return Math.sqrt(s);
}

function _checkVocab(v: number): void {
  check(Number.isInteger(v) && v >= 1, `vocabSize must be a positive integer, got ${v}`);
}

/** Fills x with a uniform random unit vector. */
function _randomUnit(x: Float64Array, rand: () => number): void {
  let n = 0;
  while (n === 0) {
    for (let j = 0; j < x.length; j++) x[j] = rand();
    n = _norm(x);
  }
  for (let j = 0; j < x.length; j++) x[j] /= n;
}

/** Standard normal samples from a seeded {@link Rng} stream (Box–Muller). */
function _gaussian(seed: number): () => number {
  const rng = new Rng(seed);
  return () => rng.normal();
}
