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
import {
  prepareChunkGrad,
  prepareChunkStats,
  type PreparedChunkGrad,
  type PreparedChunkStats,
  rowPrefix,
} from "../kernels/chunk_rows.ts";
import type { LceOptions } from "../core/options.ts";
import { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { prepareRowWeights } from "../kernels/row_weights.ts";
import { prepareUnitRowWeights } from "../kernels/unit_row_weights.ts";
import { prepareScaleByScalar } from "../kernels/scale_by_scalar.ts";
import { gradientOutputs } from "../kernels/gradient_outputs.ts";
import type { LceMethod, MethodInputs, ProblemSpec } from "./types.ts";
import {
  estimateSlack,
  type LceProducts,
  lossTensor,
  prepareLceProducts,
  vector,
  vectorBytes,
} from "./_common.ts";

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
  label: "Liger-style (WGSL)",
  description: "token chunks of f32 logits in one reused buffer; loss, gradient in place and " +
    "both products per chunk inside the forward; the backward scales the stored gradients",
  unsupported: (ctx, spec) => _unsupported(ctx, spec),
  async prepare(ctx, spec, opts) {
    const why = _unsupported(ctx, spec);
    if (why) throw new GpuError("limits", `liger: ${why}`);
    const k = await _compile(ctx, spec, opts);
    const deferred = opts.reduction === "none";
    return {
      forward(rec, x) {
        const count = vector(ctx, 1, "workspace", "count");
        const v = _perToken(k);
        let saved;
        if (deferred) {
          _chunkLoop(k, rec, x, v);
          saved = { tensors: [count], count };
        } else {
          const w = vector(ctx, spec.n, "workspace", "row weights");
          k.unitWeights!.record(rec, { targets: x.targets, w, count });
          const g = gradientOutputs(ctx, spec);
          _chunkLoop(k, rec, x, v, { w, ...g });
          rec.release(w.shards[0].buffer);
          saved = { tensors: [g.dE, g.dC, count], ...g, count, consumed: false };
        }
        const loss = lossTensor(ctx, spec.n, opts);
        k.reduce.record(rec, { lossRows: v.lossRows, targets: x.targets, loss, count });
        rec.release(v.lse.shards[0].buffer, v.lossRows.shards[0].buffer);
        return Promise.resolve({ loss, saved });
      },
      backward(rec, x, saved, gradOut) {
        if (deferred) {
          const w = vector(ctx, spec.n, "workspace", "row weights");
          k.weights!.record(rec, { gradOut, targets: x.targets, count: saved.count, w });
          const v = _perToken(k);
          const g = gradientOutputs(ctx, spec);
          _chunkLoop(k, rec, x, v, { w, ...g });
          rec.release(w.shards[0].buffer, v.lse.shards[0].buffer, v.lossRows.shards[0].buffer);
          return Promise.resolve(g);
        }
        if (saved.consumed) {
          return Promise.reject(
            new Error("liger: this forward's gradients were already scaled and handed over"),
          );
        }
        saved.consumed = true;
        k.scale!.record(rec, { x: saved.dE, scalar: gradOut });
        k.scale!.record(rec, { x: saved.dC, scalar: gradOut });
        return Promise.resolve({ dE: saved.dE, dC: saved.dC });
      },
      dispose(saved) {
        for (const t of saved.tensors) t.destroy();
      },
      estimateBytes() {
        // the module's formula, each tensor rounded, plus what it leaves out: one chunk of f32
        // logits, the f32 gradients, the per-token vectors
        const vec = vectorBytes(spec.n);
        const chunk = k.chunk * spec.v * 4, grads = (spec.n + spec.v) * spec.d * 4;
        const pass = chunk + grads + 3 * vec + 2 * vectorBytes(1) + estimateSlack(ctx);
        if (deferred) return { fwd: pass, bwd: pass, "fwd+bwd": 2 * pass - estimateSlack(ctx) };
        return { fwd: pass, bwd: grads + estimateSlack(ctx), "fwd+bwd": pass };
      },
    };
  },
};

/** The compiled kernels of the Liger row (the weights' kernels by reduction: see the module doc). */
interface _Liger {
  ctx: GpuContext;
  spec: ProblemSpec;
  chunk: number;
  products: LceProducts;
  stats: PreparedChunkStats;
  grad: PreparedChunkGrad;
  reduce: Awaited<ReturnType<typeof prepareLossReduce>>;
  unitWeights?: Awaited<ReturnType<typeof prepareUnitRowWeights>>;
  weights?: Awaited<ReturnType<typeof prepareRowWeights>>;
  scale?: Awaited<ReturnType<typeof prepareScaleByScalar>>;
}

async function _compile(ctx: GpuContext, spec: ProblemSpec, opts: LceOptions): Promise<_Liger> {
  const deferred = opts.reduction === "none";
  return {
    ctx,
    spec,
    chunk: ligerChunkSize(spec.n, spec.v, spec.d),
    // dE[chunk] = G·C sums over the whole vocabulary
    products: await prepareLceProducts(ctx, {
      dtype: spec.dtype,
      gradDtype: "f32",
      dE: "long-k",
      logits: "wide",
    }),
    stats: await prepareChunkStats(ctx, { logitsDtype: "f32", opts, v: spec.v }),
    grad: await prepareChunkGrad(ctx, { logitsDtype: "f32", opts, v: spec.v, inPlace: true }),
    reduce: await prepareLossReduce(ctx, opts),
    unitWeights: deferred ? undefined : await prepareUnitRowWeights(ctx, opts),
    weights: deferred ? await prepareRowWeights(ctx, opts) : undefined,
    scale: deferred ? undefined : await prepareScaleByScalar(ctx),
  };
}

/** Per-token LSE and loss rows of one chunk loop. */
function _perToken(k: _Liger): { lse: DeviceTensor; lossRows: DeviceTensor } {
  return {
    lse: vector(k.ctx, k.spec.n, "workspace", "lse"),
    lossRows: vector(k.ctx, k.spec.n, "workspace", "loss rows"),
  };
}

/** The chunk loop: loss rows and LSE, and with `grads` the gradients weighted by `w`. */
function _chunkLoop(
  k: _Liger,
  rec: Recorder,
  x: MethodInputs,
  v: { lse: DeviceTensor; lossRows: DeviceTensor },
  grads?: { w: DeviceTensor; dE: DeviceTensor; dC: DeviceTensor },
): void {
  const { ctx, spec, chunk } = k;
  const { logits: logitsMm, dE: dEMm, dC: dCMm } = k.products;
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
  for (let lo = 0, i = 0; lo < spec.n; lo += chunk, i++) {
    const hi = Math.min(spec.n, lo + chunk);
    const z = rowPrefix(buf, hi - lo);
    logitsMm.record(rec, {
      a: { view: rowView(x.e, lo, hi), trans: false },
      b: { view: rowView(x.c), trans: false },
      out: rowView(z),
      label: `logits[chunk ${i}] = E[chunk]·Cᵀ`,
      workspace,
    });
    const rows = { logits: z, rowOffset: lo, targets: x.targets };
    k.stats.record(rec, { ...rows, lse: v.lse, lossRows: v.lossRows });
    if (!grads) continue;
    k.grad.record(rec, { ...rows, lse: v.lse, w: grads.w, grad: z });
    dEMm.record(rec, {
      a: { view: rowView(z), trans: false },
      b: { view: rowView(x.c), trans: true },
      out: rowView(grads.dE, lo, hi),
      label: `dE[chunk ${i}] = G·C`,
      workspace,
    });
    dCMm.record(rec, {
      a: { view: rowView(z), trans: true },
      b: { view: rowView(x.e, lo, hi), trans: true },
      out: rowView(grads.dC),
      accumulate: i > 0,
      label: `dC += Gᵀ·E[chunk ${i}]`,
      workspace,
    });
  }
  for (const s of buf.shards) rec.release(s.buffer);
  rec.release(workspace);
}
