/**
 * The fused backward's dense dE path: where the filter keeps most tiles, dE's tiled part as dense
 * products on the GEMM core instead of the kept tiles' passes, chosen on the GPU per call.
 *
 * The kept tiles' dE (kernels/fused/gathered_de.ts: `kept g`, then the gathered products) runs at
 * about two thirds of the plain product's rate: past a kept fraction k of about 0.75 it costs
 * more than recomputing every tile's logits and multiplying densely (2 P at the product's rate,
 * P the plain product E·Cᵀ). So after the filter (and the order decision) pass `dense dE decision` reads the kept
 * count and writes a flag: dense when kept > {@link DENSE_DE_ABOVE} · tiles. Both paths are
 * recorded, each under a gate of that flag (gpu/gate.ts): the one not taken dispatches zero
 * workgroups, and the host never reads the count back. Software adapters record no dense path
 * by default (kernels/fused/backward_options.ts: their dispatches cost too much for the gates).
 *
 * The dense path, pass `dense dE`, for vocabulary chunks [v0, v1) in order (the vocabulary's own
 * order: the dense path needs no sorting), in as few passes as the gate's capacity allows (a
 * gated pass costs its arm dispatch and its timestamps even when it does nothing):
 *
 *   Z = E·C[v0:v1]ᵀ                       (f32, the GEMM core's logits tile)
 *   G = w_n·[p·∂z/∂x + (β/|V|)(z/s)²]      in place (kernels/logit_grad.ts `tiledPart`)
 *   dE += G·C[v0:v1]                       (into dE's f32 accumulator)
 *
 * G is the part of the gradient the filtered path tiles: dE's exact terms (the target's and
 * β/|V|'s) are in the accumulator already (kernels/fused/corrections.ts), as on the filtered path,
 * and dC is not touched (its pass stays the filtered one). Nothing is dropped: the dense path is
 * the unfiltered dE.
 *
 * Memory: none of its own. Z lives where the gathered dE keeps its slots, in dC's first output
 * buffer behind dE's f32 accumulator (dC is written only after dE is formed), so a chunk holds
 * as many vocabulary rows as that space holds f32 rows of n (`llm`, 4096 × 24,576 × 2304, bf16
 * gradients: 4,608 rows, 6 chunks; the paper's shape: 33,728, 8 chunks). With 16-bit gradients
 * the accumulator shares that buffer, so the dE product reads G through the binding it
 * accumulates into (kernels/matmul_wgsl.ts `aFromOut`), 16 bytes at a time where the chunk's
 * width and d allow.
 *
 * Deterministic: the decision is a function of the kept counts, the chunks go in a fixed order,
 * each output element of a product is owned by one thread, no split-K.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import { type DeviceTensor, tensorOnBuffer } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import { compileKernel, compileKernelNow } from "../../gpu/signature.ts";
import { recordGatedPasses } from "../../gpu/gate.ts";
import { prepareMatmul, rowView } from "../matmul.ts";
import { type MatmulKernelOptions, matmulSignature, matmulWgsl } from "../matmul_wgsl.ts";
import { gemmGrid, type GemmTile } from "../gemm_codegen.ts";
import { TILE_HW_8X16, TILE_HW_WIDE, TILE_SMALL } from "../gemm_tiles.ts";
import { vecWidth } from "../wgsl_common.ts";
import { prepareLogitGrad } from "../logit_grad.ts";
import { type BackwardGradients, dCScratch } from "./backward_plan.ts";
import {
  type DenseMode,
  type DensePathArgs,
  type DenseShare,
  prepareDenseDecision,
} from "./dense_decision.ts";

/**
 * The kept fraction above which the dense path is taken (`auto`). From an H200 at 4096 × 24,576 ×
 * 2304 (docs/performance.md): the kept tiles' dE costs about 3.0·k·P, the dense one 2.25 P, so
 * they cross at k ≈ 0.74.
 */
export const DENSE_DE_ABOVE = 0.75;

/** Which dE path the backward takes ({@link DenseMode}). */
export type DenseDEMode = DenseMode;

/**
 * The dE product's tile on hardware: 64×128, 4×16 a thread. An n×d product makes 1,152 of them
 * at `llm`'s n = 4096, d = 2304 (4.4 waves of two workgroups an SM on an H200) where 128×128 tiles
 * make 576 (2.2 waves): the dense dE 26.4 → 22.9 ms there (128×128 with 8×8 a thread 24.4,
 * 128×64 24.3, 128×32 26.0; docs/performance.md).
 */
export const DENSE_DE_TILE_HW: GemmTile = { ...TILE_HW_8X16, bm: 64, tm: 4 };

/** The dE product's tile: {@link DENSE_DE_TILE_HW} on hardware adapters, 64×64 on software ones. */
export function denseDETile(ctx: GpuContext): GemmTile {
  return ctx.report.isFallbackAdapter ? TILE_SMALL : DENSE_DE_TILE_HW;
}

/** What a dense dE path of another kernel family is prepared with (FusedBackwardOptions.denseDEPath). */
export interface DenseDEPath {
  spec: Shape & { dtype: Dtype };
  opts: LceOptions;
  mode: Exclude<DenseDEMode, "never">;
}

/** What a record of the dense path reads (see {@link PreparedDenseDE.record}). */
export interface DenseDEArgs extends DensePathArgs {
  grads: BackwardGradients;
}

/**
 * Where a dense dE's chunks go: Z of `vc` vocabulary rows at byte `start` of `free` (dC's first
 * output buffer, behind dE's f32 accumulator where `shared`); undefined where the path does not
 * apply (E, C or the accumulator over several bindings, too little free storage).
 */
export interface DenseDEChunks {
  free: TrackedBuffer;
  shared: boolean;
  start: number;
  vc: number;
}

/**
 * The chunks of a record ({@link DenseDEChunks}), or undefined where none fit; `zBytes` is the
 * bytes of Z's element (4, f32; 2 for another kernel family's f16 G).
 */
export function denseDEChunks(
  ctx: GpuContext,
  a: DenseDEArgs,
  spec: Shape,
  zBytes = 4,
): DenseDEChunks | undefined {
  const { n, v, d } = spec;
  const one = (t: DeviceTensor) => t.shards.length === 1;
  if (a.tok.length !== 1 || a.voc.length !== 1 || !one(a.e) || !one(a.c)) return undefined;
  // dE's f32 accumulator: one shard from row 0, in dC's first buffer with 16-bit gradients
  const accShard = a.grads.dE.shards;
  if (accShard.length !== 1 || accShard[0].rowStart !== 0) return undefined;
  const acc = { buffer: accShard[0].buffer, rows: accShard[0].rows };
  const { free, shared, start, end } = dCScratch(a.grads, acc, d, ctx.maxBindingBytes);
  // whole 64-row chunks: each chunk's Z starts on a binding offset
  const fit = Math.floor((end - start) / (n * zBytes) / 64) * 64;
  const vc = Math.min(v, fit);
  return vc < Math.min(v, 64) ? undefined : { free, shared, start, vc };
}

/** Chunk [v0, v0 + cols)'s Z (n × cols, f32 or `dtype`) where {@link denseDEChunks} puts it. */
export function denseDEChunk(
  ctx: GpuContext,
  c: DenseDEChunks,
  n: number,
  cols: number,
  dtype: "f32" | "f16" = "f32",
) {
  return tensorOnBuffer(ctx, { buffer: c.free.buffer, offset: c.start }, {
    dtype,
    rows: n,
    cols,
    label: "dense dE chunk",
    role: "workspace",
  });
}

/** The dense backward sharing G's part in a dense dE record: the other path's decision, A and B. */
type SharedArg = { share: DenseShare; fn: () => void };

/** The compiled dense path. */
export interface PreparedDenseDE {
  /** Vocabulary rows a chunk holds in the last record (0 where the path did not apply). */
  readonly lastChunkRows: number;
  /**
   * Roundings of dE to its output dtype where the path is taken, where another kernel family
   * says (default: the output's alone, as the kept path's).
   */
  readonly dERoundings?: number;
  /** The kept fraction above which `auto` takes the dense path. */
  readonly above: number;
  /** Whether a record with these arguments records the dense path. */
  applies(a: DenseDEArgs): boolean;
  /**
   * Records the decision, `filtered` (the kept tiles' dE) under the flag's 0 and the dense path
   * under its 1, and returns true; or returns false having recorded nothing where the dense path
   * does not apply (E or C over several bindings, too little free storage): the caller then
   * records the filtered path alone. With `shared` (the FMA family's), the decision's flag is 2
   * where the other path is dense too, and `shared.fn` is recorded under it
   * (kernels/fused/dense_shared.ts).
   */
  record(a: DenseDEArgs, filtered: () => void, shared?: SharedArg): boolean;
  /** Whether the last record took the dense path (reads the flag; false where none applied). */
  took(): Promise<boolean>;
  release(): void;
}

/** Compiles the decision, the gate and the three products of a problem. */
export async function prepareDenseDE(
  ctx: GpuContext,
  o: {
    spec: Shape & { dtype: Dtype };
    opts: LceOptions;
    mode: Exclude<DenseDEMode, "never">;
    /** 16-bit gradients: the accumulator shares dC's buffer (else f32 gradients). */
    out16: boolean;
    /** The dE product's tile (default {@link denseDETile}). */
    productTile?: GemmTile;
  },
): Promise<PreparedDenseDE> {
  const { spec, opts } = o;
  const hw = !ctx.report.isFallbackAdapter;
  const decision = await prepareDenseDecision(ctx, {
    name: "dense dE",
    mode: o.mode,
    above: DENSE_DE_ABOVE,
  });
  const zMm = await prepareMatmul(ctx, {
    tile: hw ? TILE_HW_WIDE : TILE_SMALL,
    aDtype: spec.dtype,
    bDtype: spec.dtype,
    aTrans: false,
    bTrans: false,
  });
  const grad = await prepareLogitGrad(ctx, {
    logitsDtype: "f32",
    opts,
    v: spec.v,
    inPlace: true,
    tiledPart: true,
  });
  const dETile: GemmTile = o.productTile ?? denseDETile(ctx);
  // shared storage: G read through the accumulator's binding; else the plain product
  const inOut: MatmulKernelOptions = {
    tile: dETile,
    aDtype: "f32",
    bDtype: spec.dtype,
    aTrans: false,
    bTrans: true,
    aFromOut: true,
    vecB: dETile.vec === true && dETile.bn % vecWidth(spec.dtype) === 0 &&
      spec.d % vecWidth(spec.dtype) === 0,
  };
  // 16-byte loads of G and stores of dE (one vec4<f32> binding) where the chunk allows, else
  // scalar ones (compiled on first use: an odd vocabulary or d)
  const vec4: MatmulKernelOptions = { ...inOut, vecA: true, vecOut: true };
  const dEShared = o.out16
    ? await compileKernel(ctx, matmulSignature(vec4), matmulWgsl(vec4), "dense dE product")
    : undefined;
  let dEScalar: typeof dEShared;
  const sharedKernel = (vec: boolean) =>
    vec ? dEShared! : (dEScalar ??= compileKernelNow(
      ctx,
      matmulSignature(inOut),
      matmulWgsl(inOut),
      "dense dE product (scalar)",
    ));
  const dEPlain = o.out16 ? undefined : await prepareMatmul(ctx, {
    tile: dETile,
    aDtype: "f32",
    bDtype: spec.dtype,
    aTrans: false,
    bTrans: true,
  });
  const applies = (chunks: DenseDEChunks | undefined): chunks is DenseDEChunks =>
    chunks !== undefined && chunks.shared === o.out16;
  const prepared = {
    lastChunkRows: 0,
    above: decision.above,
    applies: (a: DenseDEArgs) => applies(denseDEChunks(ctx, a, spec)),
    record(a: DenseDEArgs, filtered: () => void, shared?: SharedArg): boolean {
      prepared.lastChunkRows = 0;
      const { n, v, d } = spec;
      const chunks = denseDEChunks(ctx, a, spec);
      if (!applies(chunks)) return false;
      const { free, start, vc } = chunks;
      prepared.lastChunkRows = vc;
      const { rec } = a;
      decision.record(a, 0, shared?.share);
      decision.under(rec, 0, filtered);
      if (shared) decision.under(rec, 2, shared.fn);
      // three dispatches a chunk, in as few gated passes as they fit
      const starts = Array.from({ length: Math.ceil(v / vc) }, (_, i) => i * vc);
      decision.under(rec, 1, () => {
        recordGatedPasses(rec, "dense dE", starts, () => 3, (v0, pass) => {
          const cols = Math.min(v, v0 + vc) - v0;
          const z = denseDEChunk(ctx, chunks, n, cols);
          const cv = rowView(a.c, v0, v0 + cols);
          const e = { tensor: a.e, trans: false };
          zMm.record(rec, { a: e, b: { view: cv, trans: false }, out: z, splitK: 1, pass });
          const { targets, lse, w } = a;
          grad.record(rec, { logits: z, targets, lse, w, grad: z, colStart: v0, pass });
          const g = { tensor: z, trans: false }, ct = { view: cv, trans: true };
          if (dEPlain) {
            const acc = { out: a.grads.dE, accumulate: true, splitK: 1 };
            dEPlain.record(rec, { a: g, b: ct, ...acc, pass });
            return;
          }
          const params = {
            M: n,
            N: d,
            K: cols,
            aOff: start / 4,
            sAm: cols,
            sAk: 1,
            bOff: v0 * d,
            sBn: 1,
            sBk: d,
            cOff: 0,
            sCm: d,
            accumulate: 1,
            alpha: 1,
            kPer: cols,
            first: 1,
          };
          const kernel = sharedKernel(cols % 4 === 0 && d % 4 === 0);
          const bg = kernel.bind(rec, params, {
            b: a.c.shards[0].buffer,
            outp: free,
            part: ctx.unusedBinding,
          });
          const grid = gemmGrid(dETile, Math.ceil(n / dETile.bm), Math.ceil(d / dETile.bn));
          pass.dispatch(kernel.pipeline, bg, ...grid, 1);
        });
      });
      return true;
    },
    took() {
      return prepared.lastChunkRows === 0 ? Promise.resolve(false) : decision.took();
    },
    release() {
      decision.release();
    },
  };
  return prepared;
}
