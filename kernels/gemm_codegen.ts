/**
 * WGSL code generation for register-tiled matrix products, shared by every kernel that multiplies
 * (the plain matmul, the fused forward and backward). Deno's WGSL compiler never unrolls loops, so
 * the K-step loop body, the register tile (named vec4 accumulators) and the staging of operands in
 * workgroup memory are written out in full here.
 *
 * The product computed is acc[m][n] = Σ_k A(m, k)·B(n, k) over a BM×BN output tile per workgroup,
 * where A(m, k) = a[aOff + m·sAm + k·sAk] and B(n, k) = b[bOff + n·sBn + k·sBk] (element indices
 * into one binding each; strides come from a uniform block so one kernel serves any layout). Which
 * index is contiguous in memory (the layout) only decides how threads are mapped to the global
 * loads, so that neighbouring threads read neighbouring addresses.
 *
 * Thread (tm, tn) owns rows g·(BM/RG) + 4·tm + r and columns h·(BN/CG) + 4·tn + c for g < RG = TM/4,
 * r < 4, h < CG = TN/4, c < 4: accumulator `acc_g_r_h` holds the 4 columns c of one row. Splitting a
 * thread's rows and columns into groups of 4 spaced BM/RG and BN/CG apart makes the vec4 reads of
 * workgroup memory by neighbouring threads contiguous.
 * @module
 */
import type { TensorDtype } from "../gpu/tensor.ts";
import { loadF32, vecWidth, wgslStorageType } from "./wgsl_common.ts";
import {
  GEMM_CODEGEN,
  type GemmCodegen,
  type GemmTile,
  type MainloopOptions,
  type OperandSpec,
  tileThreads,
} from "./gemm_tiles.ts";

export * from "./gemm_tiles.ts";

/**
 * Whether an operand of `dtype` with `k` contiguous can use vector loads in a tile: the tile asks
 * for them, its K-step holds whole vectors, and K (and so every row offset) is a multiple of the
 * width.
 */
export function vecLoadsFit(t: GemmTile, dtype: TensorDtype, k: number): boolean {
  const w = vecWidth(dtype);
  return t.vec === true && t.bk % w === 0 && k % w === 0 &&
    (dtype === "bf16" || dtype === "f16" || dtype === "f32");
}

/** Names of the accumulators and where they sit in the tile. */
export interface AccSlot {
  /** WGSL expression of the f32 accumulator value. */
  expr: string;
  /** The vec4 variable holding it. */
  vec: string;
  /** Component of the vec4 (0..3). */
  comp: number;
  /** WGSL expression of the row within the tile (depends on `tm`). */
  row: string;
  /** WGSL expression of the column within the tile (depends on `tn`). */
  col: string;
  /** Indices for grouping: row group g, row r, column group h, column c. */
  g: number;
  r: number;
  h: number;
  c: number;
}

const COMP = ["x", "y", "z", "w"];

/** Every accumulator slot of a thread, in row-major order of (g, r, h, c). */
export function accSlots(t: GemmTile): AccSlot[] {
  const rg = t.tm / 4, cg = t.tn / 4;
  const out: AccSlot[] = [];
  for (let g = 0; g < rg; g++) {
    for (let r = 0; r < 4; r++) {
      for (let h = 0; h < cg; h++) {
        for (let c = 0; c < 4; c++) {
          const vec = `acc_${g}_${r}_${h}`;
          out.push({
            expr: `${vec}.${COMP[c]}`,
            vec,
            comp: c,
            row: `(${g * (t.bm / rg) + r}u + 4u * tm)`,
            col: `(${h * (t.bn / cg) + c}u + 4u * tn)`,
            g,
            r,
            h,
            c,
          });
        }
      }
    }
  }
  return out;
}

/** Names of the vec4 accumulators. */
export function accVecs(t: GemmTile): string[] {
  return [...new Set(accSlots(t).map((s) => s.vec))];
}

/** vec4s of workgroup memory per staged copy of A and of B (padded against bank conflicts). */
function _stageVecs(t: GemmTile): { a: number; b: number } {
  return { a: t.bk * (t.bm / 4 + 1), b: t.bk * (t.bn / 4 + 1) };
}

/** One operand's {@link GemmTile.threadMajor} staging. */
interface _LaneDims {
  /** Rows of the staging: thread rows of A (bm/tm), thread columns of B (bn/tn). */
  lanes: number;
  /** vec4 groups a thread holds per k: tm/4 or tn/4. */
  groups: number;
  /** vec4s of a lane's row: every copy's k-rows of groups, and one of padding. */
  rowVecs: number;
}

/** The {@link GemmTile.threadMajor} staging of A and B, `copies` slices deep. */
function _threadMajorDims(t: GemmTile, copies = 1): { a: _LaneDims; b: _LaneDims } {
  const dims = (lanes: number, groups: number) => ({
    lanes,
    groups,
    rowVecs: copies * t.bk * groups + 1,
  });
  return { a: dims(t.bm / t.tm, t.tm / 4), b: dims(t.bn / t.tn, t.tn / 4) };
}

/** The generator of a tile's WGSL: its own ({@link GemmTile}), else the core's. */
function _codegen(t: GemmTile): GemmCodegen {
  return t[GEMM_CODEGEN] ?? CORE_CODEGEN;
}

/** Bytes of workgroup memory the staging of a product takes. */
export function gemmSharedBytes(t: GemmTile): number {
  return _codegen(t).sharedBytes(t);
}

/**
 * Bytes of workgroup memory of the staging with `copies` K-step slices of A and B (1 in the core;
 * a double-buffered layout takes 2).
 */
export function stagingBytes(t: GemmTile, copies: number): number {
  if (t.threadMajor) {
    const d = _threadMajorDims(t, copies);
    return (d.a.lanes * d.a.rowVecs + d.b.lanes * d.b.rowVecs) * 16;
  }
  const s = _stageVecs(t);
  return (s.a + s.b) * 16 * copies;
}

/**
 * Workgroup-memory declarations of a product: A and B staging as flat arrays of vec4, or with
 * `stage2d` as [k][row/4] arrays (rows padded by one vec4 against bank conflicts). Two dimensions,
 * so that a read in the unrolled loop has a constant k index and a row index (`tm` or `tn` plus a
 * constant) that is the same for every k: the bounds clamp the WGSL compiler adds to dynamic
 * indices is then one per row group, not one per read.
 */
export function gemmShared(o: { tile: GemmTile; prefix?: string }): string {
  return _codegen(o.tile).shared(o);
}

/** {@link gemmShared} with `copies` K-step slices ({@link stagingBytes}). */
export function stagingDecls(o: { tile: GemmTile; prefix?: string }, copies: number): string {
  const t = o.tile, p = o.prefix ?? "";
  if (t.threadMajor) {
    const d = _threadMajorDims(t, copies);
    return `var<workgroup> ${p}As: array<array<vec4<f32>, ${d.a.rowVecs}>, ${d.a.lanes}>;
var<workgroup> ${p}Bs: array<array<vec4<f32>, ${d.b.rowVecs}>, ${d.b.lanes}>;
`;
  }
  const s = _stageVecs(t);
  if (!t.stage2d) {
    return `var<workgroup> ${p}As: array<vec4<f32>, ${copies * s.a}>;
var<workgroup> ${p}Bs: array<vec4<f32>, ${copies * s.b}>;
`;
  }
  if (t.kSplit !== undefined) {
    const w = t.kSplit, slots = (copies * t.bk) / w;
    return `var<workgroup> ${p}As: array<array<array<vec4<f32>, ${t.bm / 4 + 1}>, ${w}>, ${slots}>;
var<workgroup> ${p}Bs: array<array<array<vec4<f32>, ${t.bn / 4 + 1}>, ${w}>, ${slots}>;
`;
  }
  return `var<workgroup> ${p}As: array<array<vec4<f32>, ${t.bm / 4 + 1}>, ${copies * t.bk}>;
var<workgroup> ${p}Bs: array<array<vec4<f32>, ${t.bn / 4 + 1}>, ${copies * t.bk}>;
`;
}

/** One operand's side of the staging code. */
interface _Side {
  name: "A" | "B";
  spec: OperandSpec;
  buf: string;
  rows: number;
  /** Problem extent of the rows (M or N), first row, offset, strides (WGSL u32 expressions). */
  extent: string;
  first: string;
  off: string;
  sRow: string;
  sK: string;
  /** Workgroup array and its row length in vec4s. */
  arr: string;
  stride: number;
  /** Name of the row variable in the load's scope (`m` for A, `n` for B: offsets may use it). */
  rv: string;
  /** Prefix of the product's names (registers, workgroup arrays). */
  prefix: string;
}

/**
 * The product's main loop as statements inside `main`. Assumes `lid: u32` (local index),
 * `tm`, `tn` (thread coordinates, see {@link gemmThreadCoords}) are in scope; declares and
 * zeroes the accumulators (unless `declare` is false), then accumulates the full K range.
 * All threads must execute it (it contains barriers).
 *
 * Global loads are prefetched into registers one K-step ahead (issued before the step's
 * arithmetic, stored to workgroup memory after it). Scalar loads read one element per thread per
 * load with the bounds test per element; vector loads ({@link OperandSpec.vec}) read 16 bytes along
 * k, one bounds test per vector.
 */
export function gemmMainloop(o: MainloopOptions, declare = true): string {
  return _codegen(o.tile).mainloop(o, declare);
}

/** The statements a main loop is assembled from ({@link mainloopParts}). */
export interface MainloopParts {
  /** Accumulator and register declarations, one per line. */
  decls: string[];
  /** `let k_tiles = …;` */
  kTiles: string;
  /** The global loads of the K-step starting at `kBase` (a u32 expression) into registers. */
  fetch(kBase: string): string;
  /** The registers stored to staging copy `copy` (0, or 1 for a second copy a K-step deeper). */
  stash(copy: number): string;
  /** The arithmetic of one K-step read from staging copy `copy`. */
  compute(copy: number): string;
}

/** The pieces of {@link gemmMainloop}, for generators that arrange them otherwise. */
export function mainloopParts(o: MainloopOptions, declare: boolean): MainloopParts {
  const t = o.tile;
  const sides = _sides(o);
  _checkVectorSides(t, sides);
  const threads = tileThreads(t);
  const loads = [
    ...sides.filter((sd) => sd.spec.vec !== true).map((sd) => _scalarLoads(o, sd, threads)),
    ...sides.filter((sd) => sd.spec.vec === true).map((sd) => _vectorLoads(o, sd, threads)),
  ];
  const regDecls = loads.flatMap((l) => l.decls).join(" ");
  const fetchS = loads.flatMap((l) => l.fetch);
  const decl = declare ? accVecs(t).map((v) => `var ${v} = vec4<f32>(0.0);`) : [];
  return {
    decls: [...decl, regDecls],
    kTiles: `let k_tiles = (${o.K} + ${t.bk - 1}u) / ${t.bk}u;`,
    fetch: (kBase) => `{ let KB = ${kBase};\n    ${fetchS.join("\n    ")}\n    }`,
    stash: (copy) => loads.flatMap((l) => l.stash(copy)).join("\n    "),
    compute: (copy) => _compute(t, sides, copy).join("\n    "),
  };
}

/** The core's main loop: one staging copy, two barriers per K-step. */
function _mainloop(o: MainloopOptions, declare: boolean): string {
  const p = mainloopParts(o, declare);
  return [
    ...p.decls,
    `{
  ${p.kTiles}
  ${p.fetch("0u")}
  for (var kt = 0u; kt < k_tiles; kt++) {
    ${p.stash(0)}
    workgroupBarrier();
    ${p.fetch(`(kt + 1u) * ${o.tile.bk}u`)}
    ${p.compute(0)}
    workgroupBarrier();
  }
}`,
  ].join("\n");
}

/** The two operands' sides of a product. */
function _sides(o: MainloopOptions): _Side[] {
  const t = o.tile, p = o.prefix ?? "";
  return [
    {
      name: "A",
      spec: o.a,
      buf: o.aBuf,
      rows: t.bm,
      extent: o.M,
      first: o.m0,
      off: o.aOff,
      sRow: o.sAm,
      sK: o.sAk,
      arr: `${p}As`,
      stride: t.bm / 4 + 1,
      rv: "m",
      prefix: p,
    },
    {
      name: "B",
      spec: o.b,
      buf: o.bBuf,
      rows: t.bn,
      extent: o.N,
      first: o.n0,
      off: o.bOff,
      sRow: o.sBn,
      sK: o.sBk,
      arr: `${p}Bs`,
      stride: t.bn / 4 + 1,
      rv: "n",
      prefix: p,
    },
  ];
}

function _checkVectorSides(t: GemmTile, sides: _Side[]): void {
  for (const sd of sides.filter((x) => x.spec.vec === true)) {
    const w = vecWidth(sd.spec.dtype);
    if (sd.spec.contig === "k" ? t.bk % w !== 0 : sd.rows % w !== 0) {
      throw new RangeError(
        `vector loads of ${sd.name} along ${sd.spec.contig} need the tile's ` +
          `${sd.spec.contig === "k" ? "K-step" : "rows"} to be a multiple of ${w} ` +
          `(tile ${JSON.stringify(t)})`,
      );
    }
  }
}

/**
 * A k-row of the staging: a u32 expression, or with {@link GemmTile.kSplit} a k slot (u32
 * expression) and a constant position in it.
 */
type _KRow = string | { slot: string; at: number };

/**
 * Element (k-row, vec4 column) of a side's staging in staging copy `copy` (0, or 1 for a second
 * copy): `k` is shifted by the K-step in copy 1.
 */
function _at(t: GemmTile, sd: _Side, k: _KRow, col: string, copy: number): string {
  if (t.stage2d && t.kSplit !== undefined) return `${sd.arr}${_splitK(t, k, copy)}[${col}]`;
  if (typeof k !== "string") throw new Error("gemm codegen: a k slot needs kSplit");
  const kk = copy === 0 ? k : `${k} + ${t.bk}u`;
  if (t.threadMajor) {
    // vec4 column col = group·lanes + lane
    const d = _sideDims(t, sd);
    return _laneAt(sd, d, `(${col}) % ${d.lanes}u`, kk, `(${col}) / ${d.lanes}u`);
  }
  return t.stage2d ? `${sd.arr}[${kk}][${col}]` : `${sd.arr}[(${kk}) * ${sd.stride}u + (${col})]`;
}

/**
 * The [slot][position] indices of k-row `k` in {@link GemmTile.kSplit} staging: constants for a
 * literal k (`"5u"`), the slot's expression for a slot, else the quotient and remainder.
 */
function _splitK(t: GemmTile, k: _KRow, copy: number): string {
  const w = t.kSplit!, shift = copy === 0 ? 0 : t.bk;
  if (typeof k !== "string") {
    return `[${copy === 0 ? k.slot : `${k.slot} + ${t.bk / w}u`}][${k.at}u]`;
  }
  const lit = k.match(/^(\d+)u$/);
  if (lit) {
    const n = Number(lit[1]) + shift;
    return `[${Math.floor(n / w)}u][${n % w}u]`;
  }
  const kk = copy === 0 ? `(${k})` : `(${k} + ${shift}u)`;
  return `[${kk} / ${w}u][${kk} % ${w}u]`;
}

/** A side's {@link GemmTile.threadMajor} staging. */
function _sideDims(t: GemmTile, sd: _Side): _LaneDims {
  return _threadMajorDims(t)[sd.name === "A" ? "a" : "b"];
}

/** Element (lane, k-row kk, group) of a side's thread-major staging. */
function _laneAt(sd: _Side, d: _LaneDims, lane: string, kk: string, group: string): string {
  return `${sd.arr}[${lane}][(${kk}) * ${d.groups}u + ${group}]`;
}

/**
 * A thread's read of group `g` of its own vec4s (lane `tm` for A, `tn` for B) at k `k`: in
 * thread-major staging the lane is the row index and the group a constant, else column
 * g·lanes + lane of {@link _at}.
 */
function _readAt(t: GemmTile, sd: _Side, k: string, g: number, copy: number): string {
  const lane = sd.name === "A" ? "tm" : "tn";
  const lanes = sd.name === "A" ? t.bm / t.tm : t.bn / t.tn;
  if (t.threadMajor) {
    const kk = copy === 0 ? k : `${k} + ${t.bk}u`;
    return _laneAt(sd, _sideDims(t, sd), lane, kk, `${g}u`);
  }
  return _at(t, sd, k, `${g * lanes}u + ${lane}`, copy);
}

/** One side's global loads: register declarations, fetch statements, stash per staging copy. */
interface _Loads {
  decls: string[];
  fetch: string[];
  stash: (copy: number) => string[];
}

/**
 * Scalar operand loads: (rows·bk)/threads element loads per thread, the contiguous index varying
 * fastest across threads (coalesced).
 */
function _scalarLoads(o: MainloopOptions, sd: _Side, threads: number): _Loads {
  const t = o.tile;
  const out: _Loads & { stashes: ((copy: number) => string)[] } = {
    decls: [],
    fetch: [],
    stash: (copy) => out.stashes.map((f) => f(copy)),
    stashes: [],
  };
  const lc = sd.name.toLowerCase(), m = sd.rv;
  for (let i = 0; i < (sd.rows * t.bk) / threads; i++) {
    const r = `${sd.prefix}r${lc}${i}`;
    const idx = `(lid + ${i * threads}u)`;
    const c = sd.spec.contig === "k"
      ? { row: `(${idx} / ${t.bk}u)`, k: `(${idx} % ${t.bk}u)` }
      : { row: `(${idx} % ${sd.rows}u)`, k: `(${idx} / ${sd.rows}u)` };
    out.decls.push(`var ${r}: f32;`);
    out.fetch.push(
      `{ let ${m} = ${sd.first} + ${c.row}; let k = KB + ${c.k}; ${r} = 0.0; if (${m} < ${sd.extent} && k < ${o.K}) { ${r} = ${
        loadF32(sd.buf, sd.spec.dtype, `${sd.off} + ${m} * ${sd.sRow} + k * ${sd.sK}`)
      }; } }`,
    );
    out.stashes.push((copy) =>
      `{ let r = ${c.row}; ${_at(t, sd, c.k, "r >> 2u", copy)}[r & 3u] = ${r}; }`
    );
  }
  return out;
}

/** The f32 values of the elements of a 16-byte vector register `reg` of `dtype`, in order. */
function _vectorValues(reg: string, dtype: TensorDtype): string[] {
  const vals: string[] = [];
  for (let j = 0; j < vecWidth(dtype); j++) {
    if (dtype === "f32") vals.push(`${reg}[${j}]`);
    else if (dtype === "f16") vals.push(`unpack2x16float(${reg}[${j >> 1}]).${COMP[j & 1]}`);
    else {
      vals.push(
        j % 2 === 0
          ? `bitcast<f32>(${reg}[${j >> 1}] << 16u)`
          : `bitcast<f32>(${reg}[${j >> 1}] & 0xffff0000u)`,
      );
    }
  }
  return vals;
}

/**
 * Vector operand loads: 16-byte loads, ⌈loads / threads⌉ slots per thread. Along k
 * (`contig: "k"`) a vector holds w consecutive k of one row; along the rows (`contig: "mn"`, the
 * operand held transposed) it holds w consecutive rows of one k and lands in the staging as
 * whole vec4s (the [k][row/4] layout keeps rows contiguous).
 */
function _vectorLoads(o: MainloopOptions, sd: _Side, threads: number): _Loads {
  const t = o.tile;
  const w = vecWidth(sd.spec.dtype), count = (sd.rows * t.bk) / w;
  const ty = wgslStorageType(sd.spec.dtype, true);
  const lc = sd.name.toLowerCase(), m = sd.rv;
  const alongK = sd.spec.contig === "k";
  const out: _Loads & { stashes: ((copy: number) => string)[] } = {
    decls: [],
    fetch: [],
    stash: (copy) => out.stashes.map((f) => f(copy)),
    stashes: [],
  };
  for (let i = 0; i * threads < count; i++) {
    const reg = `${sd.prefix}rv${lc}${i}`;
    const idx = `(lid + ${i * threads}u)`;
    const guard = (i + 1) * threads > count ? `${idx} < ${count}u` : "true";
    const pos = alongK
      ? `let vrow = ${idx} / ${t.bk / w}u; let vk = (${idx} % ${t.bk / w}u) * ${w}u;`
      : `let vrow = (${idx} % ${sd.rows / w}u) * ${w}u; let vk = ${idx} / ${sd.rows / w}u;`;
    const addr = alongK
      ? `(${sd.off} + ${m} * ${sd.sRow} + k) / ${w}u`
      : `(${sd.off} + ${m} + k * ${sd.sK}) / ${w}u`;
    out.decls.push(`var ${reg}: ${ty};`);
    out.fetch.push(
      `${reg} = ${ty}(0); if (${guard}) { ${pos} let ${m} = ${sd.first} + vrow; let k = KB + vk; ` +
        `if (${m} < ${sd.extent} && k < ${o.K}) { ${reg} = ${sd.buf}[${addr}]; } }`,
    );
    const vals = _vectorValues(reg, sd.spec.dtype);
    out.stashes.push((copy) => {
      let st: string;
      if (alongK) {
        // with kSplit of the vector's width, the vector fills one k slot: constant positions
        const slot = t.stage2d && t.kSplit === w;
        const kRow = (j: number): _KRow => slot ? { slot: "kslot", at: j } : `vk + ${j}u`;
        st = `let rq = vrow >> 2u; let rc = vrow & 3u;${
          slot ? ` let kslot = ${idx} % ${t.bk / w}u;` : ""
        }\n      ${vals.map((v, j) => `${_at(t, sd, kRow(j), "rq", copy)}[rc] = ${v};`).join(" ")}`;
      } else {
        const quads: string[] = [];
        for (let q = 0; q < w / 4; q++) {
          const v4 = sd.spec.dtype === "f32"
            ? reg
            : `vec4<f32>(${vals.slice(4 * q, 4 * q + 4).join(", ")})`;
          quads.push(`${_at(t, sd, "vk", `(vrow >> 2u) + ${q}u`, copy)} = ${v4};`);
        }
        st = quads.join(" ");
      }
      return `if (${guard}) { ${pos}\n      ${st} }`;
    });
  }
  return out;
}

/** The unrolled arithmetic of one K-step from staging copy `copy`: vec4 reads and vec4 FMAs. */
function _compute(t: GemmTile, sides: _Side[], copy: number): string[] {
  const rg = t.tm / 4, cg = t.tn / 4;
  const out: string[] = [];
  const v = (x: string, k: number) => copy === 0 ? `${x}${k}` : `${x}${k}_1`;
  for (let k = 0; k < t.bk; k++) {
    for (let g = 0; g < rg; g++) {
      out.push(
        `let ${v(`a${g}_`, k)} = ${_readAt(t, sides[0], `${k}u`, g, copy)};`,
      );
    }
    for (let h = 0; h < cg; h++) {
      out.push(
        `let ${v(`b${h}_`, k)} = ${_readAt(t, sides[1], `${k}u`, h, copy)};`,
      );
    }
    for (let g = 0; g < rg; g++) {
      for (let r = 0; r < 4; r++) {
        for (let h = 0; h < cg; h++) {
          const acc = `acc_${g}_${r}_${h}`;
          out.push(
            `${acc} = fma(vec4<f32>(${v(`a${g}_`, k)}.${COMP[r]}), ${v(`b${h}_`, k)}, ${acc});`,
          );
        }
      }
    }
  }
  return out;
}

/** Statements defining `tm`, `tn` (thread coordinates in the tile) from `lid`. */
export function gemmThreadCoords(t: GemmTile): string {
  return _codegen(t).threadCoords(t);
}

/** The core's thread coordinates: row-major over the tile's thread grid. */
export function rowMajorThreadCoords(t: GemmTile): string {
  const tx = t.bn / t.tn;
  return `let tm = lid / ${tx}u;\nlet tn = lid % ${tx}u;`;
}

/** The workgroup id components of a plain product's tile row and column. */
export function gemmTileOrigin(t: GemmTile): { m: "x" | "y"; n: "x" | "y" } {
  return _codegen(t).origin(t);
}

/** The grid (x, y) of a plain product of tilesM × tilesN output tiles. */
export function gemmGrid(t: GemmTile, tilesM: number, tilesN: number): [number, number] {
  return _codegen(t).grid(tilesM, tilesN);
}

/**
 * The core's generator: one staging copy, row-major threads, consecutive workgroups along the
 * output's columns.
 */
export const CORE_CODEGEN: GemmCodegen = {
  shared: (o) => stagingDecls(o, 1),
  sharedBytes: (t) => stagingBytes(t, 1),
  threadCoords: rowMajorThreadCoords,
  mainloop: _mainloop,
  origin: () => ({ m: "y", n: "x" }),
  grid: (tilesM, tilesN) => [tilesN, tilesM],
};
