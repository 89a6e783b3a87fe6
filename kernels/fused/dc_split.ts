/**
 * Long dC walks split (kernels/fused/backward.ts): where a few vocab tiles are kept by many token
 * tiles, the dC pass's workgroup of each such tile walks them one after the other while the rest
 * of the GPU idles (on `llm:zipf=3` 11 ms for 2.4% of the tiles kept). The walk of such a tile is
 * cut into segments of about L kept token tiles, each walked by its own workgroup of the dC pass
 * (kernels/fused/kept_tiles.ts, `split`): segment 0 adds into the tile's own dC rows as before,
 * segment s ≥ 1 writes its partial sum into the dC rows of a vocab tile no token tile keeps (its
 * rows hold only the smoothing row until the target scatter, so they are free scratch: no memory
 * of their own). A sum pass then adds each split tile's partials to its rows in segment order and
 * puts the smoothing row back into the borrowed rows. The plan is taken on the GPU from the dC
 * order's counts; nothing is read back.
 *
 * Two passes over the dC order's buffer `ord` (kernels/fused/dc_order.ts: per segment the order,
 * the counts, the ranks; the ranks are no longer read once the order is placed):
 * - `dC split plan`, a workgroup per vocab segment: L = max(lMin, ⌈kept / slots⌉) for the segment's
 *   kept tiles, a tile of rank r with c kept token tiles wants x_r = ⌈c/L⌉ − 1 extra segments, and
 *   the ranks from the first get theirs while the segment's usable empty tiles last (every tile no
 *   token tile keeps, but a short last one; the first that does not fit gets what is left). It
 *   writes the slot start of each rank, S_r = r + min(x_0 + … + x_{r−1}, usable); slot S_r + s is
 *   segment s of rank r's tile, which covers its kept token tiles [⌊s·c/m⌋, ⌊(s+1)·c/m⌋), m =
 *   S_{r+1} − S_r, and segment s ≥ 1 borrows the empty tile of rank (first empty rank) + (S_r − r)
 *   + s − 1. It adds the extras to the stats counter's third word.
 * - `dC split sum`, per vocab segment: workgroups per block of a split tile's rows (the split ranks
 *   come first) add its partials, summed in f32 in segment order, into its rows (one rounding) and
 *   write the smoothing row (as the dC smoothing term does) into the borrowed rows.
 *
 * The sums are in a fixed order given the filter's mask (deterministic, bitwise reproducible): a
 * tile's kept token tiles in order within a segment, then the segments in order.
 * @module
 */
import type { LceOptions } from "../../core/options.ts";
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
import { compileKernel, signature, u32s } from "../../gpu/signature.ts";
import { type Dtype16, wgslFrom16, wgslTo16 } from "../cast16.ts";
import { dCInitValueWgsl } from "./corrections_wgsl.ts";
import type { TileSegment } from "./backward_plan.ts";

const WG = 256;

/**
 * The plan's default slots, the workgroups a walk's segments are sized for: about an H200's SMs
 * (132). On `llm:zipf=3` and `llm:zipf=2` 128 slots gave backwards of 14.8 and 19.3 ms where 256
 * gave 15.2 and 19.7 and 512 18.4 (docs/performance.md).
 */
export const DC_SPLIT_SLOTS = 128;

/** The shortest segment a split cuts (a borrowed tile costs a write and a read of its rows). */
export const DC_SPLIT_MIN = 2;

/** `plan`'s signature: the segment's tiles, slots, lMin, whether its last tile is short. */
const PLAN_SIG = signature({
  params: u32s("vTotal vBase tiles slots lMin ragged"),
  bindings: {
    ord: { elem: "u32", access: "read_write" },
    counter: { elem: "atomic<u32>", access: "read_write" },
  },
});

/**
 * WGSL of `firstEmpty(vTotal, vBase, tiles)` over the order buffer `buf`: the segment's first rank
 * no token tile keeps (the counts fall with the rank), `tiles` where every tile is kept.
 */
export function firstEmptyWgsl(buf: string): string {
  return `fn firstEmpty(vTotal: u32, vBase: u32, tiles: u32) -> u32 {
  var a = 0u;
  var b = tiles;
  loop {
    if (a >= b) { break; }
    let m = (a + b) / 2u;
    if (${buf}[vTotal + vBase + ${buf}[vBase + m]] == 0u) { b = m; } else { a = m + 1u; }
  }
  return a;
}`;
}

/** WGSL of pass `dC split plan` (one workgroup per vocab segment). */
export function dCSplitPlanWgsl(): string {
  return `${PLAN_SIG.wgsl}
var<workgroup> s_a: array<u32, ${WG}>;
var<workgroup> s_b: array<u32, ${WG}>;
fn extra(r: u32, l: u32) -> u32 {
  let c = ord[P.vTotal + P.vBase + ord[P.vBase + r]];
  return select(0u, (c + l - 1u) / l - 1u, c > 0u);
}
@compute @workgroup_size(${WG})
fn main(@builtin(local_invocation_index) lid: u32) {
  let cnt = P.vTotal + P.vBase;
  let sr = 2u * P.vTotal + P.vBase;
  // the segment's kept tiles and its tiles kept by none
  var kept = 0u;
  var empty = 0u;
  for (var r = lid; r < P.tiles; r += ${WG}u) {
    let c = ord[cnt + r];
    kept += c;
    empty += select(0u, 1u, c == 0u);
  }
  s_a[lid] = kept;
  s_b[lid] = empty;
  for (var h = ${WG / 2}u; h > 0u; h >>= 1u) {
    workgroupBarrier();
    if (lid < h) { s_a[lid] += s_a[lid + h]; s_b[lid] += s_b[lid + h]; }
  }
  workgroupBarrier();
  let l = max(P.lMin, (s_a[0] + P.slots - 1u) / P.slots);
  // a short last tile cannot lend whole rows (it is the last empty rank where it is empty)
  let usable = s_b[0] - select(0u, 1u, P.ragged == 1u && ord[cnt + P.tiles - 1u] == 0u);
  workgroupBarrier();
  // the extras' exclusive prefix over the ranks, cut at the usable tiles: S_r (the extras fall
  // with the rank, so the first ranks are split, the first that does not fit gets what is left)
  var carry = 0u;
  for (var base = 0u; base < P.tiles; base += ${WG}u) {
    let r = base + lid;
    // (select evaluates both sides: the rank is clamped so that no read leaves the segment)
    let x = select(0u, extra(min(r, P.tiles - 1u), l), r < P.tiles);
    s_a[lid] = x;
    for (var h = 1u; h < ${WG}u; h <<= 1u) {
      workgroupBarrier();
      var y = 0u;
      if (lid >= h) { y = s_a[lid - h]; }
      workgroupBarrier();
      s_a[lid] += y;
    }
    workgroupBarrier();
    let incl = carry + s_a[lid];
    if (r < P.tiles) { ord[sr + r] = r + min(incl - x, usable); }
    carry += s_a[${WG - 1}u];
    workgroupBarrier();
  }
  let m = min(carry, usable);
  if (lid == 0u && m > 0u) { atomicAdd(&counter[2], m); }
}
`;
}

/** Options of {@link dCSplitSumWgsl}: dC's dtype, the vocab tile, sorting, the loss options. */
export interface DCSplitSumOptions {
  /** A packed 16-bit dC of this dtype (d even), else f32. */
  out16?: Dtype16;
  /** Vocabulary rows per tile. */
  vocab: number;
  /** dC rows addressed through the permutation `perm`. */
  sort: boolean;
  opts: LceOptions;
}

/**
 * The sum's signature: the vocab segment [vS, vE) of dC's binding from row oR0, its tiles, d;
 * ord, dC, the smoothing row rvec (β > 0: bound but unread otherwise), [perm].
 */
function _sumSignature(o: DCSplitSumOptions) {
  return signature({
    params: u32s("vTotal vBase tiles vS vE oR0 d"),
    bindings: {
      ord: { elem: "u32", access: "read" },
      dc: { elem: o.out16 ? "u32" : "f32", access: "read_write" },
      rvec: { elem: "f32", access: "read" },
      perm: { elem: "u32", access: "read", when: o.sort },
    },
  });
}

/** Elements (or 16-bit pairs) of a split tile's rows a workgroup of the sum adds. */
const SUM_BLOCK = 8 * WG;

/** Rank rows of the sum's grid (its workgroups' y stride over the ranks). */
const SUM_RANKS = 64;

/**
 * WGSL of pass `dC split sum`: workgroup (x, y) adds block x of the rows of the tiles of ranks y,
 * y + nwg.y, … (the split ranks come first: it stops at the first unsplit one).
 */
export function dCSplitSumWgsl(o: DCSplitSumOptions): string {
  const VT = o.vocab;
  const row = (pos: string) => o.sort ? `(perm[${pos}] - P.oR0)` : `(${pos} - P.oR0)`;
  // one element (f32) or word (packed 16-bit) of a row at a time: j its index in the row
  const unit = o.out16 ? "P.d / 2u" : "P.d";
  // the row offsets of segment s's tile: its own for s = 0, else the borrowed one
  const at = (s: string) =>
    `${row(`P.vS + select(ord[P.vBase + first + ${s} - 1u], own, ${s} == 0u) * ${VT}u + i`)}`;
  const body = o.out16
    ? `var lo = 0.0;
        var hi = 0.0;
        for (var s = 1u; s < m; s++) {
          let b = ${at("s")} * P.d / 2u + j;
          let w = dc[b];
          lo += from16(w & 0xffffu);
          hi += from16(w >> 16u);
          dc[b] = ${dCInitValueWgsl(o.opts, "(2u * j)", true)};
        }
        let b = ${at("0u")} * P.d / 2u + j;
        let w = dc[b];
        dc[b] = to16(from16(w & 0xffffu) + lo) | (to16(from16(w >> 16u) + hi) << 16u);`
    : `var acc = 0.0;
        for (var s = 1u; s < m; s++) {
          let b = ${at("s")} * P.d + j;
          acc += dc[b];
          dc[b] = ${dCInitValueWgsl(o.opts, "j", false)};
        }
        dc[${at("0u")} * P.d + j] += acc;`;
  return `${_sumSignature(o).wgsl}
${o.out16 ? wgslTo16(o.out16) + wgslFrom16(o.out16) : ""}
${firstEmptyWgsl("ord")}
var<workgroup> s_tile: vec3<u32>;
@compute @workgroup_size(${WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let sr = 2u * P.vTotal + P.vBase;
  for (var r = wg.y; r < P.tiles; r += nwg.y) {
    // the tile's segments m (the split ranks come first: stop at the first unsplit one), its own
    // tile and the rank of the first borrowed one
    if (lid == 0u) {
      var m = 1u;
      if (r + 1u < P.tiles) { m = ord[sr + r + 1u] - ord[sr + r]; }
      var first = 0u;
      if (m > 1u) { first = firstEmpty(P.vTotal, P.vBase, P.tiles) + ord[sr + r] - r; }
      s_tile = vec3<u32>(m, ord[P.vBase + r], first);
    }
    let t = workgroupUniformLoad(&s_tile);
    let m = t.x;
    if (m <= 1u) { break; }
    let own = t.y;
    let first = t.z;
    let units = ${unit};
    let end = min(${VT}u * units, (wg.x + 1u) * ${SUM_BLOCK}u);
    for (var k = wg.x * ${SUM_BLOCK}u + lid; k < end; k += ${WG}u) {
      let i = k / units;
      let j = k % units;
      if (P.vS + own * ${VT}u + i < P.vE) {
        ${body}
      }
    }
    workgroupBarrier(); // s_tile is rewritten for the next tile
  }
}
`;
}

/** The compiled passes. */
export interface DCSplitPasses {
  /**
   * Records pass `dC split plan` after the dC order (kernels/fused/dc_order.ts) filled `ord`: the
   * slot starts over the ranks, the extras added to counter[2].
   */
  plan(o: {
    rec: Recorder;
    ord: TrackedBuffer;
    counter: TrackedBuffer;
    voc: TileSegment[];
    vTotal: number;
    /** Workgroups a walk's segments are sized for (default {@link DC_SPLIT_SLOTS}). */
    slots?: number;
    /** The shortest segment (default {@link DC_SPLIT_MIN}). */
    lMin?: number;
  }): void;
  /** Records pass `dC split sum` after the dC pass (split) and before the target scatter. */
  sum(o: {
    rec: Recorder;
    ord: TrackedBuffer;
    dC: DeviceTensor;
    voc: TileSegment[];
    vTotal: number;
    /** The smoothing row the dC smoothing term wrote (where it exists). */
    rvec?: TrackedBuffer;
    perm?: TrackedBuffer;
  }): void;
}

/** Compiles the split's passes for dC's dtype, the vocab tile, sorting and the loss options. */
export async function prepareDCSplit(
  ctx: GpuContext,
  o: DCSplitSumOptions,
): Promise<DCSplitPasses> {
  const plan = await compileKernel(ctx, PLAN_SIG, dCSplitPlanWgsl(), "dc_split_plan");
  const sumSig = _sumSignature(o);
  const sum = await compileKernel(ctx, sumSig, dCSplitSumWgsl(o), "dc_split_sum");
  const VT = o.vocab;
  return {
    plan({ rec, ord, counter, voc, vTotal, slots, lMin }) {
      rec.pass("dC split plan", (p) => {
        for (const vs of voc) {
          const params = {
            vTotal,
            vBase: vs.base,
            tiles: vs.tiles,
            slots: slots ?? DC_SPLIT_SLOTS,
            lMin: lMin ?? DC_SPLIT_MIN,
            ragged: (vs.end - vs.start) % VT === 0 ? 0 : 1,
          };
          p.dispatch(plan.pipeline, plan.bind(rec, params, { ord, counter }), 1);
        }
      });
    },
    sum({ rec, ord, dC, voc, vTotal, rvec, perm }) {
      rec.pass("dC split sum", (p) => {
        for (const vs of voc) {
          const os = dC.shardOf(vs.start);
          const params = {
            vTotal,
            vBase: vs.base,
            tiles: vs.tiles,
            vS: vs.start,
            vE: vs.end,
            oR0: os.rowStart,
            d: dC.cols,
          };
          // rvec is read only where the smoothing row exists: else any buffer fills its slot
          const bg = sum.bind(rec, params, { ord, dc: os.buffer, rvec: rvec ?? ord, perm });
          const units = VT * (o.out16 ? dC.cols / 2 : dC.cols);
          p.dispatch(sum.pipeline, bg, Math.ceil(units / SUM_BLOCK), Math.min(vs.tiles, SUM_RANKS));
        }
      });
    },
  };
}
