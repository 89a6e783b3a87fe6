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

/** Tile parameters of the generated product. */
export interface GemmTile {
  /** Output rows per workgroup. */
  bm: number;
  /** Output columns per workgroup. */
  bn: number;
  /** K-step: depth of one staged slice of A and B. */
  bk: number;
  /** Rows per thread (multiple of 4). */
  tm: number;
  /** Columns per thread (multiple of 4). */
  tn: number;
}

/** 128×128 output tile, 256 threads, 8×8 per thread, K-step 16 (the layout that ran 37 TFLOP/s). */
export const TILE_LARGE: GemmTile = { bm: 128, bn: 128, bk: 16, tm: 8, tn: 8 };
/** 64×64 output tile, 256 threads, 4×4 per thread, K-step 16: for small problems and CPUs. */
export const TILE_SMALL: GemmTile = { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4 };

/** Which operand index is contiguous in memory: `k` (A·Bᵀ style) or the row index (`mn`). */
export type Contig = "k" | "mn";

/** What the generator needs to know about one operand. */
export interface OperandSpec {
  /** Storage type in its binding. */
  dtype: TensorDtype;
  /** Contiguous index, for coalesced global loads. */
  contig: Contig;
}

/** Threads per workgroup for a tile. */
export function tileThreads(t: GemmTile): number {
  return (t.bm / t.tm) * (t.bn / t.tn);
}

/** Throws unless the tile is one the generator can emit. */
export function validateTile(t: GemmTile): void {
  const ok = t.tm % 4 === 0 && t.tn % 4 === 0 && t.bm % t.tm === 0 && t.bn % t.tn === 0 &&
    (t.bm * t.bk) % tileThreads(t) === 0 && (t.bn * t.bk) % tileThreads(t) === 0 &&
    tileThreads(t) <= 1024 && t.bk >= 1;
  if (!ok) throw new RangeError(`unsupported GEMM tile ${JSON.stringify(t)}`);
}

/** WGSL storage element type for a binding of `dtype`. */
export function wgslStorageType(dtype: TensorDtype): string {
  if (dtype === "f16") return "f16";
  if (dtype === "bf16" || dtype === "u32") return "u32";
  if (dtype === "i32") return "i32";
  return "f32";
}

/** A WGSL expression reading element `idx` (a u32 expression) of binding `buf` as f32. */
export function loadF32(buf: string, dtype: TensorDtype, idx: string): string {
  if (dtype === "f32") return `${buf}[${idx}]`;
  if (dtype === "f16") return `f32(${buf}[${idx}])`;
  if (dtype === "bf16") return `bf16_${buf}(${idx})`;
  return `f32(${buf}[${idx}])`;
}

/** `enable f16;` when any dtype needs it. */
export function enableDirectives(dtypes: TensorDtype[]): string {
  return dtypes.includes("f16") ? "enable f16;\n" : "";
}

/** WGSL helper functions for the bindings that need them (a bf16 reader per bf16 binding). */
export function dtypeHelpers(bindings: { name: string; dtype: TensorDtype }[]): string {
  return bindings.filter((b) => b.dtype === "bf16").map((b) => `
fn bf16_${b.name}(i: u32) -> f32 {
  let w = ${b.name}[i >> 1u];
  return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));
}
`).join("");
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

/** Options of {@link gemmMainloop}. */
export interface MainloopOptions {
  tile: GemmTile;
  a: OperandSpec;
  b: OperandSpec;
  /** Binding names of A and B. */
  aBuf: string;
  bBuf: string;
  /**
   * WGSL expressions (u32) for the problem: rows M, columns N, depth K, the tile's first row m0
   * and column n0, the element offsets and strides of A and B, and the first k (default 0u).
   */
  M: string;
  N: string;
  K: string;
  m0: string;
  n0: string;
  aOff: string;
  sAm: string;
  sAk: string;
  bOff: string;
  sBn: string;
  sBk: string;
  /** Prefix for the workgroup arrays (so two products can live in one shader). */
  prefix?: string;
}

/** Workgroup-memory declarations of a product (A and B staging, padded against bank conflicts). */
export function gemmShared(o: { tile: GemmTile; prefix?: string }): string {
  const t = o.tile, p = o.prefix ?? "";
  return `var<workgroup> ${p}As: array<vec4<f32>, ${t.bk * (t.bm / 4 + 1)}>;
var<workgroup> ${p}Bs: array<vec4<f32>, ${t.bk * (t.bn / 4 + 1)}>;
`;
}

/**
 * The product's main loop as statements inside `main`. Assumes `lid: u32` (local index),
 * `tm`, `tn` (thread coordinates, see {@link gemmThreadCoords}) are in scope; declares and
 * zeroes the accumulators (unless `declare` is false), then accumulates the full K range.
 * All threads must execute it (it contains barriers).
 */
export function gemmMainloop(o: MainloopOptions, declare = true): string {
  const t = o.tile, p = o.prefix ?? "";
  const threads = tileThreads(t);
  const rg = t.tm / 4, cg = t.tn / 4;
  const aStride = t.bm / 4 + 1, bStride = t.bn / 4 + 1; // vec4s per k-row (padded)
  const lines: string[] = [];
  if (declare) {
    for (const v of accVecs(t)) lines.push(`var ${v} = vec4<f32>(0.0);`);
  }
  const loadsA = (t.bm * t.bk) / threads, loadsB = (t.bn * t.bk) / threads;
  // Thread → (row, k) of each global load: contiguous index varies fastest across threads.
  const coords = (i: number, rows: number, contig: Contig) => {
    const idx = `(lid + ${i * threads}u)`;
    return contig === "k"
      ? { row: `(${idx} / ${t.bk}u)`, k: `(${idx} % ${t.bk}u)` }
      : { row: `(${idx} % ${rows}u)`, k: `(${idx} / ${rows}u)` };
  };
  const regsA = Array.from({ length: loadsA }, (_, i) => `${p}ra${i}`);
  const regsB = Array.from({ length: loadsB }, (_, i) => `${p}rb${i}`);
  const fetch = (kBase: string) => {
    const s: string[] = [];
    for (let i = 0; i < loadsA; i++) {
      const c = coords(i, t.bm, o.a.contig);
      s.push(
        `{ let m = ${o.m0} + ${c.row}; let k = ${kBase} + ${c.k}; ${
          regsA[i]
        } = 0.0; if (m < ${o.M} && k < ${o.K}) { ${regsA[i]} = ${
          loadF32(o.aBuf, o.a.dtype, `${o.aOff} + m * ${o.sAm} + k * ${o.sAk}`)
        }; } }`,
      );
    }
    for (let i = 0; i < loadsB; i++) {
      const c = coords(i, t.bn, o.b.contig);
      s.push(
        `{ let n = ${o.n0} + ${c.row}; let k = ${kBase} + ${c.k}; ${
          regsB[i]
        } = 0.0; if (n < ${o.N} && k < ${o.K}) { ${regsB[i]} = ${
          loadF32(o.bBuf, o.b.dtype, `${o.bOff} + n * ${o.sBn} + k * ${o.sBk}`)
        }; } }`,
      );
    }
    return s.join("\n    ");
  };
  const stash = () => {
    const s: string[] = [];
    for (let i = 0; i < loadsA; i++) {
      const c = coords(i, t.bm, o.a.contig);
      s.push(
        `{ let r = ${c.row}; ${p}As[${c.k} * ${aStride}u + (r >> 2u)][r & 3u] = ${regsA[i]}; }`,
      );
    }
    for (let i = 0; i < loadsB; i++) {
      const c = coords(i, t.bn, o.b.contig);
      s.push(
        `{ let r = ${c.row}; ${p}Bs[${c.k} * ${bStride}u + (r >> 2u)][r & 3u] = ${regsB[i]}; }`,
      );
    }
    return s.join("\n    ");
  };
  const compute: string[] = [];
  for (let k = 0; k < t.bk; k++) {
    for (let g = 0; g < rg; g++) {
      compute.push(`let a${g}_${k} = ${p}As[${k * aStride + (g * t.bm) / rg / 4}u + tm];`);
    }
    for (let h = 0; h < cg; h++) {
      compute.push(`let b${h}_${k} = ${p}Bs[${k * bStride + (h * t.bn) / cg / 4}u + tn];`);
    }
    for (let g = 0; g < rg; g++) {
      for (let r = 0; r < 4; r++) {
        for (let h = 0; h < cg; h++) {
          const v = `acc_${g}_${r}_${h}`;
          compute.push(`${v} = fma(vec4<f32>(a${g}_${k}.${COMP[r]}), b${h}_${k}, ${v});`);
        }
      }
    }
  }
  lines.push(`var ${[...regsA, ...regsB].map((r) => `${r}: f32`).join("; var ")};`);
  lines.push(`{
  let k_tiles = (${o.K} + ${t.bk - 1}u) / ${t.bk}u;
  ${fetch("0u")}
  for (var kt = 0u; kt < k_tiles; kt++) {
    ${stash()}
    workgroupBarrier();
    ${fetch(`(kt + 1u) * ${t.bk}u`)}
    ${compute.join("\n    ")}
    workgroupBarrier();
  }
}`);
  return lines.join("\n");
}

/** Statements defining `tm`, `tn` (thread coordinates in the tile) from `lid`. */
export function gemmThreadCoords(t: GemmTile): string {
  const tx = t.bn / t.tn;
  return `let tm = lid / ${tx}u;\nlet tn = lid % ${tx}u;`;
}
