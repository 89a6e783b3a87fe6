/**
 * Streaming calibration statistics from the fused forward: ECE, RMS calibration error and the
 * reliability diagram's bins without the n×|V| logits.
 *
 * The fused forward (kernels/fused/forward.ts, prepared with `tokenStats`) walks the vocabulary in
 * tiles and keeps per token, besides the running (max, Σexp) pair of the LSE, the argmax (first
 * index of the max, as torch.argmax) and Σexp(z − max)·z. What comes back to the host is n×4 f32
 * values (max logit, argmax, Σ p·z, entropy) plus the n LSEs; the host forms, in float64,
 *
 * - confidence_n = exp(max_v z_nv − LSE_n) (clamped to [0, 1] against f32 rounding),
 * - correct_n = (argmax_n == t_n),
 * - entropy_n = LSE_n − Σ_v p_nv·z_nv (the kernel's value, clamped at 0),
 *
 * for every token whose target is not the ignore index, and bins them with
 * {@link calibrationMetrics}. GPU memory above the inputs is O(n·S) for S vocab splits: the
 * logits never exist. The softcap (when given) applies to the logits, so to every statistic; β
 * changes only the loss, which is returned beside the statistics.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { createTensor, download, poison } from "../gpu/tensor.ts";
import { check } from "../core/errors.ts";
import {
  checkInputs,
  type Dtype,
  type HostInputs,
  type LceOptions,
  resolveOptions,
} from "../core/options.ts";
import type { GemmTile } from "../kernels/gemm_codegen.ts";
import { prepareFusedForward } from "../kernels/fused/forward.ts";
import type { MethodInputs, ProblemSpec } from "../methods/types.ts";
import { uploadInputs } from "../methods/run.ts";
import { calibrationMetrics, type CalibrationReport, type TokenStatsArrays } from "./metrics.ts";

/** Per-token statistics of the kept (non-ignored) tokens, from the fused forward. */
export interface StreamingTokenStats extends TokenStatsArrays {
  /** Row of each kept token in the input (ascending). */
  rows: Int32Array;
  /** First index of the max logit (as computed in f32 on the GPU). */
  argmax: Int32Array;
  /** Max logit. */
  maxLogit: Float64Array;
  /** Log-sum-exp of the logits. */
  lse: Float64Array;
  /** Label-smoothed loss of each kept token, with the β of the options (the NLL when β = 0). */
  loss: Float64Array;
  /** Mean label-smoothed loss over the kept tokens, with the β of the options. */
  meanLoss: number;
}

/** Raw outputs of the fused forward for n tokens, as downloaded. */
export interface FusedTokenOutputs {
  /** n×4 f32: max logit, argmax, Σ p·z, entropy. */
  tokenStats: ArrayLike<number>;
  /** n LSEs. */
  lse: ArrayLike<number>;
  /** n loss rows (0 for ignored ones). */
  lossRows: ArrayLike<number>;
}

/**
 * Confidence, correctness and entropy of the kept tokens from the fused forward's raw outputs
 * (see the module documentation). Throws InputError on mismatched lengths or when every target
 * is the ignore index.
 */
export function tokenStatsFromFused(
  raw: FusedTokenOutputs,
  targets: ArrayLike<number>,
  ignoreIndex = -100,
): StreamingTokenStats {
  const n = targets.length;
  check(
    raw.tokenStats.length === 4 * n,
    `tokenStats has ${raw.tokenStats.length} values, not 4·${n}`,
  );
  check(raw.lse.length === n && raw.lossRows.length === n, `lse/lossRows must have ${n} values`);
  let kept = 0;
  for (let i = 0; i < n; i++) if (targets[i] !== ignoreIndex) kept++;
  check(kept > 0, `all ${n} targets are the ignore index ${ignoreIndex}`);
  const out: StreamingTokenStats = {
    rows: new Int32Array(kept),
    confidence: new Float64Array(kept),
    correct: new Uint8Array(kept),
    entropy: new Float64Array(kept),
    argmax: new Int32Array(kept),
    maxLogit: new Float64Array(kept),
    lse: new Float64Array(kept),
    loss: new Float64Array(kept),
    meanLoss: 0,
  };
  let k = 0, loss = 0;
  for (let i = 0; i < n; i++) {
    if (targets[i] === ignoreIndex) continue;
    const max = raw.tokenStats[4 * i], arg = raw.tokenStats[4 * i + 1];
    const h = raw.tokenStats[4 * i + 3], l = raw.lse[i];
    check(
      Number.isFinite(max) && Number.isFinite(l) && Number.isFinite(h) && Number.isFinite(arg) &&
        Number.isFinite(raw.lossRows[i]),
      `token ${i}: non-finite statistics (max ${max}, argmax ${arg}, lse ${l}, entropy ${h}, ` +
        `loss ${raw.lossRows[i]})`,
    );
    out.rows[k] = i;
    out.maxLogit[k] = max;
    out.lse[k] = l;
    out.argmax[k] = arg;
    out.confidence[k] = Math.min(1, Math.exp(max - l));
    out.correct[k] = arg === targets[i] ? 1 : 0;
    out.entropy[k] = Math.max(0, h);
    out.loss[k] = raw.lossRows[i];
    loss += raw.lossRows[i];
    k++;
  }
  out.meanLoss = loss / kept;
  return out;
}

/** Options of {@link prepareStreamingCalibration}. */
export interface StreamingCalibrationOptions {
  /** Shape and storage dtype of E and C. */
  spec: ProblemSpec;
  /** Loss options (β, softcap, ignore index; the reduction is not used). */
  opts: LceOptions;
  /** GEMM tile of the fused forward (default: its own). */
  tile?: GemmTile;
  /** Vocab splits of the fused forward (default: its own). */
  vocabSplits?: number;
}

/** A compiled streaming calibration pass for one problem shape. */
export interface PreparedStreamingCalibration {
  /**
   * Runs the fused forward with token statistics on inputs already on the GPU, downloads the n×4
   * statistics and the n LSEs and loss rows, and returns the kept tokens' statistics.
   * `hostTargets` are the targets as on the GPU (the host needs them to score correctness).
   */
  measure(x: MethodInputs, hostTargets: ArrayLike<number>): Promise<StreamingTokenStats>;
}

/** Compiles the fused forward with token statistics for a problem. */
export async function prepareStreamingCalibration(
  ctx: GpuContext,
  o: StreamingCalibrationOptions,
): Promise<PreparedStreamingCalibration> {
  const { spec } = o;
  const opts = resolveOptions({ ...o.opts, reduction: "none" });
  const ff = await prepareFusedForward(ctx, {
    spec,
    opts,
    tile: o.tile,
    vocabSplits: o.vocabSplits,
    tokenStats: true,
  });
  return {
    async measure(x, hostTargets) {
      check(hostTargets.length === spec.n, `${hostTargets.length} targets for n = ${spec.n}`);
      const vec = (cols: number, label: string) =>
        createTensor(ctx, { dtype: "f32", rows: spec.n, cols, role: "output", label });
      const lse = vec(1, "lse"), lossRows = vec(1, "loss rows"), stats = vec(4, "token stats");
      try {
        // NaN in every output first: a value the kernel fails to write cannot pass for a result
        for (const t of [lse, lossRows, stats]) poison(ctx, t);
        const raw = await ctx.scoped(async () => {
          const rec = new Recorder(ctx);
          ff.record(rec, { e: x.e, c: x.c, targets: x.targets, lse, lossRows, tokenStats: stats });
          await rec.finish();
          return {
            tokenStats: await download(ctx, stats),
            lse: await download(ctx, lse),
            lossRows: await download(ctx, lossRows),
          };
        });
        return tokenStatsFromFused(raw, hostTargets, opts.ignoreIndex);
      } finally {
        for (const t of [lse, lossRows, stats]) t.destroy();
      }
    },
  };
}

/** Options of {@link streamingCalibration}. */
export interface StreamingRunOptions {
  /** Storage dtype on the GPU (default f32; E and C are rounded to it on upload). */
  dtype?: Dtype;
  /** Label smoothing β (affects only the reported loss; default 0). */
  beta?: number;
  /** Softcap of the logits (default none). */
  softcap?: number;
  /** Ignore index (default −100). */
  ignoreIndex?: number;
  /** ECE bins M (default 15). */
  bins?: number;
  /** GEMM tile of the fused forward. */
  tile?: GemmTile;
  /** Vocab splits of the fused forward. */
  vocabSplits?: number;
}

/** What {@link streamingCalibration} returns. */
export interface StreamingCalibrationResult {
  /** ECE, RMSCE, accuracy, mean confidence and entropy, per-bin statistics. */
  report: CalibrationReport;
  /** The per-token statistics behind it. */
  tokens: StreamingTokenStats;
}

/**
 * Calibration of host inputs through the fused forward, end to end: validates, uploads, measures,
 * frees, and bins the kept tokens. Throws InputError on bad inputs or options.
 */
export async function streamingCalibration(
  ctx: GpuContext,
  x: HostInputs,
  o: StreamingRunOptions = {},
): Promise<StreamingCalibrationResult> {
  const opts = resolveOptions({
    beta: o.beta ?? 0,
    softcap: o.softcap,
    ignoreIndex: o.ignoreIndex ?? -100,
    reduction: "none",
  });
  checkInputs(x, { ...opts, reduction: "mean" });
  const dtype = o.dtype ?? "f32";
  const spec = { n: x.n, v: x.v, d: x.d, dtype };
  const prepared = await prepareStreamingCalibration(ctx, {
    spec,
    opts,
    tile: o.tile,
    vocabSplits: o.vocabSplits,
  });
  const inputs = uploadInputs(ctx, x, dtype);
  try {
    const tokens = await prepared.measure(inputs, x.targets);
    return { report: calibrationMetrics(tokens, { bins: o.bins }), tokens };
  } finally {
    for (const t of [inputs.e, inputs.c, inputs.targets]) t.destroy();
  }
}
