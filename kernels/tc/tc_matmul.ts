/**
 * The tensor-core GEMM: out[rows] = alpha·A·Bᵀ (+ out) on row ranges of sharded tensors, with f16
 * operands (converted from bf16, f16 or f32 while staged, scaled by powers of two: tc_scale.ts)
 * and f32 accumulation, f32 output (or a 16-bit one, rounded once: TcMatmulKernel.outDtype).
 * The operands are given as in the FMA core (kernels/matmul.ts): a row range of the tensor
 * holding the operand (`trans: false`) or its transpose (`trans: true`), so one kernel generator
 * serves E·Cᵀ, G·C and Gᵀ·E.
 *
 * Split-K follows the FMA core: the K range cut into S slices, slice 0 written to the output,
 * the others as f32 partials added afterwards in slice order (its split-K reduction kernel), so
 * the result depends on S only; S comes from the shape ({@link tcAutoSplitK}). Products over
 * several shards are dispatched per combination of shards; a K range cut by shard boundaries is
 * accumulated in order.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { PassEncoder, Recorder } from "../../gpu/recorder.ts";
import type { Dtype16 } from "../cast16.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
import { GpuError } from "../../core/errors.ts";
import { type MatmulOperand, type RowView, rowView, vectorLoadsFit } from "../matmul.ts";
import { splitKReduceSignature, splitKReduceWgsl } from "../matmul_wgsl.ts";
import { compileKernel, compileKernelNow, type KernelOf } from "../../gpu/signature.ts";
import { GPU_SMS } from "../gemm_tiles.ts";
import { vecWidth } from "../wgsl_common.ts";
import { type TcDtype, type TcMode, tcSharedBytes } from "./tc_codegen.ts";
import {
  type TcGradEpilogue,
  type TcMatmulKernelOptions,
  tcMatmulSignature,
  tcMatmulWgsl,
} from "./tc_matmul_wgsl.ts";
import { checkTcBindings, tcMatrixBindingBytes, tcMinBindingBytes } from "./tc_bindings.ts";
import {
  tcSupport,
  tcThreads,
  type TcTile,
  tcTileName,
  tileCols,
  tileMma,
  tileRows,
  tileSubgroups,
} from "./tc_tiles.ts";

/** What a tensor-core product kernel is compiled for. */
export interface TcMatmulKernel {
  tile: TcTile;
  aDtype: TcDtype;
  bDtype: TcDtype;
  /** A held transposed (K×M: rows index K), B held transposed (K×N). */
  aTrans: boolean;
  bTrans: boolean;
  /** A staged as hi and lo f16 parts (about 22 significant bits; twice the multiplies). */
  split?: boolean;
  /** Scale the operand by its power-of-two scale (default: unless its dtype is f16). */
  scaleA?: boolean;
  scaleB?: boolean;
  /** Native subgroup matrices (default) or their emulation (tests: tc_codegen.ts). */
  mode?: TcMode;
  /** Bench diagnostics (wrong results; see tc_codegen.ts). */
  diag?: "copy-only" | "mma-only";
  /**
   * A's binding read_write, so that A may lie in the output's buffer at a disjoint range (a
   * read-only binding beside a writable one of the same buffer is refused; kernels/matmul_wgsl.ts
   * `aReadWrite`).
   */
  aReadWrite?: boolean;
  /**
   * The output's dtype (default f32). A 16-bit output is written rounded once, every tile
   * through the store scratch; its products neither accumulate nor split K, and its row stride
   * and offset are free (two elements share a word: kernels/matmul_wgsl.ts's 16-bit store).
   */
  outDtype?: "f32" | Dtype16;
  /**
   * With a 16-bit output: the loss's gradient of the product, scaled by w's power-of-two scale,
   * instead of the product (TcMatmulKernelOptions.gradEpilogue; record with `epilogue`).
   */
  gradEpilogue?: TcGradEpilogue;
  /** A comes scaled by its scale, taken as it is (TcMatmulKernelOptions.unscaleA). */
  unscaleA?: boolean;
  /**
   * Accumulating records load the output into the accumulators of full aligned tiles and store
   * them straight (TcMatmulKernelOptions.preload).
   */
  preload?: boolean;
}

/** What the gradient epilogue reads (one binding each), and where its columns start. */
export interface TcGradEpilogueArgs {
  targets: DeviceTensor;
  lse: DeviceTensor;
  w: DeviceTensor;
  /** The vocabulary index of the output's column 0. */
  col0: number;
  /** The slot of w's scale in TcMatmulOptions.scales' buffer. */
  gSlot: number;
}

/** Where the operands' scales are: a buffer of f32 powers of two and the index of each. */
export interface TcScales {
  buffer: TrackedBuffer;
  a: number;
  b: number;
}

/** Options of {@link PreparedTcMatmul.record}. */
export interface TcMatmulOptions {
  a: MatmulOperand;
  b: MatmulOperand;
  out: DeviceTensor | RowView;
  /** Add to the output instead of overwriting it. */
  accumulate?: boolean;
  alpha?: number;
  /** The operands' scales (required where the kernel scales an operand). */
  scales?: TcScales;
  /** K slices: a number or "auto" (default: {@link tcAutoSplitK}). */
  splitK?: number | "auto";
  /** A buffer for split-K partials reused across products (see kernels/matmul.ts). */
  workspace?: TrackedBuffer;
  label?: string;
  /** Record into this pass instead of a pass of its own (e.g. a gated pass: gpu/gate.ts). */
  pass?: PassEncoder;
  /** The gradient epilogue's inputs (a kernel with TcMatmulKernel.gradEpilogue). */
  epilogue?: TcGradEpilogueArgs;
}

/** A compiled tensor-core product. */
export interface PreparedTcMatmul {
  readonly kernel: TcMatmulKernel;
  /** Invocations per subgroup the kernels are generated for. */
  readonly sgSize: number;
  record(rec: Recorder, o: TcMatmulOptions): void;
  /** What the last dispatch used. */
  readonly lastVariant: { vecA: boolean; vecB: boolean; splitK: number };
  /** Bytes of split-K partials a product of this shape takes (one shard each). */
  workspaceBytes(shape: { m: number; n: number; k: number; splitK?: number | "auto" }): number;
  /** Frees the small buffers made at prepare time. */
  release(): void;
}

/** Largest split-K partials (bytes) {@link tcAutoSplitK} asks for, as the FMA core's rule. */
export const TC_SPLITK_MAX_BYTES = 128 << 20;

/**
 * Workgroups of a tile an SM holds at once: from its registers (8 f32 per accumulator matrix per
 * invocation, 2 per staged f16 value held, about 64 more) and its workgroup memory (up to
 * 227 KiB an SM on an H100). An estimate for the split rule only.
 */
export function tcResidency(t: TcTile, sgSize = 32, sharedBytes = 0): number {
  const mma = tileMma(t);
  const accRegs = (t.mt * t.nt * mma.m * mma.n) / sgSize;
  const regs = accRegs + 2 * (t.mt + t.nt) * 4 + 64;
  const byRegs = Math.floor(65536 / (tcThreads(t, sgSize) * regs));
  const byShared = sharedBytes > 0 ? Math.floor((227 << 10) / sharedBytes) : 8;
  return Math.max(1, Math.min(byRegs, byShared));
}

/**
 * K slices of a product: the fewest whose waves of workgroups (tiles·S over the GPU's
 * {@link GPU_SMS}·residency slots) are within 0.5% of the best efficiency over the allowed S
 * (slices at least 8 K-steps deep, partials within {@link TC_SPLITK_MAX_BYTES}); 1 on software
 * adapters and when emulated.
 */
export function tcAutoSplitK(
  o: { m: number; n: number; k: number; tile: TcTile; software: boolean; residency: number },
): number {
  if (o.software) return 1;
  const tiles = Math.ceil(o.m / tileRows(o.tile)) * Math.ceil(o.n / tileCols(o.tile));
  const slots = GPU_SMS * o.residency;
  const byDepth = Math.floor(o.k / (8 * o.tile.bk));
  const byBytes = Math.floor(TC_SPLITK_MAX_BYTES / (o.m * o.n * 4)) + 1;
  const most = Math.max(1, Math.min(byDepth, byBytes));
  const eff = (s: number) => (tiles * s) / (Math.ceil((tiles * s) / slots) * slots);
  let best = 0;
  for (let s = 1; s <= most; s++) best = Math.max(best, eff(s));
  let s = 1;
  while (eff(s) < best - 0.005) s++;
  return s;
}

interface _Piece {
  buffer: TrackedBuffer;
  lo: number;
  hi: number;
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

/** A dispatch's region in logical indices, and whether it adds to the output. */
interface _Region {
  os: _Piece;
  ap: _Piece;
  bp: _Piece;
  mLo: number;
  mHi: number;
  nLo: number;
  nHi: number;
  kLo: number;
  kHi: number;
  acc: boolean;
}

/** The regions of a product over every combination of overlapping shards. */
function _regions(
  k: TcMatmulKernel,
  o: TcMatmulOptions,
): { M: number; N: number; K: number; regions: _Region[] } {
  const av = _view(o.a), bv = _view(o.b);
  const out = "tensor" in o.out ? o.out : rowView(o.out);
  const M = k.aTrans ? av.tensor.cols : av.hi - av.lo;
  const K = k.aTrans ? av.hi - av.lo : av.tensor.cols;
  const N = k.bTrans ? bv.tensor.cols : bv.hi - bv.lo;
  const Kb = k.bTrans ? bv.hi - bv.lo : bv.tensor.cols;
  if (
    K !== Kb || out.hi - out.lo !== M || out.tensor.cols !== N ||
    out.tensor.dtype !== (k.outDtype ?? "f32") ||
    o.a.trans !== k.aTrans || o.b.trans !== k.bTrans || av.tensor.dtype !== k.aDtype ||
    bv.tensor.dtype !== k.bDtype
  ) {
    throw new RangeError(
      `tc matmul: A ${M}×${K}${o.a.trans ? "ᵀ" : ""} ${av.tensor.dtype}, B ${N}×${Kb}${
        o.b.trans ? "ᵀ" : ""
      } ${bv.tensor.dtype}, out ${out.hi - out.lo}×${out.tensor.cols} ${out.tensor.dtype} ` +
        `(kernel: ${k.aDtype}·${k.bDtype} → ${
          k.outDtype ?? "f32"
        }, aTrans ${k.aTrans}, bTrans ${k.bTrans})`,
    );
  }
  const started = new Set<string>();
  const regions: _Region[] = [];
  for (const os of _pieces(out)) {
    for (const ap of _pieces(av)) {
      const mLo = Math.max(os.lo, k.aTrans ? 0 : ap.lo),
        mHi = Math.min(os.hi, k.aTrans ? M : ap.hi);
      const akLo = k.aTrans ? ap.lo : 0, akHi = k.aTrans ? ap.hi : K;
      if (mLo >= mHi) continue;
      for (const bp of _pieces(bv)) {
        const nLo = k.bTrans ? 0 : bp.lo, nHi = k.bTrans ? N : bp.hi;
        const kLo = Math.max(akLo, k.bTrans ? bp.lo : 0),
          kHi = Math.min(akHi, k.bTrans ? bp.hi : K);
        if (nLo >= nHi || kLo >= kHi) continue;
        const key = `${mLo}:${nLo}`;
        const split = started.has(key);
        started.add(key);
        regions.push({
          os,
          ap,
          bp,
          mLo,
          mHi,
          nLo,
          nHi,
          kLo,
          kHi,
          acc: o.accumulate === true || split,
        });
      }
    }
  }
  return { M, N, K, regions };
}

/** K per slice and the slices of a K range cut into at most S (whole K-steps). */
function _cut(t: TcTile, depth: number, S: number): { per: number; slices: number } {
  const per = Math.ceil(Math.ceil(depth / S) / t.bk) * t.bk;
  return { per, slices: Math.ceil(depth / per) };
}

/** Compiles a tensor-core product (its vector-load variants as dispatches first need them). */
export async function prepareTcMatmul(
  ctx: GpuContext,
  kernel: TcMatmulKernel,
): Promise<PreparedTcMatmul> {
  const mode = kernel.mode ?? "native";
  const support = tcSupport(ctx);
  if (mode === "native" && support.reason) {
    throw new GpuError("limits", `tensor-core product: ${support.reason}`);
  }
  const sgSize = mode === "native" ? support.sgSize : 32;
  const t = kernel.tile;
  const aContig = kernel.aTrans ? "mn" : "k", bContig = kernel.bTrans ? "mn" : "k";
  const shared = tcSharedBytes(t, { aContig, bContig, split: kernel.split }) +
    tileSubgroups(t) * tileMma(t).m * tileMma(t).n * 4 *
      (mode === "emulated" ? 1 + t.mt * t.nt : 1);
  if (shared > ctx.device.limits.maxComputeWorkgroupStorageSize) {
    throw new GpuError(
      "limits",
      `tensor-core product: tile ${tcTileName(t)} needs ${shared} bytes of workgroup memory ` +
        `(limit ${ctx.device.limits.maxComputeWorkgroupStorageSize})`,
    );
  }
  const out16 = kernel.outDtype === "f32" ? undefined : kernel.outDtype;
  const scaleA = kernel.scaleA ?? kernel.aDtype !== "f16";
  const scaleB = kernel.scaleB ?? kernel.bDtype !== "f16";
  const options = (v: _Variant): TcMatmulKernelOptions => ({
    tile: t,
    sgSize,
    a: { dtype: kernel.aDtype, contig: aContig, vec: v.vecA, split: kernel.split },
    b: { dtype: kernel.bDtype, contig: bContig, vec: v.vecB },
    scaleA,
    scaleB,
    diag: kernel.diag,
    mode,
    straight: v.straight,
    aReadWrite: kernel.aReadWrite,
    out16,
    gradEpilogue: kernel.gradEpilogue,
    unscaleA: kernel.unscaleA,
    preload: kernel.preload,
  });
  const label = `tc matmul ${tcTileName(t)}`;
  const variants = new Map<string, _Compiled>();
  const compiled = (v: _Variant, k: _Kernel): _Compiled => ({
    k,
    // natively, straight stores are matrix stores into outp and part (tc_bindings.ts)
    min: tcMinBindingBytes(
      k.sig,
      mode === "native" && v.straight && !out16 ? ["outp", "part"] : [],
    ),
  });
  const first: _Variant = { vecA: true, vecB: true, straight: true };
  const o0 = options(first);
  variants.set(
    _key(first),
    compiled(first, await compileKernel(ctx, tcMatmulSignature(o0), tcMatmulWgsl(o0), label)),
  );
  const pick = (v: _Variant) => {
    let c = variants.get(_key(v));
    if (!c) {
      const o = options(v);
      const k = compileKernelNow(ctx, tcMatmulSignature(o), tcMatmulWgsl(o), label);
      variants.set(_key(v), c = compiled(v, k));
    }
    return c;
  };
  const reduce = await compileKernel(
    ctx,
    splitKReduceSignature("f32"),
    splitKReduceWgsl("f32"),
    "tc matmul split-K sum",
  );
  const ones = ctx.createBuffer({ size: 16, role: "params", label: "unit scales" });
  ctx.device.queue.writeBuffer(ones.buffer, 0, new Float32Array([1, 1, 1, 1]));
  const software = ctx.report.isFallbackAdapter || mode === "emulated";
  const residency = tcResidency(t, sgSize, shared);
  const slicesOf = (m: number, n: number, k: number, s: number | "auto" | undefined) =>
    s === undefined || s === "auto"
      ? tcAutoSplitK({ m, n, k, tile: t, software, residency })
      : Math.max(1, Math.floor(s));
  const lastVariant = { vecA: false, vecB: false, splitK: 1 };
  return {
    kernel,
    sgSize,
    get lastVariant() {
      return { ...lastVariant };
    },
    release() {
      ones.destroy();
    },
    workspaceBytes(sh) {
      const { slices } = _cut(t, sh.k, slicesOf(sh.m, sh.n, sh.k, sh.splitK));
      return slices <= 1 ? 0 : (slices - 1) * sh.m * sh.n * 4;
    },
    record(rec, o) {
      if (!kernel.gradEpilogue !== !o.epilogue) {
        throw new RangeError("tc matmul: a gradient epilogue kernel records with `epilogue`");
      }
      if ((scaleA || scaleB || kernel.unscaleA || o.epilogue) && !o.scales) {
        throw new RangeError("tc matmul: the kernel scales its operands; record needs `scales`");
      }
      const { M, N, K, regions } = _regions(kernel, o);
      if (out16 && (o.accumulate || regions.some((r) => r.acc))) {
        throw new RangeError("tc matmul: a 16-bit output is written whole (no accumulation)");
      }
      const S = out16 ? 1 : slicesOf(M, N, K, o.splitK);
      const inPass = (fn: (p: PassEncoder) => void) =>
        o.pass ? fn(o.pass) : rec.pass(o.label ?? "tc matmul", fn);
      inPass((pass) => {
        for (const r of regions) {
          const scope = {
            ctx,
            rec,
            pass,
            kernel,
            o,
            M,
            N,
            K,
            pick,
            reduce,
            ones,
            lastVariant,
          };
          _recordRegion(scope, r, S);
        }
      });
    },
  };
}

/** A variant of the product kernel: vector loads of A and B, straight stores. */
interface _Variant {
  vecA: boolean;
  vecB: boolean;
  straight: boolean;
}

const _key = (v: _Variant) => `${v.vecA},${v.vecB},${v.straight}`;

type _Kernel = KernelOf<ReturnType<typeof tcMatmulSignature>>;

/** A compiled variant and the smallest binding (bytes) of each of its bindings. */
interface _Compiled {
  k: _Kernel;
  min: Record<string, number>;
}

/** What the dispatches of one record share. */
interface _Scope {
  ctx: GpuContext;
  rec: Recorder;
  pass: PassEncoder;
  kernel: TcMatmulKernel;
  o: TcMatmulOptions;
  M: number;
  N: number;
  K: number;
  pick: (v: _Variant) => _Compiled;
  reduce: KernelOf<ReturnType<typeof splitKReduceSignature>>;
  ones: TrackedBuffer;
  lastVariant: { vecA: boolean; vecB: boolean; splitK: number };
}

/** Records one region: the product (sliced), then with split-K the partials' sum. */
function _recordRegion(s: _Scope, g: _Region, S: number): void {
  const { kernel: k, o, M, N, K } = s, t = k.tile;
  const cOff = (g.mLo - g.os.base) * N + g.nLo;
  const depth = g.kHi - g.kLo;
  const { per, slices } = _cut(t, depth, S);
  const mm = g.mHi - g.mLo, nn = g.nHi - g.nLo;
  const floor = tcMatrixBindingBytes(tileMma(t));
  let part: TrackedBuffer | undefined;
  let own = false;
  if (slices > 1) {
    // at least a matrix's footprint: the straight variant stores matrices into the partials
    const bytes = Math.max(floor, (slices - 1) * mm * nn * 4);
    own = o.workspace === undefined || o.workspace.size < bytes;
    part = own
      ? s.ctx.createBuffer({ size: bytes, role: "workspace", label: "tc split-K partials" })
      : o.workspace!;
  }
  const aStart = k.aTrans ? (g.kLo - g.ap.base) * M + g.mLo : (g.mLo - g.ap.base) * K + g.kLo;
  const bStart = k.bTrans ? (g.kLo - g.bp.base) * N + g.nLo : (g.nLo - g.bp.base) * K + g.kLo;
  const lda = k.aTrans ? M : K, ldb = k.bTrans ? N : K;
  const va = vectorLoadsFit({ dtype: k.aDtype, trans: k.aTrans, start: aStart, ld: lda, depth }) &&
    (k.aTrans || per % vecWidth(k.aDtype) === 0);
  const vb = vectorLoadsFit({ dtype: k.bDtype, trans: k.bTrans, start: bStart, ld: ldb, depth }) &&
    (k.bTrans || per % vecWidth(k.bDtype) === 0);
  // an output buffer smaller than one matrix takes the variant without matrix stores into it
  const straight = g.os.buffer.size >= floor;
  const { k: kern, min } = s.pick({ vecA: va, vecB: vb, straight });
  Object.assign(s.lastVariant, { vecA: va, vecB: vb, splitK: slices });
  const ep = o.epilogue;
  const params = {
    M: mm,
    N: nn,
    K: depth,
    aOff: aStart,
    lda,
    bOff: bStart,
    ldb,
    cOff,
    ldc: N,
    accumulate: g.acc ? 1 : 0,
    alpha: o.alpha ?? 1,
    kPer: per,
    first: 1,
    aSc: o.scales?.a ?? 0,
    bSc: o.scales?.b ?? 0,
    ...(ep ? { eRow: g.mLo, eCol: ep.col0 + g.nLo, gSc: ep.gSlot } : {}),
  };
  const one = (t: DeviceTensor) => {
    if (t.shards.length !== 1) throw new RangeError("tc matmul: the epilogue's inputs, one shard");
    return t.shards[0].buffer;
  };
  // an unsplit product never touches its partials: the context's unused binding stands there
  const buffers = {
    a: g.ap.buffer,
    b: g.bp.buffer,
    outp: g.os.buffer,
    part: part ?? s.ctx.unusedBinding,
    scales: o.scales?.buffer ?? s.ones,
    ...(ep ? { targets: one(ep.targets), lse: one(ep.lse), w: one(ep.w) } : {}),
  };
  checkTcBindings(kern.label, min, buffers);
  s.pass.dispatch(
    kern.pipeline,
    kern.bind(s.rec, params, buffers),
    Math.ceil(nn / tileCols(t)),
    Math.ceil(mm / tileRows(t)),
    slices,
  );
  if (slices > 1 && part) {
    const rp = {
      M: mm,
      N: nn,
      S: slices - 1,
      cOff,
      sCm: N,
      accumulate: 1,
      alpha: o.alpha ?? 1,
    };
    const wgs = Math.ceil((mm * nn) / 256);
    const x = Math.min(wgs, 65535);
    const bg = s.reduce.bind(s.rec, rp, { part, outp: g.os.buffer });
    s.pass.dispatch(s.reduce.pipeline, bg, x, Math.ceil(wgs / x));
    if (own) s.rec.release(part);
  }
}
