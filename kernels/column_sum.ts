/**
 * Column sums of a sharded row-major matrix, colsum[k] = Σ_v C[v][k], in f32 on the GPU, for the
 * "identity" smoothing term of the fused forward (Σ_v z_nv = E_n·colsum(C) without softcap).
 *
 * Accuracy without compensated arithmetic: Kahan/Neumaier summation relies on the compiler keeping
 * `(t − s) − y` as written, and SPIR-V lets a driver reassociate float additions (naga emits no
 * NoContraction), so the sum is blocked instead. Pass 1 splits the rows into at most
 * {@link MAX_CHUNKS} chunks per shard (plus one per shard boundary); within a chunk, 4 lanes per
 * column each sum a contiguous run of rows in nested blocks of 16 and 16·16 rows, and the lanes
 * are added as a tree. Pass 2 adds a column's chunk partials as a 256-way tree. The rounding error
 * is then bounded by about (16 + 16 + L/256 + 2 + 8)·ε·Σ|C[v][k]| with L the rows per lane
 * (2000 at |V| = 256000), against (|V| − 1)·ε for a plain running sum, and the order of every
 * addition is fixed, so the result is bitwise reproducible.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import type { Dtype } from "../core/options.ts";
import { dtypeHelpers, enableDirectives, loadF32, wgslStorageType } from "./wgsl_common.ts";

/** Most chunks (pass-1 partials per column) of one shard. */
export const MAX_CHUNKS = 32;
const COLS = 64; // columns per pass-1 workgroup
const LANES = 4; // row lanes per column in pass 1
const WG2 = 256; // threads per column in pass 2

/** WGSL of pass 1. Bindings: params, C shard, partials (column-major: col·chunks + chunk). */
export function columnSumPartialWgsl(dtype: Dtype): string {
  return `${enableDirectives([dtype])}
struct Params { rows: u32, d: u32, chunkBase: u32, chunks: u32, chunkRows: u32, _a: u32, _b: u32, _c: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> c: array<${wgslStorageType(dtype)}>;
@group(0) @binding(2) var<storage, read_write> partials: array<f32>;
${dtypeHelpers([{ name: "c", dtype }])}
var<workgroup> red: array<f32, ${COLS * LANES}>;
@compute @workgroup_size(${COLS * LANES})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let col = wg.x * ${COLS}u + (lid % ${COLS}u);
  let lane = lid / ${COLS}u;
  let per = P.chunkRows / ${LANES}u;
  let r0 = min(wg.y * P.chunkRows + lane * per, P.rows);
  let r1 = min(r0 + per, P.rows);
  var s = 0.0;
  if (col < P.d) {
    var r = r0;
    while (r < r1) {
      var b2 = 0.0;
      let e2 = min(r + 256u, r1);
      while (r < e2) {
        var b1 = 0.0;
        let e1 = min(r + 16u, e2);
        while (r < e1) {
          b1 += ${loadF32("c", dtype, "r * P.d + col")};
          r++;
        }
        b2 += b1;
      }
      s += b2;
    }
  }
  red[lid] = s;
  workgroupBarrier();
  if (lid < ${COLS * 2}u) { red[lid] += red[lid + ${COLS * 2}u]; }
  workgroupBarrier();
  if (lid < ${COLS}u) {
    let total = red[lid] + red[lid + ${COLS}u];
    if (col < P.d) { partials[col * P.chunks + P.chunkBase + wg.y] = total; }
  }
}
`;
}

/** WGSL of pass 2. Bindings: params, partials, out (d f32). */
export function columnSumFinalWgsl(): string {
  return `struct Params { d: u32, chunks: u32, _a: u32, _b: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<storage, read_write> outp: array<f32>;
var<workgroup> red: array<f32, ${WG2}>;
@compute @workgroup_size(${WG2})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var col = wg.x; col < P.d; col += nwg.x) {
    var s = 0.0;
    for (var j = lid; j < P.chunks; j += ${WG2}u) { s += partials[col * P.chunks + j]; }
    red[lid] = s;
    workgroupBarrier();
    for (var w = ${WG2 / 2}u; w > 0u; w >>= 1u) {
      if (lid < w) { red[lid] += red[lid + w]; }
      workgroupBarrier();
    }
    if (lid == 0u) { outp[col] = red[0]; }
    workgroupBarrier();
  }
}
`;
}

/** How the rows of C are cut into chunks. */
export interface ColumnSumPlan {
  /** Rows per chunk (a multiple of 64). */
  chunkRows: number;
  /** Chunks of each shard, in shard order. */
  chunksPerShard: number[];
  /** Chunks in all: partials per column. */
  chunks: number;
  /** Bytes of the partials buffer (the workspace of {@link PreparedColumnSum.record}). */
  workspaceBytes: number;
}

/**
 * The chunking for shards of `shardRows` rows and `d` columns: chunks of at least 256 rows, at
 * most {@link MAX_CHUNKS} per shard, and a partials buffer that fits one binding.
 */
export function columnSumPlan(
  shardRows: number[],
  d: number,
  maxBindingBytes: number,
): ColumnSumPlan {
  const rowsMax = Math.max(...shardRows);
  let chunkRows = Math.max(256, Math.ceil(Math.ceil(rowsMax / MAX_CHUNKS) / 64) * 64);
  for (;;) {
    const per = shardRows.map((r) => Math.max(1, Math.ceil(r / chunkRows)));
    const chunks = per.reduce((a, b) => a + b, 0);
    const bytes = Math.max(4, chunks * d * 4);
    if (bytes <= maxBindingBytes || chunks === shardRows.length) {
      return { chunkRows, chunksPerShard: per, chunks, workspaceBytes: bytes };
    }
    chunkRows *= 2;
  }
}

/** A compiled column sum. */
export interface PreparedColumnSum {
  /** The chunking used for `c` (its workspace bytes included). */
  plan(c: DeviceTensor): ColumnSumPlan;
  /**
   * Records colsum(c) into `out` (d×1 f32, one shard) as one pass of two dispatches per shard
   * plus one; the partials buffer is released after the submission.
   */
  record(rec: Recorder, a: { c: DeviceTensor; out: DeviceTensor }): void;
}

/** Compiles the column sum for a dtype of C. */
export async function prepareColumnSum(
  ctx: GpuContext,
  o: { dtype: Dtype },
): Promise<PreparedColumnSum> {
  const p1 = await ctx.pipeline(columnSumPartialWgsl(o.dtype), "column_sum_partial");
  const p2 = await ctx.pipeline(columnSumFinalWgsl(), "column_sum_final");
  const plan = (c: DeviceTensor) =>
    columnSumPlan(c.shards.map((s) => s.rows), c.cols, ctx.maxBindingBytes);
  return {
    plan,
    record(rec, { c, out }) {
      const d = c.cols;
      if (c.dtype !== o.dtype || out.dtype !== "f32" || out.rows * out.cols !== d) {
        throw new RangeError(
          `column_sum: C ${c.rows}×${d} ${c.dtype} (prepared for ${o.dtype}), out ${out.rows}×${out.cols} ${out.dtype}`,
        );
      }
      if (out.shards.length !== 1) throw new RangeError("column_sum: out must be one shard");
      const pl = plan(c);
      const partials = ctx.createBuffer({
        size: pl.workspaceBytes,
        role: "workspace",
        label: "column sum partials",
      });
      rec.pass("column_sum", (p) => {
        let base = 0;
        c.shards.forEach((s, i) => {
          const u = rec.uniform(
            new Uint32Array([s.rows, d, base, pl.chunks, pl.chunkRows, 0, 0, 0]),
            "column sum params",
          );
          const bg = rec.bindGroup(p1, [u, s.buffer, partials]);
          p.dispatch(p1, bg, Math.ceil(d / COLS), pl.chunksPerShard[i]);
          base += pl.chunksPerShard[i];
        });
        const u = rec.uniform(new Uint32Array([d, pl.chunks, 0, 0]), "column sum params");
        const bg = rec.bindGroup(p2, [u, partials, out.shards[0].buffer]);
        p.dispatch(p2, bg, Math.min(d, 65535));
      });
      rec.release(partials);
    },
  };
}
