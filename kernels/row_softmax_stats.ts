/**
 * Per-token softmax statistics over materialised logits (n×v, sharded by rows, f32 or a 16-bit
 * dtype): log-sum-exp, target logit, the sum of logits (smoothing term) and the per-token loss
 * LSE − (1−β)·z_t − (β/|V|)·Σz (0 for ignored rows). One workgroup per row; each thread keeps a
 * running (max, Σexp) pair and the pairs are merged in a fixed tree order (deterministic).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor, TensorDtype } from "../gpu/tensor.ts";
import type { LceOptions } from "../core/options.ts";
import {
  dtypeHelpers,
  enableDirectives,
  loadF32,
  lossConstants,
  LSE_MERGE,
  wgslStorageType,
} from "./wgsl_common.ts";
import { compileKernel, signature } from "../gpu/signature.ts";

const WG = 256;
/** Elements each thread loads before merging them (see the kernel). */
const UNROLL = 8;

/** The body of one unrolled step: UNROLL loads, then the merges in element order. */
function _unrolledStep(dtype: TensorDtype): string {
  const u = [...Array(UNROLL).keys()];
  const loads = u.map((i) =>
    `      let x${i} = softcap(${loadF32("z", dtype, `r * P.ldz + j + ${i * WG}u`)});`
  );
  const merges = u.map((i) =>
    `      ms = lse_merge(ms, vec2<f32>(x${i}, 1.0));
      zsum += x${i};
      if (i32(j + ${i * WG}u) == t) { zt = x${i}; }`
  );
  return [...loads, ...merges].join("\n");
}

/** The signature: a logits shard (`rows` rows from `rowStart`, `ldz` apart), lse and loss rows. */
export function rowSoftmaxStatsSignature(logitsDtype: TensorDtype) {
  return signature({
    params: { rows: "u32", v: "u32", rowStart: "u32", ldz: "u32" },
    bindings: {
      z: { elem: wgslStorageType(logitsDtype), access: "read" },
      targets: { elem: "i32", access: "read" },
      lse: { elem: "f32", access: "read_write" },
      loss_rows: { elem: "f32", access: "read_write" },
    },
  });
}

/** WGSL of the kernel. */
export function rowSoftmaxStatsWgsl(
  o: { logitsDtype: TensorDtype; opts: LceOptions; v: number },
): string {
  return `${enableDirectives([o.logitsDtype])}
${lossConstants(o.opts, o.v)}
${rowSoftmaxStatsSignature(o.logitsDtype).wgsl}
${dtypeHelpers([{ name: "z", dtype: o.logitsDtype }])}
${LSE_MERGE}
var<workgroup> s_ms: array<vec2<f32>, ${WG}>;
var<workgroup> s_sum: array<f32, ${WG}>;
var<workgroup> s_t: array<f32, ${WG}>;
@compute @workgroup_size(${WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var r = wg.x; r < P.rows; r += nwg.x) {
    let row = P.rowStart + r;
    let t = targets[row];
    var ms = vec2<f32>(NEG_INF, 0.0);
    var zsum = 0.0;
    var zt = 0.0;
    // ${UNROLL} independent loads per step (the compiler does not unroll: one load in flight per
    // thread would leave a single workgroup per row waiting on memory); the elements are merged in
    // the same order as one at a time, so the result is the same bits.
    var j = lid;
    for (; j + ${(UNROLL - 1) * WG}u < P.v; j += ${UNROLL * WG}u) {
${_unrolledStep(o.logitsDtype)}
    }
    for (; j < P.v; j += ${WG}u) {
      let x = softcap(${loadF32("z", o.logitsDtype, "r * P.ldz + j")});
      ms = lse_merge(ms, vec2<f32>(x, 1.0));
      zsum += x;
      if (i32(j) == t) { zt = x; }
    }
    s_ms[lid] = ms;
    s_sum[lid] = zsum;
    s_t[lid] = zt;
    workgroupBarrier();
    for (var w = ${WG / 2}u; w > 0u; w >>= 1u) {
      if (lid < w) {
        s_ms[lid] = lse_merge(s_ms[lid], s_ms[lid + w]);
        s_sum[lid] += s_sum[lid + w];
        s_t[lid] += s_t[lid + w];
      }
      workgroupBarrier();
    }
    if (lid == 0u) {
      let m = s_ms[0];
      let l = m.x + log(m.y);
      lse[row] = l;
      var loss = l - (1.0 - BETA) * s_t[0] - (BETA / VOCAB) * s_sum[0];
      if (t == IGNORE) { loss = 0.0; }
      loss_rows[row] = loss;
    }
    workgroupBarrier();
  }
}
`;
}

/** Compiled kernel; `record` dispatches one pass over every logits shard. */
export async function prepareRowSoftmaxStats(
  ctx: GpuContext,
  o: { logitsDtype: TensorDtype; opts: LceOptions; v: number },
) {
  const k = await compileKernel(
    ctx,
    rowSoftmaxStatsSignature(o.logitsDtype),
    rowSoftmaxStatsWgsl(o),
    "row_softmax_stats",
  );
  return {
    /** lse and lossRows are n×1 f32 tensors in one shard each. */
    record(
      rec: Recorder,
      a: { logits: DeviceTensor; targets: DeviceTensor; lse: DeviceTensor; lossRows: DeviceTensor },
    ) {
      rec.pass("row_softmax_stats", (p) => {
        for (const s of a.logits.shards) {
          const v = a.logits.cols;
          const bg = k.bind(rec, { rows: s.rows, v, rowStart: s.rowStart, ldz: v }, {
            z: s.buffer,
            targets: a.targets.shards[0].buffer,
            lse: a.lse.shards[0].buffer,
            loss_rows: a.lossRows.shards[0].buffer,
          });
          p.dispatch(k.pipeline, bg, Math.min(s.rows, 65535));
        }
      });
    },
  };
}
