/**
 * Vocabulary sorting for the gradient filter: the classifier rows are ordered by their mean logit
 * Ē·C_v (Ē = mean of E over the non-ignored tokens), largest first, so that the few vocabulary
 * entries with large probabilities share vocab tiles and the filter can skip the others. All on
 * the GPU, deterministic:
 *
 * - Ē: a weighted column sum (also used for Σ_n w_n·E_n by kernels/grad_corrections.ts), blocked
 *   into row chunks summed in a fixed order, then chunk partials added in order;
 * - keys: one 64-thread workgroup per classifier row, a tree-reduced dot product;
 * - sort: a bitonic sort of (key, index) u32 pairs, padded to a power of two ≥ {@link SORT_BLOCK}
 *   with sentinels. Stages whose compare distance is < SORT_BLOCK/2 run in workgroup memory (one
 *   dispatch per merge size, plus one for the first log2(SORT_BLOCK) merge sizes); longer
 *   distances run as one global dispatch each: for 2¹⁸ pairs, 55 dispatches. The f32 key is mapped
 *   to a u32 whose ascending order is the descending order of the float, and ties are broken by
 *   the index, so the result is unique and independent of scheduling.
 *
 * Sorting is done within vocabulary *segments* (row ranges that lie in one binding of C and one
 * of dC, see kernels/fused_backward.ts): a vocab tile must not straddle two bindings. With C and
 * dC in one binding each the sort is global.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import { createTensor, type DeviceTensor, type TensorDtype } from "../gpu/tensor.ts";
import type { LceOptions } from "../core/options.ts";
import { dtypeHelpers, enableDirectives, loadF32, wgslStorageType } from "./gemm_codegen.ts";

/** Pairs per workgroup in the local (workgroup-memory) bitonic stages. */
export const SORT_BLOCK = 512;
const SORT_WG = SORT_BLOCK / 2;

/** Length of the pair buffer that sorts `len` pairs: a power of two ≥ {@link SORT_BLOCK}. */
export function paddedSortLength(len: number): number {
  let n = SORT_BLOCK;
  while (n < len) n *= 2;
  return n;
}

const LESS = `fn less(a: vec2<u32>, b: vec2<u32>) -> bool {
  return a.x < b.x || (a.x == b.x && a.y < b.y);
}
`;

/**
 * WGSL of the local bitonic stages. Params: k (merge size), j (first compare distance), initial
 * (1: run every merge size 2..SORT_BLOCK). Bindings: params, pairs.
 */
export function bitonicLocalWgsl(): string {
  return `struct Params { k: u32, j: u32, initial: u32, _a: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read_write> pairs: array<vec2<u32>>;
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

/** WGSL of one global bitonic stage (k, j). Params: k, j, half (pairs / 2). */
export function bitonicGlobalWgsl(): string {
  return `struct Params { k: u32, j: u32, half: u32, _a: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read_write> pairs: array<vec2<u32>>;
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
  const local = await ctx.pipeline(bitonicLocalWgsl(), "bitonic_local");
  const global = await ctx.pipeline(bitonicGlobalWgsl(), "bitonic_global");
  return {
    record(rec, pairs, count, label = "pair sort") {
      if (count < SORT_BLOCK || (count & (count - 1)) !== 0) {
        throw new RangeError(`pair sort: ${count} is not a power of two ≥ ${SORT_BLOCK}`);
      }
      const blocks = count / SORT_BLOCK;
      rec.pass(label, (p) => {
        const u0 = rec.uniform(new Uint32Array([0, 0, 1, 0]), "sort params");
        p.dispatch(local, rec.bindGroup(local, [u0, pairs]), blocks);
        for (let k = 2 * SORT_BLOCK; k <= count; k *= 2) {
          for (let j = k / 2; j >= SORT_BLOCK; j /= 2) {
            const u = rec.uniform(new Uint32Array([k, j, count / 2, 0]), "sort params");
            p.dispatch(
              global,
              rec.bindGroup(global, [u, pairs]),
              Math.min(Math.ceil(count / 2 / 256), 65535),
            );
          }
          const u = rec.uniform(new Uint32Array([k, SORT_BLOCK / 2, 0, 0]), "sort params");
          p.dispatch(local, rec.bindGroup(local, [u, pairs]), blocks);
        }
      });
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Weighted column sums.

/** Rows summed by one pass-1 workgroup of the weighted column sum. */
export const COLSUM_CHUNK_ROWS = 256;
const COLSUM_WG = 64;

/**
 * How the rows of a weighted column sum are weighted: `vector` by an f32 vector ω_r, `validMean`
 * by 1/count for non-ignored rows and 0 for ignored ones (Ē).
 */
export type ColumnWeights = "vector" | "validMean";

/**
 * WGSL of pass 1: partial[chunk·d + col] = Σ_{r in chunk} ω_r·X[r, col], rows in order.
 * Params: rows, rowStart, d, chunkBase. Bindings: params, x shard, weights, targets, partials.
 */
export function weightedColumnPartialWgsl(
  o: { dtype: TensorDtype; weights: ColumnWeights; ignoreIndex: number },
): string {
  const wt = o.weights === "vector"
    ? "wts[row]"
    : `select(1.0, 0.0, targets[row] == ${o.ignoreIndex})`;
  return `${enableDirectives([o.dtype])}
struct Params { rows: u32, rowStart: u32, d: u32, chunkBase: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<${wgslStorageType(o.dtype)}>;
@group(0) @binding(2) var<storage, read> wts: array<f32>;
@group(0) @binding(3) var<storage, read> targets: array<i32>;
@group(0) @binding(4) var<storage, read_write> partials: array<f32>;
${dtypeHelpers([{ name: "x", dtype: o.dtype }])}
@compute @workgroup_size(${COLSUM_WG})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
  let col = gid.x;
  if (col >= P.d) { return; }
  let r0 = wg.y * ${COLSUM_CHUNK_ROWS}u;
  let r1 = min(r0 + ${COLSUM_CHUNK_ROWS}u, P.rows);
  var s = 0.0;
  for (var r = r0; r < r1; r++) {
    let row = P.rowStart + r;
    let w = ${wt};
    if (w != 0.0) { s = fma(w, ${loadF32("x", o.dtype, "r * P.d + col")}, s); }
  }
  partials[(P.chunkBase + wg.y) * P.d + col] = s;
}
`;
}

/**
 * WGSL of pass 2: out[col] = scale·Σ_chunk partial (in chunk order), divided by count[0] for
 * `validMean`. Params: d, chunks, scale. Bindings: params, partials, count, out.
 */
export function weightedColumnFinalWgsl(o: { weights: ColumnWeights }): string {
  return `struct Params { d: u32, chunks: u32, scale: f32, _a: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<storage, read> count: array<f32>;
@group(0) @binding(3) var<storage, read_write> outp: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let col = gid.x;
  if (col >= P.d) { return; }
  var s = 0.0;
  for (var j = 0u; j < P.chunks; j++) { s += partials[j * P.d + col]; }
  outp[col] = ${o.weights === "validMean" ? "P.scale * s / max(count[0], 1.0)" : "P.scale * s"};
}
`;
}

/** Arguments of {@link PreparedWeightedColumnSum.record}. */
export interface WeightedColumnSumArgs {
  /** The matrix (rows sharded). */
  x: DeviceTensor;
  /** Row weights ω (n×1 f32, one shard) for `vector`. */
  weights?: DeviceTensor;
  /** Targets (n×1 i32, one shard) for `validMean`. */
  targets?: DeviceTensor;
  /** Count of non-ignored rows (1×1 f32) for `validMean`. */
  count?: DeviceTensor;
  /** Output, d×1 f32 in one shard. */
  out: DeviceTensor;
  /** Factor applied to the sum (default 1). */
  scale?: number;
}

/** A compiled weighted column sum out = scale·Σ_r ω_r·X_r (deterministic, see module doc). */
export interface PreparedWeightedColumnSum {
  record(rec: Recorder, a: WeightedColumnSumArgs): void;
  /** Bytes of the partials workspace for a matrix with these shard row counts and d columns. */
  workspaceBytes(shardRows: number[], d: number): number;
}

/** Compiles a weighted column sum for a dtype of X. */
export async function prepareWeightedColumnSum(
  ctx: GpuContext,
  o: { dtype: TensorDtype; weights: ColumnWeights; ignoreIndex: number },
): Promise<PreparedWeightedColumnSum> {
  const p1 = await ctx.pipeline(weightedColumnPartialWgsl(o), "weighted_colsum_partial");
  const p2 = await ctx.pipeline(weightedColumnFinalWgsl(o), "weighted_colsum_final");
  const chunksOf = (rows: number[]) =>
    rows.reduce((s, r) => s + Math.max(1, Math.ceil(r / COLSUM_CHUNK_ROWS)), 0);
  return {
    workspaceBytes: (rows, d) => chunksOf(rows) * d * 4,
    record(rec, a) {
      const d = a.x.cols;
      if (a.x.dtype !== o.dtype || a.out.rows * a.out.cols !== d || a.out.shards.length !== 1) {
        throw new RangeError(`weighted column sum: X ${a.x.dtype} ${a.x.rows}×${d}`);
      }
      const chunks = chunksOf(a.x.shards.map((s) => s.rows));
      const partials = ctx.createBuffer({
        size: chunks * d * 4,
        role: "workspace",
        label: "weighted column sum partials",
      });
      const dummy = a.weights ?? a.targets ?? a.out;
      const wts = (a.weights ?? dummy).shards[0].buffer;
      const tg = (a.targets ?? dummy).shards[0].buffer;
      const cnt = (a.count ?? dummy).shards[0].buffer;
      if (o.weights === "vector" && !a.weights) throw new RangeError("weights missing");
      if (o.weights === "validMean" && (!a.targets || !a.count)) {
        throw new RangeError("targets and count missing");
      }
      rec.pass("weighted column sum", (p) => {
        let base = 0;
        for (const s of a.x.shards) {
          const nc = Math.max(1, Math.ceil(s.rows / COLSUM_CHUNK_ROWS));
          const u = rec.uniform(new Uint32Array([s.rows, s.rowStart, d, base]), "colsum params");
          p.dispatch(
            p1,
            rec.bindGroup(p1, [u, s.buffer, wts, tg, partials]),
            Math.ceil(d / COLSUM_WG),
            nc,
          );
          base += nc;
        }
        const words = new Uint32Array([d, chunks, 0, 0]);
        new Float32Array(words.buffer)[2] = a.scale ?? 1;
        const u = rec.uniform(words, "colsum params");
        p.dispatch(
          p2,
          rec.bindGroup(p2, [u, partials, cnt, a.out.shards[0].buffer]),
          Math.ceil(d / 64),
        );
      });
      rec.release(partials);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Keys and the vocabulary sort.

const KEY_WG = 64;

/**
 * WGSL of the sort keys: keys[rowStart + r] = Ē·C_r as an order-reversing u32 (ascending u32 =
 * descending float). Params: rows, rowStart, d. Bindings: params, C shard, Ē, keys.
 */
export function sortKeysWgsl(dtype: TensorDtype): string {
  return `${enableDirectives([dtype])}
struct Params { rows: u32, rowStart: u32, d: u32, _a: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> c: array<${wgslStorageType(dtype)}>;
@group(0) @binding(2) var<storage, read> ebar: array<f32>;
@group(0) @binding(3) var<storage, read_write> keys: array<u32>;
${dtypeHelpers([{ name: "c", dtype }])}
var<workgroup> red: array<f32, ${KEY_WG}>;
@compute @workgroup_size(${KEY_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var r = wg.x; r < P.rows; r += nwg.x) {
    var acc = 0.0;
    for (var k = lid; k < P.d; k += ${KEY_WG}u) {
      acc = fma(${loadF32("c", dtype, "r * P.d + k")}, ebar[k], acc);
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var w = ${KEY_WG / 2}u; w > 0u; w >>= 1u) {
      if (lid < w) { red[lid] += red[lid + w]; }
      workgroupBarrier();
    }
    if (lid == 0u) {
      let b = bitcast<u32>(red[0] + 0.0);
      // ascending order of the float ↔ ascending u32 of b ^ (sign ? ~0 : 0x80000000); reversed.
      let asc = select(b ^ 0x80000000u, ~b, (b & 0x80000000u) != 0u);
      keys[P.rowStart + r] = ~asc;
    }
    workgroupBarrier();
  }
}
`;
}

/**
 * WGSL filling the pair buffer of one segment: pairs[i] = (keys[start + i], start + i) for
 * i < len, sentinels after. Params: start, len, count. Bindings: params, keys, pairs.
 */
export function fillPairsWgsl(): string {
  return `struct Params { start: u32, len: u32, count: u32, _a: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> keys: array<u32>;
@group(0) @binding(2) var<storage, read_write> pairs: array<vec2<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < P.count; i += nwg.x * 256u) {
    var v = vec2<u32>(0xffffffffu, 0xffffffffu);
    if (i < P.len) { v = vec2<u32>(keys[P.start + i], P.start + i); }
    pairs[i] = v;
  }
}
`;
}

/** WGSL writing perm[start + i] = pairs[i].y for i < len. Bindings: params, pairs, perm. */
export function writePermWgsl(): string {
  return `struct Params { start: u32, len: u32, _a: u32, _b: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> pairs: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> perm: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < P.len; i += nwg.x * 256u) { perm[P.start + i] = pairs[i].y; }
}
`;
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
  /** Output: v u32, one binding; perm[position] = vocabulary row. */
  perm: TrackedBuffer;
  /** Segments covering [0, v) in order (default: one). */
  segments?: VocabSegment[];
}

/** A compiled vocabulary sort. */
export interface PreparedVocabSort {
  /** Records Ē, the keys and the per-segment sorts; workspaces are released after submission. */
  record(rec: Recorder, a: VocabSortArgs): void;
  /** Workspace bytes of one record call (Ē, its partials, keys, pairs). */
  workspaceBytes(eShardRows: number[], v: number, d: number, segments?: VocabSegment[]): number;
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
  const keysP = await ctx.pipeline(sortKeysWgsl(o.dtype), "vocab_sort_keys");
  const fill = await ctx.pipeline(fillPairsWgsl(), "vocab_sort_fill");
  const write = await ctx.pipeline(writePermWgsl(), "vocab_sort_write");
  const sort = await preparePairSort(ctx);
  const maxSeg = (v: number, segs?: VocabSegment[]) =>
    Math.max(...(segs ?? [{ start: 0, end: v }]).map((s) => s.end - s.start));
  return {
    workspaceBytes(eRows, v, d, segs) {
      return mean.workspaceBytes(eRows, d) + Math.ceil(d * 4 / 16) * 16 + v * 4 +
        paddedSortLength(maxSeg(v, segs)) * 8;
    },
    record(rec, a) {
      const { c } = a;
      const v = c.rows, d = c.cols;
      const segs = a.segments ?? [{ start: 0, end: v }];
      const ebar = createTensor(ctx, {
        dtype: "f32",
        rows: d,
        cols: 1,
        role: "workspace",
        label: "mean embedding",
      });
      mean.record(rec, { x: a.e, targets: a.targets, count: a.count, out: ebar });
      const keys = ctx.createBuffer({ size: v * 4, role: "workspace", label: "sort keys" });
      rec.pass("vocab sort keys", (p) => {
        for (const s of c.shards) {
          const u = rec.uniform(new Uint32Array([s.rows, s.rowStart, d, 0]), "keys params");
          p.dispatch(
            keysP,
            rec.bindGroup(keysP, [u, s.buffer, ebar.shards[0].buffer, keys]),
            Math.min(s.rows, 65535),
          );
        }
      });
      const count = paddedSortLength(maxSeg(v, segs));
      const pairs = ctx.createBuffer({ size: count * 8, role: "workspace", label: "sort pairs" });
      for (const seg of segs) {
        const len = seg.end - seg.start;
        const n = paddedSortLength(len);
        rec.pass("vocab sort fill", (p) => {
          const u = rec.uniform(new Uint32Array([seg.start, len, n, 0]), "fill params");
          p.dispatch(fill, rec.bindGroup(fill, [u, keys, pairs]), Math.min(n / 256, 65535));
        });
        sort.record(rec, pairs, n, "vocab sort");
        rec.pass("vocab sort write", (p) => {
          const u = rec.uniform(new Uint32Array([seg.start, len, 0, 0]), "write params");
          p.dispatch(
            write,
            rec.bindGroup(write, [u, pairs, a.perm]),
            Math.min(Math.ceil(len / 256), 65535),
          );
        });
      }
      rec.release(ebar.shards[0].buffer, keys, pairs);
    },
  };
}
