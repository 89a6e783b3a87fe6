/**
 * The fused backward's dense dE path on tensor cores: kernels/fused/dense_de.ts's path (the same
 * decision, gates and memory) with its two products on Dawn's subgroup matrices, for the
 * tensor-core rows (methods/fused_tc.ts), whose kept tiles' dE runs on the FMA passes: there the
 * kept tiles' dE costs about as much as on the FMA rows while the dense path costs a fraction of
 * theirs, so the dense path pays from a much lower kept fraction ({@link TC_DENSE_DE_ABOVE}).
 *
 * Once, under the decision's gate: the power-of-two scales of E, C and w (tc_scale.ts). Then for
 * vocabulary chunks [v0, v1) in order:
 *
 *   G = s_w·w_n·[p·∂z/∂x + (β/|V|)(z/s)²] of Z = E·C[v0:v1]ᵀ, in f16
 *                      (tensor cores, G formed by the product's epilogue from its f32 tile: the
 *                      part the fused backward tiles, as kernels/logit_grad.ts `tiledPart`;
 *                      TcMatmulKernel.gradEpilogue)
 *   dE += G·C[v0:v1] / s_w
 *                      (tensor cores, G taken as it is: TcMatmulKernel.unscaleA)
 *
 * G is rounded once to f16 (11 significant bits; values below 2⁻²⁴/s_w become subnormals or zero,
 * as the scales' bound says), so the product needs no hi/lo split; dE's exact terms are in the
 * accumulator already (kernels/fused/corrections.ts), as on the filtered path.
 *
 * Memory: as the FMA path's, G lies in dC's first output buffer behind dE's f32 accumulator, a
 * chunk as many vocabulary rows as that space holds f16 rows of n (dense_de.ts `denseDEChunks`);
 * the product reads it through a read_write binding of that buffer (TcMatmulKernel.aReadWrite) and
 * writes the accumulator through a binding of the accumulator's rows only: two writable bindings
 * of disjoint ranges. The scales take one small buffer pair of their own (16 bytes each).
 *
 * Dispatches: the scales, then each chunk's two products, in as few gated passes as the gate's
 * capacity allows (a gated dispatch costs a few microseconds where the path is not taken).
 *
 * Deterministic: the chunks go in a fixed order, no split-K, each output element owned by one
 * subgroup.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { tensorOnBuffer } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import { rowView } from "../matmul.ts";
import { recordGatedPasses } from "../../gpu/gate.ts";
import { prepareDenseDecision } from "../fused/dense_decision.ts";
import {
  type DenseDEArgs,
  denseDEChunk,
  denseDEChunks,
  type PreparedDenseDE,
} from "../fused/dense_de.ts";
import type { TcMode } from "./tc_codegen.ts";
import { prepareTcMatmul } from "./tc_matmul.ts";
import { prepareTcScales } from "./tc_scale.ts";
import { BASELINE_TC_TILES, type TcTile } from "./tc_tiles.ts";

/**
 * The kept fraction above which the tensor-core dense dE is taken (`auto`). From the H200 at
 * 4096 × 24,576 × 2304 (docs/tensor_cores.md): the kept tiles' dE (kept g 4.8 ms and the gathered
 * products 6.2 at k = 0.385: about 28.6·k ms) against the dense path's 6.3 ms whatever k (3
 * chunks: G from the logits' epilogue and the product): they cross at k ≈ 0.22.
 */
export const TC_DENSE_DE_ABOVE = 0.22;

/** The emulation's tile (software adapters: 32 KiB of workgroup memory). */
const _EMULATED_TILE: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };

/** Scale slots: E, C, w. */
const SE = 0, SC = 1, SW = 2;

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
  const { spec, opts } = o;
  const dt = spec.dtype === "f16" ? "f16" : "bf16";
  if (spec.dtype === "f32") throw new RangeError("tc dense dE: f32 inputs");
  const tile = o.tcMode === "native" ? BASELINE_TC_TILES.logits : _EMULATED_TILE;
  const decision = await prepareDenseDecision(ctx, {
    name: "dense dE",
    mode: o.mode,
    above: o.above ?? TC_DENSE_DE_ABOVE,
  });
  const zMm = await prepareTcMatmul(ctx, {
    tile,
    aDtype: dt,
    bDtype: dt,
    aTrans: false,
    bTrans: false,
    outDtype: "f16",
    gradEpilogue: { opts, v: spec.v, tiledPart: true },
    mode: o.tcMode,
  });
  const dEMm = await prepareTcMatmul(ctx, {
    tile,
    aDtype: "f16",
    bDtype: dt,
    aTrans: false,
    bTrans: true,
    unscaleA: true,
    aReadWrite: true,
    mode: o.tcMode,
  });
  const scales = await prepareTcScales(ctx);
  const sc = scales.allocate(ctx);
  const prepared = {
    lastChunkRows: 0,
    // the output's rounding, and G's where it is as coarse (an f16 output; bf16 has 8 bits)
    dERoundings: spec.dtype === "f16" ? 2 : 1,
    record(a: DenseDEArgs, filtered: () => void): boolean {
      prepared.lastChunkRows = 0;
      const { n, v, d } = spec;
      const chunks = denseDEChunks(ctx, a, spec, 2);
      if (!chunks) return false;
      const { free, shared, vc } = chunks;
      prepared.lastChunkRows = vc;
      // the accumulator bound over its own rows only where it shares dC's buffer with Z
      const dE = shared
        ? tensorOnBuffer(ctx, { buffer: free.buffer, offset: 0 }, {
          dtype: "f32",
          rows: n,
          cols: d,
          label: "dense dE accumulator",
          role: "workspace",
        })
        : a.grads.dE;
      const { rec } = a;
      decision.record(a);
      decision.under(rec, 0, filtered);
      // the scales, then a chunk's two products, in as few gated passes as they fit
      const starts = Array.from({ length: Math.ceil(v / vc) }, (_, i) => i * vc);
      const items: (number | "scales")[] = ["scales", ...starts];
      const scaled = [a.e, a.c, a.w];
      const count = (x: number | "scales") => x === "scales" ? scales.dispatches(scaled) : 2;
      decision.under(rec, 1, () => {
        recordGatedPasses(rec, "dense dE (tensor cores)", items, count, (v0, pass) => {
          if (v0 === "scales") {
            scales.record(rec, { tensors: scaled, first: SE, into: sc, pass });
            return;
          }
          const cols = Math.min(v, v0 + vc) - v0;
          const g = denseDEChunk(ctx, chunks, n, cols, "f16");
          const cv = rowView(a.c, v0, v0 + cols);
          const { targets, lse, w } = a;
          zMm.record(rec, {
            a: { tensor: a.e, trans: false },
            b: { view: cv, trans: false },
            out: g,
            splitK: 1,
            scales: { buffer: sc.scales, a: SE, b: SC },
            epilogue: { targets, lse, w, col0: v0, gSlot: SW },
            pass,
          });
          dEMm.record(rec, {
            a: { tensor: g, trans: false },
            b: { view: cv, trans: true },
            out: dE,
            accumulate: true,
            splitK: 1,
            scales: { buffer: sc.scales, a: SW, b: SC },
            pass,
          });
        });
      });
      return true;
    },
    took() {
      return prepared.lastChunkRows === 0 ? Promise.resolve(false) : decision.took();
    },
    release() {
      decision.release();
      zMm.release();
      dEMm.release();
      sc.scales.destroy();
      sc.maxBits.destroy();
    },
  };
  return prepared;
}
