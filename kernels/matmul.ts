/**
 * Plain matrix product out = A·Bᵀ (+ out) on sharded tensors, for the materialised methods (logits
 * = E·Cᵀ, dE = G·C, dC = Gᵀ·E) and as the speed yardstick of the fused kernels.
 *
 * Logical A is M×K and B is N×K. Each is given as a tensor holding it (`trans: false`, rows = M or
 * N) or its transpose (`trans: true`, rows = K). The launcher dispatches once per combination of
 * shards that overlap, with offsets in a uniform block; products split along K by shard boundaries
 * are accumulated in order, so results do not depend on scheduling.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor, Shard, TensorDtype } from "../gpu/tensor.ts";
import {
  accSlots,
  dtypeHelpers,
  enableDirectives,
  gemmMainloop,
  gemmShared,
  gemmThreadCoords,
  type GemmTile,
  tileThreads,
  validateTile,
  vecLoadsFit,
  vecWidth,
  wgslStorageType,
} from "./gemm_codegen.ts";

/** Generator options of the matmul kernel. */
export interface MatmulKernelOptions {
  tile: GemmTile;
  aDtype: TensorDtype;
  bDtype: TensorDtype;
  /** Whether A is held transposed (K×M) / B transposed (K×N). */
  aTrans: boolean;
  bTrans: boolean;
  /** Output dtype: f32 only (outputs are accumulators). */
  scale?: boolean;
  /**
   * Declare A / B as 16-byte vectors and load them so (only for operands not transposed; the
   * launcher picks this variant per call where K and the offsets are multiples of the width).
   */
  vecA?: boolean;
  vecB?: boolean;
}

/** WGSL of the matmul kernel. Params: M N K m0 n0 aOff sAm sAk bOff sBn sBk cOff sCm accumulate alpha. */
export function matmulWgsl(o: MatmulKernelOptions): string {
  validateTile(o.tile);
  const t = o.tile;
  const dts = [o.aDtype, o.bDtype];
  const store = accSlots(t).map((s) =>
    `{ let m = m0 + ${s.row}; let n = n0 + ${s.col};
    if (m < P.M && n < P.N) {
      let i = P.cOff + m * P.sCm + n;
      var v = P.alpha * ${s.expr};
      if (P.accumulate != 0u) { v = v + outp[i]; }
      outp[i] = v;
    } }`
  ).join("\n  ");
  return `${enableDirectives(dts)}
struct Params { M: u32, N: u32, K: u32, aOff: u32, sAm: u32, sAk: u32, bOff: u32, sBn: u32,
  sBk: u32, cOff: u32, sCm: u32, accumulate: u32, alpha: f32, _p0: u32, _p1: u32, _p2: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<${wgslStorageType(o.aDtype, o.vecA)}>;
@group(0) @binding(2) var<storage, read> b: array<${wgslStorageType(o.bDtype, o.vecB)}>;
@group(0) @binding(3) var<storage, read_write> outp: array<f32>;
${
    dtypeHelpers([{ name: "a", dtype: o.aDtype, vec: o.vecA }, {
      name: "b",
      dtype: o.bDtype,
      vec: o.vecB,
    }])
  }
${matmulEntry(o, store)}
`;
}

/**
 * The compute entry point shared by the matmul kernels: workgroup staging, the unrolled main loop
 * over the tile of output (wg.y, wg.x) with operands `a`, `b` and uniform block `P` (fields M, N,
 * K, aOff, sAm, sAk, bOff, sBn, sBk), then `stores` (statements using m0, n0, tm, tn and the
 * accumulators).
 */
export function matmulEntry(o: MatmulKernelOptions, stores: string): string {
  const t = o.tile;
  return `${gemmShared({ tile: t })}
@compute @workgroup_size(${tileThreads(t)})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(t)}
  let m0 = wg.y * ${t.bm}u;
  let n0 = wg.x * ${t.bn}u;
  ${
    gemmMainloop({
      tile: t,
      a: { dtype: o.aDtype, contig: o.aTrans ? "mn" : "k", vec: o.vecA },
      b: { dtype: o.bDtype, contig: o.bTrans ? "mn" : "k", vec: o.vecB },
      aBuf: "a",
      bBuf: "b",
      M: "P.M",
      N: "P.N",
      K: "P.K",
      m0: "m0",
      n0: "n0",
      aOff: "P.aOff",
      sAm: "P.sAm",
      sAk: "P.sAk",
      bOff: "P.bOff",
      sBn: "P.sBn",
      sBk: "P.sBk",
    })
  }
  ${stores}
}`;
}

/** One operand of {@link matmul}. */
export interface MatmulOperand {
  tensor: DeviceTensor;
  /** The tensor holds the transpose of the logical operand. */
  trans: boolean;
}

/** Options of {@link matmul}. */
export interface MatmulOptions {
  a: MatmulOperand;
  b: MatmulOperand;
  out: DeviceTensor;
  /** Add to the output instead of overwriting it. */
  accumulate?: boolean;
  /** Scale of the product (default 1). */
  alpha?: number;
  tile: GemmTile;
  label?: string;
}

interface Piece {
  shard: Shard;
  /** Range of the logical index held (rows M/N or K, depending on trans). */
  lo: number;
  hi: number;
}

const pieces = (t: DeviceTensor): Piece[] =>
  t.shards.map((s) => ({ shard: s, lo: s.rowStart, hi: s.rowStart + s.rows }));

/** A compiled matmul: call {@link PreparedMatmul.record} to add it to a Recorder. */
export interface PreparedMatmul {
  record(rec: Recorder, o: MatmulOptions): void;
}

/** Compiles the kernel for these dtypes and layouts. */
export async function prepareMatmul(
  ctx: GpuContext,
  k: MatmulKernelOptions,
): Promise<PreparedMatmul> {
  const pipeline = await ctx.pipeline(matmulWgsl(k), "matmul");
  // With a tile asking for vector loads, a second variant loads the operands held untransposed
  // 16 bytes at a time; a call uses it when K and its offsets are multiples of the widths.
  const vecA = !k.aTrans && vecLoadsFit(k.tile, k.aDtype, vecWidth(k.aDtype));
  const vecB = !k.bTrans && vecLoadsFit(k.tile, k.bDtype, vecWidth(k.bDtype));
  const vecPipeline = vecA || vecB
    ? await ctx.pipeline(matmulWgsl({ ...k, vecA, vecB }), "matmul_vec")
    : undefined;
  const wa = vecWidth(k.aDtype), wb = vecWidth(k.bDtype);
  return {
    record(rec, o) {
      const { a, b, out } = o;
      const M = a.trans ? a.tensor.cols : a.tensor.rows;
      const K = a.trans ? a.tensor.rows : a.tensor.cols;
      const N = b.trans ? b.tensor.cols : b.tensor.rows;
      const Kb = b.trans ? b.tensor.rows : b.tensor.cols;
      if (K !== Kb || out.rows !== M || out.cols !== N || out.dtype !== "f32") {
        throw new RangeError(
          `matmul: shapes A ${M}×${K}, B ${N}×${Kb}, out ${out.rows}×${out.cols} ${out.dtype}`,
        );
      }
      const t = o.tile;
      const started = new Set<string>();
      rec.pass(o.label ?? "matmul", (p) => {
        for (const os of pieces(out)) {
          for (const ap of pieces(a.tensor)) {
            // m-range and k-range from A
            const mLo = Math.max(os.lo, a.trans ? 0 : ap.lo),
              mHi = Math.min(os.hi, a.trans ? M : ap.hi);
            const akLo = a.trans ? ap.lo : 0, akHi = a.trans ? ap.hi : K;
            if (mLo >= mHi) continue;
            for (const bp of pieces(b.tensor)) {
              const nLo = b.trans ? 0 : bp.lo, nHi = b.trans ? N : bp.hi;
              const kLo = Math.max(akLo, b.trans ? bp.lo : 0);
              const kHi = Math.min(akHi, b.trans ? bp.hi : K);
              if (nLo >= nHi || kLo >= kHi) continue;
              const region = `${mLo}:${nLo}`;
              const acc = o.accumulate || started.has(region) ? 1 : 0;
              started.add(region);
              // element offsets inside each shard
              const aStart = a.trans ? (kLo - ap.lo) * M + mLo : (mLo - ap.lo) * K + kLo;
              const bStart = b.trans ? (kLo - bp.lo) * N + nLo : (nLo - bp.lo) * K + kLo;
              const words = new Uint32Array(16);
              const f = new Float32Array(words.buffer);
              words.set([
                mHi - mLo,
                nHi - nLo,
                kHi - kLo,
                aStart,
                a.trans ? 1 : K,
                a.trans ? M : 1,
                bStart,
                b.trans ? 1 : K,
                b.trans ? N : 1,
                (mLo - os.lo) * N + nLo,
                N,
                acc,
              ]);
              f[12] = o.alpha ?? 1;
              const u = rec.uniform(words, "matmul params");
              const useVec = vecPipeline !== undefined &&
                (!vecA || (K % wa === 0 && (kHi - kLo) % wa === 0 && aStart % wa === 0)) &&
                (!vecB || (K % wb === 0 && (kHi - kLo) % wb === 0 && bStart % wb === 0));
              const pl = useVec ? vecPipeline : pipeline;
              const bg = rec.bindGroup(pl, [
                u,
                ap.shard.buffer,
                bp.shard.buffer,
                os.shard.buffer,
              ]);
              p.dispatch(
                pl,
                bg,
                Math.ceil((nHi - nLo) / t.bn),
                Math.ceil((mHi - mLo) / t.bm),
              );
            }
          }
        }
      });
    },
  };
}
