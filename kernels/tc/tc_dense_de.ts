/**
 * The fused backward's dense dE path on tensor cores: kernels/fused/dense_de.ts's path (the same
 * decision, gates, chunks and memory) with its two products on Dawn's subgroup matrices, for the
 * tensor-core rows (methods/fused_tc.ts), whose kept tiles' dE runs on the FMA passes: there the
 * kept tiles' dE costs about as much as on the FMA rows while the dense path costs a fraction of
 * theirs, so the dense path pays from a much lower kept fraction ({@link TC_DENSE_DE_ABOVE}).
 *
 * For vocabulary chunks [v0, v1) in order, under the decision's gate:
 *
 *   Z = E·C[v0:v1]ᵀ                        (f32, tensor cores, E's and C's scales)
 *   G = w_n·[p·∂z/∂x + (β/|V|)(z/s)²]       in place (kernels/logit_grad.ts `tiledPart`)
 *   s_G = the power-of-two scale of G       (kernels/tc/tc_scale.ts)
 *   dE += G·C[v0:v1]                        (tensor cores, G split into hi and lo f16 parts as
 *                                           the tensor-core baseline's G: methods/baseline_tc.ts)
 *
 * Memory: as the FMA path's, Z lies in dC's first output buffer behind dE's f32 accumulator; the
 * product reads it through a read_write binding of that buffer (TcMatmulKernel.aReadWrite) and
 * writes the accumulator through a binding of the accumulator's rows only: two writable bindings
 * of disjoint ranges. The scales take one small buffer pair of their own (16 bytes each).
 *
 * Dispatches: E's and C's scales, then each chunk's product, G, G's scale and product, in as few
 * gated passes as the gate's capacity allows (a gated pass costs its arm dispatch and its
 * timestamps even where the path is not taken).
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
import { prepareLogitGrad } from "../logit_grad.ts";
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
 * products 6.2 at k = 0.385: about 28.6·k ms) against the dense path's 9.9 ms whatever k (its
 * logits 2.8, G 0.3, its scales 0.4, the split product 6.2): they cross at k ≈ 0.35.
 */
export const TC_DENSE_DE_ABOVE = 0.35;

/** The emulation's tile (software adapters: 32 KiB of workgroup memory). */
const _EMULATED_TILE: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };

/** Scale slots: E, C, G. */
const SE = 0, SC = 1, SG = 2;

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
  const tiles = o.tcMode === "native"
    ? BASELINE_TC_TILES
    : { logits: _EMULATED_TILE, split: _EMULATED_TILE };
  const decision = await prepareDenseDecision(ctx, {
    name: "dense dE",
    mode: o.mode,
    above: o.above ?? TC_DENSE_DE_ABOVE,
  });
  const zMm = await prepareTcMatmul(ctx, {
    tile: tiles.logits,
    aDtype: dt,
    bDtype: dt,
    aTrans: false,
    bTrans: false,
    mode: o.tcMode,
  });
  const dEMm = await prepareTcMatmul(ctx, {
    tile: tiles.split,
    aDtype: "f32",
    bDtype: dt,
    aTrans: false,
    bTrans: true,
    split: true,
    aReadWrite: true,
    mode: o.tcMode,
  });
  const grad = await prepareLogitGrad(ctx, {
    logitsDtype: "f32",
    opts,
    v: spec.v,
    inPlace: true,
    tiledPart: true,
  });
  const scales = await prepareTcScales(ctx);
  const sc = scales.allocate(ctx);
  const prepared = {
    lastChunkRows: 0,
    record(a: DenseDEArgs, filtered: () => void): boolean {
      prepared.lastChunkRows = 0;
      const { n, v, d } = spec;
      const chunks = denseDEChunks(ctx, a, spec);
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
      // E's and C's scales, then a chunk's four steps, in as few gated passes as they fit
      const starts = Array.from({ length: Math.ceil(v / vc) }, (_, i) => i * vc);
      const items: (number | "scales")[] = ["scales", ...starts];
      // a chunk: the two products, G, and G's scale (one shard: clear, absmax, scales)
      const count = (x: number | "scales") => x === "scales" ? scales.dispatches([a.e, a.c]) : 6;
      decision.under(rec, 1, () => {
        recordGatedPasses(rec, "dense dE (tensor cores)", items, count, (v0, pass) => {
          if (v0 === "scales") {
            scales.record(rec, { tensors: [a.e, a.c], first: SE, into: sc, pass });
            return;
          }
          const cols = Math.min(v, v0 + vc) - v0;
          const z = denseDEChunk(ctx, chunks, n, cols);
          const cv = rowView(a.c, v0, v0 + cols);
          zMm.record(rec, {
            a: { tensor: a.e, trans: false },
            b: { view: cv, trans: false },
            out: z,
            splitK: 1,
            scales: { buffer: sc.scales, a: SE, b: SC },
            pass,
          });
          const { targets, lse, w } = a;
          grad.record(rec, { logits: z, targets, lse, w, grad: z, colStart: v0, pass });
          scales.record(rec, { tensors: [z], first: SG, into: sc, pass });
          dEMm.record(rec, {
            a: { tensor: z, trans: false },
            b: { view: cv, trans: true },
            out: dE,
            accumulate: true,
            splitK: 1,
            scales: { buffer: sc.scales, a: SG, b: SC },
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
