/**
 * The backward of the no-filter rows ("+ (No Grad. Filter)", "Fused Version (No Grad. Filter)"):
 * every tile's products computed, as three dense products per vocabulary chunk on the GEMM core,
 * without the n×|V| logits. For each chunk of Vc vocabulary rows [v0, v1):
 *
 *   Z = E·C[v0:v1]ᵀ            (n×Vc f32, the one workspace, reused by every chunk)
 *   G = w_n·(softmax − (1−β)·onehot − β/|V|)·∂z     in place over Z (kernels/logit_grad.ts), with
 *                               the forward's LSE: the target and β/|V| parts are added exactly
 *   dE += G·C[v0:v1]           (f32, accumulated over the chunks in vocabulary order)
 *   dC[v0:v1] = Gᵀ·E           (f32, each chunk's rows written once)
 *
 * The cost is three products of n·|V|·d (the logits recomputed once, dE, dC), each at the GEMM
 * core's rate, plus elementwise work on n·|V| values: the no-filter ablation measures what the
 * filter saves, not a slow loop. Vocabulary sorting has no effect without the filter and is not
 * done. Gradients are f32 (like the materialised baseline): dE sums ⌈|V|/Vc⌉ chunk products.
 *
 * Memory: the chunk workspace n·Vc·4 bytes ({@link denseChunkRows}: at most
 * {@link DENSE_CHUNK_BYTES}) plus what the GEMM core's split-K takes for these shapes, besides dE
 * and dC. Deterministic: fixed chunk order, no atomics.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import { createTensor, DeviceTensor, rowsPerBinding } from "../gpu/tensor.ts";
import { gradientOutputs } from "../kernels/gradient_outputs.ts";
import type { LceOptions } from "../core/options.ts";
import { rowView } from "../kernels/matmul.ts";
import { prepareLogitGrad } from "../kernels/logit_grad.ts";
import type { FusedBackwardArgs } from "../kernels/fused/backward.ts";
import type { Gradients, ProblemSpec } from "./types.ts";
import { prepareLceProducts } from "./_common.ts";

/** Bytes of the chunk workspace the dense backward aims at (n·Vc·4). */
export const DENSE_CHUNK_BYTES = 128 << 20;

/**
 * Vocabulary rows per chunk: as many as fit in {@link DENSE_CHUNK_BYTES} at n tokens, a multiple
 * of 128 (whole tiles), at least 128, at most |V|.
 */
export function denseChunkRows(n: number, v: number): number {
  const fit = Math.floor(DENSE_CHUNK_BYTES / (Math.max(1, n) * 4) / 128) * 128;
  return Math.min(v, Math.max(128, fit));
}

/** A compiled dense backward (the fields of a fused backward that the fused methods read). */
export interface PreparedDenseBackward {
  readonly gradDtype: "f32";
  readonly roundings: { dE: number; dC: number };
  record(rec: Recorder, a: FusedBackwardArgs): Gradients;
  stats(): Promise<Record<string, number>>;
  release(): void;
  /** Bytes one record allocates besides dE and dC (uniform blocks aside), exactly. */
  workspaceBytes(): number;
}

/** Compiles the dense backward for a problem. */
export async function prepareDenseBackward(
  ctx: GpuContext,
  o: {
    spec: ProblemSpec;
    opts: LceOptions;
    /** Vocabulary rows per chunk (default {@link denseChunkRows}). */
    chunkRows?: number;
  },
): Promise<PreparedDenseBackward> {
  const { spec, opts } = o;
  const dt = spec.dtype;
  const { logits: logitsMm, dE: dEMm, dC: dCMm } = await prepareLceProducts(ctx, {
    dtype: dt,
    gradDtype: "f32",
    dC: "long-k",
    logits: "wide",
  });
  const grad = await prepareLogitGrad(ctx, { logitsDtype: "f32", opts, v: spec.v, inPlace: true });
  const vc = Math.min(spec.v, o.chunkRows ?? denseChunkRows(spec.n, spec.v));
  // one split-K workspace for every product (they run one after the other)
  const widths = [vc, spec.v - Math.floor(spec.v / vc) * vc].filter((w) => w > 0);
  const splitBytes = Math.max(
    0,
    ...widths.flatMap((w) => [
      logitsMm.workspaceBytes({ m: spec.n, n: w, k: spec.d }),
      dEMm.workspaceBytes({ m: spec.n, n: spec.d, k: w }),
      dCMm.workspaceBytes({ m: w, n: spec.d, k: spec.n }),
    ]),
  );
  const per = rowsPerBinding(ctx, "f32", vc);
  let zBytes = 0;
  for (let r = 0; r < spec.n; r += per) {
    zBytes += Math.ceil((Math.min(per, spec.n - r) * vc * 4) / 16) * 16;
  }
  return {
    workspaceBytes: () => zBytes + (splitBytes > 0 ? Math.ceil(splitBytes / 4) * 4 : 0),
    gradDtype: "f32",
    roundings: { dE: 0, dC: 0 },
    record(rec, x) {
      const { dE, dC } = gradientOutputs(ctx, spec);
      const z = createTensor(ctx, {
        dtype: "f32",
        rows: spec.n,
        cols: vc,
        role: "workspace",
        label: "vocab chunk logits",
      });
      const workspace = splitBytes > 0
        ? ctx.createBuffer({ size: splitBytes, role: "workspace", label: "split-K partials" })
        : undefined;
      for (let v0 = 0, k = 0; v0 < spec.v; v0 += vc, k++) {
        const v1 = Math.min(spec.v, v0 + vc);
        // the last chunk may be narrower: the same buffers, read with its own row stride
        const zk = v1 - v0 === vc
          ? z
          : new DeviceTensor("f32", spec.n, v1 - v0, z.shards, "vocab chunk logits (last)");
        const cv = rowView(x.c, v0, v1);
        logitsMm.record(rec, {
          a: { tensor: x.e, trans: false },
          b: { view: cv, trans: false },
          out: zk,
          label: `Z[chunk ${k}] = E·C[chunk]ᵀ`,
          workspace,
        });
        grad.record(rec, {
          logits: zk,
          targets: x.targets,
          lse: x.lse,
          w: x.w,
          grad: zk,
          colStart: v0,
        });
        dEMm.record(rec, {
          a: { tensor: zk, trans: false },
          b: { view: cv, trans: true },
          out: dE,
          accumulate: k > 0,
          label: `dE += G·C[chunk ${k}]`,
          workspace,
        });
        dCMm.record(rec, {
          a: { tensor: zk, trans: true },
          b: { tensor: x.e, trans: true },
          out: rowView(dC, v0, v1),
          label: `dC[chunk ${k}] = Gᵀ·E`,
          workspace,
        });
      }
      for (const s of z.shards) rec.release(s.buffer);
      rec.release(workspace);
      return { dE, dC };
    },
    stats: () => Promise.resolve({ vocabChunk: vc }),
    release() {},
  };
}
