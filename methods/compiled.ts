/**
 * "torch.compile-style (fused materialised)" row: what torch.compile makes of
 * cross_entropy(E @ C.T, …) on 16-bit inputs. The matmul stays a library GEMM whose n×|V| output
 * is stored once in the input dtype; the softmax statistics and the loss are one fused pass over
 * it (row_softmax_stats reads the 16-bit logits); the backward is one fused pass that forms the
 * gradient of the logits from the stored logits and writes it in the input dtype (logit_grad16),
 * followed by the two products, which read that 16-bit gradient. For f32 inputs everything is f32.
 *
 * Memory (bytes, element width b = 2 for bf16/f16, 4 for f32): forward n·|V|·b + LSE, loss rows,
 * count and loss; backward n·|V|·b (the gradient) + dE (n·d·4) + dC (|V|·d·4) + row weights (n·4).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { createTensor } from "../gpu/tensor.ts";
import { GpuError } from "../core/errors.ts";
import { rowView } from "../kernels/matmul.ts";
import { prepareRowSoftmaxStats } from "../kernels/row_softmax_stats.ts";
import { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { prepareRowWeights } from "../kernels/row_weights.ts";
import { prepareLogitGrad } from "../kernels/logit_grad.ts";
import { prepareLogitGrad16 } from "../kernels/logit_grad16.ts";
import { gradientOutputs } from "../kernels/gradient_outputs.ts";
import type { LceMethod, ProblemSpec } from "./types.ts";
import { prepareLceProducts, recordLossFromLogits, vector } from "./_common.ts";

function _unsupported(ctx: GpuContext, spec: ProblemSpec): string | undefined {
  return spec.dtype === "f16" && !ctx.hasF16 ? "the adapter has no shader-f16" : undefined;
}

/** The torch.compile analogue. */
export const compiled: LceMethod = {
  name: "compiled",
  label: "torch.compile-style (fused materialised)",
  description: "logits stored once in the input dtype, a fused loss pass, a fused backward " +
    "writing the logits' gradient in the input dtype, then the two products",
  unsupported: (ctx, spec) => _unsupported(ctx, spec),
  async prepare(ctx, spec, opts) {
    const why = _unsupported(ctx, spec);
    if (why) throw new GpuError("limits", `compiled: ${why}`);
    const ldt = spec.dtype;
    const { logits: logitsMm, dE: dEMm, dC: dCMm } = await prepareLceProducts(ctx, {
      dtype: ldt,
      logitsDtype: ldt,
      gradDtype: ldt,
    });
    const stats = await prepareRowSoftmaxStats(ctx, { logitsDtype: ldt, opts, v: spec.v });
    const reduce = await prepareLossReduce(ctx, opts);
    const weights = await prepareRowWeights(ctx, opts);
    const grad16 = ldt === "f32"
      ? undefined
      : await prepareLogitGrad16(ctx, { logitsDtype: ldt, gradDtype: ldt, opts, v: spec.v });
    const grad32 = ldt === "f32"
      ? await prepareLogitGrad(ctx, { logitsDtype: "f32", opts, v: spec.v, inPlace: false })
      : undefined;
    const nByV = (label: string) =>
      createTensor(ctx, { dtype: ldt, rows: spec.n, cols: spec.v, role: "workspace", label });
    return {
      forward(rec, x) {
        const logits = nByV("logits");
        logitsMm.record(rec, {
          a: { view: rowView(x.e), trans: false },
          b: { view: rowView(x.c), trans: false },
          out: rowView(logits),
          label: "logits = E·Cᵀ",
        });
        return Promise.resolve(
          recordLossFromLogits(ctx, rec, { stats, reduce, logits, targets: x.targets, opts }),
        );
      },
      backward(rec, x, saved, gradOut) {
        const w = vector(ctx, spec.n, "workspace", "row weights");
        weights.record(rec, { gradOut, targets: x.targets, count: saved.count, w });
        const g = nByV("dlogits");
        const args = { logits: saved.logits, targets: x.targets, lse: saved.lse, w, grad: g };
        if (grad16) grad16.record(rec, args);
        else grad32!.record(rec, args);
        const { dE, dC } = gradientOutputs(ctx, spec);
        dEMm.record(rec, {
          a: { view: rowView(g), trans: false },
          b: { view: rowView(x.c), trans: true },
          out: rowView(dE),
          label: "dE = G·C",
        });
        dCMm.record(rec, {
          a: { view: rowView(g), trans: true },
          b: { view: rowView(x.e), trans: true },
          out: rowView(dC),
          label: "dC = Gᵀ·E",
        });
        for (const s of g.shards) rec.release(s.buffer);
        rec.release(w.shards[0].buffer);
        return Promise.resolve({ dE, dC });
      },
      dispose(saved) {
        for (const t of saved.tensors) t.destroy();
      },
    };
  },
};
