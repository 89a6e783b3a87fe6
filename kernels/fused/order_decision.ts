/**
 * The `order decision` of the fused backward (kernels/fused/backward.ts): after the filter pass
 * has run in the vocabulary's own order and recorded its entry bits (kernels/fused/filter.ts,
 * FilterPassKernelOptions.entryBits), the sorted order's tile mask is formed from those
 * bits ({@link sortedMaskWgsl}) and the order that keeps fewer tiles by the margin is chosen
 * ({@link orderSelectWgsl}), all on the GPU: the sorted mask replaces the own one, or the
 * permutation is reset to the identity. Why and what it costs: the module doc of filter.ts.
 *
 * With the bound (FusedBackwardOptions.sortBound) the sorted order's work waits for the filter:
 * a token tile's hot rows fill at least ⌈hot rows / VT⌉ vocab tiles in any order, so the sum of
 * those bounds the sorted order's count from below ({@link sortBoundWgsl}); where even the bound
 * would not win by the margin, Ē, the sort keys and the sorted mask do nothing (gated on the GPU,
 * {@link prepareSortBound}; the sort itself runs on the indices in order, its 55 dispatches at
 * |V| = 256,000 cheaper run than gated) and the choice is the own order, as the full decision's
 * would be. Where the own order already keeps its token tiles' hot rows in as few tiles as any
 * order could (the paper's `cce` recipe: token n's peak is row n), that is all the decision costs.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { PassEncoder, Recorder } from "../../gpu/recorder.ts";
import { createTensor } from "../../gpu/tensor.ts";
import { prepareGate } from "../../gpu/gate.ts";
import { compileKernel, type KernelOf, signature, u32s } from "../../gpu/signature.ts";
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
 * The bound's signature: hotWords words of entry bits per token tile; the entry bits, the
 * counters.
 */
export const SORT_BOUND_SIG = signature({
  params: u32s("hotWords"),
  bindings: {
    hot: { elem: "u32", access: "read" },
    counter: { elem: "atomic<u32>", access: "read_write" },
  },
});

/**
 * WGSL of the sorted order's lower bound ({@link SORT_BOUND_SIG}): token tile r's hot rows (the
 * set bits of its entry bits) fill at least ⌈hot rows / VT⌉ vocab tiles in any order, so the
 * sorted order keeps at least the sum of those over the token tiles; one workgroup a token tile
 * adds its term to counter[3] (integer atomics: order-independent). Grid: (tTotal).
 */
export function sortBoundWgsl(tile: BackwardTile): string {
  return `${SORT_BOUND_SIG.wgsl}
var<workgroup> s_hot: atomic<u32>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  if (lid == 0u) { atomicStore(&s_hot, 0u); }
  workgroupBarrier();
  var k = 0u;
  for (var i = lid; i < P.hotWords; i += 256u) { k += countOneBits(hot[wg.x * P.hotWords + i]); }
  if (k != 0u) { atomicAdd(&s_hot, k); }
  workgroupBarrier();
  if (lid == 0u) {
    let tiles = (atomicLoad(&s_hot) + ${tile.vocab - 1}u) / ${tile.vocab}u;
    if (tiles != 0u) { atomicAdd(&counter[3], tiles); }
  }
}
`;
}

/** The bound's verdict's signature: the counters, the flag it writes. */
export const SORT_VERDICT_SIG = signature({
  params: {},
  bindings: {
    counter: { elem: "u32", access: "read_write" },
    flag: { elem: "u32", access: "read_write" },
  },
});

/**
 * WGSL of the bound's verdict (one invocation, {@link SORT_VERDICT_SIG}): flag[0] = 1 where the
 * sorted order could keep fewer tiles than the own order by the margin given its lower bound
 * counter[3] ({@link sortedOrderWins} of the bound), else 0, and then the bound stands in for the
 * sorted order's count (counter[1] = counter[3]): every reader of the two counts takes the own
 * order, as the sorted order's true count, never below its bound, would make it.
 */
export function sortVerdictWgsl(): string {
  return `${SORT_VERDICT_SIG.wgsl}
@compute @workgroup_size(1)
fn main() {
  let worth = ${SORT_MARGIN[1]}u * counter[3] < ${SORT_MARGIN[0]}u * counter[0];
  flag[0] = select(0u, 1u, worth);
  if (!worth) { counter[1] = counter[3]; }
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
 * `hot`, then the choice ({@link orderSelectWgsl}): mask = maskS, or perm = identity. In one
 * pass, or with `maskUnder` the mask in a pass of its own recorded inside it and the choice in
 * another, never gated: where the gate skips the mask, the choice still resets perm.
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
    /** Records the sorted mask's pass gated (the bound's: {@link PreparedSortBound.under}). */
    maskUnder?: (fn: () => void) => void;
  },
): void {
  const { rec, sortedMask, orderSelect, perm, hot, maskS, mask, counter } = o;
  const masks = (p: PassEncoder) => {
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
  };
  const select = (p: PassEncoder) => {
    const words = o.maskSize / 4;
    p.dispatch(
      orderSelect.pipeline,
      orderSelect.bind(rec, { maskWords: words, v: o.v }, { counter, maskS, mask, perm }),
      Math.min(Math.ceil(Math.max(words, o.v) / 256), 65535),
    );
  };
  if (!o.maskUnder) {
    rec.pass("fused backward order decision", (p) => {
      masks(p);
      select(p);
    });
    return;
  }
  o.maskUnder(() => rec.pass("fused backward sorted mask", masks));
  rec.pass("fused backward order decision", select);
}

/** The bound, its verdict's flag and its gate ({@link prepareSortBound}). */
export interface PreparedSortBound {
  /**
   * Records pass `fused backward order bound` after the filter: the sorted order's lower bound
   * from the entry bits `hot` into counter[3] ({@link sortBoundWgsl}), then the verdict into the
   * flag ({@link sortVerdictWgsl}).
   */
  record(
    rec: Recorder,
    o: { hot: TrackedBuffer; counter: TrackedBuffer; tTotal: number; hotWords: number },
  ): void;
  /**
   * Records `fn` with its passes gated by the verdict (gpu/gate.ts): they do their work only
   * where the sorted order could win.
   */
  under(rec: Recorder, fn: () => void): void;
  /** Frees the flag. */
  release(): void;
}

/** Compiles the bound, its verdict and the gate, and makes the flag. */
export async function prepareSortBound(
  ctx: GpuContext,
  tile: BackwardTile,
): Promise<PreparedSortBound> {
  const bound = await compileKernel(ctx, SORT_BOUND_SIG, sortBoundWgsl(tile), "sort_bound");
  const verdict = await compileKernel(ctx, SORT_VERDICT_SIG, sortVerdictWgsl(), "sort_verdict");
  const gate = await prepareGate(ctx);
  const flag = createTensor(ctx, {
    dtype: "u32",
    rows: 1,
    cols: 1,
    role: "workspace",
    label: "sort bound flag",
  });
  const fb = flag.shards[0].buffer;
  return {
    record(rec, o) {
      const { hot, counter } = o;
      rec.pass("fused backward order bound", (p) => {
        p.dispatch(
          bound.pipeline,
          bound.bind(rec, { hotWords: o.hotWords }, { hot, counter }),
          o.tTotal,
        );
        p.dispatch(verdict.pipeline, verdict.bind(rec, undefined, { counter, flag: fb }), 1);
      });
    },
    under(rec, fn) {
      gate.under(rec, { flag: fb, want: 1 }, fn);
    },
    release() {
      flag.destroy();
    },
  };
}
