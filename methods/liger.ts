/**
 * "Liger Kernels" row: Liger-Kernel's fused linear cross-entropy
 * (liger_kernel/ops/fused_linear_cross_entropy.py). Tokens go in chunks of
 * {@link ligerChunkSize} rows; one chunk buffer of logits is allocated once and reused by every
 * chunk. Per chunk, inside the forward: logits = E[chunk]·Cᵀ, the loss rows and LSE
 * (row_softmax_stats), the gradient of the logits written in place over them (logit_grad), then
 * dE[chunk] = G·C and dC += Gᵀ·E[chunk]. The gradients carry a unit upstream gradient (1/count
 * for mean: Liger counts the non-ignored targets first); the backward only multiplies the stored dE
 * and dC by the scalar upstream gradient, in place (element_mul_kernel), and hands them over as
 * its result, so one forward serves one backward.
 *
 * Reduction none: the upstream gradient is a vector, and dC = Σ_n g_n·G_nᵀE_n cannot be rescaled
 * once summed. Liger versions before the deferred path multiplied both gradients by grad_output[0]
 * (element_mul_kernel loads one scalar), which is wrong unless the vector is uniform; current Liger
 * computes only the loss in the forward and recomputes the chunk loop in the backward with g_n
 * folded into each row of G. This row does the latter.
 *
 * Deviations, to fit this project's contract: the chunk's logits are f32 (Liger computes them in
 * the input dtype and writes the gradient over them in that dtype), and dE, dC are f32 (Liger's
 * accumulate in the parameter dtype unless accum_dtype is set).
 *
 * The chunk products run on the GEMM core (kernels/matmul.ts); the skinny dE[chunk] = G·C (c×d
 * output, K = |V|) splits K to fill the GPU, with one partials workspace reused by every chunk
 * (counted in the peak; none on a software adapter).
 *
 * Memory (bytes), chunk c = ligerChunkSize(n, |V|, d): mean/sum forward c·|V|·4 + dE (n·d·4) +
 * dC (|V|·d·4) + row weights, LSE, loss rows (3·n·4) + count and loss; backward nothing new (the
 * stored gradients are its output). None: forward c·|V|·4 + LSE, loss rows + count + the n losses;
 * backward c·|V|·4 + dE + dC + row weights, LSE, loss rows.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { createTensor, type DeviceTensor } from "../gpu/tensor.ts";
import type { Recorder } from "../gpu/recorder.ts";
import { GpuError } from "../core/errors.ts";
import { rowView } from "../kernels/matmul.ts";
import { prepareChunkGrad, prepareChunkStats, rowPrefix } from "../kernels/chunk_rows.ts";
import { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { prepareRowWeights } from "../kernels/row_weights.ts";
import { prepareUnitRowWeights } from "../kernels/unit_row_weights.ts";
import { prepareScaleByScalar } from "../kernels/scale_by_scalar.ts";
import { gradientOutputs } from "../kernels/gradient_outputs.ts";
import type { LceMethod, MethodInputs, ProblemSpec } from "./types.ts";
import { lossTensor, prepareLceProducts, vector } from "./_common.ts";

/** The smallest power of two ≥ x (triton.next_power_of_2). */
function _nextPow2(x: number): number {
  let p = 1;
  while (p < x) p *= 2;
  return p;
}

/**
 * Liger's chunk size: the transient logits are bounded by about n·d elements, so with
 * inc = ⌈|V| / d⌉ the chunk is next_pow2(⌈n / inc⌉) tokens, at most n.
 */
export function ligerChunkSize(n: number, v: number, d: number): number {
  const inc = Math.ceil(v / d);
  return Math.min(_nextPow2(Math.ceil(n / inc)), n);
}

function _unsupported(ctx: GpuContext, spec: ProblemSpec): string | undefined {
  return spec.dtype === "f16" && !ctx.hasF16 ? "the adapter has no shader-f16" : undefined;
}

/** Liger-Kernel's fused linear cross-entropy. */
export const liger: LceMethod = {
  name: "liger",
  label: "Liger Kernels",
  description: "token chunks of f32 logits in one reused buffer; loss, gradient in place and " +
    "both products per chunk inside the forward; the backward scales the stored gradients",
  unsupported: (ctx, spec) => _unsupported(ctx, spec),
  async prepare(ctx, spec, opts) {
    const why = _unsupported(ctx, spec);
    if (why) throw new GpuError("limits", `liger: ${why}`);
    const dt = spec.dtype;
    const chunk = ligerChunkSize(spec.n, spec.v, spec.d);
    const deferred = opts.reduction === "none";
    const { logits: logitsMm, dE: dEMm, dC: dCMm } = await prepareLceProducts(ctx, {
      dtype: dt,
      gradDtype: "f32",
    });
    const stats = await prepareChunkStats(ctx, { logitsDtype: "f32", opts, v: spec.v });
    const grad = await prepareChunkGrad(ctx, {
      logitsDtype: "f32",
      opts,
      v: spec.v,
      inPlace: true,
    });
    const reduce = await prepareLossReduce(ctx, opts);
    const unitWeights = deferred ? undefined : await prepareUnitRowWeights(ctx, opts);
    const weights = deferred ? await prepareRowWeights(ctx, opts) : undefined;
    const scale = deferred ? undefined : await prepareScaleByScalar(ctx);

    /** The chunk loop: loss rows and LSE, and with `grads` the gradients weighted by `w`. */
    const chunkLoop = (
      rec: Recorder,
      x: MethodInputs,
      v: { lse: DeviceTensor; lossRows: DeviceTensor },
      grads?: { w: DeviceTensor; dE: DeviceTensor; dC: DeviceTensor },
    ) => {
      const buf = createTensor(ctx, {
        dtype: "f32",
        rows: chunk,
        cols: spec.v,
        role: "workspace",
        label: "logits chunk",
      });
      // one split-K workspace for the chunk products (they run one after the other)
      const splitBytes = Math.max(
        logitsMm.workspaceBytes({ m: chunk, n: spec.v, k: spec.d }),
        grads ? dEMm.workspaceBytes({ m: chunk, n: spec.d, k: spec.v }) : 0,
        grads ? dCMm.workspaceBytes({ m: spec.v, n: spec.d, k: chunk }) : 0,
      );
      const workspace = splitBytes > 0
        ? ctx.createBuffer({ size: splitBytes, role: "workspace", label: "split-K partials" })
        : undefined;
      for (let lo = 0, k = 0; lo < spec.n; lo += chunk, k++) {
        const hi = Math.min(spec.n, lo + chunk);
        const z = rowPrefix(buf, hi - lo);
        logitsMm.record(rec, {
          a: { view: rowView(x.e, lo, hi), trans: false },
          b: { view: rowView(x.c), trans: false },
          out: rowView(z),
          label: `logits[chunk ${k}] = E[chunk]·Cᵀ`,
          workspace,
        });
        const rows = { logits: z, rowOffset: lo, targets: x.targets };
        stats.record(rec, { ...rows, lse: v.lse, lossRows: v.lossRows });
        if (!grads) continue;
        grad.record(rec, { ...rows, lse: v.lse, w: grads.w, grad: z });
        dEMm.record(rec, {
          a: { view: rowView(z), trans: false },
          b: { view: rowView(x.c), trans: true },
          out: rowView(grads.dE, lo, hi),
          label: `dE[chunk ${k}] = G·C`,
          workspace,
        });
        dCMm.record(rec, {
          a: { view: rowView(z), trans: true },
          b: { view: rowView(x.e, lo, hi), trans: true },
          out: rowView(grads.dC),
          accumulate: k > 0,
          label: `dC += Gᵀ·E[chunk ${k}]`,
          workspace,
        });
      }
      for (const s of buf.shards) rec.release(s.buffer);
      rec.release(workspace);
    };
    const gradTensors = () => gradientOutputs(ctx, spec);
    const perToken = () => ({
      lse: vector(ctx, spec.n, "workspace", "lse"),
      lossRows: vector(ctx, spec.n, "workspace", "loss rows"),
    });

    return {
      forward(rec, x) {
        const count = vector(ctx, 1, "workspace", "count");
        const v = perToken();
        let saved;
        if (deferred) {
          chunkLoop(rec, x, v);
          saved = { tensors: [count], count };
        } else {
          const w = vector(ctx, spec.n, "workspace", "row weights");
          unitWeights!.record(rec, { targets: x.targets, w, count });
          const g = gradTensors();
          chunkLoop(rec, x, v, { w, ...g });
          rec.release(w.shards[0].buffer);
          saved = { tensors: [g.dE, g.dC, count], ...g, count, consumed: false };
        }
        const loss = lossTensor(ctx, spec.n, opts);
        reduce.record(rec, { lossRows: v.lossRows, targets: x.targets, loss, count });
        rec.release(v.lse.shards[0].buffer, v.lossRows.shards[0].buffer);
        return Promise.resolve({ loss, saved });
      },
      backward(rec, x, saved, gradOut) {
        if (deferred) {
          const w = vector(ctx, spec.n, "workspace", "row weights");
          weights!.record(rec, { gradOut, targets: x.targets, count: saved.count, w });
          const v = perToken();
          const g = gradTensors();
          chunkLoop(rec, x, v, { w, ...g });
          rec.release(w.shards[0].buffer, v.lse.shards[0].buffer, v.lossRows.shards[0].buffer);
          return Promise.resolve(g);
        }
        if (saved.consumed) {
          return Promise.reject(
            new Error("liger: this forward's gradients were already scaled and handed over"),
          );
        }
        saved.consumed = true;
        scale!.record(rec, { x: saved.dE, scalar: gradOut });
        scale!.record(rec, { x: saved.dC, scalar: gradOut });
        return Promise.resolve({ dE: saved.dE, dC: saved.dC });
      },
      dispose(saved) {
        for (const t of saved.tensors) t.destroy();
      },
    };
  },
};
