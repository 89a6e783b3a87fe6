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
import type { PassEncoder, Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor, TensorDtype } from "../gpu/tensor.ts";
import { gemmGrid, type GemmTile, workgroupSlots } from "./gemm_codegen.ts";
import { vecWidth } from "./wgsl_common.ts";
import {
  type MatmulKernelOptions,
  matmulSignature,
  matmulWgsl,
  splitKReduceSignature,
  splitKReduceWgsl,
} from "./matmul_wgsl.ts";
import { compileKernel, compileKernelNow, type KernelOf } from "../gpu/signature.ts";

type _ProductKernel = KernelOf<ReturnType<typeof matmulSignature>>;
type _ReduceKernel = KernelOf<ReturnType<typeof splitKReduceSignature>>;

export type { MatmulKernelOptions };

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
   * With `splitK` "auto": the rule may take up to this many slices past its byte limit (see
   * autoSplitK).
   */
  maxSplitK?: number;
  /**
   * A buffer for the split-K partials, reused by the caller across products recorded one after
   * the other (at least {@link PreparedMatmul.workspaceBytes} of the shape). Without it a product
   * that splits K allocates its partials and releases them after the submission.
   */
  workspace?: TrackedBuffer;
  label?: string;
  /** Record into this pass (after the work before it in the pass) instead of a pass of its own. */
  pass?: PassEncoder;
  /**
   * What a kernel prepared with `gradEpilogue` reads (MatmulKernelOptions): the targets, LSE and
   * row weights of the tokens (A's rows), and the vocabulary index of the output's column 0.
   */
  epilogue?: { targets: DeviceTensor; lse: DeviceTensor; w: DeviceTensor; col0: number };
}

/** Largest split-K workspace (bytes) {@link autoSplitK} will ask for. */
export const SPLITK_MAX_BYTES = 128 << 20;
/**
 * How far below the best wave efficiency {@link autoSplitK} may stay to take fewer slices. Each
 * slice past the first costs M·N·4 bytes of partials written and read again: at the paper's
 * shape 1.2–19 MB a slice, 1–13 µs at about 3 TB/s, against products of 3–230 ms.
 */
export const SPLITK_EFFICIENCY_SLACK = 0.005;

/**
 * The K slices of a product, a function of the shape, its shard regions and the tile only. A
 * slice count S gives tiles·S workgroups of K/S depth each; on a GPU holding
 * {@link workgroupSlots} of them at once a region takes ⌈tiles·S / slots⌉ waves (the regions,
 * one dispatch each, run one after the other), so the product's time goes as 1 / (wave
 * efficiency), the workgroups over the slots of their whole waves. The rule takes the fewest
 * slices whose efficiency is within {@link SPLITK_EFFICIENCY_SLACK} of the best over every
 * allowed S: slices
 * at least 16 K-steps deep and partials ((S − 1)·M·N·4 bytes for an f32 output, whose first
 * slice goes straight to the output; S·M·N·4 for a 16-bit one) within {@link SPLITK_MAX_BYTES}.
 * With `upTo`, up to that many slices past the byte limit (methods/baseline.ts). 1 on a
 * software adapter, whose few threads any output fills.
 *
 * On an H100 the split products of the methods (the compiled row's dEᵀ, the baseline's dE, the
 * chunked row's and Liger's chunk dE) ran in the order of this efficiency, not of a fixed wave
 * fraction (docs/performance.md).
 */
export function autoSplitK(
  o: {
    m: number;
    n: number;
    k: number;
    tile: GemmTile;
    software: boolean;
    out16?: boolean;
    upTo?: number;
    /**
     * The output regions the product is dispatched as, one after the other (one per combination
     * of shards; default the whole m×n output): each fills its own waves.
     */
    regions?: { m: number; n: number }[];
  },
): number {
  if (o.software) return 1;
  const tiles = (o.regions ?? [o]).map((r) =>
    Math.ceil(r.m / o.tile.bm) * Math.ceil(r.n / o.tile.bn)
  );
  const slots = workgroupSlots(o.tile);
  const byDepth = Math.floor(o.k / (16 * o.tile.bk));
  const byBytes = Math.floor(SPLITK_MAX_BYTES / (o.m * o.n * 4)) + (o.out16 ? 0 : 1);
  const most = Math.max(1, Math.min(byDepth, Math.max(byBytes, o.upTo ?? 0)));
  const eff = (s: number) => {
    let w = 0, whole = 0;
    for (const t of tiles) {
      w += t * s;
      whole += Math.ceil((t * s) / slots) * slots;
    }
    return w / whole;
  };
  let best = 0;
  for (let s = 1; s <= most; s++) best = Math.max(best, eff(s));
  let s = 1;
  while (eff(s) < best - SPLITK_EFFICIENCY_SLACK) s++;
  return s;
}

/** A compiled product: call {@link PreparedMatmul.record} to add it to a Recorder. */
export interface PreparedMatmul {
  record(rec: Recorder, o: MatmulOptions): void;
  /** What the last dispatch of the last record used: vector loads per operand, K slices. */
  readonly lastVariant: { vecA: boolean; vecB: boolean; splitK: number };
  /**
   * Bytes of split-K partials a product of this shape takes (0 when it does not split), with
   * `splitK` as in {@link MatmulOptions.splitK}, for operands and output in one shard each. A
   * product over several shard regions may take other slices ({@link autoSplitK}); where a
   * region needs more than the workspace it is given, it allocates its own partials.
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

type _Flags = [vecA: boolean, vecB: boolean, vecOut: boolean];
const _key = ([va, vb, vo]: _Flags) => `${va}${vb}${vo}`;
/** Variants in order of preference: as asked, without vector stores, all scalar. */
const _ladder = ([va, vb, vo]: _Flags): _Flags[] => [[va, vb, vo], [va, vb, false], [
  false,
  false,
  false,
]];

/** The compiled variants of one product kernel and what its tile allows. */
interface _Variants {
  /** The tile allows vector loads of A, of B, vector stores of the output. */
  allowed: _Flags;
  /** The first variant on the ladder of `allowed` that a dispatch allows (the scalar one exists). */
  pick(want: _Flags): { kernel: _ProductKernel; va: boolean; vb: boolean };
}

/**
 * The variants of a product by vector loads per operand and vector stores: the fastest the tile
 * allows, the same with scalar stores (outputs of a width not a multiple of 4), and all scalar; a
 * dispatch takes the first of these its strides and offsets allow. Only the fastest is compiled
 * here; the other two are compiled (synchronously, once) when a dispatch first needs them, which
 * happens only at unaligned shapes (compiled up front, they were two unused kernels per product
 * at aligned shapes, each a shader of the fully unrolled main loop).
 */
async function _compileVariants(
  ctx: GpuContext,
  k: MatmulKernelOptions & { outDtype: TensorDtype },
  label: string,
): Promise<_Variants> {
  const t = k.tile;
  // An operand can take vector loads when the tile asks for them and holds whole vectors along
  // its contiguous index (the K-step held as is, the tile's rows held transposed).
  const canVec = (dtype: TensorDtype, trans: boolean, rows: number) =>
    t.vec === true && (dtype === "f32" || dtype === "bf16" || dtype === "f16") &&
    (trans ? rows % vecWidth(dtype) === 0 : t.bk % vecWidth(dtype) === 0);
  // f32 outputs written as vec4s where the tile asks for vector accesses
  const allowed: _Flags = [
    canVec(k.aDtype, k.aTrans, t.bm),
    canVec(k.bDtype, k.bTrans, t.bn),
    k.outDtype === "f32" && t.vec === true,
  ];
  const ladder = new Set(_ladder(allowed).map(_key));
  const opts = ([vecA, vecB, vecOut]: _Flags) => ({ ...k, vecA, vecB, vecOut });
  const name = (f: _Flags) => `${label}${f.some((x) => x) ? "_vec" : ""}`;
  const variants = new Map<string, _ProductKernel>();
  variants.set(
    _key(allowed),
    await compileKernel(
      ctx,
      matmulSignature(opts(allowed)),
      matmulWgsl(opts(allowed)),
      name(allowed),
    ),
  );
  return {
    allowed,
    pick(want) {
      const f = _ladder(want).find((x) => ladder.has(_key(x)))!;
      let kernel = variants.get(_key(f));
      if (kernel === undefined) {
        kernel = compileKernelNow(ctx, matmulSignature(opts(f)), matmulWgsl(opts(f)), name(f));
        variants.set(_key(f), kernel);
      }
      return { kernel, va: f[0], vb: f[1] };
    },
  };
}

/** The logical sizes of a recorded product (checked against the prepared kernel). */
interface _Dims {
  M: number;
  N: number;
  K: number;
  aView: RowView;
  bView: RowView;
  out: RowView;
}

/** The sizes of a recorded product; throws on shapes, dtypes or layouts other than prepared. */
function _dims(k: MatmulKernelOptions & { outDtype: TensorDtype }, o: MatmulOptions): _Dims {
  const aView = _view(o.a), bView = _view(o.b);
  const out = "tensor" in o.out ? o.out : rowView(o.out);
  const aRows = aView.hi - aView.lo, bRows = bView.hi - bView.lo;
  const M = o.a.trans ? aView.tensor.cols : aRows;
  const K = o.a.trans ? aRows : aView.tensor.cols;
  const N = o.b.trans ? bView.tensor.cols : bRows;
  const Kb = o.b.trans ? bRows : bView.tensor.cols;
  const outRows = out.hi - out.lo;
  if (
    K !== Kb || outRows !== M || out.tensor.cols !== N || out.tensor.dtype !== k.outDtype ||
    o.a.trans !== k.aTrans || o.b.trans !== k.bTrans ||
    aView.tensor.dtype !== k.aDtype || bView.tensor.dtype !== k.bDtype
  ) {
    throw new RangeError(
      `matmul: A ${M}×${K}${o.a.trans ? "ᵀ" : ""} ${aView.tensor.dtype}, B ${N}×${Kb}` +
        `${o.b.trans ? "ᵀ" : ""} ${bView.tensor.dtype}, out ${outRows}×${out.tensor.cols} ` +
        `${out.tensor.dtype} (kernel: ${k.aDtype}·${k.bDtype} → ${k.outDtype}, aTrans ` +
        `${k.aTrans}, bTrans ${k.bTrans})`,
    );
  }
  if (o.tile && JSON.stringify(o.tile) !== JSON.stringify(k.tile)) {
    throw new RangeError("matmul: recorded with another tile than the one prepared");
  }
  if (k.outDtype !== "f32" && o.accumulate) {
    throw new RangeError("matmul: cannot accumulate into 16 bits");
  }
  if (!k.gradEpilogue !== !o.epilogue || (o.epilogue && (o.accumulate || k.aTrans))) {
    throw new RangeError(
      "matmul: the gradient epilogue needs a kernel prepared with it, A's rows the tokens, " +
        "no accumulation",
    );
  }
  return { M, N, K, aView, bView, out };
}

/** K per slice and the number of slices of a K range cut into (at most) S. */
function _cut(t: GemmTile, depth: number, S: number): { per: number; slices: number } {
  // slices aligned to 16 elements (whole K-steps and vectors), at least one step each
  const step = Math.max(16, t.bk);
  const per = Math.ceil(Math.ceil(depth / S) / step) * step;
  return { per, slices: Math.ceil(depth / per) };
}

/** A region of one dispatch: output rows, columns and the K range, in logical indices. */
interface _Region {
  mLo: number;
  mHi: number;
  nLo: number;
  nHi: number;
  kLo: number;
  kHi: number;
}

/** Where one dispatch writes: its output, its K slices and the partials' buffer. */
interface _Target {
  out: TrackedBuffer;
  cOff: number;
  acc: number;
  per: number;
  slices: number;
  first: number;
  part: TrackedBuffer | GPUBuffer;
}

/** What one record's dispatches share. */
interface _RecordScope {
  k: MatmulKernelOptions & { outDtype: TensorDtype };
  variants: _Variants;
  dims: _Dims;
  o: MatmulOptions;
  rec: Recorder;
  pass: PassEncoder;
  /** Set to what the dispatch used. */
  used: { vecA: boolean; vecB: boolean; splitK: number };
}

/** One product dispatch: the K range of `g` in `d.slices` slices of `d.per` (z), see matmulWgsl. */
function _dispatchProduct(s: _RecordScope, ap: _Piece, bp: _Piece, g: _Region, d: _Target) {
  const { M, N, K } = s.dims, o = s.o, k = s.k, t = k.tile;
  const aStart = o.a.trans ? (g.kLo - ap.base) * M + g.mLo : (g.mLo - ap.base) * K + g.kLo;
  const bStart = o.b.trans ? (g.kLo - bp.base) * N + g.nLo : (g.nLo - bp.base) * K + g.kLo;
  const params = {
    M: g.mHi - g.mLo,
    N: g.nHi - g.nLo,
    K: g.kHi - g.kLo,
    aOff: aStart,
    sAm: o.a.trans ? 1 : K,
    sAk: o.a.trans ? M : 1,
    bOff: bStart,
    sBn: o.b.trans ? 1 : K,
    sBk: o.b.trans ? N : 1,
    cOff: d.cOff,
    sCm: N,
    accumulate: d.acc,
    alpha: o.alpha ?? 1,
    kPer: d.per,
    first: d.first,
    ...(o.epilogue ? { eRow: s.dims.aView.lo + g.mLo, eCol: o.epilogue.col0 + g.nLo } : {}),
  };
  // slices start at multiples of 16 elements: the whole range decides (a vector along k never
  // straddles the end of a slice when the whole depth is a multiple of its width)
  const depth = g.kHi - g.kLo;
  const [vaOk, vbOk, voOk] = s.variants.allowed;
  const va = vaOk && vectorLoadsFit({
    dtype: k.aDtype,
    trans: k.aTrans,
    start: aStart,
    ld: o.a.trans ? M : K,
    depth,
  });
  const vb = vbOk && vectorLoadsFit({
    dtype: k.bDtype,
    trans: k.bTrans,
    start: bStart,
    ld: o.b.trans ? N : K,
    depth,
  });
  // vec4 stores: every row of the output region and of the partials starts at a multiple of 4
  const vo = voOk && N % 4 === 0 && d.cOff % 4 === 0 && (g.nHi - g.nLo) % 4 === 0;
  const { kernel, va: usedA, vb: usedB } = s.variants.pick([va, vb, vo]);
  Object.assign(s.used, { vecA: usedA, vecB: usedB, splitK: d.slices });
  const tilesN = Math.ceil((g.nHi - g.nLo) / t.bn), tilesM = Math.ceil((g.mHi - g.mLo) / t.bm);
  const ep = o.epilogue && {
    targets: o.epilogue.targets.shards[0].buffer,
    lse: o.epilogue.lse.shards[0].buffer,
    w: o.epilogue.w.shards[0].buffer,
  };
  s.pass.dispatch(
    kernel.pipeline,
    kernel.bind(s.rec, params, { a: ap.buffer, b: bp.buffer, outp: d.out, part: d.part, ...ep }),
    ...gemmGrid(t, tilesM, tilesN),
    d.slices,
  );
}

/**
 * Compiles the product (its fastest variant now, the others on first use: {@link _compileVariants})
 * and its split-K reduction for these layouts.
 */
export async function prepareMatmul(
  ctx: GpuContext,
  options: MatmulKernelOptions,
): Promise<PreparedMatmul> {
  const k = { ...options, outDtype: options.outDtype ?? "f32" };
  const wide = k.outDtype === "f32";
  const label = wide ? "matmul" : `matmul→${k.outDtype}`;
  const t = k.tile;
  const variants = await _compileVariants(ctx, k, label);
  const reduce = await compileKernel(
    ctx,
    splitKReduceSignature(k.outDtype),
    splitKReduceWgsl(k.outDtype),
    `${label} split-K sum`,
  );
  const lastVariant = { vecA: false, vecB: false, splitK: 1 };
  const slicesOf = (
    m: number,
    n: number,
    kk: number,
    splitK: number | "auto" | undefined,
    upTo?: number,
    regions?: { m: number; n: number }[],
  ) =>
    splitK === undefined || splitK === "auto"
      ? autoSplitK({
        m,
        n,
        k: kk,
        tile: t,
        software: ctx.report.isFallbackAdapter,
        out16: !wide,
        upTo,
        regions,
      })
      : Math.max(1, Math.floor(splitK));
  return {
    workspaceBytes(sh) {
      const { slices } = _cut(t, sh.k, slicesOf(sh.m, sh.n, sh.k, sh.splitK));
      return slices <= 1 ? 0 : (slices - (wide ? 1 : 0)) * sh.m * sh.n * 4;
    },
    get lastVariant() {
      return { ...lastVariant };
    },
    record(rec, o) {
      const dims = _dims(k, o);
      const regions = _regions(dims, o, wide);
      const areas = regions.map(({ g }) => ({ m: g.mHi - g.mLo, n: g.nHi - g.nLo }));
      const S = slicesOf(dims.M, dims.N, dims.K, o.splitK, o.maxSplitK, areas);
      const body = (pass: PassEncoder) => {
        const scope: _RecordScope = { k, variants, dims, o, rec, pass, used: lastVariant };
        for (const r of regions) {
          _recordRegion(ctx, scope, reduce, r, S);
        }
      };
      if (o.pass) body(o.pass);
      else rec.pass(o.label ?? "matmul", body);
    },
  };
}

/** A region of one output shard × A shard × B shard, with where it writes. */
interface _ShardRegion {
  os: _Piece;
  ap: _Piece;
  bp: _Piece;
  g: _Region;
  /** 1: add to the output (accumulate, or a K range split across shards after the first). */
  acc: number;
}

/**
 * The regions of a product over every combination of overlapping shards; products split along K
 * by shard boundaries accumulate in order (f32 outputs only).
 */
function _regions(dims: _Dims, o: MatmulOptions, wide: boolean): _ShardRegion[] {
  const { M, N, K } = dims;
  const started = new Set<string>();
  const out: _ShardRegion[] = [];
  for (const os of _pieces(dims.out)) {
    for (const ap of _pieces(dims.aView)) {
      const mLo = Math.max(os.lo, o.a.trans ? 0 : ap.lo);
      const mHi = Math.min(os.hi, o.a.trans ? M : ap.hi);
      const akLo = o.a.trans ? ap.lo : 0, akHi = o.a.trans ? ap.hi : K;
      if (mLo >= mHi) continue;
      for (const bp of _pieces(dims.bView)) {
        const nLo = o.b.trans ? 0 : bp.lo, nHi = o.b.trans ? N : bp.hi;
        const kLo = Math.max(akLo, o.b.trans ? bp.lo : 0);
        const kHi = Math.min(akHi, o.b.trans ? bp.hi : K);
        if (nLo >= nHi || kLo >= kHi) continue;
        const region = `${mLo}:${nLo}`;
        const split = started.has(region);
        if (split && !wide) {
          throw new RangeError("matmul: a 16-bit output cannot sum a K split across shards");
        }
        started.add(region);
        const acc = o.accumulate || split ? 1 : 0;
        out.push({ os, ap, bp, g: { mLo, mHi, nLo, nHi, kLo, kHi }, acc });
      }
    }
  }
  return out;
}

/**
 * Records one region: a single dispatch, or with split-K the sliced product and the pass adding
 * the partials in slice order (an f32 output takes slice 0 directly).
 */
function _recordRegion(
  ctx: GpuContext,
  s: _RecordScope,
  reduce: _ReduceKernel,
  r: _ShardRegion,
  S: number,
): void {
  const { os, ap, bp, g, acc } = r;
  const N = s.dims.N, wide = s.k.outDtype === "f32", o = s.o;
  const cOff = (g.mLo - os.base) * N + g.nLo;
  const depth = g.kHi - g.kLo;
  const { per, slices } = _cut(s.k.tile, depth, S);
  if (slices <= 1) {
    // one slice writes the output only: the partials' binding is not accessed
    const part = ctx.unusedBinding;
    const d = { out: os.buffer, cOff, acc, per: depth, slices: 1, first: 1, part };
    _dispatchProduct(s, ap, bp, g, d);
    return;
  }
  if (o.epilogue) throw new RangeError("matmul: the gradient epilogue needs one K slice");
  const mm = g.mHi - g.mLo, nn = g.nHi - g.nLo;
  // f32: slice 0 goes to the output, the others to partials added after it
  const first = wide ? 1 : 0;
  const bytes = (slices - first) * mm * nn * 4;
  const own = o.workspace === undefined || o.workspace.size < bytes;
  const part = own
    ? ctx.createBuffer({ size: bytes, role: "workspace", label: "split-K partials" })
    : o.workspace!;
  _dispatchProduct(s, ap, bp, g, { out: os.buffer, cOff, acc, per, slices, first, part });
  const params = {
    M: mm,
    N: nn,
    S: slices - first,
    cOff,
    sCm: N,
    accumulate: first === 1 ? 1 : acc,
    alpha: o.alpha ?? 1,
  };
  const wgs = Math.ceil((mm * (wide ? nn : Math.ceil(nn / 4))) / 256);
  const x = Math.min(wgs, 65535);
  const bg = reduce.bind(s.rec, params, { part, outp: os.buffer });
  s.pass.dispatch(reduce.pipeline, bg, x, Math.ceil(wgs / x));
  if (own) s.rec.release(part);
}
