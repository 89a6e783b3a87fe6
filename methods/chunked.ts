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
 * state ⌈n/chunks⌉·v·(4 + b) + dE (n·d·4) + dC (v·d·4) + row weights (n·4), and on a GPU one
 * chunk dE's split-K partials (kernels/matmul.ts, autoSplitK; reused by every chunk). torchtune also keeps
 * each chunk's f32 log-softmax for its backward (another n·v·4 in the forward); this row keeps the
 * per-token LSE instead, as every other row does.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import {
  createTensor,
  type DeviceTensor,
  rowsPerBinding,
  type TensorDtype,
} from "../gpu/tensor.ts";
import type { LceOptions } from "../core/options.ts";
import { GpuError } from "../core/errors.ts";
import { rowView } from "../kernels/matmul.ts";
import {
  prepareChunkGrad,
  prepareChunkStats,
  type PreparedChunkGrad,
  type PreparedChunkStats,
  rowPrefix,
} from "../kernels/chunk_rows.ts";
import { prepareCast16, type PreparedCast16 } from "../kernels/cast16.ts";
import { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { prepareRowWeights } from "../kernels/row_weights.ts";
import { gradientOutputs } from "../kernels/gradient_outputs.ts";
import type { ForwardOutput, LceMethod, MethodInputs, ProblemSpec, SavedState } from "./types.ts";
import {
  estimateSlack,
  type LceProducts,
  lossTensor,
  prepareLceProducts,
  vector,
  vectorBytes,
} from "./_common.ts";

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
      const k = await _compile(ctx, spec, opts, chunks);
      return {
        forward: (rec, x) => Promise.resolve(_forward(k, rec, x)),
        backward: (rec, x, saved, gradOut) => Promise.resolve(_backward(k, rec, x, saved, gradOut)),
        dispose(saved) {
          for (const t of saved.tensors) t.destroy();
        },
        estimateBytes: () => _estimate(k),
      };
    },
  };
}

/** The compiled kernels and the plan of one chunked method. */
interface _Chunked {
  ctx: GpuContext;
  spec: ProblemSpec;
  opts: LceOptions;
  products: LceProducts;
  stats: PreparedChunkStats;
  grad: PreparedChunkGrad;
  cast?: PreparedCast16;
  reduce: Awaited<ReturnType<typeof prepareLossReduce>>;
  weights: Awaited<ReturnType<typeof prepareRowWeights>>;
  /** Token ranges of the chunks. */
  ranges: [number, number][];
  /** A chunk-of-logits tensor (|V| columns, sharded under the binding limit). */
  chunkTensor(dtype: TensorDtype, rows: number, label: string): DeviceTensor;
}

async function _compile(
  ctx: GpuContext,
  spec: ProblemSpec,
  opts: LceOptions,
  chunks: number,
): Promise<_Chunked> {
  const per = _rowsPerShard(ctx, spec.v)!;
  const ldt = spec.dtype; // logits and their gradient are held in the input dtype
  return {
    ctx,
    spec,
    opts,
    products: await prepareLceProducts(ctx, {
      dtype: ldt,
      logitsDtype: ldt,
      gradDtype: ldt,
      dE: "long-k",
    }),
    stats: await prepareChunkStats(ctx, { logitsDtype: ldt, opts, v: spec.v }),
    grad: await prepareChunkGrad(ctx, { logitsDtype: ldt, opts, v: spec.v, inPlace: false }),
    cast: ldt === "f32" ? undefined : await prepareCast16(ctx, ldt),
    reduce: await prepareLossReduce(ctx, opts),
    weights: await prepareRowWeights(ctx, opts),
    ranges: chunkRanges(spec.n, chunks),
    chunkTensor: (dtype, rows, label) =>
      createTensor(ctx, {
        dtype,
        rows,
        cols: spec.v,
        role: "workspace",
        label,
        maxRowsPerShard: per,
      }),
  };
}

/**
 * The module's memory formula from the plan, each tensor rounded, plus what it leaves out: the
 * forward keeps every chunk's logits; the backward one chunk's f32 gradient (and its 16-bit copy),
 * the gradients in f32 and the row weights.
 */
function _estimate(k: _Chunked): { fwd: number; bwd: number; "fwd+bwd": number } {
  const { spec } = k;
  const b = spec.dtype === "f32" ? 4 : 2;
  const rows = Math.max(...k.ranges.map(([lo, hi]) => hi - lo));
  const vec = vectorBytes(spec.n);
  const slack = estimateSlack(k.ctx);
  const fwd = spec.n * spec.v * b + 3 * vec + 2 * vectorBytes(1) + slack;
  const bwd = rows * spec.v * (4 + (b === 4 ? 0 : b)) + (spec.n + spec.v) * spec.d * 4 + vec +
    slack;
  return { fwd, bwd, "fwd+bwd": fwd + bwd };
}

/** The forward: every chunk's logits in the input dtype (kept), then each upcast and reduced. */
function _forward(k: _Chunked, rec: Recorder, x: MethodInputs): ForwardOutput {
  const { ctx, spec } = k;
  // The model's chunked output projection: every chunk's logits, in the input dtype.
  const logits: DeviceTensor[] = [];
  k.ranges.forEach(([lo, hi], i) => {
    const z = k.chunkTensor(spec.dtype, hi - lo, `logits[${i}]`);
    logits.push(z);
    k.products.logits.record(rec, {
      a: { view: rowView(x.e, lo, hi), trans: false },
      b: { view: rowView(x.c), trans: false },
      out: rowView(z),
      label: `logits[${i}] = E[chunk]·Cᵀ`,
    });
  });
  // The loss: each chunk upcast to f32 and reduced; the sum over chunks / count.
  const lse = vector(ctx, spec.n, "workspace", "lse");
  const lossRows = vector(ctx, spec.n, "workspace", "loss rows");
  const count = vector(ctx, 1, "workspace", "count");
  k.ranges.forEach(([lo], i) => {
    k.stats.record(rec, { logits: logits[i], rowOffset: lo, targets: x.targets, lse, lossRows });
  });
  const loss = lossTensor(ctx, spec.n, k.opts);
  k.reduce.record(rec, { lossRows, targets: x.targets, loss, count });
  rec.release(lossRows.shards[0].buffer);
  return { loss, saved: { tensors: [...logits, lse, count], logits, lse, count } };
}

/**
 * The backward, chunks in reverse order of the forward (as autograd walks them): per chunk the
 * f32 gradient of its logits, cast to the input dtype, then dE[chunk] = G·C and dC += Gᵀ·E[chunk].
 */
function _backward(
  k: _Chunked,
  rec: Recorder,
  x: MethodInputs,
  saved: SavedState,
  gradOut: DeviceTensor,
): { dE: DeviceTensor; dC: DeviceTensor } {
  const { ctx, spec, ranges } = k;
  const logits = saved.logits as DeviceTensor[];
  const w = vector(ctx, spec.n, "workspace", "row weights");
  k.weights.record(rec, { gradOut, targets: x.targets, count: saved.count as DeviceTensor, w });
  const maxRows = Math.max(...ranges.map(([lo, hi]) => hi - lo));
  const g32 = k.chunkTensor("f32", maxRows, "dlogits chunk (f32)");
  const g16 = k.cast
    ? k.chunkTensor(spec.dtype, maxRows, `dlogits chunk (${spec.dtype})`)
    : undefined;
  const { dE, dC } = gradientOutputs(ctx, spec);
  // one split-K workspace for the chunk products (they run one after the other), as the caching
  // allocator would hand the same block to every chunk
  const splitBytes = Math.max(
    k.products.dE.workspaceBytes({ m: maxRows, n: spec.d, k: spec.v }),
    k.products.dC.workspaceBytes({ m: spec.v, n: spec.d, k: maxRows }),
  );
  const workspace = splitBytes > 0
    ? ctx.createBuffer({ size: splitBytes, role: "workspace", label: "split-K partials" })
    : undefined;
  for (let i = ranges.length - 1; i >= 0; i--) {
    const [lo, hi] = ranges[i];
    const g = rowPrefix(g32, hi - lo);
    k.grad.record(rec, {
      logits: logits[i],
      rowOffset: lo,
      targets: x.targets,
      lse: saved.lse as DeviceTensor,
      w,
      grad: g,
    });
    let gIn = g;
    if (g16 && k.cast) {
      gIn = rowPrefix(g16, hi - lo);
      k.cast.record(rec, { src: g, dst: gIn });
    }
    k.products.dE.record(rec, {
      a: { view: rowView(gIn), trans: false },
      b: { view: rowView(x.c), trans: true },
      out: rowView(dE, lo, hi),
      label: `dE[chunk ${i}] = G·C`,
      workspace,
    });
    k.products.dC.record(rec, {
      a: { view: rowView(gIn), trans: true },
      b: { view: rowView(x.e, lo, hi), trans: true },
      out: rowView(dC),
      accumulate: i !== ranges.length - 1,
      label: `dC += Gᵀ·E[chunk ${i}]`,
      workspace,
    });
  }
  for (const t of [g32, g16, w]) for (const s of t?.shards ?? []) rec.release(s.buffer);
  rec.release(workspace);
  return { dE, dC };
}

/** The Table 3 row: 8 chunks. */
export const chunked: LceMethod = makeChunked(8);
