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
import { type KernelOf, signature } from "../../gpu/signature.ts";

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

/**
 * The signature of the merge pass: the E shard's `rows` rows from `rowStart`, `sTotal` splits,
 * depth d. Bindings: the tiles pass's workspaces (ws, [Σz], [stats]), targets, [E shard and
 * colsum(C) for the `identity` term], lse, the loss rows (the target logits on entry), [stats].
 */
export function fusedMergeSignature(o: FusedMergeKernelOptions) {
  const identity = o.smoothing === "identity";
  return signature({
    params: { rows: "u32", rowStart: "u32", sTotal: "u32", d: "u32" },
    bindings: {
      ws: { elem: o.stats ? "vec2<f32>" : "f32", access: "read" },
      wsz: { elem: "f32", access: "read", when: o.smoothing === "in-kernel" },
      wsx: { elem: "vec2<f32>", access: "read", when: o.stats },
      targets: { elem: "i32", access: "read" },
      e: { elem: wgslStorageType(o.dtype), access: "read", when: identity },
      colsum: { elem: "f32", access: "read", when: identity },
      lse: { elem: "f32", access: "read_write" },
      loss_rows: { elem: "f32", access: "read_write" },
      token_stats: { elem: "f32", access: "read_write", when: o.stats },
    },
  });
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

/** WGSL of the merge pass ({@link fusedMergeSignature}). */
export function fusedMergeWgsl(o: FusedMergeKernelOptions): string {
  const identity = o.smoothing === "identity";
  const sm = _smoothing(o);
  // a split's partial log-sum-exp L is the pair (L, 1): merged by the same lse_merge
  const pair = (x: string) => o.stats ? x : `vec2<f32>(${x}, 1.0)`;
  return `${enableDirectives(identity ? [o.dtype] : [])}
${lossConstants(o.opts, o.v)}
${LSE_MERGE}
${o.stats ? STATS_MERGE : ""}
${fusedMergeSignature(o).wgsl}
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
  kernel: KernelOf<ReturnType<typeof fusedMergeSignature>>;
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
  const { kernel } = a;
  rec.pass("fused forward merge", (p) => {
    for (const es of a.e.shards) {
      const params = { rows: es.rows, rowStart: es.rowStart, sTotal: a.sTotal, d: a.e.cols };
      const bg = kernel.bind(rec, params, {
        ws: a.ws,
        wsz: a.wsz,
        wsx: a.wsx,
        targets: a.targets.shards[0].buffer,
        e: a.colsum ? es.buffer : undefined,
        colsum: a.colsum?.shards[0].buffer,
        lse: a.lse.shards[0].buffer,
        loss_rows: a.lossRows.shards[0].buffer,
        token_stats: a.tokenStats?.shards[0].buffer,
      });
      p.dispatch(kernel.pipeline, bg, Math.min(es.rows, 65535));
    }
  });
}
