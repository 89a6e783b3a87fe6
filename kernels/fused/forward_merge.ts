/**
 * Pass `fused merge` of the fused forward (kernels/fused/forward.ts): one workgroup per token
 * merges its S split partials in split order with lse_merge, and writes lse and the loss row
 * LSE − (1−β)·z_t − (β/|V|)·Σ_v z_v (0 for ignored rows), and with the calibration stats the
 * token's max, argmax, Σp·z and entropy. Smoothing term Σ_v z_nv: with `identity` it is
 * E_n·colsum(C), a per-token dot product (a 64-lane tree) with colsum(C) from
 * kernels/column_sum.ts; with `in-kernel` the S split partials of the tiles' Σz are added in
 * order; with `none` (β = 0) it is not computed.
 * @module
 */
import type { TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions } from "../../core/options.ts";
import {
  dtypeHelpers,
  enableDirectives,
  loadF32,
  lossConstants,
  LSE_MERGE,
  wgslStorageType,
} from "../wgsl_common.ts";
import { STATS_MERGE } from "./forward_epilogue.ts";

/** What the smoothing term costs where: resolved from the options. */
export type SmoothingPlan = "none" | "identity" | "in-kernel";

/** Options of the merge kernel. */
export interface FusedMergeKernelOptions {
  dtype: Dtype;
  opts: LceOptions;
  v: number;
  smoothing: SmoothingPlan;
  stats: boolean;
}

const MERGE_WG = 64;

/** Bindings: params, ws, [wsz], [wsx], targets, [e, colsum], lse, lossRows, [stats]. */
function _bindings(o: FusedMergeKernelOptions): string {
  const decls = ["var<uniform> P: Params"];
  decls.push(`var<storage, read> ws: array<${o.stats ? "vec2<f32>" : "f32"}>`);
  if (o.smoothing === "in-kernel") decls.push("var<storage, read> wsz: array<f32>");
  if (o.stats) decls.push("var<storage, read> wsx: array<vec2<f32>>");
  decls.push("var<storage, read> targets: array<i32>");
  if (o.smoothing === "identity") {
    decls.push(`var<storage, read> e: array<${wgslStorageType(o.dtype)}>`);
    decls.push("var<storage, read> colsum: array<f32>");
  }
  decls.push("var<storage, read_write> lse: array<f32>");
  decls.push("var<storage, read_write> loss_rows: array<f32>");
  if (o.stats) decls.push("var<storage, read_write> token_stats: array<f32>");
  return decls.map((d, b) => `@group(0) @binding(${b}) ${d};`).join("\n");
}

/** The smoothing term's pieces: the workgroup's dot product, then lane 0's `zsum` and its use. */
function _smoothing(o: FusedMergeKernelOptions): { dot: string; zsum: string; term: string } {
  if (o.smoothing === "none") return { dot: "", zsum: "", term: "" };
  const term = " - (BETA / VOCAB) * zsum";
  if (o.smoothing === "in-kernel") {
    return {
      dot: "",
      zsum: `var zsum = wsz[base];
      for (var j = 1u; j < P.sTotal; j++) { zsum += wsz[base + j]; }`,
      term,
    };
  }
  const dot = `var acc = 0.0;
    for (var k = lid; k < P.d; k += ${MERGE_WG}u) {
      acc = fma(${loadF32("e", o.dtype, "r * P.d + k")}, colsum[k], acc);
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var w = ${MERGE_WG / 2}u; w > 0u; w >>= 1u) {
      if (lid < w) { red[lid] += red[lid + w]; }
      workgroupBarrier();
    }`;
  return { dot, zsum: "let zsum = red[0];", term };
}

/** The token stats from the merged pair `a` and stats `ax`. */
const STATS_WRITE = `
      let wz = ax.y / a.y;
      token_stats[4u * row] = a.x;
      token_stats[4u * row + 1u] = f32(bitcast<u32>(ax.x));
      token_stats[4u * row + 2u] = a.x + wz;
      token_stats[4u * row + 3u] = log(a.y) - wz;`;

/**
 * WGSL of the merge pass. Params: rows (E shard), rowStart, sTotal, d. Bindings: params, ws,
 * [wsz], [wsx], targets, [e, colsum], lse, lossRows (holds the target logits on entry), [stats].
 */
export function fusedMergeWgsl(o: FusedMergeKernelOptions): string {
  const identity = o.smoothing === "identity";
  const sm = _smoothing(o);
  // a split's partial log-sum-exp L is the pair (L, 1): merged by the same lse_merge
  const pair = (x: string) => o.stats ? x : `vec2<f32>(${x}, 1.0)`;
  return `${enableDirectives(identity ? [o.dtype] : [])}
${lossConstants(o.opts, o.v)}
${LSE_MERGE}
${o.stats ? STATS_MERGE : ""}
struct Params { rows: u32, rowStart: u32, sTotal: u32, d: u32 };
${_bindings(o)}
${identity ? dtypeHelpers([{ name: "e", dtype: o.dtype }]) : ""}
var<workgroup> red: array<f32, ${MERGE_WG}>;
@compute @workgroup_size(${MERGE_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var r = wg.x; r < P.rows; r += nwg.x) {
    let row = P.rowStart + r;
    ${sm.dot}
    if (lid == 0u) {
      let base = row * P.sTotal;
      var a = ${pair("ws[base]")};${o.stats ? "\n      var ax = wsx[base];" : ""}
      for (var j = 1u; j < P.sTotal; j++) {
        let bb = ${pair("ws[base + j]")};${
    o.stats ? "\n        ax = stats_merge(a, ax, bb, wsx[base + j]);" : ""
  }
        a = lse_merge(a, bb);
      }
      ${sm.zsum}
      let l = a.x + log(a.y);
      lse[row] = l;
      var loss = l - (1.0 - BETA) * loss_rows[row]${sm.term};
      if (targets[row] == IGNORE) { loss = 0.0; }
      loss_rows[row] = loss;${o.stats ? STATS_WRITE : ""}
    }
    workgroupBarrier();
  }
}
`;
}

/** Arguments of {@link recordMergePass}. */
export interface MergePassArgs {
  pipeline: GPUComputePipeline;
  /** E (sharded by rows; read for the `identity` term), targets (one shard). */
  e: DeviceTensor;
  targets: DeviceTensor;
  /** Splits in all (workspace columns). */
  sTotal: number;
  /** The tiles pass's split workspaces. */
  ws: TrackedBuffer;
  wsz?: TrackedBuffer;
  wsx?: TrackedBuffer;
  /** colsum(C) (d f32, one shard) for the `identity` term. */
  colsum?: DeviceTensor;
  /** Outputs (one shard each); lossRows holds the target logits on entry. */
  lse: DeviceTensor;
  lossRows: DeviceTensor;
  tokenStats?: DeviceTensor;
}

/** Records the merge pass: one dispatch per E shard, a workgroup per token (up to 65535). */
export function recordMergePass(rec: Recorder, a: MergePassArgs): void {
  const { pipeline } = a;
  rec.pass("fused forward merge", (p) => {
    for (const es of a.e.shards) {
      const u = rec.uniform(
        new Uint32Array([es.rows, es.rowStart, a.sTotal, a.e.cols]),
        "fused merge params",
      );
      const bufs = [u, a.ws];
      if (a.wsz) bufs.push(a.wsz);
      if (a.wsx) bufs.push(a.wsx);
      bufs.push(a.targets.shards[0].buffer);
      if (a.colsum) bufs.push(es.buffer, a.colsum.shards[0].buffer);
      bufs.push(a.lse.shards[0].buffer, a.lossRows.shards[0].buffer);
      if (a.tokenStats) bufs.push(a.tokenStats.shards[0].buffer);
      p.dispatch(pipeline, rec.bindGroup(pipeline, bufs), Math.min(es.rows, 65535));
    }
  });
}
