/**
 * Pass `fused tiles` of the fused forward (kernels/fused/forward.ts): workgroups form a grid of
 * (vocab split S) × (token block of BM rows), or with `stream` a row of W workgroups that share the
 * tiles equally, each walking its pieces (kernels/fused/forward_stream.ts; the record:
 * forward_tiles_record.ts). A workgroup walks its contiguous range of BN-wide vocab tiles in
 * order; for each it computes the BM×BN logits tile with the generated register-tiled GEMM
 * ({@link gemmMainloop}), and the epilogue works on the accumulators in
 * registers: softcap, mask of the ragged vocab edge, and for each of the thread's TM rows its
 * (max, Σexp(z − max)) over its TN columns (one max, then TN exps; no rescale). Where the running
 * row state lives across tiles is the {@link TileState}. One partial log-sum-exp
 * L = max + log Σexp(z − max) per row per split goes to a workspace of n × S × 4 bytes (the merge
 * treats it as the pair (L, 1); one log and one exp more per partial than merging pairs, ~1 ulp of
 * L); with the calibration stats the (max, Σexp) pairs are kept (n × S × 8) with n × S × 8 more
 * for the stats, plus n × S × 4 for the tile Σz with softcap or the in-kernel variant.
 *
 * Target logit: written from inside the tile that holds t_n, by the one thread that holds that
 * element (it is unique: exactly one workgroup of one shard dispatch covers column t_n of row n,
 * and exactly one thread of it). It costs one compare per row per tile (the element loop runs
 * only in the one tile that holds the target), reads nothing extra, and gives the very value that
 * entered the LSE (so loss ≥ 0 holds up to rounding of the LSE alone). A separate E_n·C_{t_n} dot
 * product would re-read n rows of C gathered across shards and round differently. The value is
 * parked in `lossRows[n]`, which the merge pass then overwrites with the loss.
 *
 * The kernel source is composed from small pieces: the header (softcap, Params, bindings, GEMM
 * staging), `main` (the tile loop around the GEMM main loop), the row state (`registers` or
 * `tile`: its declarations, per-tile epilogue and write-out, a few functions each), and the
 * optional row terms Σz and the stats (kernels/fused/forward_epilogue.ts), which each state asks
 * for the lines they add at its hooks. Every switch of a variant (state, rounds, terms, pair or
 * log-sum-exp partials, vector loads) is resolved once, into a `TilesVariant`, before any WGSL is
 * written.
 * @module
 */
import type { Dtype } from "../../core/options.ts";
import {
  type AccSlot,
  accSlots,
  accVecs,
  gemmMainloop,
  gemmShared,
  gemmSharedBytes,
  gemmThreadCoords,
  type GemmTile,
  tileThreads,
  validateTile,
} from "../gemm_codegen.ts";
import { dtypeHelpers, enableDirectives, LSE_MERGE, wgslStorageType } from "../wgsl_common.ts";
import {
  type RegisterHooks,
  type RowTerm,
  rowTerms,
  rowValues,
  softcapFn,
  STATS_TERM,
  SUM_Z_TERM,
  targetWrite,
  type TileHooks,
  treeSum,
} from "./forward_epilogue.ts";
import { signature, u32s } from "../../gpu/signature.ts";
import { tileMapForwardWgsl, tileMapWidth } from "./tile_map.ts";
import { STREAM_PARAMS, streamNeutralFill, streamPiecesWgsl } from "./forward_stream.ts";

/**
 * Where the tiles kernel keeps the running (max, sumexp) state of its rows across its vocab tiles:
 *
 * - `tile` (default): each tile's rows are reduced across the threads that share them, through a
 *   small workgroup scratch (2 of a thread's TM rows per round, so 2·THREADS·8 bytes), and one
 *   owner thread per row keeps the row's running pair in two registers. Costs 2·TM/2 − 1 barriers
 *   and 16 exps per owner per tile (noise next to the tile's d·BM·BN FMAs) and keeps both the
 *   register count and the workgroup memory close to the plain GEMM's, which is what the GEMM's
 *   occupancy, and so its speed, depends on (on an H200 at the paper's shape, a bare 128×128×8
 *   tile loop ran 288 ms with ≤ 17 KiB of workgroup memory and 354 ms with 8 KiB more; the fused
 *   kernel ran 315 ms in this state, 367 ms in `registers`).
 * - `registers`: each thread keeps a running pair per row in registers (2·TM more registers) and
 *   the threads sharing a row are merged once, at the end of the workgroup's vocab range.
 */
export type TileState = "tile" | "registers";

/** Options of the tiles kernel (what its source depends on). */
export interface FusedTilesKernelOptions {
  tile: GemmTile;
  dtype: Dtype;
  /** Softcap s, or undefined. */
  softcap?: number;
  /** Sum the (capped) logits per split. */
  sumZ: boolean;
  /** Track argmax and Σexp(z − m)·(z − m). */
  stats: boolean;
  /** Where the running row state lives between tiles (default `tile`); see {@link TileState}. */
  state?: TileState;
  /** `tile` state: a thread's rows reduced per round (default {@link tileRowsPerRound}). */
  roundRows?: number;
  /**
   * Declare E and C as 16-byte vectors and load them so (the caller's promise: d is a multiple of
   * the vector width; see vecLoadsFit of kernels/gemm_codegen.ts).
   */
  vecLoads?: boolean;
  /**
   * Write each tile's largest capped logit into the tile map `tmap` (kernels/fused/tile_map.ts;
   * Params mapRow0, mapCol0, mapCols).
   */
  tileMax?: boolean;
  /**
   * The stream split (kernels/fused/forward_stream.ts): a 1-D grid of P.wgs workgroups sharing
   * the P.blocks × P.tiles tiles, instead of the (split × block) grid. `tile` state only.
   */
  stream?: boolean;
}

const NO_TARGET = "0xffffffffu"; // a local target no tile holds
/** Floats per scratch array in `tile` state: rows per round = this / THREADS (≥ 1). */
const SCRATCH_FLOATS = 512;

/**
 * Rows of a thread reduced per round in `tile` state (a power of two dividing TM) that the kernel
 * generator falls back to: small scratch ({@link SCRATCH_FLOATS} floats per array). Prepared
 * forwards use {@link defaultRoundRows} instead.
 */
export function tileRowsPerRound(t: GemmTile): number {
  let r = 1;
  while (r * 2 <= t.tm && t.tm % (r * 2) === 0 && r * 2 * tileThreads(t) <= SCRATCH_FLOATS) r *= 2;
  return r;
}

/** Most rows per round of the default for threads of 16 columns ({@link defaultRoundRows}). */
export const WIDE_ROUND_ROWS = 2;

/**
 * The default rows per round of `tile` state: the largest power of two dividing TM whose
 * workgroup memory fits `limitBytes` (all TM rows in one round needs one barrier pair per tile
 * instead of TM, which ran faster than 2 rows per round on an H200 at the paper's shape), at
 * least {@link tileRowsPerRound}'s choice's smaller neighbour 1. Threads of 16 columns (the
 * 128×256 tile) take at most {@link WIDE_ROUND_ROWS} rows per round, the fastest of 1, 2, 4 and 8
 * on an H100 with that tile's k-slot staging (docs/performance.md).
 */
export function defaultRoundRows(
  t: GemmTile,
  o: { sumZ: boolean; stats: boolean; tileMax?: boolean },
  limitBytes: number,
): number {
  let r = t.tn >= 16 ? Math.min(t.tm, WIDE_ROUND_ROWS) : t.tm;
  while (
    r > 1 && (t.tm % r !== 0 || fusedTilesWorkgroupBytes(t, { ...o, roundRows: r }) > limitBytes)
  ) {
    r /= 2;
  }
  return Math.max(1, Math.floor(r));
}

/** Workgroup memory of the tiles kernel in bytes (GEMM staging plus the row reductions). */
export function fusedTilesWorkgroupBytes(
  t: GemmTile,
  o: { sumZ: boolean; stats: boolean; state?: TileState; roundRows?: number; tileMax?: boolean },
): number {
  const threads = tileThreads(t);
  const staging = gemmSharedBytes(t) + (o.tileMax ? 4 * (t.bn / tileMapWidth(t)) : 0);
  const perPartial = rowTerms(o).reduce((b, term) => b + term.partialBytes, 8);
  if ((o.state ?? "tile") === "registers") return staging + threads * perPartial;
  return staging + t.bm * 4 + (o.roundRows ?? tileRowsPerRound(t)) * threads * perPartial;
}

/** One of a thread's TM rows: its slots (one per 4 columns) and its tile row expression. */
interface ThreadRow {
  i: number;
  slots: AccSlot[];
  row: string;
}

/** Every switch of the tiles kernel's source, resolved once from its options. */
interface TilesVariant {
  tile: GemmTile;
  dtype: Dtype;
  vec: boolean;
  softcap: number | undefined;
  state: TileState;
  /** `tile` state: a thread's rows per reduction round. */
  roundRows: number;
  /** Optional row terms (Σz, stats), in their fixed order. */
  terms: RowTerm[];
  /** Split partials kept as (max, Σexp) pairs rather than max + log Σexp. */
  pairs: boolean;
  /** The tile map's pieces (kernels/fused/tile_map.ts), when the kernel keeps the map. */
  map?: ReturnType<typeof tileMapForwardWgsl>;
  /** The stream split; else the split grid. */
  stream: boolean;
  threads: number;
  /** Threads sharing a row (BN/TN). */
  tx: number;
  rows: ThreadRow[];
}

/** The pieces a row state contributes to the kernel. */
interface StateCode {
  /** WGSL functions it needs. */
  helpers: string;
  /** Workgroup declarations. */
  decls: string;
  /** Before the tile loop. */
  init: string;
  /** After each tile's GEMM. */
  epilogue: string;
  /** After the tile loop: the split partials to the workspaces. */
  finish: string;
}

function _variant(o: FusedTilesKernelOptions): TilesVariant {
  validateTile(o.tile);
  const t = o.tile;
  const state = o.state ?? "tile";
  const threads = tileThreads(t);
  if (state === "tile" && t.bm > threads) {
    throw new RangeError(`tile state needs BM ≤ threads, got ${JSON.stringify(t)}`);
  }
  const roundRows = state === "tile" ? o.roundRows ?? tileRowsPerRound(t) : 1;
  const stream = o.stream === true;
  if (stream && state !== "tile") throw new RangeError("the stream split needs tile state");
  if (!(roundRows >= 1 && t.tm % roundRows === 0)) {
    throw new RangeError(`roundRows ${roundRows} must divide TM ${t.tm}`);
  }
  const rows: ThreadRow[] = [];
  for (const s of accSlots(t)) {
    const i = s.g * 4 + s.r;
    rows[i] ??= { i, slots: [], row: s.row };
    rows[i].slots.push(s);
  }
  const terms = rowTerms(o);
  return {
    tile: t,
    dtype: o.dtype,
    vec: o.vecLoads === true,
    softcap: o.softcap,
    state,
    roundRows,
    terms,
    pairs: terms.some((term) => term.keepsPairs),
    map: o.tileMax === true ? tileMapForwardWgsl(t, stream ? "blk" : "wg.y") : undefined,
    stream,
    threads,
    tx: t.bn / t.tn,
    rows,
  };
}

/** The non-empty pieces, each after `sep` (a newline and indent, or a space). */
function _each(pieces: string[], sep: string): string {
  return pieces.filter((x) => x !== "").map((x) => `${sep}${x}`).join("");
}

/** The split partial written to ws[o]: the pair, or its log-sum-exp m + log s. */
function _lsePartial(v: TilesVariant, pair: string, m: string, s: string): string {
  return v.pairs ? pair : `${m} + log(${s})`;
}

/**
 * The signature of the tiles pass: the E shard's `rows` rows from `rowStart` and the C shard's
 * `vRows` from `vStart`, depth d; the shard's `tiles` vocab tiles in `splits` splits from global
 * split `splitBase` of `sTotal`; the tile map's origin and width. Bindings: E, C, targets, the split
 * workspace ws (pairs, or each split's log-sum-exp: half the bytes), each row term's workspace
 * (Σz, stats), zt (the target logits), the tile map.
 */
function _signature(v: TilesVariant) {
  return signature({
    params: u32s(
      "rows rowStart vRows vStart d tiles splits splitBase sTotal mapRow0 mapCol0 mapCols" +
        (v.stream ? ` ${STREAM_PARAMS}` : ""),
    ),
    bindings: {
      e: { elem: wgslStorageType(v.dtype, v.vec), access: "read" },
      c: { elem: wgslStorageType(v.dtype, v.vec), access: "read" },
      targets: { elem: "i32", access: "read" },
      ws: { elem: v.pairs ? "vec2<f32>" : "f32", access: "read_write" },
      wsz: { elem: "f32", access: "read_write", when: v.terms.includes(SUM_Z_TERM) },
      wsx: { elem: "vec2<f32>", access: "read_write", when: v.terms.includes(STATS_TERM) },
      zt: { elem: "f32", access: "read_write" },
      tmap: { elem: "u32", access: "read_write", when: v.map !== undefined },
    },
    layout: { breaks: [7] },
  });
}

/** The signature of the tiles pass of these options. */
export function fusedTilesSignature(o: FusedTilesKernelOptions) {
  return _signature(_variant(o));
}

/** Everything before `main`. */
function _header(v: TilesVariant, s: StateCode): string {
  const ops = [{ name: "e", dtype: v.dtype, vec: v.vec }, {
    name: "c",
    dtype: v.dtype,
    vec: v.vec,
  }];
  return `${enableDirectives([v.dtype])}
const NEG_INF: f32 = -3.0e38;
${softcapFn(v.softcap)}
${s.helpers}
${_signature(v).wgsl}
${dtypeHelpers(ops)}
${gemmShared({ tile: v.tile })}
${s.decls}
${v.map?.decls ?? ""}`;
}

/** `main`: the workgroup's vocab tiles in order, each a GEMM then the state's epilogue. */
function _main(v: TilesVariant, s: StateCode): string {
  const t = v.tile;
  const operand = { dtype: v.dtype, contig: "k", vec: v.vec } as const;
  const mainloop = gemmMainloop({
    tile: t,
    a: operand,
    b: operand,
    aBuf: "e",
    bBuf: "c",
    M: "P.rows",
    N: "P.vRows",
    K: "P.d",
    m0: "m0",
    n0: "n0",
    aOff: "0u",
    sAm: "P.d",
    sAk: "1u",
    bOff: "0u",
    sBn: "P.d",
    sBk: "1u",
  }, false);
  const accs = accVecs(t).map((a) => `var ${a}: vec4<f32>;`).join(" ");
  const head = `@compute @workgroup_size(${v.threads})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(t)}`;
  const loop = `for (var it = tBegin; it < tEnd; it++) {
    let n0 = it * ${t.bn}u;
    ${accVecs(t).map((a) => `${a} = vec4<f32>(0.0);`).join(" ")}
    ${mainloop}
    let vlim = P.vRows - n0;
    let vcap = min(vlim, ${t.bn}u);
    let lim = i32(vlim) - i32(4u * tn);
  ${v.map?.init ?? ""}
  ${s.epilogue}
  ${v.map?.store ?? ""}
  }`;
  if (v.stream) {
    return `${head}
  ${accs}
  ${streamPiecesWgsl(t.bm, `${s.init}\n  ${loop}\n  ${s.finish}`)}
}
`;
  }
  return `${head}
  let m0 = wg.y * ${t.bm}u;
  let tBegin = (wg.x * P.tiles) / P.splits;
  let tEnd = ((wg.x + 1u) * P.tiles) / P.splits;
  ${s.init}
  ${accs}
  ${loop}
  ${s.finish}
}
`;
}

/** WGSL of the tiles pass ({@link fusedTilesSignature}). */
export function fusedTilesWgsl(o: FusedTilesKernelOptions): string {
  const v = _variant(o);
  const s = v.state === "registers" ? _registersState(v) : _tileState(v);
  return `${_header(v, s)}\n${_main(v, s)}`;
}

// ---------------------------------------------------------------------------------------------
// `registers` state: a running pair per thread row, merged across threads at the end.

/** A thread row's target and running values, before the tile loop. */
function _registersInit(v: TilesVariant, { i, row }: ThreadRow): string {
  const extra = _each(v.terms.map((term) => term.registers.init(i)), " ");
  return `var tg_${i} = ${NO_TARGET};
  { let lr = m0 + ${row}; if (lr < P.rows) { tg_${i} = u32(targets[P.rowStart + lr]) - P.vStart; } }
  var st_m_${i} = NEG_INF;
  var st_s_${i} = 0.0;${extra}`;
}

/** A thread row's tile folded into its running values. */
function _registersTile(v: TilesVariant, { i, row, slots: ss }: ThreadRow): string {
  const hooks = v.terms.map((term) => term.registers);
  const lines = rowValues(v.tile, ss);
  if (v.map) lines.push(v.map.row(row, ss));
  lines.push(`if (mx > st_m_${i}) {
      let sc = exp(st_m_${i} - mx);${_each(hooks.map((h) => h.rescale(i)), "\n      ")}
      st_s_${i} *= sc;
      st_m_${i} = mx;${_each(hooks.map((h) => h.newMax(i, ss, v.tile)), "\n      ")}
    }`);
  ss.forEach((_, j) => lines.push(`let p${j} = select(0.0, exp(q${j} - st_m_${i}), v${j});`));
  lines.push(`st_s_${i} += ${treeSum(ss.map((_, j) => `p${j}`))};`);
  for (const h of hooks) lines.push(...h.accumulate(i, ss));
  lines.push(targetWrite(v.tile, ss, `tg_${i}`, row));
  return `{\n    ${lines.join("\n    ")}\n  }`;
}

/** A thread row's partials merged across the threads sharing the row, then written out. */
function _registersFinish(v: TilesVariant, { i, row }: ThreadRow): string {
  const hooks = v.terms.map((term) => term.registers);
  const each = (f: (h: RegisterHooks) => string, sep: string) => _each(hooks.map(f), sep);
  return `red_ms[lid] = vec2<f32>(st_m_${i}, st_s_${i});${each((h) => h.store(i), " ")}
  workgroupBarrier();
  if (tn == 0u) {
    let lr = m0 + ${row};
    if (lr < P.rows) {
      let base = tm * ${v.tx}u;
      var a = red_ms[base];${each((h) => h.load, "\n      ")}
      for (var j = 1u; j < ${v.tx}u; j++) {
        let bb = red_ms[base + j];${each((h) => h.step, "\n        ")}
        a = lse_merge(a, bb);
      }
      let o = (P.rowStart + lr) * P.sTotal + P.splitBase + wg.x;
      ws[o] = ${_lsePartial(v, "a", "a.x", "a.y")};${each((h) => h.write, "\n      ")}
    }
  }
  workgroupBarrier();`;
}

function _registersState(v: TilesVariant): StateCode {
  const decls = [`var<workgroup> red_ms: array<vec2<f32>, ${v.threads}>;`];
  for (const term of v.terms) decls.push(term.registers.decl(v.threads));
  return {
    helpers: [LSE_MERGE, ...v.terms.map((term) => term.registers.helpers)].join("\n"),
    decls: decls.join("\n"),
    init: v.rows.map((r) => _registersInit(v, r)).join("\n  "),
    epilogue: v.rows.map((r) => _registersTile(v, r)).join("\n  "),
    finish: v.rows.map((r) => _registersFinish(v, r)).join("\n  "),
  };
}

// ---------------------------------------------------------------------------------------------
// `tile` state: per tile, rows reduced across threads through scratch, one owner thread per row.

/** Targets of the block's rows to workgroup memory, the owner's running values and its slot. */
function _tileInit(v: TilesVariant): string {
  const t = v.tile, R = v.roundRows;
  const extra = _each(v.terms.map((term) => term.tile.init), " ");
  return `for (var r = lid; r < ${t.bm}u; r += ${v.threads}u) {
    var tg = ${NO_TARGET};
    let lr = m0 + r;
    if (lr < P.rows) { tg = u32(targets[P.rowStart + lr]) - P.vStart; }
    sh_tg[r] = tg;
  }
  // thread lid < BM owns tile row lid = g·(BM/RG) + r + 4·tm: slot g·4 + r of thread row tm
  var own_m = NEG_INF; var own_s = 0.0;${extra}
  var own_round = 0xffffffffu;
  var own_base = 0u;
  if (lid < ${t.bm}u) {
    let rem = lid % ${t.bm / (t.tm / 4)}u;
    let slot = (lid / ${t.bm / (t.tm / 4)}u) * 4u + rem % 4u;
    own_round = slot / ${R}u;
    own_base = (slot % ${R}u) * ${v.threads}u + (rem / 4u) * ${v.tx}u;
  }`;
}

/** A thread row's tile partial to scratch slot k of the round (and its target logit). */
function _tileRoundRow(v: TilesVariant, { row, slots: ss }: ThreadRow, k: number): string {
  const at = `${k * v.threads}u + lid`;
  const lines = rowValues(v.tile, ss);
  if (v.map) lines.push(v.map.row(row, ss));
  // q = NEG_INF off the vocab edge; mf keeps exp(q − mf) = 0 there when no column is valid
  lines.push("let mf = max(mx, -1.0e30);");
  ss.forEach((_, j) => lines.push(`let p${j} = exp(q${j} - mf);`));
  lines.push(`scr_m[${at}] = mx;`, `scr_s[${at}] = ${treeSum(ss.map((_, j) => `p${j}`))};`);
  for (const term of v.terms) lines.push(...term.tile.round(at, ss, v.tile));
  lines.push(targetWrite(v.tile, ss, `sh_tg[${row}]`, row));
  return `{\n    ${lines.join("\n    ")}\n  }`;
}

/** The owner folds the partials of the threads sharing its row into its running values. */
function _tileMerge(v: TilesVariant): string {
  const hooks = v.terms.map((term) => term.tile);
  const each = (f: (h: TileHooks) => string, sep: string) => _each(hooks.map(f), sep);
  return `{
      var mm = scr_m[own_base];
      for (var j = 1u; j < ${v.tx}u; j++) { mm = max(mm, scr_m[own_base + j]); }
      var ss = 0.0;${each((h) => h.mergeInit, " ")}
      for (var j = 0u; j < ${v.tx}u; j++) {
        let mj = scr_m[own_base + j];
        let f = exp(mj - mm);
        ss += scr_s[own_base + j] * f;${each((h) => h.mergeStep, "\n        ")}
      }
      if (mm > own_m) {
        let sc = exp(own_m - mm);${each((h) => h.mergeUp, "\n        ")}
        own_s = own_s * sc + ss;
        own_m = mm;
      } else {
        let sc = exp(mm - own_m);
        own_s += ss * sc;${each((h) => h.mergeDown, " ")}
      }${each((h) => h.mergeAfter, "\n      ")}
    }`;
}

function _tileState(v: TilesVariant): StateCode {
  const t = v.tile, R = v.roundRows;
  const arr = (name: string, ty = "f32") =>
    `var<workgroup> ${name}: array<${ty}, ${R * v.threads}>;`;
  const decls = [`var<workgroup> sh_tg: array<u32, ${t.bm}>;`, arr("scr_m"), arr("scr_s")];
  for (const term of v.terms) decls.push(term.tile.decl(arr));
  const merge = _tileMerge(v);
  const parts: string[] = [];
  const rounds = t.tm / R;
  for (let q = 0; q < rounds; q++) {
    for (let k = 0; k < R; k++) parts.push(_tileRoundRow(v, v.rows[q * R + k], k));
    parts.push("workgroupBarrier();");
    parts.push(`if (own_round == ${q}u) ${merge}`);
    // the last round's scratch is next written after the next tile's GEMM barriers
    if (q < rounds - 1) parts.push("workgroupBarrier();");
  }
  const writes = _each(v.terms.map((term) => term.tile.write), "\n      ");
  const fills = _each(v.terms.map((term) => term.tile.neutral), " ");
  const finish = `if (lid < ${t.bm}u) {
    let lr = m0 + lid;
    if (lr < P.rows) {
      let o = (P.rowStart + lr) * P.sTotal + ${v.stream ? "slot" : "P.splitBase + wg.x"};
      ws[o] = ${_lsePartial(v, "vec2<f32>(own_m, own_s)", "own_m", "own_s")};${writes}${
    v.stream ? streamNeutralFill(v.pairs ? "vec2<f32>(NEG_INF, 0.0)" : "NEG_INF", fills) : ""
  }
    }
  }`;
  return {
    helpers: "",
    decls: decls.join("\n"),
    init: _tileInit(v),
    epilogue: parts.join("\n  "),
    finish,
  };
}
