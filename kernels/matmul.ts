/**
 * The GEMM core: out[rows] = alpha·A·Bᵀ (+ out) on row ranges of sharded tensors, for every product
 * the methods run (logits = E·Cᵀ, dE = G·C, dC = Gᵀ·E, chunk products) and as the speed yardstick
 * of the fused kernels.
 *
 * Logical A is M×K and B is N×K. Each is given as a row range of a tensor holding it (`trans:
 * false`, rows index M or N) or its transpose (`trans: true`, rows index K). The output is f32 or a
 * packed 16-bit dtype. One generator (gemm_codegen.ts) serves every layout:
 * - 16-byte vector loads along the contiguous index of each operand, whichever it is (k for an
 *   operand held as is, the rows for one held transposed), wherever the strides and offsets of the
 *   call allow; the launcher picks the variant per dispatch, scalar loads otherwise;
 * - split-K for outputs whose tiles do not fill the GPU's last wave: the K range is cut into S
 *   slices; the first writes the output (f32) and the others their partial products to an f32
 *   workspace, then one pass adds them in slice order: the result depends on S only, never on
 *   scheduling. S is chosen from the shape ({@link autoSplitK}), so runs are bitwise reproducible.
 * The launcher dispatches once per combination of shards that overlap, with offsets in a uniform
 * block; products split along K by shard boundaries are accumulated in order (f32 outputs only).
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor, TensorDtype } from "../gpu/tensor.ts";
import {
  accSlots,
  gemmMainloop,
  gemmShared,
  gemmThreadCoords,
  type GemmTile,
  tileThreads,
  validateTile,
} from "./gemm_codegen.ts";
import { dtypeHelpers, enableDirectives, vecWidth, wgslStorageType } from "./wgsl_common.ts";
import { type Dtype16, wgslTo16 } from "./cast16.ts";

/** Generator options of the product kernel. */
export interface MatmulKernelOptions {
  tile: GemmTile;
  aDtype: TensorDtype;
  bDtype: TensorDtype;
  /** Whether A is held transposed (K×M) / B transposed (K×N). */
  aTrans: boolean;
  bTrans: boolean;
  /** f32 (default), bf16 or f16. */
  outDtype?: TensorDtype;
  /** Declare A / B as 16-byte vectors and load them so (along their contiguous index). */
  vecA?: boolean;
  vecB?: boolean;
  /**
   * f32 output (and split-K partials) declared as vec4s and written 4 columns at a time (the
   * launcher picks it where N and the output offset are multiples of 4).
   */
  vecOut?: boolean;
}

const PARAMS =
  `struct Params { M: u32, N: u32, K: u32, aOff: u32, sAm: u32, sAk: u32, bOff: u32, sBn: u32,
  sBk: u32, cOff: u32, sCm: u32, accumulate: u32, alpha: f32, kPer: u32, first: u32, _p: u32 };
@group(0) @binding(0) var<uniform> P: Params;`;

/** The f32 store of every accumulator (alpha, optional accumulation into the output). */
function _storeF32(t: GemmTile, vec: boolean): string {
  if (vec) {
    return _vecSlots(t).map((s) =>
      `{ let m = m0 + ${s.row}; let n = n0 + ${s.col};
    if (m < P.M && n < P.N) {
      let i = (P.cOff + m * P.sCm + n) >> 2u;
      var v = P.alpha * ${s.vec};
      if (P.accumulate != 0u) { v = v + outp[i]; }
      outp[i] = v;
    } }`
    ).join("\n  ");
  }
  return accSlots(t).map((s) =>
    `{ let m = m0 + ${s.row}; let n = n0 + ${s.col};
    if (m < P.M && n < P.N) {
      let i = P.cOff + m * P.sCm + n;
      var v = P.alpha * ${s.expr};
      if (P.accumulate != 0u) { v = v + outp[i]; }
      outp[i] = v;
    } }`
  ).join("\n  ");
}

/** The first slot of every vec4 accumulator (4 adjacent columns of one row). */
function _vecSlots(t: GemmTile) {
  const seen = new Set<string>();
  return accSlots(t).filter((s) => !seen.has(s.vec) && seen.add(s.vec) !== undefined);
}

/**
 * WGSL of a 16-bit store: `store4(m, nb, v)` writes 4 adjacent columns of one row rounded to
 * nearest even. Two 16-bit elements share a u32 word, and a word can straddle two threads' columns
 * (an odd row stride puts every other row on an odd element). A thread writes the words it owns
 * whole (atomicStore) and the half-words it shares with a neighbour with atomicAnd (clear its half)
 * then atomicOr (set it): the halves are disjoint bits, so the word ends right whatever the order,
 * without zeroed memory, and elements outside the output region keep their values.
 */
function _store16Fns(dtype: Dtype16): string {
  return `${wgslTo16(dtype)}
fn put_half(i: u32, x: f32) {
  let sh = (i & 1u) * 16u;
  atomicAnd(&outp[i >> 1u], ~(0xffffu << sh));
  atomicOr(&outp[i >> 1u], to16(x) << sh);
}
fn put_pair(i: u32, x: f32, y: f32) {
  atomicStore(&outp[i >> 1u], to16(x) | (to16(y) << 16u));
}
fn store4(m: u32, nb: u32, v: vec4<f32>) {
  if (m >= P.M || nb >= P.N) { return; }
  let cnt = min(P.N - nb, 4u);
  let base = P.cOff + m * P.sCm + nb;
  var c = 0u;
  if ((base & 1u) == 1u) {
    put_half(base, v[0]);
    c = 1u;
  }
  loop {
    if (c + 1u >= cnt) { break; }
    put_pair(base + c, v[c], v[c + 1u]);
    c = c + 2u;
  }
  if (c < cnt) { put_half(base + c, v[c]); }
}
`;
}

/**
 * WGSL of the product kernel. Params: M N K aOff sAm sAk bOff sBn sBk cOff sCm accumulate alpha
 * (a 16-bit output needs accumulate 0), kPer, first. Bindings: params, a, b, out, part.
 *
 * Split-K in one dispatch: workgroup z takes K range [z·kPer, min(K, (z+1)·kPer)). With `first` = 1
 * slice 0 stores into the output as usual and slice z ≥ 1 its f32 partial product into `part` at
 * (z − 1)·M·N (dense M×N); with `first` = 0 every slice stores into `part` at z·M·N. Unsplit
 * products run one slice (kPer = K, first = 1) and never touch `part`.
 */
export function matmulWgsl(o: MatmulKernelOptions): string {
  validateTile(o.tile);
  const t = o.tile;
  const out = o.outDtype ?? "f32";
  if (out !== "f32" && out !== "bf16" && out !== "f16") {
    throw new RangeError(`matmul: unsupported output dtype ${out}`);
  }
  const vo = o.vecOut === true && out === "f32";
  let outDecl: string, extra = "", stores: string;
  if (out === "f32") {
    outDecl = vo ? "array<vec4<f32>>" : "array<f32>";
    stores = _storeF32(t, vo);
  } else {
    outDecl = "array<atomic<u32>>";
    extra = _store16Fns(out);
    stores = _vecSlots(t)
      .map((s) => `store4(m0 + ${s.row}, n0 + ${s.col}, P.alpha * ${s.vec});`).join("\n  ");
  }
  const partStores = vo
    ? _vecSlots(t).map((s) =>
      `{ let m = m0 + ${s.row}; let n = n0 + ${s.col};
    if (m < P.M && n < P.N) { part[(pb + m * P.N + n) >> 2u] = ${s.vec}; } }`
    ).join("\n    ")
    : accSlots(t).map((s) =>
      `{ let m = m0 + ${s.row}; let n = n0 + ${s.col};
    if (m < P.M && n < P.N) { part[pb + m * P.N + n] = ${s.expr}; } }`
    ).join("\n    ");
  return `${enableDirectives([o.aDtype, o.bDtype])}
${PARAMS}
@group(0) @binding(1) var<storage, read> a: array<${wgslStorageType(o.aDtype, o.vecA)}>;
@group(0) @binding(2) var<storage, read> b: array<${wgslStorageType(o.bDtype, o.vecB)}>;
@group(0) @binding(3) var<storage, read_write> outp: ${outDecl};
@group(0) @binding(4) var<storage, read_write> part: array<${vo ? "vec4<f32>" : "f32"}>;
${
    dtypeHelpers([{ name: "a", dtype: o.aDtype, vec: o.vecA }, {
      name: "b",
      dtype: o.bDtype,
      vec: o.vecB,
    }])
  }${extra}
${
    matmulEntry(
      o,
      `if (wg.z == 0u && P.first == 1u) {
  ${stores}
  } else {
    let pb = (wg.z - P.first) * P.M * P.N;
    ${partStores}
  }`,
      { slices: true },
    )
  }
`;
}

/**
 * The compute entry point of the product kernels: workgroup staging, the unrolled main loop over
 * the tile of output (wg.y, wg.x) with operands `a`, `b` and uniform block `P` (fields M, N, K,
 * aOff, sAm, sAk, bOff, sBn, sBk), then `stores` (statements using m0, n0, tm, tn and the
 * accumulators).
 */
export function matmulEntry(
  o: MatmulKernelOptions,
  stores: string,
  opt: { slices?: boolean } = {},
): string {
  const t = o.tile;
  // with slices: this workgroup's K range starts at ks and is kn deep (see matmulWgsl)
  const sl = opt.slices === true;
  return `${gemmShared({ tile: t })}
@compute @workgroup_size(${tileThreads(t)})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(t)}
  let m0 = wg.y * ${t.bm}u;
  let n0 = wg.x * ${t.bn}u;
  ${sl ? "let ks = wg.z * P.kPer;\n  let kn = min(P.K - ks, P.kPer);" : ""}
  ${
    gemmMainloop({
      tile: t,
      a: { dtype: o.aDtype, contig: o.aTrans ? "mn" : "k", vec: o.vecA },
      b: { dtype: o.bDtype, contig: o.bTrans ? "mn" : "k", vec: o.vecB },
      aBuf: "a",
      bBuf: "b",
      M: "P.M",
      N: "P.N",
      K: sl ? "kn" : "P.K",
      m0: "m0",
      n0: "n0",
      aOff: sl ? "(P.aOff + ks * P.sAk)" : "P.aOff",
      sAm: "P.sAm",
      sAk: "P.sAk",
      bOff: sl ? "(P.bOff + ks * P.sBk)" : "P.bOff",
      sBn: "P.sBn",
      sBk: "P.sBk",
    })
  }
  ${stores}
}`;
}

/**
 * WGSL of the split-K reduction: out[m, n] = (out[m, n] +) alpha·Σ_{s<S} part[s][m][n], summed in
 * slice order. The partials are dense S×M×N; the output region has offset cOff and row stride sCm.
 * One thread per output element (4 adjacent columns for a 16-bit output, written like the
 * product's 16-bit store). Params: M, N, S, cOff, sCm, accumulate, alpha.
 */
export function splitKReduceWgsl(outDtype: TensorDtype): string {
  const wide = outDtype === "f32";
  const head = `struct Params { M: u32, N: u32, S: u32, cOff: u32, sCm: u32, accumulate: u32,
  alpha: f32, _p0: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> part: array<f32>;`;
  const sum = `fn total(m: u32, n: u32) -> f32 {
  var v = 0.0;
  for (var s = 0u; s < P.S; s++) { v = v + part[(s * P.M + m) * P.N + n]; }
  return P.alpha * v;
}`;
  if (wide) {
    return `${head}
@group(0) @binding(2) var<storage, read_write> outp: array<f32>;
${sum}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
  let i0 = gid.x + gid.y * nw.x * 256u;
  let n = i0 % P.N;
  let m = i0 / P.N;
  if (m >= P.M) { return; }
  let i = P.cOff + m * P.sCm + n;
  var v = total(m, n);
  if (P.accumulate != 0u) { v = v + outp[i]; }
  outp[i] = v;
}
`;
  }
  return `${head}
@group(0) @binding(2) var<storage, read_write> outp: array<atomic<u32>>;
${sum}
${_store16Fns(outDtype as Dtype16)}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
  let i0 = gid.x + gid.y * nw.x * 256u;
  let groups = (P.N + 3u) / 4u;
  let nb = (i0 % groups) * 4u;
  let m = i0 / groups;
  if (m >= P.M) { return; }
  var v = vec4<f32>(0.0);
  for (var c = 0u; c < 4u; c++) { if (nb + c < P.N) { v[c] = total(m, nb + c); } }
  store4(m, nb, v);
}
`;
}

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

/**
 * One operand: a row range (`view`) of the tensor holding it, or a whole tensor (`tensor`), as
 * held or (`trans`) holding its transpose (its rows index K).
 */
export type MatmulOperand =
  | { view: RowView; trans: boolean; tensor?: undefined }
  | { tensor: DeviceTensor; trans: boolean; view?: undefined };

/** Options of {@link PreparedMatmul.record}. */
export interface MatmulOptions {
  a: MatmulOperand;
  b: MatmulOperand;
  /** The output: a whole tensor or a row range. */
  out: DeviceTensor | RowView;
  /** Add to the output instead of overwriting it (f32 outputs only). */
  accumulate?: boolean;
  /** Scale of the product (default 1). */
  alpha?: number;
  /** The tile the kernel was prepared with (optional; checked when given). */
  tile?: GemmTile;
  /** K slices: a number, or "auto" (default: {@link autoSplitK}). */
  splitK?: number | "auto";
  /**
   * A buffer for the split-K partials, reused by the caller across products recorded one after
   * the other (at least {@link PreparedMatmul.workspaceBytes} of the shape). Without it a product
   * that splits K allocates its partials and releases them after the submission.
   */
  workspace?: TrackedBuffer;
  label?: string;
}

/**
 * Workgroups of the 128×128 tile an NVIDIA H100/H200 runs at once: 132 SMs × 2 (a 256-thread
 * workgroup of that tile takes about half an SM's registers). Measured: the dE = G·C product of
 * the paper's shape has 1,152 output tiles, 4.36 such waves, and ran at 0.87× the rate of the
 * logits product until split in two.
 */
export const GPU_WORKGROUP_SLOTS = 264;
/** Largest split-K workspace (bytes) {@link autoSplitK} will ask for. */
export const SPLITK_MAX_BYTES = 128 << 20;
/** Wave efficiency (workgroups / whole waves of {@link GPU_WORKGROUP_SLOTS}) split-K aims at. */
export const SPLITK_WAVE_EFFICIENCY = 0.9;

/**
 * The K slices of a product, a function of the shape only: the fewest slices S whose workgroups
 * (output tiles × S) fill their last wave of {@link GPU_WORKGROUP_SLOTS} to at least
 * {@link SPLITK_WAVE_EFFICIENCY} on average, with slices at least 16 K-steps deep and the partials
 * ((S − 1)·M·N·4 bytes for an f32 output, whose first slice goes straight to the output; S·M·N·4
 * for a 16-bit one) within {@link SPLITK_MAX_BYTES}. 1 on a software adapter, whose few threads
 * any output fills.
 */
export function autoSplitK(
  o: { m: number; n: number; k: number; tile: GemmTile; software: boolean; out16?: boolean },
): number {
  if (o.software) return 1;
  const tiles = Math.ceil(o.m / o.tile.bm) * Math.ceil(o.n / o.tile.bn);
  const byDepth = Math.floor(o.k / (16 * o.tile.bk));
  const byBytes = Math.floor(SPLITK_MAX_BYTES / (o.m * o.n * 4)) + (o.out16 ? 0 : 1);
  const most = Math.max(1, Math.min(byDepth, byBytes));
  const eff = (s: number) => {
    const w = tiles * s;
    return w / (Math.ceil(w / GPU_WORKGROUP_SLOTS) * GPU_WORKGROUP_SLOTS);
  };
  let best = 1;
  for (let s = 1; s <= most; s++) {
    if (eff(s) >= SPLITK_WAVE_EFFICIENCY) return s;
    if (eff(s) > eff(best)) best = s;
  }
  return best;
}

/** A compiled product: call {@link PreparedMatmul.record} to add it to a Recorder. */
export interface PreparedMatmul {
  record(rec: Recorder, o: MatmulOptions): void;
  /** What the last dispatch of the last record used: vector loads per operand, K slices. */
  readonly lastVariant: { vecA: boolean; vecB: boolean; splitK: number };
  /**
   * Bytes of split-K partials a product of this shape takes (0 when it does not split), with
   * `splitK` as in {@link MatmulOptions.splitK}.
   */
  workspaceBytes(shape: { m: number; n: number; k: number; splitK?: number | "auto" }): number;
}

/**
 * Whether a dispatch can read an operand with 16-byte vector loads: its start element and the
 * stride between its k-rows (held transposed) or rows (held as is) are multiples of the vector
 * width, and (held as is) so is the K range.
 */
export function vectorLoadsFit(
  o: { dtype: TensorDtype; trans: boolean; start: number; ld: number; depth: number },
): boolean {
  const w = vecWidth(o.dtype);
  return o.start % w === 0 && o.ld % w === 0 && (o.trans || o.depth % w === 0);
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

const _view = (x: MatmulOperand): RowView => x.view ?? rowView(x.tensor!);

/** Compiles the product (and its vector-load variants and split-K reduction) for these layouts. */
export async function prepareMatmul(
  ctx: GpuContext,
  k: MatmulKernelOptions,
): Promise<PreparedMatmul> {
  const outDtype = k.outDtype ?? "f32";
  const wide = outDtype === "f32";
  const label = wide ? "matmul" : `matmul→${outDtype}`;
  const t = k.tile;
  // An operand can take vector loads when the tile asks for them and holds whole vectors along
  // its contiguous index (the K-step held as is, the tile's rows held transposed).
  const canVec = (dtype: TensorDtype, trans: boolean, rows: number) =>
    t.vec === true && (dtype === "f32" || dtype === "bf16" || dtype === "f16") &&
    (trans ? rows % vecWidth(dtype) === 0 : t.bk % vecWidth(dtype) === 0);
  const vaOk = canVec(k.aDtype, k.aTrans, t.bm), vbOk = canVec(k.bDtype, k.bTrans, t.bn);
  // f32 outputs written as vec4s where the tile asks for vector accesses
  const voOk = wide && t.vec === true;
  // Pipelines by vector loads per operand and vector stores: the fastest the tile allows, the same
  // with scalar stores (outputs of a width not a multiple of 4), and all scalar; a dispatch takes
  // the first of these its strides and offsets allow (compiling every combination would triple
  // the preparation time for dispatches that do not occur at aligned shapes).
  const variants = new Map<string, GPUComputePipeline>();
  type Flags = [boolean, boolean, boolean];
  const key = ([va, vb, vo]: Flags) => `${va}${vb}${vo}`;
  // in order of preference: as asked, without vector stores, all scalar
  const ladder = ([va, vb, vo]: Flags): Flags[] => [[va, vb, vo], [va, vb, false], [
    false,
    false,
    false,
  ]];
  for (const f of ladder([vaOk, vbOk, voOk])) {
    if (variants.has(key(f))) continue;
    const [va, vb, vo] = f;
    variants.set(
      key(f),
      await ctx.pipeline(
        matmulWgsl({ ...k, outDtype, vecA: va, vecB: vb, vecOut: vo }),
        `${label}${va || vb || vo ? "_vec" : ""}`,
      ),
    );
  }
  /** The first compiled variant on the ladder of what a dispatch allows (the scalar one exists). */
  const pick = (want: Flags) => {
    const f = ladder(want).find((x) => variants.has(key(x)))!;
    return { pl: variants.get(key(f))!, va: f[0], vb: f[1] };
  };
  const reduce = await ctx.pipeline(splitKReduceWgsl(outDtype), `${label} split-K sum`);
  let lastVariant = { vecA: false, vecB: false, splitK: 1 };
  const slicesOf = (m: number, n: number, k: number, splitK: number | "auto" | undefined) =>
    splitK === undefined || splitK === "auto"
      ? autoSplitK({ m, n, k, tile: t, software: ctx.report.isFallbackAdapter, out16: !wide })
      : Math.max(1, Math.floor(splitK));
  /** K per slice and the number of slices of a K range cut into (at most) S. */
  const cut = (depth: number, S: number) => {
    // slices aligned to 16 elements (whole K-steps and vectors), at least one step each
    const step = Math.max(16, t.bk);
    const per = Math.ceil(Math.ceil(depth / S) / step) * step;
    return { per, slices: Math.ceil(depth / per) };
  };
  return {
    workspaceBytes(sh) {
      const { slices } = cut(sh.k, slicesOf(sh.m, sh.n, sh.k, sh.splitK));
      return slices <= 1 ? 0 : (slices - (wide ? 1 : 0)) * sh.m * sh.n * 4;
    },
    get lastVariant() {
      return lastVariant;
    },
    record(rec, o) {
      const aView = _view(o.a), bView = _view(o.b);
      const out = "tensor" in o.out ? o.out : rowView(o.out);
      const aRows = aView.hi - aView.lo, bRows = bView.hi - bView.lo;
      const M = o.a.trans ? aView.tensor.cols : aRows;
      const K = o.a.trans ? aRows : aView.tensor.cols;
      const N = o.b.trans ? bView.tensor.cols : bRows;
      const Kb = o.b.trans ? bRows : bView.tensor.cols;
      const outRows = out.hi - out.lo;
      if (
        K !== Kb || outRows !== M || out.tensor.cols !== N || out.tensor.dtype !== outDtype ||
        o.a.trans !== k.aTrans || o.b.trans !== k.bTrans ||
        aView.tensor.dtype !== k.aDtype || bView.tensor.dtype !== k.bDtype
      ) {
        throw new RangeError(
          `matmul: A ${M}×${K}${o.a.trans ? "ᵀ" : ""} ${aView.tensor.dtype}, B ${N}×${Kb}` +
            `${o.b.trans ? "ᵀ" : ""} ${bView.tensor.dtype}, out ${outRows}×${out.tensor.cols} ` +
            `${out.tensor.dtype} (kernel: ${k.aDtype}·${k.bDtype} → ${outDtype}, aTrans ` +
            `${k.aTrans}, bTrans ${k.bTrans})`,
        );
      }
      if (o.tile && JSON.stringify(o.tile) !== JSON.stringify(t)) {
        throw new RangeError("matmul: recorded with another tile than the one prepared");
      }
      if (!wide && o.accumulate) throw new RangeError("matmul: cannot accumulate into 16 bits");
      const started = new Set<string>();
      const outPieces = _pieces(out), aPieces = _pieces(aView), bPieces = _pieces(bView);
      const S = slicesOf(M, N, K, o.splitK);
      const alpha = o.alpha ?? 1;
      rec.pass(o.label ?? "matmul", (p) => {
        /** One dispatch: the K range of g in `slices` slices of `per` (z), see matmulWgsl. */
        const product = (
          ap: _Piece,
          bp: _Piece,
          g: { mLo: number; mHi: number; nLo: number; nHi: number; kLo: number; kHi: number },
          d: {
            out: TrackedBuffer;
            cOff: number;
            acc: number;
            per: number;
            slices: number;
            first: number;
            part: TrackedBuffer;
          },
        ) => {
          const aStart = o.a.trans ? (g.kLo - ap.base) * M + g.mLo : (g.mLo - ap.base) * K + g.kLo;
          const bStart = o.b.trans ? (g.kLo - bp.base) * N + g.nLo : (g.nLo - bp.base) * K + g.kLo;
          const words = new Uint32Array(16);
          words.set([
            g.mHi - g.mLo,
            g.nHi - g.nLo,
            g.kHi - g.kLo,
            aStart,
            o.a.trans ? 1 : K,
            o.a.trans ? M : 1,
            bStart,
            o.b.trans ? 1 : K,
            o.b.trans ? N : 1,
            d.cOff,
            N,
            d.acc,
            0,
            d.per,
            d.first,
          ]);
          new Float32Array(words.buffer)[12] = alpha;
          // slices start at multiples of 16 elements: the whole range decides (a vector along k
          // never straddles the end of a slice when the whole depth is a multiple of its width)
          const depth = g.kHi - g.kLo;
          const va = vaOk &&
            vectorLoadsFit({
              dtype: k.aDtype,
              trans: k.aTrans,
              start: aStart,
              ld: o.a.trans ? M : K,
              depth,
            });
          const vb = vbOk &&
            vectorLoadsFit({
              dtype: k.bDtype,
              trans: k.bTrans,
              start: bStart,
              ld: o.b.trans ? N : K,
              depth,
            });
          // vec4 stores: every row of the output region and of the partials starts at a
          // multiple of 4 floats
          const vo = voOk && N % 4 === 0 && d.cOff % 4 === 0 && (g.nHi - g.nLo) % 4 === 0;
          const { pl, va: usedA, vb: usedB } = pick([va, vb, vo]);
          lastVariant = { vecA: usedA, vecB: usedB, splitK: d.slices };
          const u = rec.uniform(words, "matmul params");
          p.dispatch(
            pl,
            rec.bindGroup(pl, [u, ap.buffer, bp.buffer, d.out, d.part]),
            Math.ceil((g.nHi - g.nLo) / t.bn),
            Math.ceil((g.mHi - g.mLo) / t.bm),
            d.slices,
          );
        };
        for (const os of outPieces) {
          for (const ap of aPieces) {
            const mLo = Math.max(os.lo, o.a.trans ? 0 : ap.lo);
            const mHi = Math.min(os.hi, o.a.trans ? M : ap.hi);
            const akLo = o.a.trans ? ap.lo : 0, akHi = o.a.trans ? ap.hi : K;
            if (mLo >= mHi) continue;
            for (const bp of bPieces) {
              const nLo = o.b.trans ? 0 : bp.lo, nHi = o.b.trans ? N : bp.hi;
              const kLo = Math.max(akLo, o.b.trans ? bp.lo : 0);
              const kHi = Math.min(akHi, o.b.trans ? bp.hi : K);
              if (nLo >= nHi || kLo >= kHi) continue;
              const region = `${mLo}:${nLo}`;
              const split = started.has(region);
              if (split && !wide) {
                throw new RangeError("matmul: a 16-bit output cannot sum a K split across shards");
              }
              const acc = o.accumulate || split ? 1 : 0;
              started.add(region);
              const cOff = (mLo - os.base) * N + nLo;
              const g = { mLo, mHi, nLo, nHi, kLo, kHi };
              const depth = kHi - kLo;
              const { per, slices } = cut(depth, S);
              if (slices <= 1) {
                product(ap, bp, g, {
                  out: os.buffer,
                  cOff,
                  acc,
                  per: depth,
                  slices: 1,
                  first: 1,
                  part: os.buffer,
                });
                continue;
              }
              const mm = mHi - mLo, nn = nHi - nLo;
              // f32: slice 0 goes to the output, the others to partials added after it
              const first = wide ? 1 : 0;
              const bytes = (slices - first) * mm * nn * 4;
              const own = o.workspace === undefined || o.workspace.size < bytes;
              const part = own
                ? ctx.createBuffer({ size: bytes, role: "workspace", label: "split-K partials" })
                : o.workspace!;
              product(ap, bp, g, { out: os.buffer, cOff, acc, per, slices, first, part });
              const w = new Uint32Array(8);
              w.set([mm, nn, slices - first, cOff, N, first === 1 ? 1 : acc]);
              new Float32Array(w.buffer)[6] = alpha;
              const u = rec.uniform(w, "split-K params");
              const wgs = Math.ceil((mm * (wide ? nn : Math.ceil(nn / 4))) / 256);
              const x = Math.min(wgs, 65535);
              p.dispatch(
                reduce,
                rec.bindGroup(reduce, [u, part, os.buffer]),
                x,
                Math.ceil(wgs / x),
              );
              if (own) rec.release(part);
            }
          }
        }
      });
    },
  };
}
