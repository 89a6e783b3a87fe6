/**
 * What the tensor-core dense dE and dC (tc_dense_de.ts, tc_dense_dc.ts) share: the decision, G
 * in f16 written by the logits product's epilogue, chunk by chunk, with the scales it needs, and
 * the gradient product of each chunk, all in as few gated passes as the gate's capacity allows
 * (a gated dispatch costs a few microseconds where the path is not taken).
 *
 * Once: the power-of-two scales of E, C and w (tc_scale.ts). Then for each vocabulary chunk
 * [v0, v1), into the chunk's G tensor (n × (v1 − v0), f16):
 *
 *   G = s_w·w_n·(p − (1−β)[v = t_n] − β/|V|)·∂z/∂x of Z = E·C[v0:v1]ᵀ   (dC: the whole gradient), or
 *   G = s_w·w_n·[p·∂z/∂x + (β/|V|)(z/s)²]                              (dE: the part tiled)
 *
 * (tensor cores, from the f32 tile: TcMatmulKernel.gradEpilogue, kernels/logit_grad.ts's
 * arithmetic; |G| ≤ |w_n|·(1 + β/|V|), so s_w puts G in f16's range without a pass over G), then
 * the chunk's gradient product, one dispatch, which takes G as it is and divides by s_w
 * (TcMatmulKernel.unscaleA): dE += G·C[v0:v1] into its f32 accumulator, or dC[v0:v1] = Gᵀ·E in
 * dC's dtype. G is rounded once to f16 (11 significant bits; values below 2⁻²⁴/s_w become
 * subnormals or zero, as the scales' bound says), so the products need no hi/lo split.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import { recordGatedPasses } from "../../gpu/gate.ts";
import { type MatmulOperand, type RowView, rowView } from "../matmul.ts";
import {
  type DensePathArgs,
  type PreparedDenseDecision,
  prepareDenseDecision,
} from "../fused/dense_decision.ts";
import type { TcMode } from "./tc_codegen.ts";
import { prepareTcMatmul } from "./tc_matmul.ts";
import { prepareTcScales } from "./tc_scale.ts";
import { BASELINE_TC_TILES, type TcTile } from "./tc_tiles.ts";

/** The emulation's tile (software adapters: 32 KiB of workgroup memory). */
const _EMULATED_TILE: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };

/** Scale slots: E, C, w. */
const SE = 0, SC = 1, SW = 2;

/** A chunk of a dense path: vocabulary rows [v0, v1) and where its G goes. */
export interface TcDenseChunk {
  v0: number;
  v1: number;
  g: DeviceTensor;
}

/** A chunk's gradient product: its operands (G and E or C) and where it writes. */
export interface TcDenseProduct {
  a: MatmulOperand;
  b: MatmulOperand;
  out: DeviceTensor | RowView;
}

/** The compiled pieces of a tensor-core dense path. */
export interface TcDensePath {
  /** The tile of the logits and gradient products. */
  readonly tile: TcTile;
  /** The path's decision (kernels/fused/dense_decision.ts). */
  readonly decision: PreparedDenseDecision;
  /**
   * Records E's, C's and w's scales, then each chunk's G and its gradient product, `product(chunk)`
   * saying its operands, in as few passes as they fit, all gated on the decision taking the path.
   */
  record<T extends TcDenseChunk>(
    rec: Recorder,
    a: DensePathArgs,
    chunks: readonly T[],
    product: (x: T) => TcDenseProduct,
  ): void;
  release(): void;
}

/**
 * Compiles a dense path's decision, its logits product with the gradient epilogue, its scales and
 * its gradient product: dE's G·C (G as stored, C transposed, added to dE's f32 accumulator) or
 * dC's Gᵀ·E (both transposed, written in `outDtype`).
 */
export async function prepareTcDensePath(
  ctx: GpuContext,
  o: {
    path: "dE" | "dC";
    spec: Shape & { dtype: Dtype };
    opts: LceOptions;
    mode: "auto" | "always";
    /** The kept fraction above which `auto` takes the path. */
    above: number;
    /** Native subgroup matrices or their emulation (tests). */
    tcMode: TcMode;
    /** dC's dtype (dC only; dE's accumulator is f32). */
    outDtype?: "f32" | "bf16" | "f16";
  },
): Promise<TcDensePath> {
  const { spec } = o;
  if (spec.dtype === "f32") throw new RangeError("tc dense path: f32 inputs");
  const dt = spec.dtype, dE = o.path === "dE";
  const tile = o.tcMode === "native" ? BASELINE_TC_TILES.logits : _EMULATED_TILE;
  const name = `dense ${o.path}`;
  const decision = await prepareDenseDecision(ctx, { name, mode: o.mode, above: o.above });
  const zMm = await prepareTcMatmul(ctx, {
    tile,
    aDtype: dt,
    bDtype: dt,
    aTrans: false,
    bTrans: false,
    outDtype: "f16",
    gradEpilogue: { opts: o.opts, v: spec.v, tiledPart: dE },
    mode: o.tcMode,
  });
  const gradMm = await prepareTcMatmul(ctx, {
    tile,
    aDtype: "f16",
    bDtype: dt,
    aTrans: !dE,
    bTrans: true,
    unscaleA: true,
    aReadWrite: true,
    outDtype: dE ? undefined : o.outDtype,
    // dE's G·C adds into its accumulator: full tiles load it and store straight
    preload: dE,
    mode: o.tcMode,
  });
  const scales = await prepareTcScales(ctx);
  const sc = scales.allocate(ctx);
  // G's scale (divided out) and that of its other operand, C for dE, E for dC
  const gradScales = { buffer: sc.scales, a: SW, b: dE ? SC : SE };
  return {
    tile,
    decision,
    record<T extends TcDenseChunk>(
      rec: Recorder,
      a: DensePathArgs,
      chunks: readonly T[],
      product: (x: T) => TcDenseProduct,
    ) {
      const scaled = [a.e, a.c, a.w];
      const items: (T | "scales")[] = ["scales", ...chunks];
      const count = (x: T | "scales") => x === "scales" ? scales.dispatches(scaled) : 2;
      decision.under(rec, 1, () => {
        recordGatedPasses(rec, `${name} (tensor cores)`, items, count, (x, pass) => {
          if (x === "scales") {
            scales.record(rec, { tensors: scaled, first: SE, into: sc, pass });
            return;
          }
          const { targets, lse, w } = a;
          zMm.record(rec, {
            a: { tensor: a.e, trans: false },
            b: { view: rowView(a.c, x.v0, x.v1), trans: false },
            out: x.g,
            splitK: 1,
            scales: { buffer: sc.scales, a: SE, b: SC },
            epilogue: { targets, lse, w, col0: x.v0, gSlot: SW },
            pass,
          });
          const p = product(x);
          gradMm.record(rec, { ...p, accumulate: dE, splitK: 1, scales: gradScales, pass });
        });
      });
    },
    release() {
      decision.release();
      zMm.release();
      gradMm.release();
      sc.scales.destroy();
      sc.maxBits.destroy();
    },
  };
}
