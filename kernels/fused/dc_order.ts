/**
 * Pass `dC order` of the fused backward (kernels/fused/backward.ts): the order in which the dC pass
 * (kernels/fused/kept_tiles.ts) takes its vocab tiles, the tiles with the most kept token tiles
 * first.
 *
 * The dC pass gives each vocab tile to one workgroup, which walks the tile's kept token tiles one
 * after the other (it owns the tile's dC rows: nothing else adds into them). The walks differ in
 * length (on the `llm` fixture from 1 to all 32 token tiles), and the GPU starts workgroups in
 * index order as earlier ones finish. In the vocabulary's order a long walk that starts late ends
 * last while other SMs idle; longest first (the LPT rule of list scheduling) the pass ends about
 * when the average SM's share of the kept tiles is done (measured on the H100: see
 * docs/performance.md). Which workgroup walks which tile changes no sum's order: the
 * gradients are bitwise the same in any order.
 *
 * Three dispatches over the buffer `ord` (3·vTotal u32: the order, the counts, the ranks):
 * - `count`, a thread per vocab tile (all segments): its kept token tiles, one mask bit per token
 *   tile (the mask of kernels/fused/filter.ts: bit t·vTotal + v); it also zeroes the tile's rank;
 * - `rank`, per vocab segment a workgroup per (256 tiles, 256 others): each thread counts the
 *   others that come before its tile (a larger count, or the same count and a smaller index) and
 *   adds that into the tile's rank (integer atomics: the sum is the same in any order), so a tile's
 *   rank is its position in the segment, larger counts first, ties by index: a permutation, the
 *   same every run;
 * - `place`, a thread per tile of each segment: ord[vBase + rank] = the tile's index in the
 *   segment, which the dC pass reads as its workgroup's tile.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { TileSegment } from "./backward_plan.ts";
import { compileKernel, signature } from "../../gpu/signature.ts";

const WG = 256;

/** The uniform fields of the three dispatches: vocab and token tiles, the segment's tiles. */
const PARAMS = { vTotal: "u32", tTotal: "u32", vBase: "u32", tiles: "u32" } as const;
/** `count`'s signature: the mask, ord. */
const COUNT_SIG = signature({
  params: PARAMS,
  bindings: {
    mask: { elem: "u32", access: "read" },
    ord: { elem: "u32", access: "read_write" },
  },
});
/** `rank`'s: ord, added to atomically. */
const RANK_SIG = signature({
  params: PARAMS,
  bindings: { ord: { elem: "atomic<u32>", access: "read_write" } },
});
/** `place`'s: ord. */
const PLACE_SIG = signature({
  params: PARAMS,
  bindings: { ord: { elem: "u32", access: "read_write" } },
});

/** WGSL of dispatch `count` (grid ⌈vTotal/256⌉). */
export function dCOrderCountWgsl(): string {
  return `${COUNT_SIG.wgsl}
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let v = gid.x;
  if (v >= P.vTotal) { return; }
  var n = 0u;
  for (var t = 0u; t < P.tTotal; t++) {
    let i = t * P.vTotal + v;
    n += (mask[i >> 5u] >> (i & 31u)) & 1u;
  }
  ord[P.vTotal + v] = n;
  ord[2u * P.vTotal + v] = 0u;
}
`;
}

/**
 * WGSL of dispatch `rank` (grid ⌈tiles/256⌉ × ⌈tiles/256⌉ per vocab segment: workgroup (x, y)
 * compares tiles 256x… with tiles 256y…, staged in workgroup memory).
 */
export function dCOrderRankWgsl(): string {
  return `${RANK_SIG.wgsl}
var<workgroup> s_cnt: array<u32, ${WG}>;
@compute @workgroup_size(${WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let cnt = P.vTotal + P.vBase;
  let b = wg.y * ${WG}u;
  s_cnt[lid] = select(0u, atomicLoad(&ord[cnt + min(b + lid, P.tiles - 1u)]), b + lid < P.tiles);
  workgroupBarrier();
  let j = wg.x * ${WG}u + lid;
  if (j >= P.tiles) { return; }
  let mine = atomicLoad(&ord[cnt + j]);
  let m = min(${WG}u, P.tiles - b);
  var r = 0u;
  for (var q = 0u; q < m; q++) {
    let c = s_cnt[q];
    r += select(0u, 1u, c > mine || (c == mine && b + q < j));
  }
  if (r > 0u) { atomicAdd(&ord[2u * P.vTotal + P.vBase + j], r); }
}
`;
}

/** WGSL of dispatch `place` (grid ⌈tiles/256⌉ per vocab segment). */
export function dCOrderPlaceWgsl(): string {
  return `${PLACE_SIG.wgsl}
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let j = gid.x;
  if (j >= P.tiles) { return; }
  ord[P.vBase + ord[2u * P.vTotal + P.vBase + j]] = j;
}
`;
}

/** The compiled pass. */
export interface DCOrderPass {
  /**
   * Records the dispatches: `ord` (dCOrderBytes of kernels/fused/backward_plan.ts) gets the dC
   * pass's order.
   */
  record(o: {
    rec: Recorder;
    mask: TrackedBuffer;
    ord: TrackedBuffer;
    voc: TileSegment[];
    tTotal: number;
    vTotal: number;
  }): void;
}

/** Compiles pass `dC order`. */
export async function prepareDCOrder(ctx: GpuContext): Promise<DCOrderPass> {
  const count = await compileKernel(ctx, COUNT_SIG, dCOrderCountWgsl(), "dc_order_count");
  const rank = await compileKernel(ctx, RANK_SIG, dCOrderRankWgsl(), "dc_order_rank");
  const place = await compileKernel(ctx, PLACE_SIG, dCOrderPlaceWgsl(), "dc_order_place");
  return {
    record({ rec, mask, ord, voc, tTotal, vTotal }) {
      rec.pass("fused backward dC order", (p) => {
        const all = { vTotal, tTotal, vBase: 0, tiles: 0 };
        p.dispatch(
          count.pipeline,
          count.bind(rec, all, { mask, ord }),
          Math.ceil(vTotal / WG),
        );
        const segs = voc.map((vs) => ({
          groups: Math.ceil(vs.tiles / WG),
          u: RANK_SIG.uniform(rec, { vTotal, tTotal, vBase: vs.base, tiles: vs.tiles }),
        }));
        for (const { groups, u } of segs) {
          p.dispatch(rank.pipeline, rank.bind(rec, u, { ord }), groups, groups);
        }
        for (const { groups, u } of segs) {
          p.dispatch(place.pipeline, place.bind(rec, u, { ord }), groups);
        }
      });
    },
  };
}
