/**
 * "Chunked CE (torchtune, 8 chunks)" row: torchtune's CEWithChunkedOutputLoss with the output
 * projection chunked over tokens as its models do. The forward computes the logits of each token
 * chunk (torch.chunk sizes: ⌈n/chunks⌉ rows, the last one shorter) as its own tensor in the input
 * dtype (16-bit for bf16/f16 inputs), so every chunk's logits are alive at once; each chunk is then
 * upcast to f32 and reduced (row_softmax_stats reads the 16-bit logits and widens them), and the
 * loss is divided by the count of non-ignored tokens. The backward does what autograd does per
 * chunk: the f32 gradient of the upcast logits, cast to the input dtype, then dE[chunk] = G·C and
 * dC += Gᵀ·E[chunk] reading that 16-bit gradient; one chunk's gradient buffers are reused by the
 * next (the caching allocator's reuse).
 *
 * Memory (bytes, 16-bit input of width b = 2; f32 input: b = 4 and no 16-bit gradient copy):
 * forward Σ_chunks rows·v·b (= n·v·b) + LSE, loss rows, count and loss; backward above the saved
 * state ⌈n/chunks⌉·v·(4 + b) + dE (n·d·4) + dC (v·d·4) + row weights (n·4). torchtune also keeps
 * each chunk's f32 log-softmax for its backward (another n·v·4 in the forward); this row keeps the
 * per-token LSE instead, as every other row does.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { createTensor, type DeviceTensor, rowsPerBinding } from "../gpu/tensor.ts";
import { GpuError } from "../core/errors.ts";
import { rowView } from "../kernels/matmul.ts";
import { prepareChunkGrad, prepareChunkStats, rowPrefix } from "../kernels/chunk_rows.ts";
import { prepareCast16 } from "../kernels/cast16.ts";
import { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { prepareRowWeights } from "../kernels/row_weights.ts";
import { gradientOutputs } from "../kernels/gradient_outputs.ts";
import type { LceMethod, ProblemSpec } from "./types.ts";
import { lossTensor, prepareLceProducts, vector } from "./_common.ts";

/** torch.chunk's split of n rows into at most `chunks` pieces of ⌈n/chunks⌉ rows: [lo, hi) each. */
export function chunkRanges(n: number, chunks: number): [number, number][] {
  if (!(Number.isInteger(chunks) && chunks >= 1)) {
    throw new RangeError(`chunks must be a positive integer, got ${chunks}`);
  }
  const size = Math.ceil(n / chunks);
  const out: [number, number][] = [];
  for (let lo = 0; lo < n; lo += size) out.push([lo, Math.min(n, lo + size)]);
  return out;
}

/**
 * Rows per shard shared by the chunks' logits and gradient buffers: the f32 gradient of a chunk
 * must have its 16-bit logits' sharding, and a 16-bit shard of an odd width must hold an even
 * number of rows. Undefined when no such count exists (one f32 row pair exceeds a binding).
 */
function _rowsPerShard(ctx: GpuContext, v: number): number | undefined {
  let per: number;
  try {
    per = rowsPerBinding(ctx, "f32", v);
  } catch {
    return undefined;
  }
  if (v % 2 === 1) per -= per % 2;
  return per >= 1 ? per : undefined;
}

function _unsupported(ctx: GpuContext, spec: ProblemSpec): string | undefined {
  if (spec.dtype === "f16" && !ctx.hasF16) return "the adapter has no shader-f16";
  if (_rowsPerShard(ctx, spec.v) === undefined) {
    return `${spec.v % 2 === 1 ? "two f32 rows" : "one f32 row"} of ${spec.v} logits exceed ` +
      `the per-binding limit of ${ctx.maxBindingBytes} bytes`;
  }
  return undefined;
}

/** The chunked method with `chunks` token chunks (torchtune's default is 8). */
export function makeChunked(chunks = 8): LceMethod {
  if (!(Number.isInteger(chunks) && chunks >= 1)) {
    throw new RangeError(`chunks must be a positive integer, got ${chunks}`);
  }
  return {
    name: chunks === 8 ? "chunked" : `chunked${chunks}`,
    label: `Chunked CE (torchtune, ${chunks} chunks)`,
    description: `logits of ${chunks} token chunks kept in the input dtype, each upcast and ` +
      "reduced; per-chunk f32 gradient cast to the input dtype, then the two products",
    unsupported: (ctx, spec) => _unsupported(ctx, spec),
    async prepare(ctx, spec, opts) {
      const why = _unsupported(ctx, spec);
      if (why) throw new GpuError("limits", `chunked: ${why}`);
      const per = _rowsPerShard(ctx, spec.v)!;
      const ldt = spec.dtype; // logits and their gradient are held in the input dtype
      const wide = ldt === "f32";
      const { logits: logitsMm, dE: dEMm, dC: dCMm } = await prepareLceProducts(ctx, {
        dtype: ldt,
        logitsDtype: ldt,
        gradDtype: ldt,
      });
      const stats = await prepareChunkStats(ctx, { logitsDtype: ldt, opts, v: spec.v });
      const grad = await prepareChunkGrad(ctx, {
        logitsDtype: ldt,
        opts,
        v: spec.v,
        inPlace: false,
      });
      const cast = ldt === "f32" ? undefined : await prepareCast16(ctx, ldt);
      const reduce = await prepareLossReduce(ctx, opts);
      const weights = await prepareRowWeights(ctx, opts);
      const ranges = chunkRanges(spec.n, chunks);
      const chunkTensor = (dtype: typeof ldt, rows: number, label: string) =>
        createTensor(ctx, {
          dtype,
          rows,
          cols: spec.v,
          role: "workspace",
          label,
          maxRowsPerShard: per,
        });
      return {
        forward(rec, x) {
          // The model's chunked output projection: every chunk's logits, in the input dtype.
          const logits: DeviceTensor[] = [];
          ranges.forEach(([lo, hi], k) => {
            const z = chunkTensor(ldt, hi - lo, `logits[${k}]`);
            logits.push(z);
            logitsMm.record(rec, {
              a: { view: rowView(x.e, lo, hi), trans: false },
              b: { view: rowView(x.c), trans: false },
              out: rowView(z),
              label: `logits[${k}] = E[chunk]·Cᵀ`,
            });
          });
          // The loss: each chunk upcast to f32 and reduced; the sum over chunks / count.
          const lse = vector(ctx, spec.n, "workspace", "lse");
          const lossRows = vector(ctx, spec.n, "workspace", "loss rows");
          const count = vector(ctx, 1, "workspace", "count");
          ranges.forEach(([lo], k) => {
            stats.record(rec, {
              logits: logits[k],
              rowOffset: lo,
              targets: x.targets,
              lse,
              lossRows,
            });
          });
          const loss = lossTensor(ctx, spec.n, opts);
          reduce.record(rec, { lossRows, targets: x.targets, loss, count });
          rec.release(lossRows.shards[0].buffer);
          return Promise.resolve({
            loss,
            saved: { tensors: [...logits, lse, count], logits, lse, count },
          });
        },
        backward(rec, x, saved, gradOut) {
          const logits = saved.logits as DeviceTensor[];
          const w = vector(ctx, spec.n, "workspace", "row weights");
          weights.record(rec, { gradOut, targets: x.targets, count: saved.count, w });
          const maxRows = Math.max(...ranges.map(([lo, hi]) => hi - lo));
          const g32 = chunkTensor("f32", maxRows, "dlogits chunk (f32)");
          const g16 = wide ? undefined : chunkTensor(ldt, maxRows, `dlogits chunk (${ldt})`);
          const { dE, dC } = gradientOutputs(ctx, spec);
          // Autograd walks the chunks in reverse order of the forward.
          for (let k = ranges.length - 1; k >= 0; k--) {
            const [lo, hi] = ranges[k];
            const g = rowPrefix(g32, hi - lo);
            grad.record(rec, {
              logits: logits[k],
              rowOffset: lo,
              targets: x.targets,
              lse: saved.lse,
              w,
              grad: g,
            });
            let gIn = g;
            if (g16 && cast) {
              gIn = rowPrefix(g16, hi - lo);
              cast.record(rec, { src: g, dst: gIn });
            }
            dEMm.record(rec, {
              a: { view: rowView(gIn), trans: false },
              b: { view: rowView(x.c), trans: true },
              out: rowView(dE, lo, hi),
              label: `dE[chunk ${k}] = G·C`,
            });
            dCMm.record(rec, {
              a: { view: rowView(gIn), trans: true },
              b: { view: rowView(x.e, lo, hi), trans: true },
              out: rowView(dC),
              accumulate: k !== ranges.length - 1,
              label: `dC += Gᵀ·E[chunk ${k}]`,
            });
          }
          for (const t of [g32, g16, w]) for (const s of t?.shards ?? []) rec.release(s.buffer);
          return Promise.resolve({ dE, dC });
        },
        dispose(saved) {
          for (const t of saved.tensors) t.destroy();
        },
      };
    },
  };
}

/** The Table 3 row: 8 chunks. */
export const chunked: LceMethod = makeChunked(8);
