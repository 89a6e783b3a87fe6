/**
 * The fused backward's dense dC path on tensor cores: kernels/fused/dense_dc.ts's path (the same
 * decision, gates, chunks from the top and tail, within the fused rows' memory bound) with its
 * two products on Dawn's subgroup matrices, for the tensor-core rows (methods/fused_tc.ts), whose
 * kept tiles' dC runs on the FMA passes: there the kept tiles' dC costs about as much as on the
 * FMA rows while the dense path costs a fraction of theirs, so the dense path pays from a much
 * lower kept fraction ({@link TC_DENSE_DC_ABOVE}).
 *
 * For vocabulary chunks [v0, v1) from the last row down, under the decision's gate:
 *
 *   Z = E·C[v0:v1]ᵀ                          (f32, tensor cores, E's and C's scales)
 *   G = w_n·(p − (1−β)[v = t_n] − β/|V|)·∂z/∂x in place (kernels/logit_grad.ts, the whole gradient)
 *   s_G = the power-of-two scale of G          (kernels/tc/tc_scale.ts)
 *   dC[v0:v1] = Gᵀ·E                           (tensor cores, G split into hi and lo f16 parts as
 *                                              the tensor-core baseline's; written whole in dC's
 *                                              dtype, rounded once: TcMatmulKernel.outDtype)
 *
 * Memory: G is f32 (the product splits it), so a chunk's G takes n·(v1 − v0)·4 bytes of dC's
 * rows below the chunk, not yet written: the chunks are those of dense_dc.ts's plan for a G of 4
 * bytes an element (backward_plan.ts `denseDCPlanFor` with `gBytes`: more, narrower chunks than
 * the FMA path's 16-bit G), the last chunk's G in the tail workspace. G is read through a
 * read_write binding (TcMatmulKernel.aReadWrite) of a range disjoint from the chunk's output rows.
 * The scales take one small buffer pair of their own (16 bytes each).
 *
 * Dispatches: E's and C's scales, then each chunk's product, G, G's scale and product, in as few
 * gated passes as the gate's capacity allows.
 *
 * Deterministic: the decision is a function of the kept counts, the chunks go in a fixed order,
 * no split-K, each output element owned by one subgroup. G is the whole gradient, its target and
 * β/|V| terms exact: nothing is dropped, the dense path is the unfiltered dC.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { tensorOnBuffer } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import { recordGatedPasses } from "../../gpu/gate.ts";
import { rowView } from "../matmul.ts";
import { prepareLogitGrad } from "../logit_grad.ts";
import { prepareDenseDecision } from "../fused/dense_decision.ts";
import type { DenseDCArgs, DenseDCPathOptions, PreparedDenseDC } from "../fused/dense_dc.ts";
import type { TcMode } from "./tc_codegen.ts";
import { prepareTcMatmul } from "./tc_matmul.ts";
import { prepareTcScales } from "./tc_scale.ts";
import { BASELINE_TC_TILES, type TcTile } from "./tc_tiles.ts";

/**
 * The kept fraction above which the tensor-core dense dC is taken (`auto`). From the H200 at
 * 4096 × 24,576 × 2304 (docs/tensor_cores.md): the kept tiles' dC pass costs about 31·k ms (12.1
 * at k = 0.385, 29 at 0.963), the dense path about 10 ms whatever k (its logits 2.8, the split
 * product about 6, G and its scales under 1): they cross at k ≈ 0.33.
 */
export const TC_DENSE_DC_ABOVE = 0.35;

/** Bytes of the tensor-core dense dC's G an element: f32, split into hi and lo by its product. */
export const TC_DENSE_DC_G_BYTES = 4;

/** The emulation's tile (software adapters: 32 KiB of workgroup memory). */
const _EMULATED_TILE: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };

/** Scale slots: E, C, G. */
const SE = 0, SC = 1, SG = 2;

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
  const tiles = o.tcMode === "native"
    ? BASELINE_TC_TILES
    : { logits: _EMULATED_TILE, split: _EMULATED_TILE };
  const decision = await prepareDenseDecision(ctx, {
    name: "dense dC",
    mode: o.mode,
    above: o.above ?? TC_DENSE_DC_ABOVE,
  });
  const zMm = await prepareTcMatmul(ctx, {
    tile: tiles.logits,
    aDtype: dt,
    bDtype: dt,
    aTrans: false,
    bTrans: false,
    mode: o.tcMode,
  });
  const dCMm = await prepareTcMatmul(ctx, {
    tile: tiles.split,
    aDtype: "f32",
    bDtype: dt,
    aTrans: true,
    bTrans: true,
    split: true,
    aReadWrite: true,
    outDtype: o.outDtype,
    mode: o.tcMode,
  });
  const grad = await prepareLogitGrad(ctx, {
    logitsDtype: "f32",
    opts,
    v: spec.v,
    inPlace: true,
  });
  const scales = await prepareTcScales(ctx);
  const sc = scales.allocate(ctx);
  const prepared = {
    lastChunks: 0,
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
          dtype: "f32",
          rows: n,
          cols,
          label: v0 === 0 ? "dense dC tail" : "dense dC chunk",
          role: "workspace",
        });
      type Item = [number, number] | "scales";
      const items: Item[] = ["scales", ...plan.chunks];
      // a chunk: the two products, G, and G's scale (one shard: clear, absmax, scales)
      const count = (x: Item) => x === "scales" ? scales.dispatches([a.e, a.c]) : 6;
      decision.under(rec, 1, () => {
        recordGatedPasses(rec, "dense dC (tensor cores)", items, count, (x, pass) => {
          if (x === "scales") {
            scales.record(rec, { tensors: [a.e, a.c], first: SE, into: sc, pass });
            return;
          }
          const [v0, v1] = x, cols = v1 - v0;
          const g = gOf(v0, cols);
          zMm.record(rec, {
            a: { tensor: a.e, trans: false },
            b: { view: rowView(a.c, v0, v1), trans: false },
            out: g,
            splitK: 1,
            scales: { buffer: sc.scales, a: SE, b: SC },
            pass,
          });
          const { targets, lse, w } = a;
          grad.record(rec, { logits: g, targets, lse, w, grad: g, colStart: v0, pass });
          scales.record(rec, { tensors: [g], first: SG, into: sc, pass });
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
            scales: { buffer: sc.scales, a: SG, b: SE },
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
