/**
 * `baseline-tc`: the materialised baseline (methods/baseline.ts) with its three products on
 * tensor cores (kernels/tc/tc_matmul.ts): logits = E·Cᵀ, dE = G·C, dC = Gᵀ·E, f32 accumulation
 * and f32 logits and gradients; the row statistics, loss and G are the FMA baseline's kernels.
 *
 * Precision of the gradient products: G (f32) rounded to f16 would carry a relative error of
 * 2⁻¹² per element, which moves dE and dC by up to 2⁻¹²·Σ|G||C| — past the parity tolerance
 * (2·10⁻⁵ of the largest element) wherever the gradient is a small difference of larger terms
 * (β = 1, flat softmax). So G is split: G·2^s = hi + lo with hi its leading 11 significant bits and
 * lo = G·2^s − hi rounded to f16, both multiplied (about 22 significant bits, twice the products'
 * multiplies), with one power-of-two scale 2^s for all of G (from its largest |value|,
 * kernels/tc/tc_scale.ts) so that hi sits in f16's normal range; E and C (bf16 or f16) convert
 * exactly after their own scales.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { createTensor } from "../gpu/tensor.ts";
import { prepareRowSoftmaxStats } from "../kernels/row_softmax_stats.ts";
import { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { prepareRowWeights } from "../kernels/row_weights.ts";
import { prepareLogitGrad } from "../kernels/logit_grad.ts";
import { gradientOutputs } from "../kernels/gradient_outputs.ts";
import type { TcMode } from "../kernels/tc/tc_codegen.ts";
import { prepareTcMatmul } from "../kernels/tc/tc_matmul.ts";
import { prepareTcScales } from "../kernels/tc/tc_scale.ts";
import { BASELINE_TC_TILES, type TcTile } from "../kernels/tc/tc_tiles.ts";
import type { LceMethod, PreparedMethod, ProblemSpec } from "./types.ts";
import type { LceOptions } from "../core/options.ts";
import {
  ESTIMATE_SLACK_BYTES,
  estimateSlack,
  recordLossFromLogits,
  vector,
  vectorBytes,
} from "./_common.ts";
import { TC_ARITHMETIC, tcUnsupported } from "./fused_tc.ts";

/** The emulation's tiles (software adapters: 32 KiB of workgroup memory). */
const EMULATED_TILE: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };

/** Scale slots: E, C, G. */
const SE = 0, SC = 1, SG = 2;

/** The baseline on tensor cores (natively, or emulated for tests). */
export function baselineTcMethod(o: { name: string; mode?: TcMode }): LceMethod {
  const mode = o.mode ?? "native";
  return {
    name: o.name,
    label: "Baseline (tensor cores)",
    description: `f32 logits and their gradient materialised, three products on ${TC_ARITHMETIC} ` +
      "(G as hi and lo f16 parts)",
    arithmetic: mode === "native"
      ? `${TC_ARITHMETIC}; G split hi/lo`
      : "tensor cores emulated in fp32 FMA (WGSL)",
    unsupported: (ctx: GpuContext, spec) => tcUnsupported(ctx, spec, mode),
    estimateBytes: (spec, opts) => _estimate(spec, opts, ESTIMATE_SLACK_BYTES),
    prepare: (ctx, spec, opts) => _prepare(ctx, spec, opts, mode),
  };
}

/** The registered row. */
export const baselineTc: LceMethod = baselineTcMethod({ name: "baseline-tc" });

/** The three products (the gradient ones with G split), one after the other. */
async function _products(ctx: GpuContext, dt: "bf16" | "f16", mode: TcMode) {
  const tiles = mode === "native"
    ? BASELINE_TC_TILES
    : { logits: EMULATED_TILE, split: EMULATED_TILE };
  const logitsMm = await prepareTcMatmul(ctx, {
    tile: tiles.logits,
    aDtype: dt,
    bDtype: dt,
    aTrans: false,
    bTrans: false,
    mode,
  });
  const g = { tile: tiles.split, aDtype: "f32", bDtype: dt, split: true, mode } as const;
  const dEMm = await prepareTcMatmul(ctx, { ...g, aTrans: false, bTrans: true });
  const dCMm = await prepareTcMatmul(ctx, { ...g, aTrans: true, bTrans: true });
  return { logitsMm, dEMm, dCMm };
}

async function _prepare(
  ctx: GpuContext,
  spec: ProblemSpec,
  opts: LceOptions,
  mode: TcMode,
): Promise<PreparedMethod> {
  const { logitsMm, dEMm, dCMm } = await _products(
    ctx,
    spec.dtype === "f16" ? "f16" : "bf16",
    mode,
  );
  const scales = await prepareTcScales(ctx);
  const stats = await prepareRowSoftmaxStats(ctx, { logitsDtype: "f32", opts, v: spec.v });
  const reduce = await prepareLossReduce(ctx, opts);
  const weights = await prepareRowWeights(ctx, opts);
  const grad = await prepareLogitGrad(ctx, {
    logitsDtype: "f32",
    opts,
    v: spec.v,
    inPlace: false,
  });
  return {
    forward(rec, x) {
      const logits = createTensor(ctx, {
        dtype: "f32",
        rows: spec.n,
        cols: spec.v,
        role: "workspace",
        label: "logits",
      });
      const sc = scales.allocate(ctx);
      scales.record(rec, { tensors: [x.e, x.c], first: SE, into: sc });
      logitsMm.record(rec, {
        a: { tensor: x.e, trans: false },
        b: { tensor: x.c, trans: false },
        out: logits,
        scales: { buffer: sc.scales, a: SE, b: SC },
        label: "logits = E·Cᵀ (tensor cores)",
      });
      const out = recordLossFromLogits(ctx, rec, {
        stats,
        reduce,
        logits,
        targets: x.targets,
        opts,
      });
      return Promise.resolve({ loss: out.loss, saved: { ...out.saved, sc } });
    },
    backward(rec, x, saved, gradOut) {
      const w = vector(ctx, spec.n, "workspace", "row weights");
      weights.record(rec, { gradOut, targets: x.targets, count: saved.count, w });
      const g = createTensor(ctx, {
        dtype: "f32",
        rows: spec.n,
        cols: spec.v,
        role: "workspace",
        label: "dlogits",
      });
      grad.record(rec, {
        logits: saved.logits,
        targets: x.targets,
        lse: saved.lse,
        w,
        grad: g,
      });
      const sc = saved.sc;
      scales.record(rec, { tensors: [g], first: SG, into: sc });
      const { dE, dC } = gradientOutputs(ctx, spec);
      dEMm.record(rec, {
        a: { tensor: g, trans: false },
        b: { tensor: x.c, trans: true },
        out: dE,
        scales: { buffer: sc.scales, a: SG, b: SC },
        label: "dE = G·C (tensor cores, G split)",
      });
      dCMm.record(rec, {
        a: { tensor: g, trans: true },
        b: { tensor: x.e, trans: true },
        out: dC,
        scales: { buffer: sc.scales, a: SG, b: SE },
        label: "dC = Gᵀ·E (tensor cores, G split)",
      });
      for (const s of g.shards) rec.release(s.buffer);
      rec.release(w.shards[0].buffer);
      return Promise.resolve({ dE, dC });
    },
    dispose(saved) {
      for (const t of saved.tensors) t.destroy();
      saved.sc.scales.destroy();
      saved.sc.maxBits.destroy();
    },
    // split-K partials of the products: at most TC_SPLITK_MAX_BYTES each (estimateSlack's)
    estimateBytes: () => _estimate(spec, opts, estimateSlack(ctx)),
    stats: () =>
      Promise.resolve({ gradDtype: "f32", arithmetic: `${TC_ARITHMETIC}; G split hi/lo` }),
    release() {
      for (const m of [logitsMm, dEMm, dCMm]) m.release();
    },
  };
}

/**
 * Bytes a call allocates: the f32 logits (and G in the backward), the gradients, the per-token
 * vectors; the slack covers parameter blocks, shard rounding, E's, C's and G's scales and the
 * products' split-K partials.
 */
function _estimate(spec: ProblemSpec, opts: LceOptions, slack: number) {
  const logits = spec.n * spec.v * 4, grads = (spec.n + spec.v) * spec.d * 4;
  const small = vectorBytes(spec.n) * 4 + vectorBytes(opts.reduction === "none" ? spec.n : 1);
  return {
    fwd: logits + small + slack,
    bwd: logits + grads + small + slack,
    "fwd+bwd": 2 * logits + grads + small + 2 * slack,
  };
}
