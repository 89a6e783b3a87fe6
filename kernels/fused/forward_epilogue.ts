/**
 * WGSL pieces of the fused forward's tiles epilogue (kernels/fused/forward_tiles.ts): what runs on
 * a thread's accumulators once a BM×BN logit tile is in registers.
 *
 * - {@link softcapFn}: the softcap, or the identity.
 * - {@link rowValues}, {@link argmaxOf}, {@link targetWrite}: per thread row of a tile, the capped
 *   and masked values with their max, the first column holding the max, the target logit capture.
 * - {@link RowTerm}: an optional quantity carried beside each row's (max, Σexp) from tile to tile
 *   and split to split: {@link SUM_Z_TERM} (Σz for the smoothing term) and {@link STATS_TERM} (the
 *   calibration statistics: argmax and Σexp(z − m)·(z − m)). A term lists everything it adds to
 *   each part of the kernel, for both row states, so that whether a variant has it is decided in
 *   one place ({@link rowTerms}).
 * @module
 */
import type { AccSlot, GemmTile } from "../gemm_codegen.ts";
import { f32Lit } from "../wgsl_common.ts";

/** The softcap s·tanh(x/s) as `fn softcap(x: f32) -> f32`, the identity without one. */
export function softcapFn(softcap: number | undefined): string {
  if (softcap === undefined) return "fn softcap(x: f32) -> f32 { return x; }";
  return `const SOFTCAP: f32 = ${f32Lit(softcap)};
// s·tanh(x/s) = s − 2s/(exp(2x/s) + 1): one exp (and exact 0 at 0, ±s at ±∞)
fn softcap(x: f32) -> f32 { return SOFTCAP - (2.0 * SOFTCAP) / (exp(x * (2.0 / SOFTCAP)) + 1.0); }`;
}

/** Pairwise combination of expressions (a balanced tree, so sums round like pairwise sums). */
export function tree(xs: string[], op: (a: string, b: string) => string): string {
  let cur = xs;
  while (cur.length > 1) {
    const next: string[] = [];
    for (let i = 0; i < cur.length; i += 2) {
      next.push(i + 1 < cur.length ? op(cur[i], cur[i + 1]) : cur[i]);
    }
    cur = next;
  }
  return cur[0];
}

/** The pairwise sum of the expressions. */
export const treeSum = (xs: string[]): string => tree(xs, (a, b) => `(${a} + ${b})`);

/** `f(j)` for each of a thread row's slots, summed pairwise. */
const sumOver = (ss: AccSlot[], f: (j: number) => string) => treeSum(ss.map((_, j) => f(j)));

/**
 * A slot's column minus 4·tn, as an i32 literal: comparing it with per-tile values (vlim − 4·tn)
 * leaves no per-column loop invariants for the compiler to hoist into registers.
 */
export function slotColumn(t: GemmTile, s: AccSlot): string {
  return `${s.h * (t.bn / (t.tn / 4)) + s.c}i`;
}

/** Statements computing z_j (capped), v_j (in range), q_j (masked) and the row max mx. */
export function rowValues(t: GemmTile, ss: AccSlot[]): string[] {
  const lines = ss.map((s, j) =>
    `let z${j} = softcap(${s.expr}); let v${j} = ${
      slotColumn(t, s)
    } < lim; let q${j} = select(NEG_INF, z${j}, v${j});`
  );
  lines.push(`let mx = ${tree(ss.map((_, j) => `q${j}`), (a, b) => `max(${a}, ${b})`)};`);
  return lines;
}

/** `am`: the first of the thread's columns (minus 4·tn) holding mx. */
export function argmaxOf(t: GemmTile, ss: AccSlot[]): string {
  const picks = ss.slice(0, -1).map((s, j) => ({ s, j })).reverse().map(({ s, j }) =>
    `am = select(am, ${slotColumn(t, s)}, q${j} == mx);`
  );
  return `var am = ${slotColumn(t, ss[ss.length - 1])};\n    ${picks.join(" ")}`;
}

/**
 * Writes the target logit from the one thread holding it: `tg` is the row's local target, `row`
 * the tile row.
 */
export function targetWrite(t: GemmTile, ss: AccSlot[], tg: string, row: string): string {
  const writes = ss.map((s, j) =>
    `if (rel == ${slotColumn(t, s)}) { zt[P.rowStart + m0 + ${row}] = z${j}; }`
  );
  return `{
      let lt = ${tg} - n0;
      if (lt < vcap) {
        let rel = i32(lt) - i32(4u * tn);
        ${writes.join("\n        ")}
      }
    }`;
}

/**
 * `fn stats_merge(a, ax, b, bx) -> vec2<f32>`: merges the calibration partials (argmax bits,
 * Σexp(z − m)·(z − m)) of two (max, sumexp) pairs a and b (before a itself is merged): the argmax
 * of the larger max (the smaller index on a tie), and the sums moved to the common max M:
 * Σe^{z−M}(z − M) = e^{m−M}·(w + (m − M)·s). Relative to the max, so that the entropy
 * log s − w/s has no cancellation against the max (LSE − Σ p·z would lose ~ulp(LSE)).
 */
export const STATS_MERGE =
  `fn stats_merge(a: vec2<f32>, ax: vec2<f32>, b: vec2<f32>, bx: vec2<f32>) -> vec2<f32> {
  let m = max(a.x, b.x);
  var arg = ax.x;
  if (b.x > a.x || (b.x == a.x && bitcast<u32>(bx.x) < bitcast<u32>(ax.x))) { arg = bx.x; }
  if (m <= NEG_INF) { return vec2<f32>(arg, 0.0); }
  let wa = select(0.0, exp(a.x - m) * (ax.y + (a.x - m) * a.y), a.y > 0.0);
  let wb = select(0.0, exp(b.x - m) * (bx.y + (b.x - m) * b.y), b.y > 0.0);
  return vec2<f32>(arg, wa + wb);
}
`;

/**
 * What a term adds in `registers` state, for thread row `i` (running values st_*_i; the row's
 * running max st_m_i and sum st_s_i; the tile's mx, z_j, p_j) and in the final merge across the
 * threads sharing a row (running pair `a`, next pair `bb`, partner index `base + j`).
 */
export interface RegisterHooks {
  /** WGSL helpers the merge uses. */
  helpers: string;
  /** Workgroup scratch for the final merge, one value per thread. */
  decl(threads: number): string;
  /** Declarations of the running values. */
  init(i: number): string;
  /** Statements before a new max rescales st_s_i (sc = exp(st_m_i − mx)). */
  rescale(i: number): string;
  /** Statements after st_m_i became the tile's max mx. */
  newMax(i: number, ss: AccSlot[], t: GemmTile): string;
  /** Accumulation of the tile's values (after st_s_i). */
  accumulate(i: number, ss: AccSlot[]): string[];
  /** The thread's value to scratch. */
  store(i: number): string;
  /** The row's first partial, from scratch. */
  load: string;
  /** Folding the partial of thread base + j in (before `a` takes `bb`). */
  step: string;
  /** The row's split partial to its workspace at index o. */
  write: string;
}

/**
 * What a term adds in `tile` state: per round a thread's rows go to scratch at index `at`, then the
 * owner of a row folds the partials of the threads sharing it (mm, ss: their max and sum; f the
 * rescale of partner j) into its running values own_*.
 */
export interface TileHooks {
  /** Workgroup scratch declarations, given the array declarer. */
  decl(arr: (name: string, ty?: string) => string): string;
  /** Declarations of the owner's running values. */
  init: string;
  /** A thread row's partial to scratch at `at` (mf: its max floored). */
  round(at: string, ss: AccSlot[], t: GemmTile): string[];
  /** Declarations of the partners' merged values. */
  mergeInit: string;
  /** Folding partner j in. */
  mergeStep: string;
  /** Where the partners' max mm exceeds own_m (sc = exp(own_m − mm)), before own_s. */
  mergeUp: string;
  /** Where it does not (sc = exp(mm − own_m)), after own_s. */
  mergeDown: string;
  /** After either. */
  mergeAfter: string;
  /** The row's split partial to its workspace at index o. */
  write: string;
  /** A partial at index o that leaves the merge unchanged (the stream split's unused slots). */
  neutral: string;
}

/** An optional quantity carried beside each row's (max, Σexp): all it adds to the tiles kernel. */
export interface RowTerm {
  /** Workgroup bytes per partial in the scratch. */
  partialBytes: number;
  /** With it the (max, Σexp) partials are kept as pairs instead of max + log Σexp. */
  keepsPairs: boolean;
  registers: RegisterHooks;
  tile: TileHooks;
}

/** Σ_v z_nv of the capped logits (every column summed: off the vocab edge z = softcap(0) = 0). */
export const SUM_Z_TERM: RowTerm = {
  partialBytes: 4,
  keepsPairs: false,
  registers: {
    helpers: "",
    decl: (threads) => `var<workgroup> red_z: array<f32, ${threads}>;`,
    init: (i) => `var st_z_${i} = 0.0;`,
    rescale: () => "",
    newMax: () => "",
    accumulate: (i, ss) => [`st_z_${i} += ${sumOver(ss, (j) => `z${j}`)};`],
    store: (i) => `red_z[lid] = st_z_${i};`,
    load: "var zs = red_z[base];",
    step: "zs += red_z[base + j];",
    write: "wsz[o] = zs;",
  },
  tile: {
    decl: (arr) => arr("scr_z"),
    init: "var own_z = 0.0;",
    round: (at, ss) => [`scr_z[${at}] = ${sumOver(ss, (j) => `z${j}`)};`],
    mergeInit: "var zz = 0.0;",
    mergeStep: "zz += scr_z[own_base + j];",
    mergeUp: "",
    mergeDown: "",
    mergeAfter: "own_z += zz;",
    write: "wsz[o] = own_z;",
    neutral: "wsz[o] = 0.0;",
  },
};

/**
 * The calibration statistics: argmax (first index of the max, as u32 bits) and
 * Σexp(z − m)·(z − m) relative to the running max m (see {@link STATS_MERGE}).
 */
export const STATS_TERM: RowTerm = {
  partialBytes: 8,
  keepsPairs: true,
  registers: {
    helpers: STATS_MERGE,
    decl: (threads) => `var<workgroup> red_x: array<vec2<f32>, ${threads}>;`,
    init: (i) => `var st_a_${i} = 0u; var st_w_${i} = 0.0;`,
    rescale: (i) =>
      `st_w_${i} = sc * (st_w_${i} + select(0.0, (st_m_${i} - mx) * st_s_${i}, st_s_${i} > 0.0));`,
    newMax: (i, ss, t) =>
      `${argmaxOf(t, ss)}\n      st_a_${i} = P.vStart + n0 + 4u * tn + u32(am);`,
    accumulate: (i, ss) => [`st_w_${i} += ${sumOver(ss, (j) => `p${j} * (z${j} - st_m_${i})`)};`],
    store: (i) => `red_x[lid] = vec2<f32>(bitcast<f32>(st_a_${i}), st_w_${i});`,
    load: "var ax = red_x[base];",
    step: "ax = stats_merge(a, ax, bb, red_x[base + j]);",
    write: "wsx[o] = ax;",
  },
  tile: {
    decl: (arr) => `${arr("scr_a", "u32")}\n${arr("scr_w")}`,
    init: "var own_a = 0u; var own_w = 0.0;",
    round: (at, ss, t) => [
      argmaxOf(t, ss),
      `scr_a[${at}] = P.vStart + n0 + 4u * tn + u32(am);`,
      `scr_w[${at}] = ${sumOver(ss, (j) => `p${j} * (z${j} - mf)`)};`,
    ],
    mergeInit: "var aa = 0xffffffffu; var ww = 0.0;",
    mergeStep: [
      "let sj = scr_s[own_base + j];",
      "ww += f * (scr_w[own_base + j] + select(0.0, (max(mj, -1.0e30) - mm) * sj, sj > 0.0));",
      "if (mj == mm) { aa = min(aa, scr_a[own_base + j]); }",
    ].join("\n        "),
    mergeUp:
      "own_w = sc * (own_w + select(0.0, (own_m - mm) * own_s, own_s > 0.0)) + ww; own_a = aa;",
    mergeDown: "own_w += sc * (ww + select(0.0, (mm - own_m) * ss, ss > 0.0));",
    mergeAfter: "",
    write: "wsx[o] = vec2<f32>(bitcast<f32>(own_a), own_w);",
    neutral: "wsx[o] = vec2<f32>(0.0);",
  },
};

/** The row terms a variant carries, in their fixed order: Σz, then the stats. */
export function rowTerms(o: { sumZ: boolean; stats: boolean }): RowTerm[] {
  return [...(o.sumZ ? [SUM_Z_TERM] : []), ...(o.stats ? [STATS_TERM] : [])];
}
