/**
 * Vocabulary sorting for the gradient filter: the classifier rows are ordered by their mean logit
 * Ē·C_v (Ē = mean of E over the non-ignored tokens), largest first, so that the few vocabulary
 * entries with large probabilities share vocab tiles and the filter can skip the others. All on
 * the GPU, deterministic, and in place in the permutation buffer (v u32, the output): besides it
 * the sort needs only Ē, its column partials and two words.
 *
 * - Ē: a weighted column sum (kernels/column_sum.ts, also used for Σ_n w_n·E_n by
 *   kernels/fused/corrections.ts), blocked into row chunks summed in a fixed order, then chunk
 *   partials added in order;
 * - keys (kernels/fused/sort_keys.ts): each classifier row's dot product with Ē, summed in a
 *   fixed order and written as f32 bits into the permutation buffer; the largest and smallest key
 *   are kept with integer atomics (max of an order-preserving u32 image: order-independent, so
 *   deterministic);
 * - packing: each key is quantised linearly between the smallest and the largest key to the
 *   32 − b high bits of a u32 (largest key → 0) whose b low bits hold the row's index in its
 *   segment (b = ⌈log₂ of the longest segment⌉: 18 bits of index and 14 of key, 16,384 levels, at
 *   |V| = 256,000); ties, that is keys within one level, keep index order;
 * - sort: an in-place bitonic sort of those u32 words (ascending), any length: the network of
 *   the next power of two with every comparator pointing up (the first stage of each merge
 *   compares mirrored positions), so that the missing elements act as +∞ and never move. Stages
 *   whose compare distance is < SORT_BLOCK/2 run in workgroup memory (one dispatch per merge
 *   size, plus one for the first log2(SORT_BLOCK) merge sizes); longer distances run as one
 *   global dispatch each: for 2¹⁸ words, 55 dispatches;
 * - unpacking: perm[i] = segment start + the index bits.
 *
 * The packed words are distinct (their index bits are), so the order is unique and independent of
 * scheduling, and the result is a permutation whatever the keys (NaN included). Quantising the
 * key only changes the order among rows whose mean logits lie within (max − min)/2^(32−b) of each
 * other, which does not matter to the filter: it asks which rows share a 64-row tile.
 *
 * Sorting is done within vocabulary *segments* (row ranges that lie in one binding of C and one
 * of dC, see kernels/fused/backward.ts): a vocab tile must not straddle two bindings. With C and
 * dC in one binding each the sort is global.
 *
 * The pair sort (64-bit (key, value) pairs in a power-of-two buffer) is kept for the target sort
 * of kernels/fused/corrections.ts (n pairs).
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor, type TensorDtype } from "../../gpu/tensor.ts";
import type { LceOptions } from "../../core/options.ts";
import { columnPartialsBytes, prepareWeightedColumnSum } from "../column_sum.ts";
import { compileKernel, signature } from "../../gpu/signature.ts";
import { ASC, prepareSortKeys } from "./sort_keys.ts";

/** Pairs per workgroup in the local (workgroup-memory) bitonic stages. */
export const SORT_BLOCK = 512;
const SORT_WG = SORT_BLOCK / 2;

/** Length of the pair buffer that sorts `len` pairs: a power of two ≥ {@link SORT_BLOCK}. */
export function paddedSortLength(len: number): number {
  let n = SORT_BLOCK;
  while (n < len) n *= 2;
  return n;
}

/** The local pair stages' signature: k (merge size), j (first compare distance), initial. */
const BITONIC_LOCAL_SIG = signature({
  params: { k: "u32", j: "u32", initial: "u32" },
  bindings: { pairs: { elem: "vec2<u32>", access: "read_write" } },
});
/** One global pair stage's: k, j, half (pairs / 2). */
const BITONIC_GLOBAL_SIG = signature({
  params: { k: "u32", j: "u32", half: "u32" },
  bindings: { pairs: { elem: "vec2<u32>", access: "read_write" } },
});

const LESS = `fn less(a: vec2<u32>, b: vec2<u32>) -> bool {
  return a.x < b.x || (a.x == b.x && a.y < b.y);
}
`;

/**
 * WGSL of the local bitonic stages ({@link BITONIC_LOCAL_SIG}; initial 1: run every merge size
 * 2..SORT_BLOCK).
 */
export function bitonicLocalWgsl(): string {
  return `${BITONIC_LOCAL_SIG.wgsl}
var<workgroup> s: array<vec2<u32>, ${SORT_BLOCK}>;
${LESS}
fn cmp_swap(i: u32, base: u32, k: u32, j: u32) {
  let l = 2u * j * (i / j) + (i % j);
  let r = l + j;
  let up = ((base + l) & k) == 0u;
  let a = s[l];
  let b = s[r];
  if (select(less(a, b), less(b, a), up)) {
    s[l] = b;
    s[r] = a;
  }
}
@compute @workgroup_size(${SORT_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let base = wg.x * ${SORT_BLOCK}u;
  s[lid] = pairs[base + lid];
  s[lid + ${SORT_WG}u] = pairs[base + lid + ${SORT_WG}u];
  workgroupBarrier();
  if (P.initial != 0u) {
    for (var k = 2u; k <= ${SORT_BLOCK}u; k <<= 1u) {
      for (var j = k >> 1u; j > 0u; j >>= 1u) {
        cmp_swap(lid, base, k, j);
        workgroupBarrier();
      }
    }
  } else {
    for (var j = P.j; j > 0u; j >>= 1u) {
      cmp_swap(lid, base, P.k, j);
      workgroupBarrier();
    }
  }
  pairs[base + lid] = s[lid];
  pairs[base + lid + ${SORT_WG}u] = s[lid + ${SORT_WG}u];
}
`;
}

/** WGSL of one global bitonic stage ({@link BITONIC_GLOBAL_SIG}). */
export function bitonicGlobalWgsl(): string {
  return `${BITONIC_GLOBAL_SIG.wgsl}
${LESS}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < P.half; i += nwg.x * 256u) {
    let l = 2u * P.j * (i / P.j) + (i % P.j);
    let r = l + P.j;
    let up = (l & P.k) == 0u;
    let a = pairs[l];
    let b = pairs[r];
    if (select(less(a, b), less(b, a), up)) {
      pairs[l] = b;
      pairs[r] = a;
    }
  }
}
`;
}

/** A compiled bitonic sort of (key, value) u32 pairs, ascending by key then value. */
export interface PreparedPairSort {
  /**
   * Records the sort of `pairs` (`count` vec2<u32> entries, a power of two ≥ SORT_BLOCK) as one
   * pass. Pad unused entries with (0xFFFFFFFF, 0xFFFFFFFF) to keep them last.
   */
  record(rec: Recorder, pairs: TrackedBuffer, count: number, label?: string): void;
}

/** Compiles the pair sort. */
export async function preparePairSort(ctx: GpuContext): Promise<PreparedPairSort> {
  const local = await compileKernel(ctx, BITONIC_LOCAL_SIG, bitonicLocalWgsl(), "bitonic_local");
  const global = await compileKernel(
    ctx,
    BITONIC_GLOBAL_SIG,
    bitonicGlobalWgsl(),
    "bitonic_global",
  );
  return {
    record(rec, pairs, count, label = "pair sort") {
      if (count < SORT_BLOCK || (count & (count - 1)) !== 0) {
        throw new RangeError(`pair sort: ${count} is not a power of two ≥ ${SORT_BLOCK}`);
      }
      const blocks = count / SORT_BLOCK;
      rec.pass(label, (p) => {
        const all = local.bind(rec, { k: 0, j: 0, initial: 1 }, { pairs });
        p.dispatch(local.pipeline, all, blocks);
        for (let k = 2 * SORT_BLOCK; k <= count; k *= 2) {
          for (let j = k / 2; j >= SORT_BLOCK; j /= 2) {
            p.dispatch(
              global.pipeline,
              global.bind(rec, { k, j, half: count / 2 }, { pairs }),
              Math.min(Math.ceil(count / 2 / 256), 65535),
            );
          }
          const bg = local.bind(rec, { k, j: SORT_BLOCK / 2, initial: 0 }, { pairs });
          p.dispatch(local.pipeline, bg, blocks);
        }
      });
    },
  };
}

// ---------------------------------------------------------------------------------------------
// In-place sort of u32 words, any length.

/**
 * The local u32 stages' signature: the range [off, off + len) of data, j (0: merge sizes
 * 2..SORT_BLOCK, each from its mirrored first stage; else the plain stages j, j/2, …, 1).
 */
const U32_LOCAL_SIG = signature({
  params: { off: "u32", len: "u32", j: "u32" },
  bindings: { data: { elem: "u32", access: "read_write" } },
});
/** One global u32 stage's: the range, j, mirrored, half (comparators: the padded length / 2). */
const U32_GLOBAL_SIG = signature({
  params: { off: "u32", len: "u32", j: "u32", mirrored: "u32", half: "u32" },
  bindings: { data: { elem: "u32", access: "read_write" } },
});

/**
 * WGSL of the local stages of the in-place u32 sort: a workgroup loads SORT_BLOCK words of the
 * range (+∞ past its end), runs stages and writes back the words inside the range.
 */
export function u32SortLocalWgsl(): string {
  return `${U32_LOCAL_SIG.wgsl}
var<workgroup> s: array<u32, ${SORT_BLOCK}>;
// comparator i of a stage at distance j; mirrored (first stage of merge size k = 2j) or plain
fn stage(i: u32, j: u32, mirrored: bool) {
  let l = 2u * j * (i / j) + (i % j);
  let r = select(l + j, l + 2u * j - 1u - 2u * (i % j), mirrored);
  let a = s[l];
  let b = s[r];
  if (b < a) {
    s[l] = b;
    s[r] = a;
  }
}
@compute @workgroup_size(${SORT_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let base = wg.x * ${SORT_BLOCK}u;
  for (var h = 0u; h < 2u; h++) {
    let i = lid + h * ${SORT_WG}u;
    var x = 0xffffffffu;
    if (base + i < P.len) { x = data[P.off + base + i]; }
    s[i] = x;
  }
  workgroupBarrier();
  if (P.j == 0u) {
    for (var k = 2u; k <= ${SORT_BLOCK}u; k <<= 1u) {
      stage(lid, k >> 1u, true);
      workgroupBarrier();
      for (var j = k >> 2u; j > 0u; j >>= 1u) {
        stage(lid, j, false);
        workgroupBarrier();
      }
    }
  } else {
    for (var j = P.j; j > 0u; j >>= 1u) {
      stage(lid, j, false);
      workgroupBarrier();
    }
  }
  for (var h = 0u; h < 2u; h++) {
    let i = lid + h * ${SORT_WG}u;
    if (base + i < P.len) { data[P.off + base + i] = s[i]; }
  }
}
`;
}

/**
 * WGSL of one global stage of the in-place u32 sort: distance j, mirrored (the first stage of
 * merge size 2j) or plain; comparators whose upper word lies past the range are skipped (it is
 * +∞).
 */
export function u32SortGlobalWgsl(): string {
  return `${U32_GLOBAL_SIG.wgsl}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < P.half; i += nwg.x * 256u) {
    let l = 2u * P.j * (i / P.j) + (i % P.j);
    let r = select(l + P.j, l + 2u * P.j - 1u - 2u * (i % P.j), P.mirrored != 0u);
    if (r < P.len) {
      let a = data[P.off + l];
      let b = data[P.off + r];
      if (b < a) {
        data[P.off + l] = b;
        data[P.off + r] = a;
      }
    }
  }
}
`;
}

/** A compiled in-place ascending sort of a range of u32 words (no workspace). */
export interface PreparedU32Sort {
  /** Records the sort of words [off, off + len) of `data` as one pass. */
  record(rec: Recorder, data: TrackedBuffer, off: number, len: number, label?: string): void;
}

/** Compiles the u32 sort. */
export async function prepareU32Sort(ctx: GpuContext): Promise<PreparedU32Sort> {
  const local = await compileKernel(ctx, U32_LOCAL_SIG, u32SortLocalWgsl(), "u32_sort_local");
  const global = await compileKernel(ctx, U32_GLOBAL_SIG, u32SortGlobalWgsl(), "u32_sort_global");
  return {
    record(rec, data, off, len, label = "u32 sort") {
      if (len <= 1) return;
      const count = paddedSortLength(len);
      const blocks = Math.ceil(len / SORT_BLOCK);
      if (blocks > 65535) throw new RangeError(`u32 sort: ${len} words`);
      rec.pass(label, (p) => {
        p.dispatch(local.pipeline, local.bind(rec, { off, len, j: 0 }, { data }), blocks);
        for (let k = 2 * SORT_BLOCK; k <= count; k *= 2) {
          for (let j = k / 2; j >= SORT_BLOCK; j /= 2) {
            const params = { off, len, j, mirrored: j === k / 2 ? 1 : 0, half: count / 2 };
            p.dispatch(
              global.pipeline,
              global.bind(rec, params, { data }),
              Math.min(Math.ceil(count / 2 / 256), 65535),
            );
          }
          const bg = local.bind(rec, { off, len, j: SORT_BLOCK / 2 }, { data });
          p.dispatch(local.pipeline, bg, blocks);
        }
      });
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Keys and the vocabulary sort.

/** Packing's signature: the segment [start, start + len), shift, qmax; perm, the key range. */
const PACK_SIG = signature({
  params: { start: "u32", len: "u32", shift: "u32", qmax: "u32" },
  bindings: {
    perm: { elem: "u32", access: "read_write" },
    range: { elem: "u32", count: 2, access: "read" },
  },
});

/** Unpacking's signature: the segment and the index bits' mask; perm. */
const UNPACK_SIG = signature({
  params: { start: "u32", len: "u32", mask: "u32" },
  bindings: { perm: { elem: "u32", access: "read_write" } },
});

/**
 * WGSL packing a segment's keys in place: perm[start + i] = (q << shift) | i with q the key's
 * level between the largest (q = 0) and the smallest key (q = qmax); q = 0 for every row where
 * no key was taken (the range still cleared: range[0] = 0, which no key's image is).
 */
export function packKeysWgsl(): string {
  return `${PACK_SIG.wgsl}
${ASC}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let hi = unasc(range[0]);
  let lo = unasc(~range[1]);
  for (var i = gid.x; i < P.len; i += nwg.x * 256u) {
    let key = bitcast<f32>(perm[P.start + i]);
    var t = 0.0;
    if (range[0] != 0u && hi > lo) { t = clamp((hi - key) / (hi - lo), 0.0, 1.0); }
    let q = min(u32(t * f32(P.qmax)), P.qmax);
    perm[P.start + i] = (q << P.shift) | i;
  }
}
`;
}

/** WGSL unpacking a sorted segment: perm[start + i] = start + (perm[start + i] & mask). */
export function unpackPermWgsl(): string {
  return `${UNPACK_SIG.wgsl}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < P.len; i += nwg.x * 256u) {
    perm[P.start + i] = P.start + (perm[P.start + i] & P.mask);
  }
}
`;
}

/** Index bits b of the packed sort words for segments of at most `len` rows (2^b ≥ len). */
export function sortIndexBits(len: number): number {
  let b = 0;
  while (2 ** b < len) b++;
  return b;
}

/** A range of vocabulary rows sorted among themselves: [start, end). */
export interface VocabSegment {
  start: number;
  end: number;
}

/** Arguments of {@link PreparedVocabSort.record}. */
export interface VocabSortArgs {
  e: DeviceTensor;
  c: DeviceTensor;
  targets: DeviceTensor;
  /** Count of non-ignored tokens (1×1 f32, from the forward). */
  count: DeviceTensor;
  /** Output: v u32, one binding; perm[position] = vocabulary row. Also the sort's work area. */
  perm: TrackedBuffer;
  /** Segments covering [0, v) in order (default: one). */
  segments?: VocabSegment[];
  /**
   * Buffer for the column partials of Ē (≥ {@link columnPartialsBytes} of E's shards), e.g. shared
   * with other column sums; default: allocated by the call.
   */
  partials?: TrackedBuffer;
  /**
   * Records Ē and the keys inside it (the order decision's bound gates them: kernels/fused/
   * order_decision.ts). Where they do nothing the key range stays cleared, every row packs to
   * level 0 ahead of its index, and the sort leaves perm the identity.
   */
  keysUnder?: (fn: () => void) => void;
}

/** A compiled vocabulary sort. */
export interface PreparedVocabSort {
  /** Records Ē, the keys and the per-segment sorts; workspaces are released after submission. */
  record(rec: Recorder, a: VocabSortArgs): void;
  /** {@link vocabSortWorkspaceBytes}. */
  workspaceBytes(eShardRows: number[], d: number, ownPartials?: boolean): number;
}

/** Bytes of the key range buffer (two u32, padded). */
const RANGE_BYTES = 16;

/**
 * Workspace bytes of one vocab sort besides `perm`: Ē (d f32), its column partials (unless the
 * caller supplies them: `ownPartials` false) and the key range.
 */
export function vocabSortWorkspaceBytes(
  eShardRows: number[],
  d: number,
  ownPartials = true,
): number {
  return (ownPartials ? columnPartialsBytes(eShardRows, d) : 0) + Math.ceil(d * 4 / 16) * 16 +
    RANGE_BYTES;
}

/** Compiles the vocabulary sort for the problem's dtype. */
export async function prepareVocabSort(
  ctx: GpuContext,
  o: { dtype: TensorDtype; opts: LceOptions },
): Promise<PreparedVocabSort> {
  const mean = await prepareWeightedColumnSum(ctx, {
    dtype: o.dtype,
    weights: "validMean",
    ignoreIndex: o.opts.ignoreIndex,
  });
  const keys = await prepareSortKeys(ctx, o.dtype);
  const pack = await compileKernel(ctx, PACK_SIG, packKeysWgsl(), "vocab_sort_pack");
  const unpack = await compileKernel(ctx, UNPACK_SIG, unpackPermWgsl(), "vocab_sort_unpack");
  const sort = await prepareU32Sort(ctx);
  return {
    workspaceBytes: vocabSortWorkspaceBytes,
    record(rec, a) {
      const { c } = a;
      const v = c.rows, d = c.cols;
      const segs = a.segments ?? [{ start: 0, end: v }];
      if (a.perm.size < v * 4) {
        throw new RangeError(`vocab sort: perm of ${a.perm.size} bytes for ${v} rows`);
      }
      const ebar = createTensor(ctx, {
        dtype: "f32",
        rows: d,
        cols: 1,
        role: "workspace",
        label: "mean embedding",
      });
      const range = ctx.createBuffer({ size: RANGE_BYTES, role: "workspace", label: "key range" });
      rec.clear(range);
      (a.keysUnder ?? ((fn) => fn()))(() => {
        mean.record(rec, {
          x: a.e,
          targets: a.targets,
          count: a.count,
          out: ebar,
          partials: a.partials,
        });
        keys.record(rec, { c, ebar: ebar.shards[0].buffer, perm: a.perm, range });
      });
      const bits = sortIndexBits(Math.max(...segs.map((g) => g.end - g.start)));
      const grid = (len: number) => Math.max(1, Math.min(Math.ceil(len / 256), 65535));
      for (const seg of segs) {
        const len = seg.end - seg.start;
        rec.pass("vocab sort pack", (p) => {
          const params = { start: seg.start, len, shift: bits, qmax: 2 ** (32 - bits) - 1 };
          p.dispatch(pack.pipeline, pack.bind(rec, params, { perm: a.perm, range }), grid(len));
        });
        sort.record(rec, a.perm, seg.start, len, "vocab sort");
        rec.pass("vocab sort unpack", (p) => {
          const params = { start: seg.start, len, mask: 2 ** bits - 1 };
          p.dispatch(unpack.pipeline, unpack.bind(rec, params, { perm: a.perm }), grid(len));
        });
      }
      rec.release(ebar.shards[0].buffer, range);
    },
  };
}
