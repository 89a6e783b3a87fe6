/**
 * The `order decision` of the fused backward (kernels/fused/backward.ts): after the filter pass
 * has run in the vocabulary's own order and recorded its entry bits (kernels/fused/filter.ts,
 * FilterPassKernelOptions.entryBits), the sorted order's tile mask is formed from those
 * bits ({@link sortedMaskWgsl}) and the order that keeps fewer tiles by the margin is chosen
 * ({@link orderSelectWgsl}), all on the GPU: the sorted mask replaces the own one, or the
 * permutation is reset to the identity. Why and what it costs: the module doc of filter.ts.
 * @module
 */
import type { TrackedBuffer } from "../../gpu/context.ts";
import { type KernelOf, signature, u32s } from "../../gpu/signature.ts";
import type { BackwardTile } from "./backward_tiles.ts";
import { TILE_COUNT } from "./backward_wgsl.ts";
import type { FilterRecordOptions } from "./filter.ts";

/**
 * The sorted mask's signature: the vocab segment [vS, vE) with its first global tile vBase and
 * `tiles` tiles, vTotal, tTotal, hotWords; perm, the entry bits, maskS, the counters.
 */
export const SORTED_MASK_SIG = signature({
  params: u32s("vS vE vBase vTotal tTotal hotWords tiles"),
  bindings: {
    perm: { elem: "u32", access: "read" },
    hot: { elem: "u32", access: "read" },
    maskS: { elem: "atomic<u32>", access: "read_write" },
    counter: { elem: "atomic<u32>", access: "read_write" },
  },
  layout: { breaks: [6] },
});

/** The order selection's signature: maskWords mask words, v rows; counters, maskS, mask, perm. */
export const ORDER_SELECT_SIG = signature({
  params: { maskWords: "u32", v: "u32" },
  bindings: {
    counter: { elem: "u32", access: "read" },
    maskS: { elem: "u32", access: "read" },
    mask: { elem: "u32", access: "read_write" },
    perm: { elem: "u32", access: "read_write" },
  },
});

/**
 * WGSL of the sorted order's mask, from the filter's entry bits (see
 * FilterPassKernelOptions.entryBits): one thread per (token tile, vocab tile of the sorted
 * order in one segment) keeps the tile when any of its rows perm[p] has its bit set for the token
 * tile; sets the tile's bit in the zeroed `maskS` and counts the kept tiles in counter[1] (integer
 * atomics) ({@link SORTED_MASK_SIG}). Grid: (⌈tiles/64⌉, tTotal).
 */
export function sortedMaskWgsl(tile: BackwardTile): string {
  return `${SORTED_MASK_SIG.wgsl}
${TILE_COUNT.decl}
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  if (lid == 0u) { atomicStore(&s_count, 0u); }
  workgroupBarrier();
  let j = wg.x * 64u + lid;
  let r = wg.y;
  if (j < P.tiles) {
    let p0 = P.vS + j * ${tile.vocab}u;
    let p1 = min(p0 + ${tile.vocab}u, P.vE);
    var kept = false;
    for (var p = p0; p < p1; p++) {
      let row = perm[p];
      if (((hot[r * P.hotWords + (row >> 5u)] >> (row & 31u)) & 1u) != 0u) { kept = true; break; }
    }
    if (kept) {
      let mi = r * P.vTotal + P.vBase + j;
      ${TILE_COUNT.keep("maskS", "      ")}
    }
  }
  ${TILE_COUNT.flush(1)}
}
`;
}

/**
 * The order decision's margin [a, b]: the sorted order is used when it keeps fewer than a/b of
 * the own order's tiles (5% fewer). Reading C through the permutation scatters its rows, and the
 * sort itself takes time, so a tie-level gain is not worth it (on lavapipe, `llm` fixture at
 * 1024×8192×64, a sorted order keeping 0.7% fewer tiles ran the dE pass 30% slower; on the H200
 * at 4096×24,576×2304 sorting keeps 8.6% fewer tiles and was 13% faster).
 */
export const SORT_MARGIN: readonly [number, number] = [19, 20];

/** Whether the order decision takes the sorted order, from the two kept-tile counts. */
export function sortedOrderWins(ownKept: number, sortedKept: number): boolean {
  return SORT_MARGIN[1] * sortedKept < SORT_MARGIN[0] * ownKept;
}

/**
 * WGSL of the order decision: the sorted order is kept when it keeps fewer tiles than the own
 * order by the margin ({@link sortedOrderWins}, counts counter[0] of the filter pass and
 * counter[1] of {@link sortedMaskWgsl}); then mask = maskS, else perm = identity (mask stays the
 * own order's) ({@link ORDER_SELECT_SIG}).
 */
export function orderSelectWgsl(): string {
  return `${ORDER_SELECT_SIG.wgsl}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let sorted = ${SORT_MARGIN[1]}u * counter[1] < ${SORT_MARGIN[0]}u * counter[0];
  for (var i = gid.x; i < max(P.maskWords, P.v); i += nwg.x * 256u) {
    if (sorted) {
      if (i < P.maskWords) { mask[i] = maskS[i]; }
    } else if (i < P.v) {
      perm[i] = i;
    }
  }
}
`;
}

/**
 * Records the `order decision`: the sorted order's mask `maskS` (zeroed) from the entry bits
 * `hot`, then the choice ({@link orderSelectWgsl}): mask = maskS, or perm = identity.
 */
export function recordOrderDecision(
  o: FilterRecordOptions & {
    sortedMask: KernelOf<typeof SORTED_MASK_SIG>;
    orderSelect: KernelOf<typeof ORDER_SELECT_SIG>;
    v: number;
    perm: TrackedBuffer;
    hot: TrackedBuffer;
    maskS: TrackedBuffer;
    /** Bytes of the mask. */
    maskSize: number;
  },
): void {
  const { rec, sortedMask, orderSelect, perm, hot, maskS, mask, counter } = o;
  rec.pass("fused backward order decision", (p) => {
    for (const vs of o.voc) {
      const params = {
        vS: vs.start,
        vE: vs.end,
        vBase: vs.base,
        vTotal: o.vTotal,
        tTotal: o.tTotal,
        hotWords: o.hotWords,
        tiles: vs.tiles,
      };
      const bg = sortedMask.bind(rec, params, { perm, hot, maskS, counter });
      p.dispatch(sortedMask.pipeline, bg, Math.ceil(vs.tiles / 64), o.tTotal);
    }
    const words = o.maskSize / 4;
    p.dispatch(
      orderSelect.pipeline,
      orderSelect.bind(rec, { maskWords: words, v: o.v }, { counter, maskS, mask, perm }),
      Math.min(Math.ceil(Math.max(words, o.v) / 256), 65535),
    );
  });
}
