/**
 * What the tensor-core dense dE and dC (tc_dense_de.ts, tc_dense_dc.ts) share: G in f16, written
 * by the logits product's epilogue, chunk by chunk, with the scales it needs, all in as few gated
 * passes as the gate's capacity allows (a gated dispatch costs a few microseconds where the path
 * is not taken).
 *
 * Once: the power-of-two scales of E, C and w (tc_scale.ts). Then for each vocabulary chunk
 * [v0, v1), into the chunk's G tensor (n × (v1 − v0), f16):
 *
 *   G = s_w·w_n·(p − (1−β)[v = t_n] − β/|V|)·∂z/∂x of Z = E·C[v0:v1]ᵀ   (the whole gradient), or
 *   G = s_w·w_n·[p·∂z/∂x + (β/|V|)(z/s)²]                              (`tiledPart`)
 *
 * (tensor cores, from the f32 tile: TcMatmulKernel.gradEpilogue, kernels/logit_grad.ts's
 * arithmetic; |G| ≤ |w_n|·(1 + β/|V|), so s_w puts G in f16's range without a pass over G), then
 * the caller's gradient product of that chunk, one dispatch, which takes G as it is and divides
 * by s_w ({@link TcDenseG.productScales}, TcMatmulKernel.unscaleA). G is rounded once to f16 (11
 * significant bits; values below 2⁻²⁴/s_w become subnormals or zero, as the scales' bound says),
 * so the products need no hi/lo split.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import type { PassEncoder, Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import { recordGatedPasses } from "../../gpu/gate.ts";
import { rowView } from "../matmul.ts";
import type { DensePathArgs } from "../fused/dense_decision.ts";
import type { TcMode } from "./tc_codegen.ts";
import { prepareTcMatmul, type TcScales } from "./tc_matmul.ts";
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

/** The compiled G of a dense path. */
export interface TcDenseG {
  /** The tile of the logits product, and of the caller's gradient product. */
  readonly tile: TcTile;
  /** The gradient product's scales: G's (s_w, divided out) and its other operand's, E or C. */
  productScales(other: "e" | "c"): TcScales;
  /**
   * Records E's, C's and w's scales, then each chunk's G and `product(chunk, pass)` (one
   * dispatch), in as few gated passes labelled `label` as they fit.
   */
  record<T extends TcDenseChunk>(
    rec: Recorder,
    label: string,
    a: DensePathArgs,
    chunks: readonly T[],
    product: (x: T, pass: PassEncoder) => void,
  ): void;
  release(): void;
}

/** Compiles the G of a dense path: its logits product with the gradient epilogue, its scales. */
export async function prepareTcDenseG(
  ctx: GpuContext,
  o: {
    spec: Shape & { dtype: Dtype };
    opts: LceOptions;
    /** Native subgroup matrices or their emulation (tests). */
    tcMode: TcMode;
    /** The part the fused backward tiles (dE's), else the whole gradient (dC's). */
    tiledPart: boolean;
  },
): Promise<TcDenseG> {
  const { spec } = o;
  if (spec.dtype === "f32") throw new RangeError("tc dense path: f32 inputs");
  const dt = spec.dtype;
  const tile = o.tcMode === "native" ? BASELINE_TC_TILES.logits : _EMULATED_TILE;
  const zMm = await prepareTcMatmul(ctx, {
    tile,
    aDtype: dt,
    bDtype: dt,
    aTrans: false,
    bTrans: false,
    outDtype: "f16",
    gradEpilogue: { opts: o.opts, v: spec.v, tiledPart: o.tiledPart },
    mode: o.tcMode,
  });
  const scales = await prepareTcScales(ctx);
  const sc = scales.allocate(ctx);
  return {
    tile,
    productScales: (other) => ({ buffer: sc.scales, a: SW, b: other === "e" ? SE : SC }),
    record<T extends TcDenseChunk>(
      rec: Recorder,
      label: string,
      a: DensePathArgs,
      chunks: readonly T[],
      product: (x: T, pass: PassEncoder) => void,
    ) {
      const scaled = [a.e, a.c, a.w];
      const items: (T | "scales")[] = ["scales", ...chunks];
      const count = (x: T | "scales") => x === "scales" ? scales.dispatches(scaled) : 2;
      recordGatedPasses(rec, label, items, count, (x, pass) => {
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
        product(x, pass);
      });
    },
    release() {
      zMm.release();
      sc.scales.destroy();
      sc.maxBits.destroy();
    },
  };
}
