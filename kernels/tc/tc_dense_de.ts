/**
 * The fused backward's dense dE path on tensor cores: kernels/fused/dense_de.ts's path (the same
 * decision, gates and memory) with its two products on Dawn's subgroup matrices, for the
 * tensor-core rows (methods/fused_tc.ts), whose kept tiles' dE runs on the FMA passes: there the
 * kept tiles' dE costs about as much as on the FMA rows while the dense path costs a fraction of
 * theirs, so the dense path pays from a much lower kept fraction ({@link TC_DENSE_DE_ABOVE}).
 *
 * For vocabulary chunks [v0, v1) in order, under the decision's gate: G, the part of the gradient
 * of Z = E·C[v0:v1]ᵀ the fused backward tiles, in f16 from the logits product's epilogue
 * (tc_dense_g.ts), then
 *
 *   dE += G·C[v0:v1] / s_w   (tensor cores, G taken as it is)
 *
 * dE's exact terms are in the accumulator already (kernels/fused/corrections.ts), as on the
 * filtered path.
 *
 * Memory: as the FMA path's, G lies in dC's first output buffer behind dE's f32 accumulator, a
 * chunk as many vocabulary rows as that space holds f16 rows of n (dense_de.ts `denseDEChunks`);
 * the product reads it through a read_write binding of that buffer (TcMatmulKernel.aReadWrite) and
 * writes the accumulator through a binding of the accumulator's rows only: two writable bindings
 * of disjoint ranges.
 *
 * Deterministic: the chunks go in a fixed order, no split-K, each output element owned by one
 * subgroup.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { tensorOnBuffer } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import { rowView } from "../matmul.ts";
import {
  type DenseDEArgs,
  denseDEChunk,
  denseDEChunks,
  type PreparedDenseDE,
} from "../fused/dense_de.ts";
import type { TcMode } from "./tc_codegen.ts";
import { prepareTcDensePath } from "./tc_dense_g.ts";

/**
 * The kept fraction above which the tensor-core dense dE is taken (`auto`). From the H200 at
 * 4096 × 24,576 × 2304 (docs/tensor_cores.md): the kept tiles' dE (kept g 4.8 ms and the gathered
 * products 6.2 at k = 0.385: about 28.6·k ms) against the dense path's 6.3 ms whatever k (3
 * chunks: G from the logits' epilogue and the product): they cross at k ≈ 0.22.
 */
export const TC_DENSE_DE_ABOVE = 0.22;

/** Compiles the tensor-core dense dE of a problem. */
export async function prepareTcDenseDE(
  ctx: GpuContext,
  o: {
    spec: Shape & { dtype: Dtype };
    opts: LceOptions;
    mode: "auto" | "always";
    /** Native subgroup matrices or their emulation (tests). */
    tcMode: TcMode;
    /** The kept fraction above which `auto` takes it (default {@link TC_DENSE_DE_ABOVE}). */
    above?: number;
  },
): Promise<PreparedDenseDE> {
  const { spec } = o;
  const dp = await prepareTcDensePath(ctx, {
    ...o,
    path: "dE",
    above: o.above ?? TC_DENSE_DE_ABOVE,
  });
  const { decision } = dp;
  const prepared = {
    lastChunkRows: 0,
    // the output's rounding, and G's where it is as coarse (an f16 output; bf16 has 8 bits)
    dERoundings: spec.dtype === "f16" ? 2 : 1,
    above: decision.above,
    applies: (a: DenseDEArgs) => denseDEChunks(ctx, a, spec, 2) !== undefined,
    record(a: DenseDEArgs, filtered: () => void): boolean {
      prepared.lastChunkRows = 0;
      const { n, v, d } = spec;
      const chunks = denseDEChunks(ctx, a, spec, 2);
      if (!chunks) return false;
      const { free, shared, vc } = chunks;
      prepared.lastChunkRows = vc;
      // the accumulator bound over its own rows only where it shares dC's buffer with G
      const dE = shared
        ? tensorOnBuffer(ctx, { buffer: free.buffer, offset: 0 }, {
          dtype: "f32",
          rows: n,
          cols: d,
          label: "dense dE accumulator",
          role: "workspace",
        })
        : a.grads.dE;
      decision.record(a);
      decision.under(a.rec, 0, filtered);
      const parts = Array.from({ length: Math.ceil(v / vc) }, (_, i) => {
        const v0 = i * vc, v1 = Math.min(v, v0 + vc);
        return { v0, v1, g: denseDEChunk(ctx, chunks, n, v1 - v0, "f16") };
      });
      dp.record(a.rec, a, parts, (x) => ({
        a: { tensor: x.g, trans: false },
        b: { view: rowView(a.c, x.v0, x.v1), trans: true },
        out: dE,
      }));
      return true;
    },
    took() {
      return prepared.lastChunkRows === 0 ? Promise.resolve(false) : decision.took();
    },
    release() {
      dp.release();
    },
  };
  return prepared;
}
