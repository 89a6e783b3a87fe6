/**
 * The keys of the vocabulary sort (kernels/fused/vocab_order.ts): each classifier row's mean
 * logit Ē·C_v as f32 bits, written into the permutation buffer, and the range of the keys (the
 * largest and smallest, as integer atomics on an order-preserving u32 image: order-independent,
 * so deterministic). Two kernels with the same results up to the order of their sums:
 *
 * - {@link sortKeysVecWgsl} where a row is a whole number of 16-byte vectors
 *   ({@link sortKeysVecFits}): 32 threads a row, each reading 16 bytes at a time, 8 rows a
 *   workgroup (at the paper's shape C is 1.1 GiB, so the pass is a read of C);
 * - {@link sortKeysWgsl} otherwise: one 64-thread workgroup a row, one element a thread at a time.
 *
 * Each sums in a fixed order (a thread's elements in order, then a fixed tree), so the keys are
 * bitwise reproducible.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor, TensorDtype } from "../../gpu/tensor.ts";
import { compileKernel, signature } from "../../gpu/signature.ts";
import { dtypeHelpers, enableDirectives, loadF32, wgslStorageType } from "../wgsl_common.ts";

const KEY_WG = 64;
/** Workgroups of the keys pass (each walks rows; one pair of atomics per workgroup). */
const KEY_GRID = 8192;

/** The order-preserving u32 image of an f32 (ascending float ↔ ascending u32), in WGSL. */
export const ASC =
  `fn asc(b: u32) -> u32 { return select(b ^ 0x80000000u, ~b, (b & 0x80000000u) != 0u); }
fn unasc(a: u32) -> f32 { return bitcast<f32>(select(~a, a ^ 0x80000000u, (a & 0x80000000u) != 0u)); }
`;

/** The keys' signature: a C shard (`rows` rows from `rowStart`, d wide), Ē, perm, range. */
function _keysSignature(dtype: TensorDtype) {
  return signature({
    params: { rows: "u32", rowStart: "u32", d: "u32" },
    bindings: {
      c: { elem: wgslStorageType(dtype), access: "read" },
      ebar: { elem: "f32", access: "read" },
      perm: { elem: "u32", access: "read_write" },
      range: { elem: "atomic<u32>", count: 2, access: "read_write" },
    },
  });
}

/**
 * WGSL of the sort keys: perm[rowStart + r] = the f32 bits of Ē·C_r, and
 * range = (max asc(key), max ~asc(key)) by atomics (one pair per workgroup).
 */
export function sortKeysWgsl(dtype: TensorDtype): string {
  return `${enableDirectives([dtype])}
${_keysSignature(dtype).wgsl}
${dtypeHelpers([{ name: "c", dtype }])}
${ASC}
var<workgroup> red: array<f32, ${KEY_WG}>;
@compute @workgroup_size(${KEY_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  var hi = 0u;
  var lo = 0u;
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
      perm[P.rowStart + r] = b;
      hi = max(hi, asc(b));
      lo = max(lo, ~asc(b));
    }
    workgroupBarrier();
  }
  if (lid == 0u && wg.x < P.rows) {
    atomicMax(&range[0], hi);
    atomicMax(&range[1], lo);
  }
}
`;
}

/** Rows a workgroup of the vector keys pass takes at a time (32 threads a row). */
const VKEY_ROWS = 8;

/** Whether the vector keys pass ({@link sortKeysVecWgsl}) can read rows of depth d. */
export function sortKeysVecFits(dtype: TensorDtype, d: number): boolean {
  return d % (dtype === "f32" ? 4 : 8) === 0;
}

/** The vector keys pass's signature: C and Ē bound as 16-byte vectors. */
function _keysVecSignature(dtype: TensorDtype) {
  return signature({
    params: { rows: "u32", rowStart: "u32", d: "u32" },
    bindings: {
      c: { elem: wgslStorageType(dtype, true), access: "read" },
      ebar: { elem: "vec4<f32>", access: "read" },
      perm: { elem: "u32", access: "read_write" },
      range: { elem: "atomic<u32>", count: 2, access: "read_write" },
    },
  });
}

/**
 * WGSL of the sort keys read 16 bytes at a time (where {@link sortKeysVecFits}): the same keys
 * and range as {@link sortKeysWgsl}, 32 threads a row and {@link VKEY_ROWS} rows a workgroup;
 * each thread sums its vectors in order, then the row's 32 sums are added by a fixed tree.
 */
export function sortKeysVecWgsl(dtype: TensorDtype): string {
  const wide = dtype === "f32" ? 4 : 8;
  const dot = dtype === "f32" ? "acc = acc + dot(c[base + j], ebar[j]);" : `let q = c[base + j];
      let e0 = ebar[2u * j];
      let e1 = ebar[2u * j + 1u];
      ${
    dtype === "f16"
      ? `let a0 = unpack2x16float(q.x); let a1 = unpack2x16float(q.y);
      let a2 = unpack2x16float(q.z); let a3 = unpack2x16float(q.w);
      let lo = vec4<f32>(a0.x, a0.y, a1.x, a1.y);
      let hi = vec4<f32>(a2.x, a2.y, a3.x, a3.y);`
      : `let lo = vec4<f32>(bitcast<f32>(q.x << 16u), bitcast<f32>(q.x & 0xffff0000u),
                         bitcast<f32>(q.y << 16u), bitcast<f32>(q.y & 0xffff0000u));
      let hi = vec4<f32>(bitcast<f32>(q.z << 16u), bitcast<f32>(q.z & 0xffff0000u),
                         bitcast<f32>(q.w << 16u), bitcast<f32>(q.w & 0xffff0000u));`
  }
      acc = acc + dot(lo, e0) + dot(hi, e1);`;
  return `${_keysVecSignature(dtype).wgsl}
${ASC}
var<workgroup> red: array<f32, ${VKEY_ROWS * 32}>;
@compute @workgroup_size(${VKEY_ROWS * 32})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let lane = lid & 31u;
  let grp = lid >> 5u;
  let vecs = P.d / ${wide}u;
  var hi = 0u;
  var lo = 0u;
  for (var r0 = wg.x * ${VKEY_ROWS}u; r0 < P.rows; r0 += nwg.x * ${VKEY_ROWS}u) {
    let r = r0 + grp;
    var acc = 0.0;
    if (r < P.rows) {
      let base = r * vecs;
      for (var j = lane; j < vecs; j += 32u) {
        ${dot}
      }
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var w = 16u; w > 0u; w >>= 1u) {
      if (lane < w) { red[lid] += red[lid + w]; }
      workgroupBarrier();
    }
    if (lane == 0u && r < P.rows) {
      let b = bitcast<u32>(red[lid] + 0.0);
      perm[P.rowStart + r] = b;
      hi = max(hi, asc(b));
      lo = max(lo, ~asc(b));
    }
    workgroupBarrier();
  }
  if (lane == 0u && (hi | lo) != 0u) {
    atomicMax(&range[0], hi);
    atomicMax(&range[1], lo);
  }
}
`;
}

/** A compiled keys pass: records the keys of every shard of C into perm, the range into range. */
export interface PreparedSortKeys {
  record(
    rec: Recorder,
    a: { c: DeviceTensor; ebar: TrackedBuffer; perm: TrackedBuffer; range: TrackedBuffer },
  ): void;
}

/** Compiles both keys kernels for the dtype (the depth, known when recording, picks one). */
export async function prepareSortKeys(
  ctx: GpuContext,
  dtype: TensorDtype,
): Promise<PreparedSortKeys> {
  const scalar = await compileKernel(
    ctx,
    _keysSignature(dtype),
    sortKeysWgsl(dtype),
    "vocab_sort_keys",
  );
  const vector = await compileKernel(
    ctx,
    _keysVecSignature(dtype),
    sortKeysVecWgsl(dtype),
    "vocab_sort_keys_vec",
  );
  return {
    record(rec, a) {
      const d = a.c.cols, vec = sortKeysVecFits(dtype, d);
      rec.pass("vocab sort keys", (p) => {
        for (const s of a.c.shards) {
          const params = { rows: s.rows, rowStart: s.rowStart, d };
          const bufs = { c: s.buffer, ebar: a.ebar, perm: a.perm, range: a.range };
          if (vec) {
            const grid = Math.min(Math.ceil(s.rows / VKEY_ROWS), KEY_GRID);
            p.dispatch(vector.pipeline, vector.bind(rec, params, bufs), grid);
          } else {
            p.dispatch(scalar.pipeline, scalar.bind(rec, params, bufs), Math.min(s.rows, KEY_GRID));
          }
        }
      });
    },
  };
}
