/**
 * The fused backward's dense dC path on tensor cores: kernels/fused/dense_dc.ts's path (the same
 * decision, gates, chunks from the top and tail, within the fused rows' memory bound) with its
 * two products on Dawn's subgroup matrices, for the tensor-core rows (methods/fused_tc.ts), whose
 * kept tiles' dC runs on the FMA passes: there the kept tiles' dC costs about as much as on the
 * FMA rows while the dense path costs a fraction of theirs, so the dense path pays from a lower
 * kept fraction ({@link TC_DENSE_DC_ABOVE}).
 *
 * Once, under the decision's gate: the power-of-two scales of E, C and w (tc_scale.ts). Then for
 * vocabulary chunks [v0, v1) from the last row down:
 *
 *   G = s_w·w_n·(p − (1−β)[v = t_n] − β/|V|)·∂z/∂x of Z = E·C[v0:v1]ᵀ, in f16
 *                      (tensor cores, G formed by the product's epilogue from its f32 tile:
 *                      TcMatmulKernel.gradEpilogue; |G| ≤ |w_n|, so s_w puts it in f16's range)
 *   dC[v0:v1] = Gᵀ·E / s_w
 *                      (tensor cores, G taken as it is: TcMatmulKernel.unscaleA; written whole in
 *                      dC's dtype, rounded once: TcMatmulKernel.outDtype)
 *
 * G is the whole gradient, its target and β/|V| terms exact: nothing is dropped, the dense path
 * is the unfiltered dC. It is rounded once to f16 (11 significant bits, where the FMA path's 16-bit
 * G is rounded to the gradients' dtype, bf16's 8 bits; values below 2⁻²⁴/s_w become subnormals or
 * zero, as the scales' bound says), so the product needs no hi/lo split.
 *
 * Memory: a chunk's G (n·(v1 − v0) f16) lies in dC's rows below the chunk, not yet written: the
 * chunks are those of dense_dc.ts's plan (for a G of 2 bytes an element:
 * {@link TC_DENSE_DC_G_BYTES}), the last chunk's G in the tail workspace. The product reads G
 * through a read_write binding (TcMatmulKernel.aReadWrite) of a range disjoint from the chunk's
 * output rows. The scales take one small buffer pair of their own (16 bytes each).
 *
 * Dispatches: the scales, then each chunk's two products, in as few gated passes as the gate's
 * capacity allows (a gated dispatch costs a few microseconds where the path is not taken).
 *
 * Deterministic: the decision is a function of the kept counts, the chunks go in a fixed order,
 * no split-K, each output element owned by one subgroup.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { tensorOnBuffer } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import { recordGatedPasses } from "../../gpu/gate.ts";
import { rowView } from "../matmul.ts";
import { prepareDenseDecision } from "../fused/dense_decision.ts";
import type { DenseDCArgs, DenseDCPathOptions, PreparedDenseDC } from "../fused/dense_dc.ts";
import type { TcMode } from "./tc_codegen.ts";
import { prepareTcMatmul } from "./tc_matmul.ts";
import { prepareTcScales } from "./tc_scale.ts";
import { BASELINE_TC_TILES, type TcTile } from "./tc_tiles.ts";

/**
 * The kept fraction above which the tensor-core dense dC is taken (`auto`). From the H200 at
 * 4096 × 24,576 × 2304 (docs/tensor_cores.md): the kept tiles' dC pass costs about 31·k ms (12.1
 * at k = 0.385), the dense path 7.2 ms whatever k (13 chunks: G from the logits' epilogue and the
 * product) plus the kept path's target scatter, which runs either way and costs 1.0 ms where the
 * dC pass folded no target: they cross at k ≈ 0.26.
 */
export const TC_DENSE_DC_ABOVE = 0.26;

/** Bytes of the tensor-core dense dC's G an element: f16. */
export const TC_DENSE_DC_G_BYTES = 2;

/** The emulation's tile (software adapters: 32 KiB of workgroup memory). */
const _EMULATED_TILE: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };

/** Scale slots: E, C, w. */
const SE = 0, SC = 1, SW = 2;

/** Compiles the tensor-core dense dC of a problem. */
export async function prepareTcDenseDC(
  ctx: GpuContext,
  o: DenseDCPathOptions & {
    spec: Shape & { dtype: Dtype };
    opts: LceOptions;
    /** Native subgroup matrices or their emulation (tests). */
    tcMode: TcMode;
    /** The kept fraction above which `auto` takes it (default {@link TC_DENSE_DC_ABOVE}). */
    above?: number;
  },
): Promise<PreparedDenseDC> {
  const { spec, opts, plan } = o;
  if (spec.dtype === "f32") throw new RangeError("tc dense dC: f32 inputs");
  const dt = spec.dtype;
  const tile = o.tcMode === "native" ? BASELINE_TC_TILES.logits : _EMULATED_TILE;
  const decision = await prepareDenseDecision(ctx, {
    name: "dense dC",
    mode: o.mode,
    above: o.above ?? TC_DENSE_DC_ABOVE,
  });
  const zMm = await prepareTcMatmul(ctx, {
    tile,
    aDtype: dt,
    bDtype: dt,
    aTrans: false,
    bTrans: false,
    outDtype: "f16",
    gradEpilogue: { opts, v: spec.v },
    mode: o.tcMode,
  });
  const dCMm = await prepareTcMatmul(ctx, {
    tile,
    aDtype: "f16",
    bDtype: dt,
    aTrans: true,
    bTrans: true,
    unscaleA: true,
    aReadWrite: true,
    outDtype: o.outDtype,
    mode: o.tcMode,
  });
  const scales = await prepareTcScales(ctx);
  const sc = scales.allocate(ctx);
  const prepared = {
    lastChunks: 0,
    // the output's rounding, and G's where it is as coarse (an f16 output; bf16 has 8 bits)
    dCRoundings: spec.dtype === "f16" ? 2 : 1,
    record(a: DenseDCArgs, filtered: (gated: (fn: () => void) => void) => void): boolean {
      prepared.lastChunks = 0;
      const { n, d } = spec;
      const one = (t: { shards: unknown[] }) => t.shards.length === 1;
      const single = a.tok.length === 1 && a.voc.length === 1;
      if (!plan || !single || !one(a.e) || !one(a.c) || !one(a.dC)) return false;
      const dCBuf = a.dC.shards[0].buffer;
      if (a.dC.dtype !== o.outDtype || dCBuf.offset !== 0) return false;
      prepared.lastChunks = plan.chunks.length;
      const { rec } = a;
      decision.record(a);
      filtered((fn) => decision.under(rec, 0, fn));
      const tail = ctx.createBuffer({
        size: plan.tailBytes,
        role: "workspace",
        label: "dense dC tail",
      });
      rec.release(tail);
      const bytes = o.outDtype === "f32" ? 4 : 2;
      const gOf = (v0: number, cols: number) =>
        tensorOnBuffer(ctx, { buffer: v0 === 0 ? tail.buffer : dCBuf.buffer, offset: 0 }, {
          dtype: "f16",
          rows: n,
          cols,
          label: v0 === 0 ? "dense dC tail" : "dense dC chunk",
          role: "workspace",
        });
      type Item = [number, number] | "scales";
      const items: Item[] = ["scales", ...plan.chunks];
      const scaled = [a.e, a.c, a.w];
      const count = (x: Item) => x === "scales" ? scales.dispatches(scaled) : 2;
      decision.under(rec, 1, () => {
        recordGatedPasses(rec, "dense dC (tensor cores)", items, count, (x, pass) => {
          if (x === "scales") {
            scales.record(rec, { tensors: scaled, first: SE, into: sc, pass });
            return;
          }
          const [v0, v1] = x, cols = v1 - v0;
          const g = gOf(v0, cols);
          const { targets, lse, w } = a;
          zMm.record(rec, {
            a: { tensor: a.e, trans: false },
            b: { view: rowView(a.c, v0, v1), trans: false },
            out: g,
            splitK: 1,
            scales: { buffer: sc.scales, a: SE, b: SC },
            epilogue: { targets, lse, w, col0: v0, gSlot: SW },
            pass,
          });
          const out = tensorOnBuffer(ctx, { buffer: dCBuf.buffer, offset: v0 * d * bytes }, {
            dtype: o.outDtype,
            rows: cols,
            cols: d,
            label: "dense dC rows",
            role: "workspace",
          });
          dCMm.record(rec, {
            a: { tensor: g, trans: true },
            b: { tensor: a.e, trans: true },
            out,
            splitK: 1,
            scales: { buffer: sc.scales, a: SW, b: SE },
            pass,
          });
        });
      });
      return true;
    },
    took() {
      return prepared.lastChunks === 0 ? Promise.resolve(false) : decision.took();
    },
    release() {
      decision.release();
      zMm.release();
      dCMm.release();
      sc.scales.destroy();
      sc.maxBits.destroy();
    },
  };
  return prepared;
}
