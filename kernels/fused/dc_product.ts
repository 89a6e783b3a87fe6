/**
 * The dC pass's gradient product read straight from E (kernels/fused/kept_tiles.ts,
 * `dCDirect`): dC[tile rows, chunk] += Pᵀ·E[token tile, chunk] for each chunk of d, with P (the
 * tile's w·g, VT vocabulary rows × TT tokens) in workgroup memory as the epilogue left it and E
 * read from storage, not staged.
 *
 * The staged product (the GEMM generator's mainloop, kernels/gemm_codegen.ts) copies P's slice
 * and E's slice into staging arrays every K-step of 8 tokens, with two barriers a step, though P
 * is in workgroup memory already and E's slice is read by every thread row of the workgroup alike.
 * Here no barrier falls inside the product: thread (tm, tn) owns the vocabulary rows of its logits
 * lanes (the rows it formed P for) and the 8 consecutive columns 8·tn … 8·tn + 7 of each chunk of
 * 8·(TT/tn) columns; it reads P four tokens at a time as vectors (P held as vec4 along the tokens)
 * and E's 8 columns of a token as one 16-byte load (bf16, d a multiple of 8; else 8 loads), the
 * next four tokens' loads issued before this four's multiplies. The threads of a thread row read
 * the same E row in one coalesced line, which the other thread rows then find in the cache.
 *
 * A whole token tile's product over a whole chunk (every tile but a segment's last, every chunk
 * but a ragged last one) runs a copy of the loop without the loads' bounds tests, E's index
 * stepped from one four tokens to the next instead of recomputed. With E's 16-byte loads a 16-bit
 * dC's row lane (8 columns, 4 words) is read and written as one 16-byte vector: the pass binds its
 * output as vec4<u32> there (kernels/fused/kept_tiles.ts).
 *
 * Each output element is the same sum as the staged product's, term by term in token order with
 * the same fma, then the same read-modify-write, so dC is the same bit for bit.
 * @module
 */
import type { Dtype } from "../../core/options.ts";
import { accSlots, type GemmTile } from "../gemm_codegen.ts";
import { loadF32 } from "../wgsl_common.ts";
import { type Lane, tileLanes } from "./backward_wgsl.ts";

/** What {@link dCDirectProductWgsl} is generated for. */
export interface DCDirectProductOptions {
  /** The logits tile (bm vocabulary rows × bn tokens; tm × tn a thread). */
  tile: GemmTile;
  dtype: Dtype;
  /** E bound as 16-byte vectors (bf16, d a multiple of 8). */
  vec: boolean;
  /** A packed 16-bit dC (pairs of columns a word, d even), else f32. */
  out16: boolean;
  /** dC split: `fresh` (the segment's first update of a borrowed tile) writes instead of adding. */
  split: boolean;
}

/** Columns of d a chunk of the product covers (8 a thread, bn/tn threads across). */
export function dCDirectChunk(t: GemmTile): number {
  return 8 * (t.bn / t.tn);
}

/** The workgroup array P is staged in: vec4 along the tokens (bm·bn/4 of them). */
export function dCDirectPsDecl(t: GemmTile): string {
  if (t.bn % 4 !== 0) {
    throw new RangeError(`dC direct product: tile bn ${t.bn} not a multiple of 4`);
  }
  return `var<workgroup> Ps: array<vec4<f32>, ${(t.bm * t.bn) / 4}>;`;
}

/** The epilogue's store of P at (vocabulary row, token) into {@link dCDirectPsDecl}'s array. */
export function dCDirectPsStore(t: GemmTile, row: string, tok: string, value: string): string {
  return `Ps[${row} * ${t.bn / 4}u + (${tok}) / 4u][(${tok}) % 4u] = ${value};`;
}

/** E's 8 columns col … col + 7 of token row k (zero past the tile or d) into variable `name`. */
function _loadE(o: DCDirectProductOptions, name: string, k: string): string {
  const row = `(t0 + ${k} - P.eR0) * P.d`;
  if (o.vec) {
    return `var ${name} = vec4<u32>(0u);
          if (${k} < kdepth && col < P.d) { ${name} = e[(${row} + col) / 8u]; }`;
  }
  const el = Array.from(
    { length: 8 },
    (_, j) =>
      `if (col + ${j}u < P.d) { ${name}[${j}] = ${
        loadF32("e", o.dtype, `${row} + col + ${j}u`)
      }; }`,
  );
  return `var ${name}: array<f32, 8>;
          if (${k} < kdepth) { ${el.join(" ")} }`;
}

/** E's columns 0–3 (half 0) or 4–7 (half 1) of a loaded row as a vec4<f32>. */
function _half(o: DCDirectProductOptions, name: string, h: number): string {
  if (o.vec) {
    const w = (i: number) => `${name}[${2 * h + i}]`;
    return `vec4<f32>(bitcast<f32>(${w(0)} << 16u), bitcast<f32>(${w(0)} & 0xffff0000u), ` +
      `bitcast<f32>(${w(1)} << 16u), bitcast<f32>(${w(1)} & 0xffff0000u))`;
  }
  const j = 4 * h;
  return `vec4<f32>(${name}[${j}], ${name}[${j + 1}], ${name}[${j + 2}], ${name}[${j + 3}])`;
}

/**
 * A 16-bit pair word of row lane `r` (columns 2w, 2w + 1 of its 8) with its two sums added to the
 * old word `prev`, each half rounded to nearest even.
 */
function _pairWord(r: Lane, w: number, prev: string): string {
  const q = `q_${r.key}_${w >> 1}`, lo = `${q}[${(2 * w) % 4}]`, hi = `${q}[${(2 * w) % 4 + 1}]`;
  return `to16(from16(${prev} & 0xffffu) + ${lo}) | (to16(from16(${prev} >> 16u) + ${hi}) << 16u)`;
}

/** The read-modify-write's statements, one a line. */
const SEP = "\n        ";

/** The read-modify-write of a row lane's 8 columns (f32, or 4 words of 16-bit pairs). */
function _rmw(o: DCDirectProductOptions, r: Lane): string {
  const old = (
    i: string,
  ) => (o.split ? `select(outp[${i}], ${o.out16 ? "0u" : "0.0"}, fresh)` : `outp[${i}]`);
  if (o.out16 && o.vec) {
    // d a multiple of 8: the row lane's 8 columns are 4 words of one 16-byte vector
    const prev = o.split ? "select(outp[wi], vec4<u32>(0u), fresh)" : "outp[wi]";
    return `if (ov_${r.key} && col < P.d) { let wi = (ob_${r.key} + col) >> 3u; let old = ${prev}; outp[wi] = vec4<u32>(${
      [0, 1, 2, 3].map((w) => _pairWord(r, w, `old[${w}]`)).join(", ")
    }); }`;
  }
  if (o.out16) {
    return Array.from(
      { length: 4 },
      (_, w) =>
        `if (ov_${r.key} && col + ${2 * w}u < P.d) { let wi = (ob_${r.key} + col + ${
          2 * w
        }u) >> 1u; let old = ${old("wi")}; outp[wi] = ${_pairWord(r, w, "old")}; }`,
    ).join(SEP);
  }
  return Array.from(
    { length: 8 },
    (_, j) =>
      `if (ov_${r.key} && col + ${j}u < P.d) { let i = ob_${r.key} + col + ${j}u; outp[i] = ${
        old("i")
      } + q_${r.key}_${j >> 2}[${j % 4}]; }`,
  ).join(SEP);
}

/**
 * WGSL of the product over every chunk of d, after the epilogue's barrier: reads `kdepth` (the
 * tile's tokens), t0, tm, tn, the row lanes' ov_ and ob_, and with `split` `fresh`.
 */
export function dCDirectProductWgsl(o: DCDirectProductOptions): string {
  const t = o.tile;
  const CH = dCDirectChunk(t);
  // the thread's vocabulary rows: its logits lanes (their keys name ov_ and ob_)
  const rows = tileLanes(accSlots(t)).rows;
  const qs = rows.flatMap((r) => [`q_${r.key}_0`, `q_${r.key}_1`]);
  const aLoads = rows.map((r) => `let a_${r.key} = Ps[${r.expr} * ${t.bn / 4}u + g];`);
  const fmas = [0, 1, 2, 3].flatMap((kk) => [
    `{ let lo = ${_half(o, `e${kk}`, 0)}; let hi = ${_half(o, `e${kk}`, 1)};`,
    ...rows.map((r) =>
      `  q_${r.key}_0 = fma(vec4<f32>(a_${r.key}[${kk}]), lo, q_${r.key}_0); q_${r.key}_1 = fma(vec4<f32>(a_${r.key}[${kk}]), hi, q_${r.key}_1);`
    ),
    "}",
  ]);
  const cur = [0, 1, 2, 3].map((kk) => _loadE(o, `e${kk}`, `${kk}u`));
  const next = [0, 1, 2, 3].map((kk) => _loadE(o, `n${kk}`, `k + ${4 + kk}u`));
  // four tokens' multiplies: P's values of the thread's rows, then the fma of each E column
  const step = [...aLoads, ...fmas].join("\n            ");
  const general = `${cur.join("\n          ")}
          for (var g = 0u; g < (kdepth + 3u) / 4u; g++) {
            let k = 4u * g;
            ${next.join("\n            ")}
            ${step}
            e0 = n0; e1 = n1; e2 = n2; e3 = n3;
          }`;
  return `for (var dc = 0u; dc < P.d; dc += ${CH}u) {
        let col = dc + 8u * tn;
        ${qs.map((q) => `var ${q} = vec4<f32>(0.0);`).join(" ")}
        ${
    o.vec
      ? `if (kdepth == ${t.bn}u && dc + ${CH}u <= P.d) {
          ${_fullLoop(o, step)}
        } else {
          ${general}
        }`
      : general
  }
        ${rows.map((r) => _rmw(o, r)).join("\n        ")}
      }`;
}

/**
 * The product loop of a whole tile (bn tokens) over a whole chunk with E's 16-byte loads: the
 * general loop's sums in its order, without its bounds tests, E's index stepped instead of
 * recomputed, the last four tokens outside the loop (no load past the tile).
 */
function _fullLoop(o: DCDirectProductOptions, step: string): string {
  const t = o.tile;
  const ld = (name: string, kk: number, base: string) =>
    `var ${name} = e[${base}${kk ? ` + ${kk}u * ew` : ""}];`;
  const cur = [0, 1, 2, 3].map((kk) => ld(`e${kk}`, kk, "ei"));
  const next = [0, 1, 2, 3].map((kk) => ld(`n${kk}`, kk, "ni"));
  return `let ew = P.d / 8u;
          var ei = ((t0 - P.eR0) * P.d + col) / 8u;
          ${cur.join(" ")}
          for (var g = 0u; g < ${t.bn / 4 - 1}u; g++) {
            let ni = ei + 4u * ew;
            ${next.join(" ")}
            ${step}
            e0 = n0; e1 = n1; e2 = n2; e3 = n3;
            ei = ni;
          }
          {
            let g = ${t.bn / 4 - 1}u;
            ${step}
          }`;
}
