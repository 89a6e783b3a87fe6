/**
 * The tensor-core main loop's global loads and their staging (kernels/tc/tc_codegen.ts): for each
 * operand, the registers a thread loads a K-step ahead, the loads, and the stores of those
 * registers into the staging arrays as f16. Three kinds:
 *
 * - vector loads: 16 bytes a lane (8 bf16/f16 or 4 f32 values) along the contiguous index;
 * - word loads (16-bit operands, `TcTile.words`): 4 bytes (two values) a lane, the lanes of
 *   a warp laid over the staging so that every f16 store of the warp hits 32 different banks;
 * - scalar loads: one element a load, where the caller promises no alignment.
 * @module
 */
import { loadF32, vecWidth, wgslStorageType } from "../wgsl_common.ts";
import type { TcDtype, TcMainloopOptions, TcOperand } from "./tc_codegen.ts";

const COMP = ["x", "y", "z", "w"];

/**
 * A staging copy: its number, or a WGSL u32 expression of it (the parity loop's, `TcTile.parity`).
 */
export type StageCopy = number | string;

/** The u32 expression copy·n (copy a number or an expression). */
export function copyTimes(copy: StageCopy, n: number): string {
  return typeof copy === "number" ? `${copy * n}u` : `(${copy}) * ${n}u`;
}

/** WGSL storage element type of an operand's binding. */
export function tcStorageType(op: TcOperand): string {
  if (op.vec) return op.dtype === "f32" ? "vec4<f32>" : "vec4<u32>";
  return wgslStorageType(op.dtype);
}

/** One side of the staging. */
export interface StageSide {
  name: "A" | "B";
  op: TcOperand;
  buf: string;
  /** Rows of the operand in the tile (bm or bn). */
  rows: number;
  extent: string;
  first: string;
  off: string;
  ld: string;
  scale?: string;
  /** Staging arrays (hi, and lo when split) and the staged row length in halves. */
  arr: string;
  arrLo?: string;
  stride: number;
  /**
   * Sub-arrays a copy: one per subgroup row (A) or column (B) of the tile, each holding the rows
   * that subgroup multiplies (`subRows`), so that every matrix load reads its own sub-array at a
   * constant offset. Dawn's robustness checks each matrix load's extent against its array: with
   * constant offsets the check folds away. `flat`: one array a copy (subs = 1), the matrix
   * offsets from the subgroup's first row; for products with a split operand, which the
   * sub-arrays made slower (an H200, robustness on).
   */
  flat: boolean;
  subs: number;
  subRows: number;
  /** Halves of one sub-array. */
  subElems: number;
  /** WGSL u32 expression of the subgroup's sub-array (from `sg`). */
  subOf: string;
  prefix: string;
}

/** One side's global loads: register declarations, fetch statements, stash per copy. */
export interface StageLoads {
  decls: string[];
  fetch: string[];
  stash: (copy: StageCopy) => string[];
}

/**
 * The hi/lo split of a split operand: hi keeps x's leading 11 significant bits (its mantissa cut
 * by integer masking, so hi converts to f16 exactly in f16's normal range) and lo = x − hi is
 * exact in f32 and rounded once to f16. Not lo = x − f32(f16(x)): shader compilers may fold that
 * conversion round trip to x (Mesa's does), which leaves lo = 0.
 */
const HI_MASK = "0xffffe000u";

/**
 * f16 stores of the f32 pair `x` (vec2) at staging places i0, i1 (index suffixes, {@link _el};
 * hi, and lo when split).
 */
function _storePair(s: StageSide, x: string, i0: string, i1: string, tag: string): string {
  const hi = `h${tag}`;
  if (!s.arrLo) {
    return `let ${hi} = vec2<f16>(${x}); ${s.arr}${i0} = ${hi}.x; ${s.arr}${i1} = ${hi}.y;`;
  }
  return [
    `let x${tag} = ${x};`,
    `let t${tag} = bitcast<vec2<f32>>(bitcast<vec2<u32>>(x${tag}) & vec2<u32>(${HI_MASK}));`,
    `let ${hi} = vec2<f16>(t${tag}); ${s.arr}${i0} = ${hi}.x; ${s.arr}${i1} = ${hi}.y;`,
    `let l${tag} = vec2<f16>(x${tag} - t${tag}); ${s.arrLo}${i0} = l${tag}.x; ${s.arrLo}${i1} = l${tag}.y;`,
  ].join(" ");
}

/** The f32 pairs (vec2 expressions) of a 16-byte register, in element order. */
function _pairs(reg: string, dtype: TcDtype): string[] {
  const out: string[] = [];
  if (dtype === "f32") {
    out.push(`${reg}.xy`, `${reg}.zw`);
  } else {
    for (let q = 0; q < 4; q++) {
      const w = `${reg}.${COMP[q]}`;
      out.push(
        dtype === "f16"
          ? `unpack2x16float(${w})`
          : `vec2<f32>(bitcast<f32>(${w} << 16u), bitcast<f32>(${w} & 0xffff0000u))`,
      );
    }
  }
  return out;
}

/**
 * The index suffix `[sub-array][element]` (flat: `[element]`) of the staged value at tile row `r`
 * (0 ≤ r < rows) and K-step column `k` (u32 expressions) in staging copy `copy`, plus `j` along
 * the contiguous index (a vector's j-th value): row r lies in sub-array r / subRows (see
 * StageSide.subs).
 */
function _el(s: StageSide, copy: StageCopy, r: string, k: string, j?: number): string {
  const one = s.subs === 1;
  const sub = one ? "0u" : `${r} / ${s.subRows}u`, rr = one ? r : `(${r} % ${s.subRows}u)`;
  const plus = j === undefined ? "" : ` + ${j}u`;
  const within = s.op.contig === "k"
    ? `${rr} * ${s.stride}u + ${k}${plus}`
    : `${k} * ${s.stride}u + ${rr}${plus}`;
  if (s.flat) return `[${copy === 0 ? within : `${copyTimes(copy, s.subElems)} + ${within}`}]`;
  const outer = copy === 0 ? sub : `${copyTimes(copy, s.subs)} + ${sub}`;
  return `[${outer}][${within}]`;
}

/** Vector loads: ⌈vectors / threads⌉ 16-byte registers per thread and K-step. */
function _vectorLoads(o: TcMainloopOptions, s: StageSide, threads: number): StageLoads {
  const t = o.tile, w = vecWidth(s.op.dtype), count = (s.rows * t.bk) / w;
  const alongK = s.op.contig === "k";
  const ty = tcStorageType(s.op);
  const lc = s.name.toLowerCase();
  const out: StageLoads & { stashes: ((copy: StageCopy) => string)[] } = {
    decls: [],
    fetch: [],
    stash: (copy) => out.stashes.map((f) => f(copy)),
    stashes: [],
  };
  const direct = s.op.dtype === "f16" && !s.scale && !s.arrLo;
  for (let i = 0; i * threads < count; i++) {
    const reg = `${s.prefix}rv${lc}${i}`;
    const idx = `(lid + ${i * threads}u)`;
    const guard = (i + 1) * threads > count ? `${idx} < ${count}u` : "true";
    const pos = alongK
      ? `let vr = ${idx} / ${t.bk / w}u; let vk = (${idx} % ${t.bk / w}u) * ${w}u;`
      : `let vr = (${idx} % ${s.rows / w}u) * ${w}u; let vk = ${idx} / ${s.rows / w}u;`;
    const start = alongK
      ? (s.op.rowStart ? `${s.op.rowStart("r")} + k` : `${s.off} + r * ${s.ld} + k`)
      : `${s.off} + r + k * ${s.ld}`;
    out.decls.push(`var ${reg}: ${ty};`);
    out.fetch.push(
      `${reg} = ${ty}(0); if (${guard}) { ${pos} let r = ${s.first} + vr; let k = KB + vk; ` +
        `if (r < ${s.extent} && k < KE) { ${reg} = ${s.buf}[(${start}) / ${w}u]; } }`,
    );
    // staging place of the vector's j-th value (in copy `copy`)
    const at = (copy: StageCopy, j: number) => _el(s, copy, "vr", "vk", j);
    out.stashes.push((copy) => {
      const lines: string[] = [];
      if (direct) {
        for (let q = 0; q < 4; q++) {
          // a bitcast natively; naga (the emulation under Deno's WebGPU) has no f16 bitcast
          const pair = o.mode === "emulated"
            ? `vec2<f16>(unpack2x16float(${reg}.${COMP[q]}))`
            : `bitcast<vec2<f16>>(${reg}.${COMP[q]})`;
          lines.push(
            `let d${q} = ${pair}; ${s.arr}${at(copy, 2 * q)} = d${q}.x; ${s.arr}${
              at(copy, 2 * q + 1)
            } = d${q}.y;`,
          );
        }
      } else {
        _pairs(reg, s.op.dtype).forEach((x, q) => {
          const v = s.scale ? `(${x} * ${s.scale})` : x;
          lines.push(
            _storePair(s, v, at(copy, 2 * q), at(copy, 2 * q + 1), `${q}`),
          );
        });
      }
      return `if (${guard}) { ${pos}\n      ${lines.join("\n      ")} }`;
    });
  }
  return out;
}

/** Scalar loads: one element per load, (rows·bk)/threads per thread and K-step. */
function _scalarLoads(o: TcMainloopOptions, s: StageSide, threads: number): StageLoads {
  const t = o.tile, count = s.rows * t.bk;
  const alongK = s.op.contig === "k";
  const lc = s.name.toLowerCase();
  const out: StageLoads & { stashes: ((copy: StageCopy) => string)[] } = {
    decls: [],
    fetch: [],
    stash: (copy) => out.stashes.map((f) => f(copy)),
    stashes: [],
  };
  for (let i = 0; i * threads < count; i++) {
    const reg = `${s.prefix}rs${lc}${i}`;
    const idx = `(lid + ${i * threads}u)`;
    const guard = (i + 1) * threads > count ? `${idx} < ${count}u` : "true";
    const pos = alongK
      ? `let er = ${idx} / ${t.bk}u; let ek = ${idx} % ${t.bk}u;`
      : `let er = ${idx} % ${s.rows}u; let ek = ${idx} / ${s.rows}u;`;
    const addr = alongK
      ? (s.op.rowStart ? `${s.op.rowStart("r")} + k` : `${s.off} + r * ${s.ld} + k`)
      : `${s.off} + r + k * ${s.ld}`;
    out.decls.push(`var ${reg}: f32;`);
    out.fetch.push(
      `${reg} = 0.0; if (${guard}) { ${pos} let r = ${s.first} + er; let k = KB + ek; ` +
        `if (r < ${s.extent} && k < KE) { ${reg} = ${loadF32(s.buf, s.op.dtype, addr)}; } }`,
    );
    out.stashes.push((copy) => {
      const at = _el(s, copy, "er", "ek");
      const x = s.scale ? `(${reg} * ${s.scale})` : reg;
      const lines = s.arrLo
        ? [
          `let x = ${x}; let t = bitcast<f32>(bitcast<u32>(x) & ${HI_MASK});`,
          `${s.arr}${at} = f16(t); ${s.arrLo}${at} = f16(x - t);`,
        ]
        : [`${s.arr}${at} = f16(${x});`];
      return `if (${guard}) { ${pos} ${lines.join(" ")} }`;
    });
  }
  return out;
}

/**
 * The row step of the word loads' lane layout for a k-contiguous operand: a warp's store covers
 * R = 32 / W staged rows of W words (W = bk / 2), and its lanes take rows 0, δ, 2δ, … of a block
 * of R·δ rows (the block's other rows go to the next δ − 1 warps), with δ the smallest step for
 * which those R rows start in different groups of W banks: then the warp's 32 words fall on 32
 * banks. 1 where no step does or the block would straddle a sub-array (stores conflict, results
 * unchanged).
 */
export function wordRowStep(wordsPerRow: number, strideWords: number, subRows: number): number {
  if (32 % wordsPerRow !== 0) return 1;
  const rows = 32 / wordsPerRow;
  for (let d = 1; rows * d <= subRows; d++) {
    if (subRows % (rows * d) !== 0) continue;
    const starts = [...Array(rows).keys()].map((j) => (j * d * strideWords) % 32);
    if (new Set(starts).size === rows && starts.every((b) => b % wordsPerRow === 0)) return d;
  }
  return 1;
}

/**
 * Word loads (16-bit operands): ⌈words / threads⌉ 4-byte registers per thread and K-step, each
 * two consecutive values along the contiguous index, read from the operand's 16-byte-vector
 * binding by component. Along k the lanes follow {@link wordRowStep}; along the rows a warp's 32
 * words are 64 consecutive rows of one k. Where the threads cover whole blocks a thread's rows
 * (or k) are its first plus constants, computed once.
 */
function _wordLoads(o: TcMainloopOptions, s: StageSide, threads: number): StageLoads {
  const t = o.tile, count = (s.rows * t.bk) / 2, alongK = s.op.contig === "k";
  const lc = s.name.toLowerCase(), p = s.prefix;
  // words a line: a staged row (along k) or a k of the tile's rows (along the rows)
  const line = alongK ? t.bk / 2 : s.rows / 2;
  const step = alongK ? wordRowStep(line, s.stride / 2, s.subRows) : 1;
  const lineRows = alongK && 32 % line === 0 ? 32 / line : 1, block = lineRows * step;
  const fast = threads % line === 0 && (threads / line) % block === 0;
  const decls: string[] = [];
  if (fast) {
    const u = `(lid / ${line}u)`, w = `(lid % ${line}u)`;
    decls.push(
      alongK
        ? `let ${p}wr${lc} = (${u} / ${block}u) * ${block}u + ((${u} % ${block}u) % ${lineRows}u) * ${step}u + (${u} % ${block}u) / ${lineRows}u; let ${p}wk${lc} = ${w} * 2u;`
        : `let ${p}wr${lc} = ${w} * 2u; let ${p}wk${lc} = ${u};`,
    );
  }
  const stashes: ((copy: StageCopy) => string)[] = [];
  const out: StageLoads = {
    decls,
    fetch: [],
    stash: (copy) => stashes.map((f) => f(copy)),
  };
  const direct = s.op.dtype === "f16" && !s.scale && !s.arrLo;
  for (let i = 0; i * threads < count; i++) {
    const reg = `${p}rw${lc}${i}`;
    const idx = `(lid + ${i * threads}u)`;
    const guard = (i + 1) * threads > count ? `${idx} < ${count}u` : "true";
    const c = (i * threads) / line;
    const pos = fast
      ? (alongK
        ? `let vr = ${p}wr${lc} + ${c}u; let vk = ${p}wk${lc};`
        : `let vr = ${p}wr${lc}; let vk = ${p}wk${lc} + ${c}u;`)
      : (alongK
        ? `let vr = ${idx} / ${line}u; let vk = (${idx} % ${line}u) * 2u;`
        : `let vr = (${idx} % ${line}u) * 2u; let vk = ${idx} / ${line}u;`);
    const start = alongK
      ? (s.op.rowStart ? `${s.op.rowStart("r")} + k` : `${s.off} + r * ${s.ld} + k`)
      : `${s.off} + r + k * ${s.ld}`;
    out.decls.push(`var ${reg}: u32;`);
    out.fetch.push(
      `${reg} = 0u; if (${guard}) { ${pos} let r = ${s.first} + vr; let k = KB + vk; ` +
        `if (r < ${s.extent} && k < KE) { let ew = ${start}; ${reg} = ${s.buf}[ew / 8u][(ew / 2u) % 4u]; } }`,
    );
    const at = (copy: StageCopy, j: number) => _el(s, copy, "vr", "vk", j);
    stashes.push((copy) => {
      let line: string;
      if (direct) {
        // a bitcast natively; naga (the emulation under Deno's WebGPU) has no f16 bitcast
        const pair = o.mode === "emulated"
          ? `vec2<f16>(unpack2x16float(${reg}))`
          : `bitcast<vec2<f16>>(${reg})`;
        line = `let d = ${pair}; ${s.arr}${at(copy, 0)} = d.x; ${s.arr}${at(copy, 1)} = d.y;`;
      } else {
        const x = s.op.dtype === "f16"
          ? `unpack2x16float(${reg})`
          : `vec2<f32>(bitcast<f32>(${reg} << 16u), bitcast<f32>(${reg} & 0xffff0000u))`;
        line = _storePair(s, s.scale ? `(${x} * ${s.scale})` : x, at(copy, 0), at(copy, 1), "0");
      }
      return `if (${guard}) { ${pos} ${line} }`;
    });
  }
  return out;
}

/**
 * One side's loads: word loads for a 16-bit operand with vector loads on a tile with
 * `TcTile.words`, else vector loads where the operand has them, else scalar loads.
 */
export function stageLoads(o: TcMainloopOptions, s: StageSide, threads: number): StageLoads {
  if (s.op.vec && o.tile.words && s.op.dtype !== "f32") return _wordLoads(o, s, threads);
  return s.op.vec ? _vectorLoads(o, s, threads) : _scalarLoads(o, s, threads);
}
