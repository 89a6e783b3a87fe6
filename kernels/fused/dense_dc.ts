/**
 * The fused backward's dense dC path: where the filter keeps most tiles, dC as dense products on
 * the GEMM core instead of the kept tiles' pass, chosen on the GPU per call, within the fused
 * row's memory bound (no n×|V| logits).
 *
 * The kept tiles' dC pass (kernels/fused/kept_tiles.ts) recomputes each kept tile and multiplies
 * at about half of the plain product's rate P: past a kept fraction k of about
 * {@link DENSE_DC_ABOVE} it costs more than recomputing every tile's logits and multiplying
 * densely (2 P at the GEMM core's rate). So after dE is formed, pass `dense dC decision` reads the
 * kept count and writes a flag, and both paths are recorded under gates of it (gpu/gate.ts), as
 * the dense dE path's are (kernels/fused/dense_de.ts): the kept tiles' dC pass, its split's sum
 * and the target scatter under 0, the dense path under 1. The kept path's light passes (the
 * smoothing row, the order, the split's plan, the target pairs and their sort) run ungated: where
 * the dense path is taken it overwrites every row they wrote, and where it is not they cost
 * nothing more than before (a gated dispatch costs about 5 µs even with no workgroups). The
 * scatter is gated because it is not light there: where the dC pass ran under a closed gate it
 * folded no target, so the scatter would add every token's (1.0 ms at `llm` on the H200).
 *
 * The dense path, pass `dense dC`, for vocabulary chunks [v0, v1) from the last row down:
 *
 *   G = w_n·(p − (1−β)[v = t_n] − β/|V|)·∂z/∂x of Z = E·C[v0:v1]ᵀ   (the GEMM core's logits tile,
 *                                        G formed by its epilogue: kernels/matmul_wgsl.ts
 *                                        `gradEpilogue`, kernels/logit_grad.ts's arithmetic)
 *   dC[v0:v1] = Gᵀ·E                     (written whole, rounded once)
 *
 * G is the whole gradient, its target and β/|V| terms exact, so the chunk's rows need nothing
 * else: nothing is dropped, the dense path is the unfiltered dC. G is stored in dC's element
 * type: f32 with f32 gradients (and with 16-bit ones of odd d, whose dC is accumulated in f32),
 * else the 16-bit dtype, rounded once as the materialised baseline's 16-bit G is.
 *
 * Memory: where does G live? dE is final before dC's storage is first written
 * (kernels/fused/backward.ts), so every row of dC not yet written is free. A chunk's G (n·Vc
 * elements) lies at the start of dC's storage, below the chunk's rows: n·(v1 − v0) ≤ v0·d, so
 * each chunk is at most d / (n + d) of the rows above it (`llm`, 4096 × 24,576 × 2304: 36% of
 * them, 8,832 rows first). The last chunk [0, v1) has no free rows below it: its G takes a
 * workspace of its own, the *tail*, of at most {@link DENSE_DC_TAIL_BYTES} and within what the
 * backward's workspace leaves of {@link FUSED_BACKWARD_WORKSPACE_LIMIT} ({@link denseDCPlan}: 192
 * rows at `llm`, 13 chunks in all). G and the rows a chunk writes are two writable bindings of the
 * same buffer, of disjoint byte ranges (kernels/matmul_wgsl.ts `aReadWrite`); each chunk's first
 * row lies on a binding offset (256 bytes) and its width is whole 16-row groups (16-byte loads).
 *
 * Chunks narrower than {@link DENSE_DC_SMALL_BELOW} rows (the last half dozen) take small tiles,
 * and their dC products split-K with the partials in the tail where it holds them
 * (kernels/matmul.ts: the slices added in their order).
 *
 * Deterministic: the decision is a function of the kept counts, the chunks go in a fixed order,
 * each output element of a product is owned by one thread, split-K partials are added in slice
 * order.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { PassEncoder } from "../../gpu/recorder.ts";
import { type DeviceTensor, elementBytes, tensorOnBuffer } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../../core/options.ts";
import { recordGatedPasses } from "../../gpu/gate.ts";
import { prepareMatmul, rowView } from "../matmul.ts";
import { type GemmTile } from "../gemm_codegen.ts";
import { TILE_HW_TT, TILE_HW_WIDE, TILE_SMALL } from "../gemm_tiles.ts";
import { DENSE_DE_TILE_HW } from "./dense_de.ts";
import type { DenseSharedPlan } from "./dense_shared.ts";
import {
  type DenseMode,
  type DensePathArgs,
  type DenseShare,
  type PreparedDenseDecision,
  prepareDenseDecision,
} from "./dense_decision.ts";

/**
 * The kept fraction above which the dense path is taken (`auto`). From an H200 at 4096 × 24,576 ×
 * 2304 (docs/performance.md): the kept tiles' dC pass costs about 3.6·k·P (35.3 ms at k = 0.963,
 * 29.2 at 0.791, P = 10.1 ms), the dense path 2.6 P (25.8 ms), so they cross at k ≈ 0.70.
 */
export const DENSE_DC_ABOVE = 0.7;

/** Which dC path the backward takes ({@link DenseMode}). */
export type DenseDCMode = DenseMode;

/** Bytes the dense dC's tail (the last chunk's G) may take at most. */
export const DENSE_DC_TAIL_BYTES = 3 << 19;

/**
 * The workspace the fused backward keeps within, the tail included: 2 MiB (its memory bound over
 * dE and dC) less 128 KiB for the uniform blocks and the counters.
 */
export const FUSED_BACKWARD_WORKSPACE_LIMIT = (2 << 20) - (128 << 10);

/** Byte alignment of every chunk's first row (a storage binding's offset). */
const _ALIGN = 256;

/** Rows a chunk's width is a multiple of (but the first's, where |V| is not). */
const _GROUP = 16;

/** Rows of the tail at least: below it the path does not apply. */
const _MIN_TAIL = 8;

/**
 * Chunks at most: where more would be needed the path is not recorded. Where not taken, each
 * chunk's gated dispatches of zero workgroups still cost about 5 µs each (at the paper's shape
 * even a tail of 96 rows would make 35 chunks).
 */
export const DENSE_DC_MAX_CHUNKS = 32;

/** The dense dC's chunks, from the last vocabulary row down, and its tail. */
export interface DenseDCPlan {
  /** Rows [floor, floor + tailRows) form the last chunk, its G in the tail workspace. */
  tailRows: number;
  /** Bytes of the tail workspace (n·min(tailRows, |V|) of dC's elements, padded to 16). */
  tailBytes: number;
  /** Every chunk [v0, v1), the first at the top; the last is [floor, v1 ≤ floor + tailRows). */
  chunks: [number, number][];
  /** Rows below the chunks, not theirs (a dense backward sharing G: dE's accumulator); 0. */
  floor: number;
  /** Rows a chunk's boundary is a multiple of (binding offsets, whole 16-row groups). */
  q: number;
}

const _gcd = (a: number, b: number): number => (b === 0 ? a : _gcd(b, a % b));

/**
 * The chunks of a problem, or undefined where the path does not apply (a tail of fewer than 8
 * rows in the bytes left, a chunk that cannot move down, more than
 * {@link DENSE_DC_MAX_CHUNKS}). `outBytes` is the bytes of dC's accumulator element (2 or 4, G's
 * too), `restBytes` the backward's other workspace.
 */
export function denseDCPlan(o: {
  n: number;
  v: number;
  d: number;
  outBytes: number;
  /** Bytes of G's element where they differ from the accumulator's (another kernel family's). */
  gBytes?: number;
  restBytes: number;
  maxBindingBytes: number;
  /** The tail's rows at most (tests: more chunks at small shapes). */
  maxTailRows?: number;
  /**
   * Rows [0, floor) are not the plan's (a multiple of the plan's q): the chunks cover [floor, v),
   * each one's G at the floor (kernels/fused/dense_shared.ts). Default 0.
   */
  floor?: number;
}): DenseDCPlan | undefined {
  const { n, v, d, outBytes } = o;
  const f = o.floor ?? 0;
  const rowBytes = d * outBytes;
  // chunk boundaries at binding offsets and chunks of whole 16-row groups, so that the products
  // take their 16-byte loads and stores (G's row stride is the chunk's width): multiples of q
  // rows (a ragged |V| leaves the first chunk ragged)
  const off = _ALIGN / _gcd(_ALIGN, rowBytes % _ALIGN === 0 ? _ALIGN : rowBytes % _ALIGN);
  const q = (off * _GROUP) / _gcd(off, _GROUP);
  const budget = Math.min(DENSE_DC_TAIL_BYTES, FUSED_BACKWARD_WORKSPACE_LIMIT - o.restBytes);
  // G takes dC's element (or gBytes): n·outBytes bytes a vocabulary row
  const gRow = n * (o.gBytes ?? outBytes);
  const fit = Math.min(Math.floor(budget / gRow), o.maxTailRows ?? Infinity);
  const tailRows = Math.floor(fit / q) * q;
  if (f % q !== 0 || f >= v) return undefined;
  if (tailRows < Math.min(v - f, _MIN_TAIL)) return undefined;
  const gBytes = (rows: number) => Math.ceil((gRow * rows) / 16) * 16;
  const maxRows = Math.floor(o.maxBindingBytes / gRow);
  const chunks: [number, number][] = [];
  let v1 = v;
  while (v1 > f + tailRows) {
    // the lowest v0 whose rows between the floor and it hold the chunk's G, on a binding offset
    let v0 = Math.ceil((v1 * gRow + f * rowBytes) / (gRow + rowBytes) / q) * q;
    while (v0 < v1 && gBytes(v1 - v0) > (v0 - f) * rowBytes) v0 += q;
    v0 = Math.max(v0, f + tailRows, v1 - Math.floor(maxRows / q) * q);
    if (v0 >= v1) return undefined;
    chunks.push([v0, v1]);
    v1 = v0;
  }
  chunks.push([f, v1]);
  if (chunks.length > DENSE_DC_MAX_CHUNKS) return undefined;
  return { tailRows, tailBytes: gBytes(Math.min(tailRows, v - f)), chunks, floor: f, q };
}

/** What a record of the dense path reads (see {@link PreparedDenseDC.record}). */
export interface DenseDCArgs extends DensePathArgs {
  /** dC's accumulator (the output, or its f32 scratch), not yet written. */
  dC: DeviceTensor;
}

/**
 * What a dense dC path of another kernel family is prepared with
 * (FusedBackwardOptions.denseDCPath): its chunks come from a plan for its G's bytes.
 */
export interface DenseDCPathOptions {
  spec: Shape & { dtype: Dtype };
  opts: LceOptions;
  mode: Exclude<DenseDCMode, "never">;
  /** dC's accumulator dtype (f32, or the 16-bit output written in place). */
  outDtype: "f32" | "bf16" | "f16";
  /** The chunks ({@link denseDCPlan}), or undefined where the path cannot apply. */
  plan: DenseDCPlan | undefined;
}

/** A dense dC path of another kernel family (FusedBackwardOptions.denseDCPath). */
export interface DenseDCPath {
  /** Bytes of its G an element (the plan's chunks and tail). */
  gBytes: number;
  prepare(ctx: GpuContext, o: DenseDCPathOptions): Promise<PreparedDenseDC>;
}

/** The compiled dense dC path. */
export interface PreparedDenseDC {
  /** The chunks of the last record (0 where the path did not apply). */
  readonly lastChunks: number;
  /** The kept fraction above which `auto` takes the dense path. */
  readonly above: number;
  /** Whether a record with these arguments records the dense path ({@link denseDCApplies}). */
  applies(a: DenseDCArgs): boolean;
  /**
   * Roundings of dC to its output dtype where the path is taken, where another kernel family
   * says (default: G's to a 16-bit dC's dtype and the output's).
   */
  readonly dCRoundings?: number;
  /**
   * Records the decision, then `filtered` (the kept tiles' dC), which records its costly passes
   * through `gated` (under the flag's 0), then the dense path under the flag's 1, and returns
   * true; or returns false having recorded nothing where the dense path does not apply (E, C or
   * dC over several bindings): the caller then records `filtered` alone, ungated.
   */
  record(
    a: DenseDCArgs,
    filtered: (gated: (fn: () => void) => void) => void,
    shared?: { share: DenseShare; record: DenseSharedRecord },
  ): boolean;
  /** Whether the last record took the dense path (reads the flag; false where none applied). */
  took(): Promise<boolean>;
  /**
   * The last record's flag, in one read back: 0 the kept tiles, 1 the dense dC, 2 the dense
   * backward sharing G (kernels/fused/dense_shared.ts); 0 where none applied. Absent: no shared path.
   */
  taken?(): Promise<number>;
  /**
   * The shared path's record for these arguments, where prepared with its plan and it applies
   * (dE's accumulator `dE` where the plan's floor says); undefined else.
   */
  sharing?(a: DenseDCArgs & { dE: DeviceTensor }): DenseSharedRecord | undefined;
  release(): void;
}

/**
 * A dense backward sharing G, for one record (kernels/fused/dense_shared.ts): `dEPhases` (A and
 * B, recorded under the dense dE decision's flag 2, before dE's cast), `dCPhase` (D, under the
 * dense dC decision's flag 2), and the tail workspace both take, which the dense dC takes too.
 */
export interface DenseSharedRecord {
  tail: TrackedBuffer;
  dEPhases(): void;
  dCPhase(): void;
}

/**
 * The start of a dense dC record, shared by the kernel families: where the path applies (a plan;
 * E, C and dC's accumulator of `outDtype` in one binding each, dC's from offset 0), the decision,
 * `filtered` under its 0 and the tail workspace (released with the record); undefined, having
 * recorded nothing, where it does not.
 */
export function beginDenseDC(
  ctx: GpuContext,
  o: {
    plan: DenseDCPlan | undefined;
    outDtype: "f32" | "bf16" | "f16";
    decision: PreparedDenseDecision;
    /** The path's chunk count, set to this record's (0 where it does not apply). */
    prepared: { lastChunks: number };
  },
  a: DenseDCArgs,
  filtered: (gated: (fn: () => void) => void) => void,
  shared?: { share: DenseShare; record: DenseSharedRecord },
): { plan: DenseDCPlan; dCBuf: TrackedBuffer; tail: TrackedBuffer } | undefined {
  const { plan, decision } = o;
  o.prepared.lastChunks = 0;
  if (!plan || !denseDCApplies(o, a)) return undefined;
  const dCBuf = a.dC.shards[0].buffer;
  const { rec } = a;
  decision.record(a, 0, shared?.share);
  filtered((fn) => decision.under(rec, 0, fn));
  // the shared path's tail where it is recorded (the largest of the plans' tails)
  const tail = shared?.record.tail ?? ctx.createBuffer({
    size: plan.tailBytes,
    role: "workspace",
    label: "dense dC tail",
  });
  if (!shared) rec.release(tail);
  o.prepared.lastChunks = plan.chunks.length;
  return { plan, dCBuf, tail };
}

/**
 * Whether the dense dC applies to a record: a plan, and E, C and dC's accumulator of `outDtype` in
 * one binding each, dC's from offset 0.
 */
export function denseDCApplies(
  o: { plan: DenseDCPlan | undefined; outDtype: "f32" | "bf16" | "f16" },
  a: DenseDCArgs,
): boolean {
  const one = (t: DeviceTensor) => t.shards.length === 1;
  const single = a.tok.length === 1 && a.voc.length === 1;
  if (!o.plan || !single || !one(a.e) || !one(a.c) || !one(a.dC)) return false;
  return a.dC.dtype === o.outDtype && a.dC.shards[0].buffer.offset === 0;
}

/** The dC product's tile on the large chunks: Gᵀ·E, both held transposed. */
export function denseDCTile(ctx: GpuContext): GemmTile {
  return ctx.report.isFallbackAdapter ? TILE_SMALL : TILE_HW_TT;
}

/**
 * Chunks of fewer rows than this take the small tile (DenseDCTuning.smallTile) for both products
 * on hardware: the chunks near the tail hold tens to hundreds of rows, where the large tiles make
 * a few dozen workgroups, each walking the whole depth (n for dC).
 */
export const DENSE_DC_SMALL_BELOW = 1024;

/** The dense dC's tiles (tuning). */
export interface DenseDCTuning {
  /** The dC product's tile (default {@link denseDCTile}). */
  productTile?: GemmTile;
  /** Both products' tile for small chunks (default the dense dE's 64×128 on hardware). */
  smallTile?: GemmTile;
  /** Chunks below this many rows take `smallTile` (default {@link DENSE_DC_SMALL_BELOW}). */
  smallBelow?: number;
  /** Each product of each chunk in a pass of its own, labelled with its rows (diagnostics). */
  perProduct?: boolean;
  /**
   * Split-K slices at most for the small chunks' dC products, their partials in the tail (free
   * until the last chunk), as many as it holds (default {@link DENSE_DC_SMALL_SPLIT}; 1: none).
   */
  smallSplit?: number;
}

/**
 * Split-K slices at most of a small chunk's dC product: its depth n over a few dozen workgroups
 * is what it costs, not its work.
 */
export const DENSE_DC_SMALL_SPLIT = 4;

/** Compiles the decision, the gate and the two products of a problem. */
export async function prepareDenseDC(
  ctx: GpuContext,
  o: {
    spec: Shape & { dtype: Dtype };
    opts: LceOptions;
    mode: Exclude<DenseDCMode, "never">;
    /** dC's accumulator dtype (f32, or the 16-bit output written in place). */
    outDtype: "f32" | "bf16" | "f16";
    /** The chunks ({@link denseDCPlan}), or undefined where the path cannot apply. */
    plan: DenseDCPlan | undefined;
    tuning?: DenseDCTuning;
    /** The dense backward sharing G's plan, where it is recorded (kernels/fused/dense_shared.ts). */
    shared?: DenseSharedPlan;
  },
): Promise<PreparedDenseDC> {
  const { spec, opts } = o;
  const hw = !ctx.report.isFallbackAdapter;
  const decision = await prepareDenseDecision(ctx, {
    name: "dense dC",
    mode: o.mode,
    above: DENSE_DC_ABOVE,
  });
  const t = o.tuning ?? {};
  // G in dC's element type, written by the logits product's epilogue
  const gDtype = o.outDtype;
  const products = (zTile: GemmTile, dCTile: GemmTile) =>
    Promise.all([
      prepareMatmul(ctx, {
        tile: zTile,
        aDtype: spec.dtype,
        bDtype: spec.dtype,
        aTrans: false,
        bTrans: false,
        outDtype: gDtype,
        gradEpilogue: { opts, v: spec.v },
      }),
      prepareMatmul(ctx, {
        tile: dCTile,
        aDtype: gDtype,
        bDtype: spec.dtype,
        aTrans: true,
        bTrans: true,
        outDtype: o.outDtype,
        aReadWrite: true,
      }),
    ]);
  const large = await products(hw ? TILE_HW_WIDE : TILE_SMALL, t.productTile ?? denseDCTile(ctx));
  const smallTile = t.smallTile ?? (hw ? DENSE_DE_TILE_HW : TILE_SMALL);
  const smallBelow = t.smallBelow ?? (hw ? DENSE_DC_SMALL_BELOW : 0);
  const maxSplit = t.smallSplit ?? DENSE_DC_SMALL_SPLIT;
  const chunkLists = [o.plan?.chunks, o.shared?.shared.chunks, o.shared?.dC?.chunks];
  const small = chunkLists.some((l) => l?.some(([v0, v1]) => v1 - v0 < smallBelow))
    ? await products(smallTile, smallTile)
    : large;
  // the shared path's dE product (kernels/fused/dense_shared.ts): G·C[chunk] into dE's f32
  // accumulator, G read through a writable binding of dC's storage
  const shared = o.shared;
  const dEMm = shared
    ? await prepareMatmul(ctx, {
      tile: hw ? DENSE_DE_TILE_HW : TILE_SMALL,
      aDtype: gDtype,
      bDtype: spec.dtype,
      aTrans: false,
      bTrans: true,
      aReadWrite: true,
    })
    : undefined;
  const bytes = elementBytes(o.outDtype), rowBytes = spec.d * bytes;
  /** A chunk's work: G at byte `gAt` of dC's storage or in the tail, then dE and/or dC. */
  type Work = {
    v0: number;
    v1: number;
    inTail: boolean;
    gAt: number;
    dE?: { acc: DeviceTensor; first: boolean };
    dC: boolean;
    split: number;
    dispatches: number;
  };
  // split-K of the dC product where small, the partials in the tail (an f32 dC: slices after
  // the first; a 16-bit one: every slice), except the tail's own chunk
  const work = (
    chunks: [number, number][],
    w: { tailBytes: number; floor: number; dE?: DeviceTensor; dC: boolean; firstDE?: boolean },
  ): Work[] =>
    chunks.map(([v0, v1], i) => {
      const cols = v1 - v0, first = o.outDtype === "f32" ? 1 : 0;
      const fit = first + Math.floor(w.tailBytes / (cols * spec.d * 4));
      const inTail = w.dC && v0 === w.floor;
      const split = w.dC && cols < smallBelow && !inTail ? Math.max(1, Math.min(maxSplit, fit)) : 1;
      const dE = w.dE ? { acc: w.dE, first: w.firstDE === true && i === 0 } : undefined;
      // dispatches: G, the products, and a split product's sum
      const dispatches = 1 + (dE ? 1 : 0) + (w.dC ? 1 : 0) + (split > 1 ? 1 : 0);
      return { v0, v1, inTail, gAt: w.floor * rowBytes, dE, dC: w.dC, split, dispatches };
    });
  const record = (
    a: DenseDCArgs,
    bufs: { dCBuf: TrackedBuffer; tail: TrackedBuffer },
    items: Work[],
    label: string,
  ) => {
    const { n } = spec, { rec } = a, { dCBuf, tail } = bufs;
    const onDC = (offset: number, rows: number, cols: number) =>
      tensorOnBuffer(ctx, { buffer: dCBuf.buffer, offset }, {
        dtype: gDtype,
        rows,
        cols,
        label: "dense dC chunk",
        role: "workspace",
      });
    const chunk = (c: Work, pass?: PassEncoder) => {
      const { v0, v1 } = c, cols = v1 - v0;
      // with `perProduct` each product in a pass of its own, labelled with the chunk's rows
      const inPass = (what: string, fn: (p: PassEncoder) => void) =>
        pass ? fn(pass) : rec.pass(`${label} ${what} (${cols} rows)`, fn);
      const g = c.inTail
        ? tensorOnBuffer(ctx, { buffer: tail.buffer }, {
          dtype: gDtype,
          rows: n,
          cols,
          label: "dense dC tail",
          role: "workspace",
        })
        : onDC(c.gAt, n, cols);
      const [zMm, dCMm] = cols < smallBelow ? small : large;
      const { targets, lse, w } = a;
      inPass("G", (pass) =>
        zMm.record(rec, {
          a: { tensor: a.e, trans: false },
          b: { view: rowView(a.c, v0, v1), trans: false },
          out: g,
          splitK: 1,
          epilogue: { targets, lse, w, col0: v0 },
          pass,
        }));
      if (c.dE) {
        const { acc, first } = c.dE;
        inPass("dE product", (pass) =>
          dEMm!.record(rec, {
            a: { tensor: g, trans: false },
            b: { view: rowView(a.c, v0, v1), trans: true },
            out: acc,
            accumulate: !first,
            splitK: 1,
            pass,
          }));
      }
      if (!c.dC) return;
      const out = onDC(v0 * rowBytes, cols, spec.d);
      inPass("product", (pass) =>
        dCMm.record(rec, {
          a: { tensor: g, trans: true },
          b: { tensor: a.e, trans: true },
          out,
          splitK: c.split,
          workspace: tail,
          pass,
        }));
    };
    if (t.perProduct) {
      for (const c of items) chunk(c);
      return;
    }
    recordGatedPasses(rec, label, items, (c) => c.dispatches, chunk);
  };
  const prepared: PreparedDenseDC = {
    lastChunks: 0,
    above: decision.above,
    applies: (a: DenseDCArgs) => denseDCApplies(o, a),
    record(a, filtered, sharedRecord) {
      const begun = beginDenseDC(ctx, { ...o, decision, prepared }, a, filtered, sharedRecord);
      if (!begun) return false;
      const { plan } = begun;
      const items = work(plan.chunks, { tailBytes: plan.tailBytes, floor: 0, dC: true });
      decision.under(a.rec, 1, () => record(a, begun, items, "dense dC"));
      if (sharedRecord) decision.under(a.rec, 2, sharedRecord.record.dCPhase);
      return true;
    },
    took() {
      return prepared.lastChunks === 0 ? Promise.resolve(false) : decision.took();
    },
    taken() {
      return prepared.lastChunks === 0 ? Promise.resolve(0) : decision.taken();
    },
    sharing: shared && o.plan
      ? (a) => {
        const sp = shared;
        if (!denseDCApplies(o, a) || a.dE.shards.length !== 1) return undefined;
        // dE's accumulator at the start of dC's storage where the plan's floor says, else apart
        const acc = a.dE.shards[0], dCBuf = a.dC.shards[0].buffer;
        const inDC = acc.buffer.buffer === dCBuf.buffer;
        if (inDC !== sp.floor > 0 || (inDC && (acc.buffer.offset !== 0 || acc.rowStart !== 0))) {
          return undefined;
        }
        if (inDC && acc.rows * spec.d * 4 > sp.floor * rowBytes) return undefined;
        // the accumulator as a binding of its own bytes, beside G's in the same buffer
        const dE = inDC
          ? tensorOnBuffer(ctx, { buffer: dCBuf.buffer, offset: 0 }, {
            dtype: "f32",
            rows: acc.rows,
            cols: spec.d,
            label: "dE accumulator",
            role: "workspace",
          })
          : a.dE;
        const tail = ctx.createBuffer({
          size: Math.max(sp.tailBytes, o.plan!.tailBytes),
          role: "workspace",
          label: "dense dC tail",
        });
        a.rec.release(tail);
        const bufs = { dCBuf, tail };
        const first = work(sp.dEChunks, {
          tailBytes: 0,
          floor: sp.floor,
          dE,
          dC: false,
          firstDE: true,
        });
        const both = work(sp.shared.chunks, {
          tailBytes: sp.shared.tailBytes,
          floor: sp.floor,
          dE,
          dC: true,
          firstDE: sp.floor === 0,
        });
        const last = sp.dC
          ? work(sp.dC.chunks, { tailBytes: sp.dC.tailBytes, floor: 0, dC: true })
          : [];
        return {
          tail,
          dEPhases: () => record(a, bufs, [...first, ...both], "dense shared"),
          dCPhase: () => record(a, bufs, last, "dense shared dC"),
        };
      }
      : undefined,
    release() {
      decision.release();
    },
  };
  return prepared;
}
