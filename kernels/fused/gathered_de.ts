/**
 * dE of the fused backward's kept tiles as one dense product per token tile: the kept tiles are
 * gathered instead of walked one by one.
 *
 * The per-tile dE pass (kernels/fused/kept_tiles.ts) recomputes a kept tile's logits and then adds
 * P·C[vocab tile, :] into its token rows in d chunks, each a product of depth VT with a
 * read-modify-write of the f32 accumulator: on the `llm` fixture (38% of tiles kept) it ran at a
 * third of the plain product's rate. Here the same work is three passes, about twice as fast on
 * the H100 where many tiles are kept and a few tenths of a millisecond slower at the paper's
 * shape, where almost none are (docs/performance.md):
 *
 * 0. pass `dE plan` ({@link gatheredPlanWgsl}, one workgroup): counts each token tile's kept tiles
 *    and packs the token tiles in order into *rounds* of at most `cap` slots, writing each round's
 *    workgroup counts (read by indirect dispatches: empty rounds cost nothing), its first token
 *    tile, and each token tile's first slot in its round.
 * 1. pass `kept g` ({@link keptGradWgsl}): one workgroup per (vocab tile, token tile) of a round;
 *    a tile the mask keeps recomputes its TT×VT logits and stores the unweighted gradient g (see
 *    gradValue in kernels/fused/backward_wgsl.ts) in the token tile's slot `rank`, rank being the
 *    count of kept tiles before it in the token tile's mask row (so slots follow the vocab order),
 *    and the C rows of its VT entries in the *row list* (through the vocab order when sorting; as
 *    f32, exact below 2²⁴). Skipped tiles return at once.
 * 2. pass `dE` ({@link gatheredDEWgsl}): one workgroup per (token tile, BN columns of d) computes
 *    Σ_j g[slot j]·C[rows of slot j, columns] as a product of depth (kept tiles)·VT, the B
 *    operand's rows gathered through the row list (one dependent load), and adds w_n times it
 *    into dE's f32 accumulator (which already holds the exact terms: kernels/fused/corrections.ts).
 *
 * Storage: no memory of its own (the plan's 9 words a token tile are made at prepare time). dE is
 * formed completely before dC's storage is first written (see "Gradient dtype" in
 * kernels/fused/backward_plan.ts), so the slots and row lists live in dC's first output buffer,
 * behind dE's f32 accumulator when that is there too: `cap` slots. A token tile has at most as
 * many kept tiles as vocab tiles, so every round of the plan closes with at least ⌊cap / vocab
 * tiles⌋ token tiles: the host records that worst case's rounds (bf16 gradients at the paper's
 * shape: 8; on `llm` 4096×24,576×2304: 7; f32 gradients 4 and 2), nothing can overflow and
 * nothing is read back. g is stored in f32: in f16 a confident token's p ≈ 1 at its target would
 * keep only 2⁻¹² of 1 − p, which the exact target term −(1 − β) cancels (tried: bf16 dE off by 1.5
 * output roundings on a peaked fixture).
 *
 * Order and ownership: every output element is owned by one workgroup of one dispatch, its kept
 * tiles added in vocab order in one accumulator: bitwise reproducible, no atomics on floats (the
 * only atomic counts mask bits in workgroup memory).
 *
 * Where it applies ({@link PreparedGatheredDE.record} returns false otherwise and the caller runs
 * the per-tile pass): one binding each of E, C, dE and dC (one token and one vocab segment), VT a
 * multiple of 4, and dC's first buffer holding at least one token tile's worst case of slots.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import { type Engine, isDawn } from "../../gpu/engine.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor, download } from "../../gpu/tensor.ts";
import { type GemmTile, TILE_HW } from "../gemm_codegen.ts";
import { type BackwardGradients, dCScratch, type TileSegment } from "./backward_plan.ts";
import type { BackwardTile } from "./backward_tiles.ts";
import { compileKernel } from "../../gpu/signature.ts";
import {
  type GatheredDEKernelOptions,
  gatheredDESignature,
  gatheredDEWgsl,
  gatheredPlanWgsl,
  keptGradSignature,
  keptGradWgsl,
  PLAN_SIG,
  slotBytes,
} from "./gathered_de_wgsl.ts";

export type { GatheredDEKernelOptions } from "./gathered_de_wgsl.ts";

/** Where the gathered dE's product runs: a hardware adapter or not, and the WebGPU engine. */
export interface GatheredDETarget {
  /** A hardware adapter (not a software one). */
  hardware: boolean;
  /** The engine (gpu/engine.ts). */
  engine: Engine;
}

/**
 * The product tile of pass `dE`: for 128-token tiles on hardware 128×64 (256 threads, 16-byte
 * loads, [k][row] staging), 8×4 a thread under Deno's WebGPU and 4×8 a thread under Dawn (on the
 * H200 each the faster on its engine, by 5% on wgpu and 13% on Dawn; 128×32, chosen on the H100
 * before the row list, took 1.6× as long on Dawn: docs/performance.md); else TT×64 with at most
 * 256 threads (TT/16 rows a thread, at least 4).
 */
export function gatheredDETile(bt: BackwardTile, on: GatheredDETarget): GemmTile {
  if (on.hardware && bt.tokens === TILE_HW.bm) {
    return isDawn(on.engine) ? { ...TILE_HW, bn: 64, tm: 4, tn: 8 } : { ...TILE_HW, bn: 64, tn: 4 };
  }
  return { bm: bt.tokens, bn: 64, bk: 16, tm: Math.max(4, bt.tokens / 16), tn: 4 };
}

/** The tensors and segments of a record ({@link PreparedGatheredDE.record}). */
export interface GatheredDEArgs {
  rec: Recorder;
  e: DeviceTensor;
  c: DeviceTensor;
  lse: TrackedBuffer;
  w: TrackedBuffer;
  perm?: TrackedBuffer;
  mask: TrackedBuffer;
  tok: TileSegment[];
  voc: TileSegment[];
  vTotal: number;
  d: number;
  /**
   * The gradients: dE's f32 accumulator is slab part 0 (16-bit gradients, one slab, one part) or
   * the f32 output (one shard); the free storage is dC's first output buffer.
   */
  grads: BackwardGradients;
}

/** Compiled passes of the gathered dE. */
export interface PreparedGatheredDE {
  /** Rounds recorded by the last successful record (0 before any, or after a fallback). */
  lastRounds: number;
  /**
   * Records the plan, then per round pass `kept g` and pass `dE` (their workgroup counts from
   * the plan), and returns true; or records nothing and returns false where the gathered form
   * does not apply (see the module doc).
   */
  record(a: GatheredDEArgs): boolean;
  /** The last record's rounds that held token tiles (reads the plan on the GPU). */
  usedRounds(): Promise<number>;
  /** Frees the plan's buffer. */
  release(): void;
}

/** Options of {@link prepareGatheredDE}. */
export interface GatheredDEPrepareOptions extends GatheredDEKernelOptions {
  /** Tokens n (sizes the plan). */
  n: number;
  /** Cap on slots per round (default: as many as the storage holds; tests force rounds). */
  maxRoundSlots?: number;
}

/** What a caller may set of the gathered dE (tests, tuning); the rest comes from the backward. */
export interface GatheredDETuning {
  /** Cap on slots per round ({@link GatheredDEPrepareOptions.maxRoundSlots}). */
  maxRoundSlots?: number;
  /** The kept g pass's tile ({@link GatheredDEKernelOptions.keptTile}). */
  keptTile?: GemmTile;
  /** The product's tile (default {@link gatheredDETile}). */
  productTile?: GemmTile;
}

/** dE's f32 accumulator: one slab of one part (16-bit gradients) or the one-shard f32 output. */
function _accumulator(o: GatheredDEPrepareOptions, g: BackwardGradients) {
  if (o.accShared) {
    if (g.slabs.length !== 1 || g.parts !== 1) return undefined;
    return g.slabs[0];
  }
  if (g.dEOut.shards.length !== 1 || g.dEOut.dtype !== "f32") return undefined;
  return { buffer: g.dEOut.shards[0].buffer, r0: 0, rows: g.dEOut.rows };
}

/**
 * The slots a round holds (cap), the rounds the worst case needs (every token tile's every vocab
 * tile kept: each round then holds ⌊cap / vocab tiles⌋ token tiles, and the plan's greedy rounds
 * never need more), and the word offsets of the row lists and slots in the free buffer.
 */
function _layout(
  o: GatheredDEPrepareOptions,
  a: GatheredDEArgs,
  sizes: { nVT: number; tTotal: number; maxBindingBytes: number },
) {
  const { nVT, tTotal } = sizes;
  const acc = _accumulator(o, a.grads);
  if (!acc) return undefined;
  const { free, shared, start, end } = dCScratch(a.grads, acc, a.d, sizes.maxBindingBytes);
  if (shared !== o.accShared || acc.r0 !== 0 || acc.rows < a.tok[0].end) return undefined;
  const VT = o.tile.vocab;
  const cap = Math.min(
    Math.floor((end - start - 256) / (VT * 4 + slotBytes(o.tile))),
    o.maxRoundSlots ?? Infinity,
  );
  if (cap < nVT) return undefined;
  const rounds = Math.ceil(tTotal / Math.min(Math.floor(cap / nVT), 65535));
  const lW = start / 4;
  const gW = lW + Math.ceil((cap * VT * 4) / 256) * 64;
  return { cap, rounds, lW, gW, acc, free };
}

/** Compiles the three passes and makes the plan's buffer (9 words a token tile). */
export async function prepareGatheredDE(
  ctx: GpuContext,
  o: GatheredDEPrepareOptions,
): Promise<PreparedGatheredDE> {
  const planPass = await compileKernel(
    ctx,
    PLAN_SIG,
    gatheredPlanWgsl(),
    "fused_backward_dE_plan",
  );
  const gSig = keptGradSignature(o);
  const gPass = await compileKernel(ctx, gSig, keptGradWgsl(o), "fused_backward_kept_g");
  const gemm = await compileKernel(
    ctx,
    gatheredDESignature(o),
    gatheredDEWgsl(o),
    "fused_backward_gathered_dE",
  );
  const tMax = Math.ceil(o.n / o.tile.tokens);
  const plan = createTensor(ctx, {
    dtype: "u32",
    rows: 9 * tMax,
    cols: 1,
    role: "workspace",
    label: "gathered dE plan",
    usage: GPUBufferUsage.INDIRECT,
  });
  const pb = plan.shards[0].buffer;
  const prepared: PreparedGatheredDE = {
    lastRounds: 0,
    record(a) {
      prepared.lastRounds = 0;
      const [ts, vs] = [a.tok[0], a.voc[0]];
      const oneBinding = (t: DeviceTensor) => t.shards.length === 1;
      if (a.tok.length !== 1 || a.voc.length !== 1 || !oneBinding(a.e) || !oneBinding(a.c)) {
        return false;
      }
      if (vs.tiles > 65535 || vs.end > 2 ** 24 || ts.tiles > tMax) return false;
      const lay = _layout(o, a, {
        nVT: vs.tiles,
        tTotal: ts.tiles,
        maxBindingBytes: ctx.maxBindingBytes,
      });
      if (!lay) return false;
      const { rec } = a;
      const dX = Math.ceil(a.d / o.gemmTile.bn);
      const q = {
        T: ts.tiles,
        nVT: vs.tiles,
        cap: lay.cap,
        nR: lay.rounds,
        tBase: ts.base,
        vTotal: a.vTotal,
        vBase: vs.base,
        gX: vs.tiles,
        dX,
      };
      rec.pass("fused backward dE plan", (p) => {
        p.dispatch(planPass.pipeline, planPass.bind(rec, q, { mask: a.mask, plan: pb }), 1);
      });
      const eb = a.e.shards[0].buffer, cb = a.c.shards[0].buffer;
      for (let r = 0; r < lay.rounds; r++) {
        // E, C and dE are one binding each from row 0 (see `record`'s conditions)
        const P = gSig.uniform(rec, {
          tS: ts.start,
          tE: ts.end,
          eR0: 0,
          vS: vs.start,
          vE: vs.end,
          cR0: 0,
          oR0: 0,
          d: a.d,
          tBase: ts.base,
          vBase: vs.base,
          vTotal: a.vTotal,
          nVT: vs.tiles,
          round: r,
          gW: lay.gW,
          lW: lay.lW,
          nR: lay.rounds,
        }, "gathered dE params");
        rec.pass("fused backward kept g", (p) => {
          const bg = gPass.bind(rec, P, {
            e: eb,
            c: cb,
            lse: a.lse,
            w: a.w,
            perm: a.perm,
            mask: a.mask,
            plan: pb,
            ws: lay.free,
          });
          p.dispatchIndirect(gPass.pipeline, bg, pb, 24 * r);
        });
        rec.pass("fused backward dE", (p) => {
          const bg = gemm.bind(rec, P, {
            c: cb,
            w: a.w,
            plan: pb,
            ws: lay.free,
            acc: o.accShared ? undefined : lay.acc.buffer,
          });
          p.dispatchIndirect(gemm.pipeline, bg, pb, 24 * r + 12);
        });
      }
      prepared.lastRounds = lay.rounds;
      return true;
    },
    async usedRounds() {
      const words = await download(ctx, plan);
      let used = 0;
      for (let r = 0; r < prepared.lastRounds; r++) if (words[6 * r + 1] > 0) used++;
      return used;
    },
    release() {
      plan.destroy();
    },
  };
  return prepared;
}
