/**
 * The tile map of the fused forward and the `map filter` pass of the fused backward (the
 * "Ours + tile map" row, method `fused-tilemap`).
 *
 * The fused backward's gradient filter (kernels/fused/backward.ts, pass `filter`) recomputes every
 * logit tile (one forward's worth of products) only to decide which (token tile, vocab tile)
 * pairs hold some g = p·f' + (β/|V|)(z/s)² ≥ ε. The forward has already computed every tile, so
 * it can leave behind what that decision needs: one value per map entry (token block BM × BN
 * vocabulary columns: a forward tile, or a 128-column part of a wider one, {@link tileMapWidth}),
 * the entry's largest capped logit M. Then for a backward tile,
 *
 *   p_nv = exp(z_nv − LSE_n) ≤ exp(M − L_min),   L_min = min of LSE_n over its rows with w_n ≠ 0,
 *
 * and with f' = 1 − (z/s)² ∈ [0, 1], g ≤ exp(M − L_min) + b, where b = β/|V| with softcap and
 * β > 0 (the middle term of P, bounded by (β/|V|)·1; see the module doc of
 * kernels/fused/backward.ts), else 0. The map filter keeps a backward tile when that bound
 * reaches ε (with M the largest over the forward tiles covering it), so it keeps every tile the
 * exact filter keeps (up to the rounding slack below), and drops a tile only where every element
 * has g < ε: the exact filter's error bound holds unchanged. Tiles whose rows are all ignored
 * (w_n = 0) are skipped, as the exact filter skips them. The pass has one thread per backward
 * tile reading a map entry or a few (and each workgroup the LSE of one token tile): no products,
 * where the exact filter recomputes one forward's worth.
 *
 * Rounding slack. The forward's logits come from its own GEMM tile and its own softcap formula,
 * the backward's from another tile and `s·tanh(z/s)`: both are f32 dot products of the same
 * inputs, accumulated in increasing k with fma, so they agree to a few ulps (the classic bound is
 * 2·γ_d·Σ_k|e_k·c_k|, γ_d ≈ d·2⁻²⁴). The bound is taken at M + δ with
 * δ = {@link MAP_SLACK_ABS} + {@link MAP_SLACK_REL}·|M| (1/32 + |M|/1024): it covers the classic
 * bound wherever Σ_k|e_k·c_k| ≤ 113 + 3.5·|M| at d = 2304 (on the `cce` recipe at the paper's
 * shape it is ≈ 30, √d = 48 on the diagonal), and costs a factor e^δ ≈ 1.03 on the bound.
 *
 * Map entries: the order-preserving u32 key of the f32 value ({@link tileMapKey}: sign bit set
 * for non-negative floats, all bits flipped for negative ones), so that an integer max is the
 * float max: the forward reduces each tile's rows with a workgroup integer atomicMax (order
 * independent, hence deterministic) and one thread stores the entry (each (token block, vocab
 * tile) belongs to one workgroup). Key 0 (below every float) marks an entry never written (the
 * record zeroes the map); the map filter keeps such tiles.
 *
 * Vocabulary order: the forward walks the vocabulary in its own order, so the map's tiles are
 * ranges of that order, and the backward of this row works in it too (no sorting: a sorted
 * order's tiles gather rows from many forward tiles, whose maxima would bound them only loosely).
 * On the `cce` recipe the own order is also the one `fused` picks (it keeps fewer tiles there);
 * on LLM-like data sorting would keep fewer.
 *
 * Layout ({@link tileMapLayout}): rows are the forward's token blocks, E shard after E shard
 * (ceil(rows/BM) each), columns its entries' vocabulary ranges, C shard after C shard
 * (ceil(rows/BN) each). At the paper's shape with 128×128 entries (the 128×256 forward tile keeps
 * two): 64 × 2,000 entries, 500 KiB, kept from the forward to the backward (the row counts it in
 * the forward's memory).
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor } from "../../gpu/tensor.ts";
import { GpuError } from "../../core/errors.ts";
import type { LceOptions } from "../../core/options.ts";
import { f32Lit } from "../wgsl_common.ts";
import type { AccSlot, GemmTile } from "../gemm_codegen.ts";
import { tree } from "./forward_epilogue.ts";
import { TILE_COUNT } from "./backward_wgsl.ts";
import { compileKernel, signature, u32s } from "../../gpu/signature.ts";

/** Vocabulary columns of a map entry where the forward tile is wider ({@link tileMapWidth}). */
export const TILE_MAP_BN = 128;

/** Absolute part of the map filter's rounding slack δ on M (see the module doc). */
export const MAP_SLACK_ABS = 2 ** -5;
/** Part of δ relative to |M|. */
export const MAP_SLACK_REL = 2 ** -10;

/** Forward tile size the map is kept at (token block × vocab tile). */
export interface TileMapTile {
  bm: number;
  bn: number;
}

/** Where each shard's tiles sit in the map. */
export interface TileMapLayout {
  /** Map rows (token blocks in all) and columns (vocab tiles in all). */
  rows: number;
  cols: number;
  /** First map row of each E shard's blocks, first map column of each C shard's tiles. */
  rowBase: number[];
  colBase: number[];
  tile: TileMapTile;
}

/** The map's layout for E and C sharded into these row counts (see the module doc). */
export function tileMapLayout(
  eShardRows: number[],
  cShardRows: number[],
  tile: TileMapTile,
): TileMapLayout {
  const bases = (rows: number[], b: number) => {
    const base: number[] = [];
    let at = 0;
    for (const r of rows) {
      base.push(at);
      at += Math.ceil(r / b);
    }
    return { base, total: at };
  };
  const r = bases(eShardRows, tile.bm), c = bases(cShardRows, tile.bn);
  return { rows: r.total, cols: c.total, rowBase: r.base, colBase: c.base, tile };
}

/** Bytes of the map of a layout (a u32 per entry, 16-byte padded as createTensor pads). */
export function tileMapBytes(layout: { rows: number; cols: number }): number {
  return Math.ceil(Math.max(layout.rows * layout.cols, 1) * 4 / 16) * 16;
}

/**
 * A tile map for E and C as sharded (u32, rows × cols, one binding; GpuError "limits" when it does
 * not fit one). Its contents are written by the forward's record.
 */
export function createTileMap(
  ctx: GpuContext,
  e: DeviceTensor,
  c: DeviceTensor,
  tile: TileMapTile,
): DeviceTensor {
  const layout = tileMapLayout(e.shards.map((s) => s.rows), c.shards.map((s) => s.rows), tile);
  if (tileMapBytes(layout) > ctx.maxBindingBytes) {
    throw new GpuError(
      "limits",
      `tile map: ${layout.rows}×${layout.cols} entries exceed one binding`,
    );
  }
  return createTensor(ctx, {
    dtype: "u32",
    rows: layout.rows,
    cols: layout.cols,
    role: "workspace",
    label: "tile map",
  });
}

/** Checks that `map` is the map of E and C with `tile`; returns its layout. */
export function checkTileMap(
  map: DeviceTensor,
  e: DeviceTensor,
  c: DeviceTensor,
  tile: TileMapTile,
): TileMapLayout {
  const layout = tileMapLayout(e.shards.map((s) => s.rows), c.shards.map((s) => s.rows), tile);
  if (
    map.dtype !== "u32" || map.rows !== layout.rows || map.cols !== layout.cols ||
    map.shards.length !== 1
  ) {
    throw new RangeError(
      `tile map is ${map.rows}×${map.cols} ${map.dtype} in ${map.shards.length} shards, ` +
        `expected ${layout.rows}×${layout.cols} u32 in one`,
    );
  }
  return layout;
}

/** The order-preserving u32 key of an f32 (as the kernels compute it). */
export function tileMapKey(x: number): number {
  const b = new Uint32Array(Float32Array.of(x).buffer)[0];
  return (b & 0x80000000 ? ~b : b | 0x80000000) >>> 0;
}

/** The f32 of a key ({@link tileMapKey}'s inverse); NaN for key 0 (an entry never written). */
export function tileMapValue(key: number): number {
  if (key === 0) return NaN;
  const b = (key & 0x80000000 ? key & 0x7fffffff : ~key) >>> 0;
  return new Float32Array(Uint32Array.of(b).buffer)[0];
}

/** WGSL of `tmap_key(x: f32) -> u32` and `tmap_value(k: u32) -> f32` ({@link tileMapKey}). */
export const TILE_MAP_KEY_WGSL = `fn tmap_key(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}
fn tmap_value(k: u32) -> f32 {
  return bitcast<f32>(select(~k, k & 0x7fffffffu, (k & 0x80000000u) != 0u));
}
`;

/**
 * Vocabulary columns of a map entry for a forward tile t: {@link TILE_MAP_BN} where t is a whole
 * number of such entries wider than one and each thread's column groups (4·bn/tn columns each,
 * kernels/gemm_codegen.ts accSlots) lie inside one entry, so that a thread's maxima split by entry
 * without a cross-thread step; else t's own width. The 128×256 forward tile keeps two 128-column
 * entries: the map of the 128×128 tile, whose bound the backward needs (a 256-column entry bounds
 * twice the backward tiles on the `cce` recipe).
 */
export function tileMapWidth(t: { bn: number; tn: number }): number {
  const group = t.bn / (t.tn / 4);
  const w = TILE_MAP_BN;
  return t.bn > w && t.bn % w === 0 && w % group === 0 ? w : t.bn;
}

/** The map's tile for a forward tile: its rows, {@link tileMapWidth} columns. */
export function forwardMapTile(t: { bm: number; bn: number; tn: number }): TileMapTile {
  return { bm: t.bm, bn: tileMapWidth(t) };
}

/**
 * WGSL pieces of the FMA forward tiles kernel (kernels/fused/forward_tiles.ts) with a tile map
 * (bound as `tmap`, one u32 per entry of {@link forwardMapTile}: `split` entries a forward tile):
 * the workgroup keys (one a entry), the per-row line (inside a row's block of the epilogue, where
 * `q{j}` is the thread's j-th column of the row, NEG_INF off the vocab edge; `row` the row's index
 * expression in the tile) and the store after the epilogue (`it` the vocab tile of the C shard,
 * `block` the token block of the E shard, wg.y by default; Params mapRow0, mapCol0, mapCols; an
 * entry past the shard's rows, the second half of a ragged last tile, is not stored).
 */
export function tileMapForwardWgsl(t: GemmTile, block = "wg.y") {
  const w = tileMapWidth(t), split = t.bn / w, group = t.bn / (t.tn / 4);
  const parts = [...Array(split).keys()];
  const keys = parts.map((h) => `atomicMax(&s_tmax[${h}], tmap_key(tmx_${h}));`).join(" ");
  return {
    decls: `var<workgroup> s_tmax: array<atomic<u32>, ${split}>;\n${TILE_MAP_KEY_WGSL}`,
    init: parts.map((h) => `var tmx_${h} = NEG_INF;`).join(" "),
    row: (row: string, ss: AccSlot[]) =>
      parts.map((h) => {
        const qs = ss.flatMap((s, j) => Math.floor((s.h * group) / w) === h ? [`q${j}`] : []);
        const mx = tree(qs, (a, b) => `max(${a}, ${b})`);
        return `tmx_${h} = max(tmx_${h}, select(NEG_INF, ${mx}, m0 + ${row} < P.rows));`;
      }).join("\n    "),
    // s_tmax starts at 0 (workgroup memory is zeroed) and is reset by the exchange; the next
    // tile's atomics come after the next GEMM's barriers, so after the exchange
    store: `${keys}
  workgroupBarrier();
  if (lid < ${split}u) {
    let mc = it * ${split}u + lid;
    let key = atomicExchange(&s_tmax[lid], 0u);
    if (mc * ${w}u < P.vRows) { tmap[(P.mapRow0 + ${block}) * P.mapCols + P.mapCol0 + mc] = key; }
  }`,
  };
}

/**
 * The tile map pieces for kernels with subgroup matrices in workgroup memory (the tensor-core
 * forward, one entry a tile, `mx` the row's max over the thread's columns): the key is the first
 * of four words (16 bytes), so with every other workgroup variable a multiple of 16 bytes each
 * one starts 16-byte aligned wherever the driver places it, as subgroup-matrix loads and stores
 * need (a lone 4-byte atomic let the driver shift the matrix scratch by one word).
 *
 * `row` takes every row of the tile, those past the E shard's end included: their E rows are
 * staged as zeros, so their logits are softcap(0) = 0 and an entry of a ragged last token block
 * is max(M, 0) instead of M. That is still an upper bound on the block's logits, all the map
 * filter needs: it may keep more backward tiles of that last block, never fewer (a full block's
 * entry is M exactly). Testing each row against the shard's end instead cost the forward a
 * quarter of its time on an H200 with Dawn's robustness on (48.7 → 64.6 ms at the paper's
 * shape), though not with it off.
 */
export const tileMapForwardWgsl16 = {
  decls: `var<workgroup> s_tmax: array<atomic<u32>, 4>;\n${TILE_MAP_KEY_WGSL}`,
  init: "var tmx = NEG_INF;",
  row: "tmx = max(tmx, mx);",
  store: `atomicMax(&s_tmax[0], tmap_key(tmx));
  workgroupBarrier();
  if (lid == 0u) {
    tmap[(P.mapRow0 + wg.y) * P.mapCols + P.mapCol0 + it] = atomicExchange(&s_tmax[0], 0u);
  }`,
};

/**
 * {@link tileMapForwardWgsl16} without its atomics, for a forward whose workgroup memory must not
 * grow by their 16 bytes (the 128×128 tensor-core forward with one epilogue scratch matrix a
 * subgroup, TcTile.singleScratch: 24 KiB): each of the `threads` invocations writes its maximum
 * into the epilogue's scratch `scr` (free after the tile's last round, which ends with a barrier),
 * and invocation 0 takes their maximum. The same entry bit for bit: the key is monotonic in the
 * value, so the key of the maximum is the maximum of the keys.
 */
export function tileMapForwardWgsl16Scratch(threads: number) {
  return {
    decls: TILE_MAP_KEY_WGSL,
    init: tileMapForwardWgsl16.init,
    row: tileMapForwardWgsl16.row,
    store: `scr[lid] = tmx;
  workgroupBarrier();
  if (lid == 0u) {
    var m = scr[0];
    for (var q = 1u; q < ${threads}u; q++) { m = max(m, scr[q]); }
    tmap[(P.mapRow0 + wg.y) * P.mapCols + P.mapCol0 + it] = tmap_key(m);
  }`,
  };
}

/** Options of {@link mapFilterWgsl}. */
export interface MapFilterKernelOptions {
  /** The backward tile (TT tokens × VT vocabulary entries): one mask bit per tile. */
  tile: { tokens: number; vocab: number };
  /** The forward's tile the map was kept at. */
  mapTile: TileMapTile;
  opts: LceOptions;
  /** Vocabulary size |V|. */
  v: number;
  /** Filter threshold ε. */
  eps: number;
}

/** Threads of the map filter's workgroups (vocab tiles per workgroup). */
const MAP_FILTER_WG = 256;

/**
 * The map filter's signature: the token segment [tS, tE) of the E shard starting at eR0, whose
 * first block is map row fR0; the vocab segment [vS, vE) of the C shard starting at cR0, whose
 * first tile is map column fC0; tBase, vBase (global tile indices of the segments' first tiles),
 * vTotal (vocab tiles in all), tiles (vocab tiles of the segment), mapCols. Bindings: lse, the row
 * weights w, the tile map, the mask and the kept-tile counter.
 */
const MAP_FILTER_SIG = signature({
  params: u32s("tS tE eR0 fR0 vS vE cR0 fC0 tBase vBase vTotal tiles mapCols"),
  bindings: {
    lse: { elem: "f32", access: "read" },
    w: { elem: "f32", access: "read" },
    tmap: { elem: "u32", access: "read" },
    mask: { elem: "atomic<u32>", access: "read_write" },
    counter: { elem: "atomic<u32>", access: "read_write" },
  },
  layout: { breaks: [8] },
});

/**
 * WGSL of the map filter: one workgroup per (token tile, 256 vocab tiles of one segment pair).
 * The workgroup takes L_min, the smallest LSE of the token tile's rows with w_n ≠ 0 (integer
 * atomicMin of the keys); each thread then takes M, the largest map entry over the forward tiles
 * covering its backward tile, and keeps the tile when exp(M + δ − L_min) + b ≥ ε (see the module
 * doc): it sets the tile's bit in the zeroed mask (integer atomicOr) and counts it (workgroup
 * count, then one integer atomicAdd into counter[0]) ({@link MAP_FILTER_SIG}).
 * Grid: (⌈tiles/256⌉, token tiles of the segment).
 */
export function mapFilterWgsl(o: MapFilterKernelOptions): string {
  if (!(o.eps > 0 && Number.isFinite(o.eps))) {
    throw new RangeError(`map filter: eps must be > 0, got ${o.eps}`);
  }
  const middle = o.opts.capped && o.opts.smoothing ? o.opts.beta / o.v : 0;
  const TT = o.tile.tokens, VT = o.tile.vocab;
  return `const EPS: f32 = ${f32Lit(o.eps)};
const MIDDLE: f32 = ${f32Lit(middle)};
const SLACK_ABS: f32 = ${f32Lit(MAP_SLACK_ABS)};
const SLACK_REL: f32 = ${f32Lit(MAP_SLACK_REL)};
${MAP_FILTER_SIG.wgsl}
var<workgroup> s_lmin: atomic<u32>;
${TILE_COUNT.decl}
${TILE_MAP_KEY_WGSL}
@compute @workgroup_size(${MAP_FILTER_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let t0 = P.tS + wg.y * ${TT}u;
  let t1 = min(t0 + ${TT}u, P.tE);
  if (lid == 0u) {
    atomicStore(&s_lmin, 0xffffffffu);
    atomicStore(&s_count, 0u);
  }
  workgroupBarrier();
  for (var r = t0 + lid; r < t1; r += ${MAP_FILTER_WG}u) {
    if (w[r] != 0.0) { atomicMin(&s_lmin, tmap_key(lse[r])); }
  }
  workgroupBarrier();
  let lk = atomicLoad(&s_lmin);
  let j = wg.x * ${MAP_FILTER_WG}u + lid;
  // lk = 0xffffffff: every row ignored, nothing to keep
  if (j < P.tiles && lk != 0xffffffffu) {
    let lmin = tmap_value(lk);
    let v0 = P.vS + j * ${VT}u;
    let v1 = min(v0 + ${VT}u, P.vE);
    let r0 = P.fR0 + (t0 - P.eR0) / ${o.mapTile.bm}u;
    let r1 = P.fR0 + (t1 - 1u - P.eR0) / ${o.mapTile.bm}u;
    let c0 = P.fC0 + (v0 - P.cR0) / ${o.mapTile.bn}u;
    let c1 = P.fC0 + (v1 - 1u - P.cR0) / ${o.mapTile.bn}u;
    var mk = 0u;
    for (var r = r0; r <= r1; r++) {
      for (var c = c0; c <= c1; c++) { mk = max(mk, tmap[r * P.mapCols + c]); }
    }
    var keep = true; // mk = 0: an entry never written
    if (mk != 0u) {
      let m = tmap_value(mk);
      keep = exp(m + SLACK_ABS + SLACK_REL * abs(m) - lmin) + MIDDLE >= EPS;
    }
    if (keep) {
      let mi = (P.tBase + wg.y) * P.vTotal + P.vBase + j;
      ${TILE_COUNT.keep("mask", "      ")}
    }
  }
  ${TILE_COUNT.flush(0)}
}
`;
}

/** A row range inside one binding of each tensor of a pair, and its tiles (as the backward cuts). */
export interface MapFilterSegment {
  start: number;
  end: number;
  /** Tiles in the segment and global index of its first tile. */
  tiles: number;
  base: number;
}

/** Tensors and buffers of {@link PreparedMapFilter.record}. */
export interface MapFilterArgs {
  /** E and C as the forward saw them (their shards place the map's rows and columns). */
  e: DeviceTensor;
  c: DeviceTensor;
  /** The forward's tile map. */
  tileMap: DeviceTensor;
  /** n×1 f32 LSE and row weights, one shard each. */
  lse: DeviceTensor;
  w: DeviceTensor;
  /** The backward's token and vocab segments (tiles never straddle shards of E or C). */
  tok: MapFilterSegment[];
  voc: MapFilterSegment[];
  /** Vocab tiles in all (mask row length). */
  vTotal: number;
  /** The zeroed tile mask and the kept-tile counter (counter[0] is added to). */
  mask: TrackedBuffer;
  counter: TrackedBuffer;
}

/** A compiled map filter pass. */
export interface PreparedMapFilter {
  /** The forward's tile the map is read at. */
  readonly mapTile: TileMapTile;
  /** Records the pass `fused backward map filter`. */
  record(rec: Recorder, a: MapFilterArgs): void;
}

/** Compiles the map filter for a backward tile and the forward's map tile. */
export async function prepareMapFilter(
  ctx: GpuContext,
  o: MapFilterKernelOptions,
): Promise<PreparedMapFilter> {
  const kernel = await compileKernel(
    ctx,
    MAP_FILTER_SIG,
    mapFilterWgsl(o),
    "fused_backward_map_filter",
  );
  return {
    mapTile: o.mapTile,
    record(rec, a) {
      const layout = checkTileMap(a.tileMap, a.e, a.c, o.mapTile);
      const shardIndex = (t: DeviceTensor, row: number) =>
        t.shards.findIndex((s) => row < s.rowStart + s.rows);
      rec.pass("fused backward map filter", (p) => {
        for (const vs of a.voc) {
          const ci = shardIndex(a.c, vs.start);
          const gx = Math.ceil(vs.tiles / MAP_FILTER_WG);
          for (const ts of a.tok) {
            const ei = shardIndex(a.e, ts.start);
            if (ts.tiles > 65535 || gx > 65535) {
              throw new GpuError("limits", `map filter grid ${gx}×${ts.tiles}`);
            }
            const params = {
              tS: ts.start,
              tE: ts.end,
              eR0: a.e.shards[ei].rowStart,
              fR0: layout.rowBase[ei],
              vS: vs.start,
              vE: vs.end,
              cR0: a.c.shards[ci].rowStart,
              fC0: layout.colBase[ci],
              tBase: ts.base,
              vBase: vs.base,
              vTotal: a.vTotal,
              tiles: vs.tiles,
              mapCols: layout.cols,
            };
            const bg = kernel.bind(rec, params, {
              lse: a.lse.shards[0].buffer,
              w: a.w.shards[0].buffer,
              tmap: a.tileMap.shards[0].buffer,
              mask: a.mask,
              counter: a.counter,
            });
            p.dispatch(kernel.pipeline, bg, gx, ts.tiles);
          }
        }
      });
    },
  };
}
