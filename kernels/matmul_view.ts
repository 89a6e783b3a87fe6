/**
 * Matrix products on row ranges of sharded tensors: out[rows] = alpha·A·Bᵀ (+ out) where each
 * operand and the output may be a range of rows of a larger tensor (a token chunk of E, the rows
 * of dE a chunk owns). The output is f32 (kernels/matmul.ts) or a packed 16-bit dtype
 * (kernels/matmul_store16.ts); both kernels take element offsets and strides in a uniform block,
 * so a range is only a different offset. Like kernels/matmul.ts, the launcher dispatches once per
 * combination of overlapping shards, and products split along K by shard boundaries are
 * accumulated in order (f32 outputs only: a 16-bit output cannot hold a partial sum).
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor, TensorDtype } from "../gpu/tensor.ts";
import type { GemmTile } from "./gemm_codegen.ts";
import { matmulWgsl } from "./matmul.ts";
import { matmulStore16Wgsl } from "./matmul_store16.ts";

/** Rows [lo, hi) of a tensor. */
export interface RowView {
  tensor: DeviceTensor;
  lo: number;
  hi: number;
}

/** Rows [lo, hi) of `t` (default: all of them). */
export function rowView(t: DeviceTensor, lo = 0, hi = t.rows): RowView {
  if (!(0 <= lo && lo <= hi && hi <= t.rows)) {
    throw new RangeError(`${t.label}: rows [${lo}, ${hi}) out of 0..${t.rows}`);
  }
  return { tensor: t, lo, hi };
}

/** One operand: a row range of the tensor holding it or (trans) its transpose. */
export interface ViewOperand {
  view: RowView;
  /** The tensor holds the transpose of the logical operand (its rows index K). */
  trans: boolean;
}

/** Options of {@link PreparedMatmulView.record}. */
export interface ViewMatmulOptions {
  a: ViewOperand;
  b: ViewOperand;
  out: RowView;
  /** Add to the output instead of overwriting it (f32 outputs only). */
  accumulate?: boolean;
  /** Scale of the product (default 1). */
  alpha?: number;
  tile: GemmTile;
  label?: string;
}

/** Generator options: operand dtypes and layouts, and the output dtype. */
export interface MatmulViewKernelOptions {
  tile: GemmTile;
  aDtype: TensorDtype;
  bDtype: TensorDtype;
  aTrans: boolean;
  bTrans: boolean;
  /** f32 (default), bf16 or f16. */
  outDtype?: TensorDtype;
}

/** A compiled product on row views. */
export interface PreparedMatmulView {
  record(rec: Recorder, o: ViewMatmulOptions): void;
}

interface _Piece {
  buffer: TrackedBuffer;
  /** Range of the view's logical rows held by this shard. */
  lo: number;
  hi: number;
  /** The view's logical row index of the shard's first row (may be negative). */
  base: number;
}

function _pieces(v: RowView): _Piece[] {
  const out: _Piece[] = [];
  for (const s of v.tensor.shards) {
    const lo = Math.max(s.rowStart, v.lo), hi = Math.min(s.rowStart + s.rows, v.hi);
    if (lo < hi) {
      out.push({ buffer: s.buffer, lo: lo - v.lo, hi: hi - v.lo, base: s.rowStart - v.lo });
    }
  }
  return out;
}

/** Compiles the product for these dtypes and layouts. */
export async function prepareMatmulView(
  ctx: GpuContext,
  k: MatmulViewKernelOptions,
): Promise<PreparedMatmulView> {
  const outDtype = k.outDtype ?? "f32";
  if (outDtype !== "f32" && outDtype !== "bf16" && outDtype !== "f16") {
    throw new RangeError(`matmul: unsupported output dtype ${outDtype}`);
  }
  const wide = outDtype === "f32";
  const code = outDtype === "f32" ? matmulWgsl(k) : matmulStore16Wgsl({ ...k, outDtype });
  const pipeline = await ctx.pipeline(code, wide ? "matmul" : `matmul→${outDtype}`);
  return {
    record(rec, o) {
      const { a, b, out } = o;
      const aRows = a.view.hi - a.view.lo, bRows = b.view.hi - b.view.lo;
      const M = a.trans ? a.view.tensor.cols : aRows;
      const K = a.trans ? aRows : a.view.tensor.cols;
      const N = b.trans ? b.view.tensor.cols : bRows;
      const Kb = b.trans ? bRows : b.view.tensor.cols;
      const outRows = out.hi - out.lo;
      if (
        K !== Kb || outRows !== M || out.tensor.cols !== N || out.tensor.dtype !== outDtype ||
        a.trans !== k.aTrans || b.trans !== k.bTrans
      ) {
        throw new RangeError(
          `matmul: A ${M}×${K}${a.trans ? "ᵀ" : ""}, B ${N}×${Kb}${b.trans ? "ᵀ" : ""}, ` +
            `out ${outRows}×${out.tensor.cols} ${out.tensor.dtype} (kernel: ${outDtype}, ` +
            `aTrans ${k.aTrans}, bTrans ${k.bTrans})`,
        );
      }
      if (!wide && o.accumulate) throw new RangeError("matmul: cannot accumulate into 16 bits");
      const t = o.tile;
      const started = new Set<string>();
      const outPieces = _pieces(out), aPieces = _pieces(a.view), bPieces = _pieces(b.view);
      rec.pass(o.label ?? "matmul", (p) => {
        for (const os of outPieces) {
          for (const ap of aPieces) {
            const mLo = Math.max(os.lo, a.trans ? 0 : ap.lo);
            const mHi = Math.min(os.hi, a.trans ? M : ap.hi);
            const akLo = a.trans ? ap.lo : 0, akHi = a.trans ? ap.hi : K;
            if (mLo >= mHi) continue;
            for (const bp of bPieces) {
              const nLo = b.trans ? 0 : bp.lo, nHi = b.trans ? N : bp.hi;
              const kLo = Math.max(akLo, b.trans ? bp.lo : 0);
              const kHi = Math.min(akHi, b.trans ? bp.hi : K);
              if (nLo >= nHi || kLo >= kHi) continue;
              const region = `${mLo}:${nLo}`;
              const split = started.has(region);
              if (split && !wide) {
                throw new RangeError("matmul: a 16-bit output cannot sum a K split across shards");
              }
              const acc = o.accumulate || split ? 1 : 0;
              started.add(region);
              const aStart = a.trans ? (kLo - ap.base) * M + mLo : (mLo - ap.base) * K + kLo;
              const bStart = b.trans ? (kLo - bp.base) * N + nLo : (nLo - bp.base) * K + kLo;
              const words = new Uint32Array(16);
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
                (mLo - os.base) * N + nLo,
                N,
                acc,
              ]);
              new Float32Array(words.buffer)[12] = o.alpha ?? 1;
              const u = rec.uniform(words, "matmul params");
              const bg = rec.bindGroup(pipeline, [u, ap.buffer, bp.buffer, os.buffer]);
              p.dispatch(
                pipeline,
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
