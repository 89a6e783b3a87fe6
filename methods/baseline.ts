/**
 * "Baseline" row: the analogue of torch.nn.CrossEntropyLoss on `logits.float()`. The forward
 * materialises the n×|V| f32 logits (E·Cᵀ), reduces each row to its log-sum-exp and loss, and keeps
 * the logits for the backward; the backward materialises the n×|V| gradient of the logits and then
 * multiplies: dE = G·C, dC = Gᵀ·E.
 * @module
 */
import { createTensor } from "../gpu/tensor.ts";
import { prepareRowSoftmaxStats } from "../kernels/row_softmax_stats.ts";
import { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { prepareRowWeights } from "../kernels/row_weights.ts";
import { prepareLogitGrad } from "../kernels/logit_grad.ts";
import { gradientOutputs } from "../kernels/gradient_outputs.ts";
import type { LceMethod, ProblemSpec } from "./types.ts";
import type { LceOptions } from "../core/options.ts";
import {
  ESTIMATE_SLACK_BYTES,
  estimateSlack,
  prepareLceProducts,
  recordLossFromLogits,
  vector,
  vectorBytes,
} from "./_common.ts";

/** Label of the baseline forward's product pass: P, the plain product E·Cᵀ, in reports. */
export const BASELINE_PRODUCT_PASS = "logits = E·Cᵀ";

/**
 * K slices the backward's dE = G·C (f32 G, K = |V|) may take past the split rule's byte limit on
 * a GPU (kernels/matmul.ts, autoSplitK): each slice past the first costs n·d·4 bytes of partials
 * (72 MiB at the paper's shape), and at the paper's shape the rule's whole number of waves within
 * 12 slices ran fastest on an H100 (docs/performance.md).
 */
const BASELINE_DE_MAX_SLICES = 12;

/** The materialised baseline. */
export const baseline: LceMethod = {
  name: "baseline",
  label: "Baseline (materialised f32 logits)",
  description: "f32 logits and their gradient materialised in GPU memory, then two matrix products",
  estimateBytes: (spec, opts) => _estimate(spec, opts, ESTIMATE_SLACK_BYTES),
  async prepare(ctx, spec, opts) {
    const { logits: logitsMm, dE: dEMm, dC: dCMm } = await prepareLceProducts(ctx, {
      dtype: spec.dtype,
      gradDtype: "f32",
      dC: "long-k",
      dE: "all-rows",
      logits: "wide",
    });
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
        logitsMm.record(rec, {
          a: { tensor: x.e, trans: false },
          b: { tensor: x.c, trans: false },
          out: logits,
          label: BASELINE_PRODUCT_PASS,
        });
        return Promise.resolve(
          recordLossFromLogits(ctx, rec, { stats, reduce, logits, targets: x.targets, opts }),
        );
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
        grad.record(rec, { logits: saved.logits, targets: x.targets, lse: saved.lse, w, grad: g });
        const { dE, dC } = gradientOutputs(ctx, spec);
        dEMm.record(rec, {
          a: { tensor: g, trans: false },
          b: { tensor: x.c, trans: true },
          out: dE,
          maxSplitK: BASELINE_DE_MAX_SLICES,
          label: "dE = G·C",
        });
        dCMm.record(rec, {
          a: { tensor: g, trans: true },
          b: { tensor: x.e, trans: true },
          out: dC,
          label: "dC = Gᵀ·E",
        });
        for (const s of g.shards) rec.release(s.buffer);
        rec.release(w.shards[0].buffer);
        return Promise.resolve({ dE, dC });
      },
      dispose(saved) {
        for (const t of saved.tensors) t.destroy();
      },
      estimateBytes: () =>
        _estimate(
          spec,
          opts,
          estimateSlack(ctx, { upTo: BASELINE_DE_MAX_SLICES, upToBytes: spec.n * spec.d * 4 }),
        ),
    };
  },
};

/**
 * The memory of the baseline's calls: the f32 logits (and in the backward their gradient), the
 * f32 gradients, the per-token vectors, plus `slack` for what the formula leaves out.
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
