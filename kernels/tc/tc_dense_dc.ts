/**
 * The fused backward's dense dC path on tensor cores: kernels/fused/dense_dc.ts's path (the same
 * decision, gates, chunks from the top and tail, within the fused rows' memory bound) with its
 * two products on Dawn's subgroup matrices, for the tensor-core rows (methods/fused_tc.ts), whose
 * kept tiles' dC runs on the FMA passes: there the kept tiles' dC costs about as much as on the
 * FMA rows while the dense path costs a fraction of theirs, so the dense path pays from a lower
 * kept fraction ({@link TC_DENSE_DC_ABOVE}).
 *
 * For vocabulary chunks [v0, v1) from the last row down, under the decision's gate: G, the whole
 * gradient of Z = E·C[v0:v1]ᵀ, in f16 from the logits product's epilogue (tc_dense_g.ts), then
 *
 *   dC[v0:v1] = Gᵀ·E / s_w   (tensor cores, G taken as it is; written whole in dC's dtype, rounded
 *                            once: TcMatmulKernel.outDtype)
 *
 * G's target and β/|V| terms are exact: nothing is dropped, the dense path is the unfiltered dC.
 * G is rounded once to f16 (11 significant bits, where the FMA path's 16-bit G is rounded to the
 * gradients' dtype, bf16's 8 bits).
 *
 * Memory: a chunk's G (n·(v1 − v0) f16) lies in dC's rows below the chunk, not yet written: the
 * chunks are those of dense_dc.ts's plan (for a G of 2 bytes an element:
 * {@link TC_DENSE_DC_G_BYTES}), the last chunk's G in the tail workspace. The product reads G
 * through a read_write binding (TcMatmulKernel.aReadWrite) of a range disjoint from the chunk's
 * output rows.
 *
 * Deterministic: the decision is a function of the kept counts, the chunks go in a fixed order,
 * no split-K, each output element owned by one subgroup.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { tensorOnBuffer } from "../../gpu/tensor.ts";
import {
  beginDenseDC,
  denseDCApplies,
  type DenseDCArgs,
  type DenseDCPathOptions,
  type PreparedDenseDC,
} from "../fused/dense_dc.ts";
import type { TcMode } from "./tc_codegen.ts";
import { prepareTcDensePath } from "./tc_dense_g.ts";

/**
 * The kept fraction above which the tensor-core dense dC is taken (`auto`). From the H200 at
 * 4096 × 24,576 × 2304 (docs/tensor_cores.md): the kept tiles' dC pass costs about 31·k ms (12.1
 * at k = 0.385), the dense path 7.2 ms whatever k (13 chunks: G from the logits' epilogue and the
 * product): they cross at k ≈ 0.23.
 */
export const TC_DENSE_DC_ABOVE = 0.23;

/** Bytes of the tensor-core dense dC's G an element: f16. */
export const TC_DENSE_DC_G_BYTES = 2;

/** Compiles the tensor-core dense dC of a problem. */
export async function prepareTcDenseDC(
  ctx: GpuContext,
  o: DenseDCPathOptions & {
    /** Native subgroup matrices or their emulation (tests). */
    tcMode: TcMode;
    /** The kept fraction above which `auto` takes it (default {@link TC_DENSE_DC_ABOVE}). */
    above?: number;
  },
): Promise<PreparedDenseDC> {
  const { spec } = o;
  const dp = await prepareTcDensePath(ctx, {
    ...o,
    path: "dC",
    above: o.above ?? TC_DENSE_DC_ABOVE,
  });
  const prepared = {
    lastChunks: 0,
    // the output's rounding, and G's where it is as coarse (an f16 output; bf16 has 8 bits)
    dCRoundings: spec.dtype === "f16" ? 2 : 1,
    above: dp.decision.above,
    applies: (a: DenseDCArgs) => denseDCApplies(o, a),
    record(a: DenseDCArgs, filtered: (gated: (fn: () => void) => void) => void): boolean {
      const begun = beginDenseDC(ctx, { ...o, decision: dp.decision, prepared }, a, filtered);
      if (!begun) return false;
      const { plan, dCBuf, tail } = begun;
      const { n, d } = spec;
      const bytes = o.outDtype === "f32" ? 4 : 2;
      // each chunk's G below its rows, the last chunk's in the tail
      const chunks = plan.chunks.map(([v0, v1]) => ({
        v0,
        v1,
        g: tensorOnBuffer(ctx, { buffer: v0 === 0 ? tail.buffer : dCBuf.buffer, offset: 0 }, {
          dtype: "f16",
          rows: n,
          cols: v1 - v0,
          label: "dense dC G",
          role: "workspace",
        }),
      }));
      dp.record(a.rec, a, chunks, (x) => ({
        a: { tensor: x.g, trans: true },
        b: { tensor: a.e, trans: true },
        out: tensorOnBuffer(ctx, { buffer: dCBuf.buffer, offset: x.v0 * d * bytes }, {
          dtype: o.outDtype,
          rows: x.v1 - x.v0,
          cols: d,
          label: "dense dC rows",
          role: "workspace",
        }),
      }));
      return true;
    },
    took() {
      return prepared.lastChunks === 0 ? Promise.resolve(false) : dp.decision.took();
    },
    release() {
      dp.release();
    },
  };
  return prepared;
}
