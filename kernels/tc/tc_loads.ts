/**
 * The tensor-core main loop's global loads and their staging (kernels/tc/tc_codegen.ts): for each
 * operand, the registers a thread loads a K-step ahead, the loads, and the stores of those
 * registers into the staging arrays as f16. Two kinds:
 *
 * - vector loads: 16 bytes a lane (8 bf16/f16 or 4 f32 values) along the contiguous index;
 * - scalar loads: one element a load, where the caller promises no alignment.
 * @module
 */
import { loadF32, vecWidth, wgslStorageType } from "../wgsl_common.ts";
import type { TcDtype, TcMainloopOptions, TcOperand } from "./tc_codegen.ts";

const COMP = ["x", "y", "z", "w"];

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

/** One side's global loads: register declarations, fetch statements, a stash per register. */
export interface StageLoads {
  decls: string[];
  fetch: string[];
  /** Each register's stores into staging copy `copy`. */
  stashes: ((copy: number) => string)[];
}

/** Element index (u32 expression) of the operand's element (r, k), from `r` and `k` in scope. */
function _start(s: StageSide): string {
  if (s.op.contig !== "k") return `${s.off} + r + k * ${s.ld}`;
  return s.op.rowStart ? `${s.op.rowStart("r")} + k` : `${s.off} + r * ${s.ld} + k`;
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
function _el(s: StageSide, copy: number, r: string, k: string, j?: number): string {
  const one = s.subs === 1;
  const sub = one ? "0u" : `${r} / ${s.subRows}u`, rr = one ? r : `(${r} % ${s.subRows}u)`;
  const plus = j === undefined ? "" : ` + ${j}u`;
  const within = s.op.contig === "k"
    ? `${rr} * ${s.stride}u + ${k}${plus}`
    : `${k} * ${s.stride}u + ${rr}${plus}`;
  if (s.flat) return `[${copy === 0 ? within : `${copy * s.subElems}u + ${within}`}]`;
  const outer = copy === 0 ? sub : `${copy * s.subs}u + ${sub}`;
  return `[${outer}][${within}]`;
}

/** Vector loads: ⌈vectors / threads⌉ 16-byte registers per thread and K-step. */
function _vectorLoads(o: TcMainloopOptions, s: StageSide, threads: number): StageLoads {
  const t = o.tile, w = vecWidth(s.op.dtype), count = (s.rows * t.bk) / w;
  const alongK = s.op.contig === "k";
  const ty = tcStorageType(s.op);
  const lc = s.name.toLowerCase();
  const out: StageLoads = { decls: [], fetch: [], stashes: [] };
  const direct = s.op.dtype === "f16" && !s.scale && !s.arrLo;
  for (let i = 0; i * threads < count; i++) {
    const reg = `${s.prefix}rv${lc}${i}`;
    const idx = `(lid + ${i * threads}u)`;
    const guard = (i + 1) * threads > count ? `${idx} < ${count}u` : "true";
    const pos = alongK
      ? `let vr = ${idx} / ${t.bk / w}u; let vk = (${idx} % ${t.bk / w}u) * ${w}u;`
      : `let vr = (${idx} % ${s.rows / w}u) * ${w}u; let vk = ${idx} / ${s.rows / w}u;`;
    out.decls.push(`var ${reg}: ${ty};`);
    out.fetch.push(
      `${reg} = ${ty}(0); if (${guard}) { ${pos} let r = ${s.first} + vr; let k = KB + vk; ` +
        `if (r < ${s.extent} && k < KE) { ${reg} = ${s.buf}[(${_start(s)}) / ${w}u]; } }`,
    );
    // staging place of the vector's j-th value (in copy `copy`)
    const at = (copy: number, j: number) => _el(s, copy, "vr", "vk", j);
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
  const out: StageLoads = { decls: [], fetch: [], stashes: [] };
  for (let i = 0; i * threads < count; i++) {
    const reg = `${s.prefix}rs${lc}${i}`;
    const idx = `(lid + ${i * threads}u)`;
    const guard = (i + 1) * threads > count ? `${idx} < ${count}u` : "true";
    const pos = alongK
      ? `let er = ${idx} / ${t.bk}u; let ek = ${idx} % ${t.bk}u;`
      : `let er = ${idx} % ${s.rows}u; let ek = ${idx} / ${s.rows}u;`;
    out.decls.push(`var ${reg}: f32;`);
    out.fetch.push(
      `${reg} = 0.0; if (${guard}) { ${pos} let r = ${s.first} + er; let k = KB + ek; ` +
        `if (r < ${s.extent} && k < KE) { ${reg} = ${loadF32(s.buf, s.op.dtype, _start(s))}; } }`,
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

/** One side's loads: vector loads where the operand has them, else scalar loads. */
export function stageLoads(o: TcMainloopOptions, s: StageSide, threads: number): StageLoads {
  return s.op.vec ? _vectorLoads(o, s, threads) : _scalarLoads(o, s, threads);
}
