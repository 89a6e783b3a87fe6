/**
 * "torch.compile-style (fused materialised)" row: what torch.compile makes of
 * cross_entropy(E @ C.T, …) on 16-bit inputs. The matmul stays a library GEMM whose n×|V| output
 * is stored once in the input dtype; the softmax statistics and the loss are one fused pass over
 * it (row_softmax_stats reads the 16-bit logits); the backward is one fused pass that forms the
 * gradient of the logits from the stored logits and writes it in the input dtype (logit_grad16),
 * followed by the two products, which read that 16-bit gradient. For f32 inputs everything is f32.
 * With a 16-bit gradient dE is formed transposed, dEᵀ = Cᵀ·Gᵀ into a d×n f32 scratch, then
 * transposed into dE (kernels/transpose.ts): that layout pair runs at the plain product's rate on
 * an H100, G·C 7% below it (methods/_common.ts).
 *
 * Memory (bytes, element width b = 2 for bf16/f16, 4 for f32): forward n·|V|·b + LSE, loss rows,
 * count and loss; backward n·|V|·b (the gradient) + dE (n·d·4) + dC (|V|·d·4) + row weights (n·4),
 * + the dEᵀ scratch (n·d·4) with a 16-bit gradient.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { createTensor, type DeviceTensor } from "../gpu/tensor.ts";
import type { Recorder } from "../gpu/recorder.ts";
import { GpuError } from "../core/errors.ts";
import { type PreparedMatmul, rowView } from "../kernels/matmul.ts";
import { type PreparedTranspose, prepareTranspose, transposeFits } from "../kernels/transpose.ts";
import { prepareRowSoftmaxStats } from "../kernels/row_softmax_stats.ts";
import { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { prepareRowWeights } from "../kernels/row_weights.ts";
import { prepareLogitGrad } from "../kernels/logit_grad.ts";
import { prepareLogitGrad16 } from "../kernels/logit_grad16.ts";
import { gradientOutputs } from "../kernels/gradient_outputs.ts";
import type { LceMethod, ProblemSpec } from "./types.ts";
import {
  estimateSlack,
  prepareLceProducts,
  recordLossFromLogits,
  vector,
  vectorBytes,
} from "./_common.ts";

function _unsupported(ctx: GpuContext, spec: ProblemSpec): string | undefined {
  if (spec.dtype === "f16" && !ctx.hasF16) return "the adapter has no shader-f16";
  // a 16-bit gradient's dE is transposed into place (an f32 one is not)
  if (spec.dtype !== "f32" && !transposeFits(spec.d, spec.n)) {
    return `n = ${spec.n} tokens is past the dE transpose's grid`;
  }
  return undefined;
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
    const transposedDE = ldt !== "f32";
    const { logits: logitsMm, dE: dEMm, dC: dCMm } = await prepareLceProducts(ctx, {
      dtype: ldt,
      logitsDtype: ldt,
      gradDtype: ldt,
      dE: transposedDE ? "transposed" : undefined,
    });
    const transpose = transposedDE ? await prepareTranspose(ctx) : undefined;
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
        if (transposedDE) {
          _recordTransposedDE(rec, { ctx, spec, dEMm, transpose: transpose!, g, c: x.c, dE });
        } else {
          dEMm.record(rec, {
            a: { view: rowView(g), trans: false },
            b: { view: rowView(x.c), trans: true },
            out: rowView(dE),
            label: "dE = G·C",
          });
        }
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
      estimateBytes() {
        // the module's formula, each tensor rounded, plus what it leaves out
        const b = ldt === "f32" ? 4 : 2;
        const nv = spec.n * spec.v * b, vec = vectorBytes(spec.n);
        const grads = (spec.n + spec.v) * spec.d * 4;
        const slack = estimateSlack(ctx);
        const fwd = nv + 2 * vec + 2 * vectorBytes(1) + vectorBytes(spec.n) + slack;
        const bwd = vec + nv + grads + (transposedDE ? spec.d * spec.n * 4 : 0) + slack;
        return { fwd, bwd, "fwd+bwd": fwd + bwd };
      },
    };
  },
};

/** dEᵀ = Cᵀ·Gᵀ into a d×n f32 scratch, then dE = (dEᵀ)ᵀ; the scratch is released after. */
function _recordTransposedDE(
  rec: Recorder,
  o: {
    ctx: GpuContext;
    spec: ProblemSpec;
    dEMm: PreparedMatmul;
    transpose: PreparedTranspose;
    g: DeviceTensor;
    c: DeviceTensor;
    dE: DeviceTensor;
  },
): void {
  const dET = createTensor(o.ctx, {
    dtype: "f32",
    rows: o.spec.d,
    cols: o.spec.n,
    role: "workspace",
    label: "dEᵀ",
  });
  o.dEMm.record(rec, {
    a: { view: rowView(o.c), trans: true },
    b: { view: rowView(o.g), trans: false },
    out: rowView(dET),
    label: "dEᵀ = Cᵀ·Gᵀ",
  });
  o.transpose.record(rec, { src: dET, dst: o.dE, label: "dE = (dEᵀ)ᵀ" });
  for (const s of dET.shards) rec.release(s.buffer);
}
