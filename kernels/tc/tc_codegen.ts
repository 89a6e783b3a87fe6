/**
 * WGSL code generation for the tensor-core GEMM main loop (Dawn's subgroup-matrix extension),
 * shared by the plain product (tc_matmul_wgsl.ts), the fused forward (tc_forward.ts) and the
 * backward's filter pass (tc_filter.ts).
 *
 * The product is acc(m, n) = Σ_k A(m, k)·B(n, k) over a workgroup's bm×bn tile, with A(m, k) and
 * B(n, k) read from one binding each: with `contig: "k"` element (r, k) of an operand sits at
 * off + r·ld + k (or rowStart(r) + k), with `contig: "mn"` at off + r + k·ld. Each K-step (steps
 * 1 and 2 are kernels/tc/tc_loads.ts's):
 *
 * 1. global loads into registers, issued a step ahead: 16-byte vectors along the contiguous index
 *    (8 bf16/f16 or 4 f32 values) where the caller promises alignment ({@link TcOperand.vec}),
 *    else one element per load, zero outside the problem;
 * 2. conversion to f16 (bf16 and f32 through f32, times the operand's power-of-two scale; f16
 *    unscaled is a bitcast) and scalar f16 stores into the staging arrays: [row][k] for a
 *    k-contiguous operand, [k][row] for the other, each row padded by {@link STAGE_PAD} halves;
 *    a `split` operand (A only) is staged twice, as hi = f16(x) and lo = f16(x − hi), and
 *    multiplied twice (about 22 significant bits instead of 11);
 * 3. per subgroup, for each MMA k-slice: mt left and nt right matrices loaded from the staging
 *    (row- or column-major by the staging's layout, offsets from `subgroup_id` only, as Dawn's
 *    uniformity analysis requires) and mt·nt multiply-accumulates into f32 result matrices.
 *
 * Everything is unrolled but the K loop (Deno's and Dawn's compilers do not unroll). Double
 * buffering follows kernels/gemm_codegen.ts: the loop body runs two K-steps so that every staging
 * offset is a constant plus the subgroup's base. The subgroup-matrix operations themselves, native
 * or emulated (tests on adapters without them), are tc_mma.ts's.
 * @module
 */
import { vecWidth } from "../wgsl_common.ts";
import { stageLoads, type StageSide } from "./tc_loads.ts";
import {
  emulationDecls,
  emuName,
  emuSlot,
  tcLoadAcc,
  type TcMode,
  tcResultType,
} from "./tc_mma.ts";
export { tcResultType } from "./tc_mma.ts";
import {
  STAGE_PAD,
  tcThreads,
  type TcTile,
  tileCols,
  tileMma,
  tileRows,
  validateTcTile,
} from "./tc_tiles.ts";

/** Element types the operands may be stored in (converted to f16 when staged). */
export type TcDtype = "bf16" | "f16" | "f32";

export { tcEnables, tcEntryParams, tcLanePrelude, type TcMode, tcStoreAcc } from "./tc_mma.ts";
export { tcStorageType } from "./tc_loads.ts";

/** One operand of the product. */
export interface TcOperand {
  dtype: TcDtype;
  /** The contiguous index: k (A·Bᵀ style) or the operand's rows (held transposed). */
  contig: "k" | "mn";
  /**
   * 16-byte vector loads along the contiguous index (binding declared as vectors): offset, row
   * stride and, for `contig: "k"`, K multiples of the vector width. The caller's promise.
   */
  vec?: boolean;
  /** Staged as hi and lo f16 parts and multiplied twice (A only). */
  split?: boolean;
  /**
   * With `contig: "k"`: the element index of row r's first element (a WGSL u32 expression of r),
   * instead of off + r·ld (rows read through a permutation).
   */
  rowStart?: (r: string) => string;
}

/** Options of {@link tcMainloop}. */
export interface TcMainloopOptions {
  tile: TcTile;
  /** Invocations per subgroup. */
  sgSize: number;
  a: TcOperand;
  b: TcOperand;
  /** Binding names of A and B. */
  aBuf: string;
  bBuf: string;
  /** WGSL u32 expressions: rows M, columns N, depth K, the tile's first row and column. */
  M: string;
  N: string;
  K: string;
  m0: string;
  n0: string;
  /** Element offsets and strides (see the module doc). */
  aOff: string;
  lda: string;
  bOff: string;
  ldb: string;
  /** WGSL f32 expressions multiplying each value before its conversion (default none). */
  aScale?: string;
  bScale?: string;
  /** Prefix of the workgroup arrays and registers (two products in one shader). */
  prefix?: string;
  /** Native subgroup matrices (default) or their emulation ({@link TcMode}). */
  mode?: TcMode;
  /**
   * Diagnostics for the bench only (wrong results): `copy-only` does one multiply a K-step
   * instead of mt·nt·(bk/k) (the staging's cost), `mma-only` stages only the first K-step (the
   * arithmetic's and the matrix loads' cost).
   */
  diag?: "copy-only" | "mma-only";
  /**
   * Where `when` holds (a uniform WGSL bool), the accumulators start from the f32 array `buf`
   * times `factor` instead of zeros, accumulator (i, j) at element `off(i, j)` with row stride
   * `stride`: an accumulating product's old values ({@link tcLoadAcc}; emulated, `buf` must be
   * among the module's load sources, {@link tcModuleDecls}).
   */
  preload?: {
    buf: string;
    off: (i: number, j: number) => string;
    stride: string;
    factor: string;
    when: string;
  };
}

function _sides(o: TcMainloopOptions): StageSide[] {
  const t = o.tile, p = o.prefix ?? "";
  if (o.b.split) throw new RangeError("tc mainloop: only A may be split");
  const side = (
    name: "A" | "B",
    op: TcOperand,
    rows: number,
    x: { buf: string; extent: string; first: string; off: string; ld: string; scale?: string },
  ): StageSide => {
    const flat = _flatStaging(o.a);
    return {
      name,
      op,
      rows,
      ...x,
      arr: `${p}s${name}`,
      arrLo: op.split ? `${p}s${name}lo` : undefined,
      flat,
      ..._staging(t, name, op.contig, flat),
      subOf: name === "A" ? `(sg / ${t.sgCols}u)` : `(sg % ${t.sgCols}u)`,
      prefix: p,
    };
  };
  return [
    side("A", o.a, tileRows(t), {
      buf: o.aBuf,
      extent: o.M,
      first: o.m0,
      off: o.aOff,
      ld: o.lda,
      scale: o.aScale,
    }),
    side("B", o.b, tileCols(t), {
      buf: o.bBuf,
      extent: o.N,
      first: o.n0,
      off: o.bOff,
      ld: o.ldb,
      scale: o.bScale,
    }),
  ];
}

/** Whether a product stages flat (see StageSide.flat): where A is split. */
const _flatStaging = (a: { split?: boolean }) => a.split === true;

/** The staging of one side of a tile (A: its rows, B: its columns): see StageSide. */
function _staging(t: TcTile, name: "A" | "B", contig: "k" | "mn", flat: boolean) {
  const rows = name === "A" ? tileRows(t) : tileCols(t);
  const subs = flat ? 1 : name === "A" ? t.sgRows : t.sgCols, subRows = rows / subs;
  const stride = contig === "k" ? t.bk + STAGE_PAD : subRows + STAGE_PAD;
  return { stride, subs, subRows, subElems: contig === "k" ? subRows * stride : t.bk * stride };
}

/** Bytes of workgroup memory the staging of a product takes. */
export function tcSharedBytes(
  t: TcTile,
  o: { aContig: "k" | "mn"; bContig: "k" | "mn"; split?: boolean },
): number {
  validateTcTile(t);
  const copies = t.dbuf ? 2 : 1, flat = _flatStaging(o);
  const elems = (name: "A" | "B", contig: "k" | "mn") => {
    const s = _staging(t, name, contig, flat);
    return s.subs * s.subElems;
  };
  const a = elems("A", o.aContig) * (o.split ? 2 : 1);
  return (a + elems("B", o.bContig)) * copies * 2;
}

/**
 * `words` (4-byte) rounded up to whole 16 bytes. Every workgroup variable of a kernel with
 * subgroup matrices is a multiple of 16 bytes, so each starts 16-byte aligned wherever the driver
 * places it: subgroup-matrix loads and stores into workgroup memory need it (on an H100 and H200
 * through Dawn, a lone 4-byte atomic beside the scratch shifted the stored matrices by a word).
 */
export function wgWords(words: number): number {
  return Math.ceil(words / 4) * 4;
}

/** Workgroup declarations of the staging arrays (f16; enable f16 is the kernel's). */
export function tcShared(o: TcMainloopOptions): string {
  const copies = o.tile.dbuf ? 2 : 1;
  return _sides(o).flatMap((s) =>
    [s.arr, s.arrLo].filter((x) => x !== undefined).map((arr) =>
      s.flat
        ? `var<workgroup> ${arr}: array<f16, ${copies * s.subElems}>;`
        : `var<workgroup> ${arr}: array<array<f16, ${s.subElems}>, ${copies * s.subs}>;`
    )
  ).join("\n");
}

/** Accumulator names `acc_i_j` of a subgroup's register tile, with (i, j). */
export function tcAccs(t: TcTile, prefix = ""): { name: string; i: number; j: number }[] {
  const out: { name: string; i: number; j: number }[] = [];
  for (let i = 0; i < t.mt; i++) {
    for (let j = 0; j < t.nt; j++) out.push({ name: `${prefix}acc_${i}_${j}`, i, j });
  }
  return out;
}

/**
 * Statements defining the subgroup's first row `${prefix}sr` and first column `${prefix}sc` in
 * the tile (uniform: from `sg`, the `subgroup_id` builtin).
 */
export function tcSubgroupCoords(t: TcTile, prefix = ""): string {
  const m = tileMma(t);
  return `let ${prefix}sr = (sg / ${t.sgCols}u) * ${t.mt * m.m}u;
  let ${prefix}sc = (sg % ${t.sgCols}u) * ${t.nt * m.n}u;`;
}

/** Offset (u32 expression) and layout of matrix (i or j) at MMA k-slice kk of copy `copy`. */
function _matrixAt(
  t: TcTile,
  s: StageSide,
  copy: number,
  kk: number,
  idx: number,
): { at: string; sub: string; off: string; layout: "row_major" | "col_major" } {
  const mma = tileMma(t);
  const along = s.name === "A" ? mma.m : mma.n;
  // staged [row][k] (k-contiguous): row-major for A (rows m), column-major for B (element (k, n)
  // at n·stride + k); staged [k][row]: column-major for A (element (m, k) at k·stride + m),
  // row-major for B
  const alongK = s.op.contig === "k";
  const c = alongK ? idx * along * s.stride + kk * mma.k : kk * mma.k * s.stride + idx * along;
  const layout = alongK === (s.name === "A") ? "row_major" : "col_major";
  if (s.flat) {
    // one array a copy: the offset starts at the subgroup's first row (sr or sc)
    const first = s.name === "A" ? `${s.prefix}sr` : `${s.prefix}sc`;
    const at = alongK ? `${first} * ${s.stride}u` : first;
    return { at: "", sub: "0u", off: `${at} + ${copy * s.subElems + c}u`, layout };
  }
  // the subgroup's own sub-array of the copy; the offset inside it is a constant
  const sub = copy === 0 ? s.subOf : `${copy * s.subs}u + ${s.subOf}`;
  return { at: `[${sub}]`, sub, off: `${c}u`, layout };
}

/** The arithmetic of one K-step from staging copy `copy`. */
function _compute(o: TcMainloopOptions, sides: StageSide[], copy: number): string[] {
  const t = o.tile, mma = tileMma(t), p = o.prefix ?? "";
  const [A, B] = sides;
  const left = `subgroup_matrix_left<f16, ${mma.k}, ${mma.m}>`;
  const right = `subgroup_matrix_right<f16, ${mma.n}, ${mma.k}>`;
  const emu = o.mode === "emulated";
  const out: string[] = [];
  const slices = o.diag === "copy-only" ? 1 : t.bk / mma.k;
  const mt = o.diag === "copy-only" ? 1 : t.mt, nt = o.diag === "copy-only" ? 1 : t.nt;
  for (let kk = 0; kk < slices; kk++) {
    const tag = `${copy}_${kk}`;
    const bs = [...Array(nt).keys()].map((j) => _matrixAt(t, B, copy, kk, j));
    if (!emu) {
      bs.forEach((m, j) =>
        out.push(
          `let ${p}b${tag}_${j} = subgroupMatrixLoad<${right}, ${m.layout}>(&${B.arr}${m.at}, ${m.off}, ${B.stride}u);`,
        )
      );
    }
    for (let i = 0; i < mt; i++) {
      const m = _matrixAt(t, A, copy, kk, i);
      const parts = [A.arr, A.arrLo].filter((x) => x !== undefined);
      parts.forEach((arr, h) => {
        const a = `${p}a${tag}_${i}_${h}`;
        if (!emu) {
          out.push(
            `let ${a} = subgroupMatrixLoad<${left}, ${m.layout}>(&${arr}${m.at}, ${m.off}, ${A.stride}u);`,
          );
        }
        for (let j = 0; j < nt; j++) {
          const acc = `${p}acc_${i}_${j}`;
          if (emu) {
            out.push(
              `${emuName(p, "mma", arr)}(${emuSlot(t, i, j)}, ${m.sub}, ${m.off}, ${A.stride}u, ${
                m.layout === "col_major"
              }, ${bs[j].sub}, ${bs[j].off}, ${B.stride}u, ${bs[j].layout === "col_major"}, sl);`,
            );
          } else {
            out.push(`${acc} = subgroupMatrixMultiplyAccumulate(${a}, ${p}b${tag}_${j}, ${acc});`);
          }
        }
      });
    }
  }
  return out;
}

/**
 * Module-scope code of the product: the staging arrays, and when emulated the accumulators and
 * the emulation's functions (tc_mma.ts), with a store function per array of `storeTargets` and
 * a load function for the preload's array (TcMainloopOptions.preload).
 */
export function tcModuleDecls(o: TcMainloopOptions, storeTargets: string[] = []): string {
  const staging = tcShared(o);
  if (o.mode !== "emulated") return staging;
  const [A, B] = _sides(o);
  const left = [A.arr, A.arrLo].filter((x) => x !== undefined);
  return `${staging}\n${
    emulationDecls({
      ...o,
      left,
      right: B.arr,
      storeTargets,
      loadSources: o.preload ? [o.preload.buf] : [],
      flat: [A.flat, B.flat],
    })
  }`;
}

/**
 * The product's main loop as statements inside `main`. Needs `lid` (local_invocation_index) and
 * `sg` (subgroup_id) in scope and the subgroup coordinates ({@link tcSubgroupCoords}); declares
 * and zeroes the accumulators (or only zeroes them with `declare` false), then accumulates the K
 * range. All invocations must run it (barriers); it ends with a barrier, so the staging may be
 * reused after it.
 */
export function tcMainloop(o: TcMainloopOptions, declare = true): string {
  const t = o.tile;
  validateTcTile(t);
  const sides = _sides(o);
  const threads = tcThreads(t, o.sgSize);
  for (const s of sides) {
    const w = vecWidth(s.op.dtype);
    if (s.op.vec && (s.op.contig === "k" ? t.bk % w : s.rows % w) !== 0) {
      throw new RangeError(`tc mainloop: vector loads of ${s.name} do not fit the tile`);
    }
    if (s.op.rowStart && s.op.contig !== "k") {
      throw new RangeError("tc mainloop: rowStart needs a k-contiguous operand");
    }
  }
  const loads = sides.map((s) => stageLoads(o, s, threads));
  const zero = `${tcResultType(t)}()`;
  const accs = tcAccs(t, o.prefix).map((a) =>
    o.mode === "emulated"
      ? `${o.prefix ?? ""}emu_zero(${emuSlot(t, a.i, a.j)}, sl);`
      : declare
      ? `var ${a.name} = ${zero};`
      : `${a.name} = ${zero};`
  );
  const pre = o.preload;
  if (pre) {
    const loads = tcAccs(t, o.prefix).map((a) =>
      tcLoadAcc(o, a, pre.buf, pre.off(a.i, a.j), pre.stride, pre.factor)
    );
    accs.push(`if (${pre.when}) {\n    ${loads.join("\n    ")}\n  }`);
  }
  const decls = loads.flatMap((l) => l.decls).join(" ");
  const fetch = (kb: string) =>
    `{ let KB = ${kb}; let KE = ${o.K};\n    ${
      loads.flatMap((l) => l.fetch).join("\n    ")
    }\n    }`;
  const stash = (copy: number) =>
    loads.flatMap((l) => l.stashes.map((f) => f(copy))).join("\n    ");
  const compute = (copy: number) => _compute(o, sides, copy).join("\n    ");
  const mmaOnly = o.diag === "mma-only";
  const loopFetch = (kb: string) => mmaOnly ? "" : fetch(kb);
  const loopStash = (copy: number) => mmaOnly ? "" : stash(copy);
  const kTiles = `let k_tiles = (${o.K} + ${t.bk - 1}u) / ${t.bk}u;`;
  if (!t.dbuf) {
    return `${accs.join(" ")}
${decls}
{
  ${kTiles}
  ${fetch("0u")}
  for (var kt = 0u; kt < k_tiles; kt++) {
    ${kt0Stash(mmaOnly, stash(0), loopStash(0))}
    workgroupBarrier();
    ${loopFetch(`(kt + 1u) * ${t.bk}u`)}
    ${compute(0)}
    workgroupBarrier();
  }
}`;
  }
  return `${accs.join(" ")}
${decls}
{
  ${kTiles}
  ${fetch("0u")}
  ${stash(0)}
  ${mmaOnly && t.dbuf ? stash(1) : ""}
  workgroupBarrier();
  for (var kt = 0u; kt < k_tiles; kt += 2u) {
    ${loopFetch(`(kt + 1u) * ${t.bk}u`)}
    ${compute(0)}
    if (kt + 1u < k_tiles) {
      ${loopStash(1)}
      workgroupBarrier();
      ${loopFetch(`(kt + 2u) * ${t.bk}u`)}
      ${compute(1)}
      ${loopStash(0)}
      workgroupBarrier();
    }
  }
  workgroupBarrier();
}`;
}

/** The single-buffered loop's stash: every step, or with `mma-only` the first step's only. */
function kt0Stash(mmaOnly: boolean, first: string, every: string): string {
  return mmaOnly ? `if (kt == 0u) {\n    ${first}\n    }` : every;
}
