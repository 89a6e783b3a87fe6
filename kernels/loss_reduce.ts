/**
 * Reduces per-token losses to the loss (sum, or mean over non-ignored tokens) in one workgroup,
 * in a fixed order (deterministic), and records the count of non-ignored tokens, which the
 * backward needs for the mean. Reduction none copies the rows.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import type { LceOptions } from "../core/options.ts";
import { compileKernel, signature } from "../gpu/signature.ts";

const WG = 256;

/** The signature: n loss rows and targets in; loss (1 or n values) and count (1 f32) out. */
const SIG = signature({
  params: { n: "u32" },
  bindings: {
    rows: { elem: "f32", access: "read" },
    targets: { elem: "i32", access: "read" },
    loss: { elem: "f32", access: "read_write" },
    count: { elem: "f32", access: "read_write" },
  },
});

/** WGSL of the reduction. */
export function lossReduceWgsl(o: LceOptions): string {
  return `const IGNORE: i32 = ${o.ignoreIndex};
${SIG.wgsl}
var<workgroup> s_sum: array<f32, ${WG}>;
var<workgroup> s_cnt: array<f32, ${WG}>;
@compute @workgroup_size(${WG})
fn main(@builtin(local_invocation_index) lid: u32) {
  var sum = 0.0;
  var cnt = 0.0;
  for (var i = lid; i < P.n; i += ${WG}u) {
    let valid = targets[i] != IGNORE;
    ${o.reduction === "none" ? "loss[i] = select(0.0, rows[i], valid);" : ""}
    sum += select(0.0, rows[i], valid);
    cnt += select(0.0, 1.0, valid);
  }
  s_sum[lid] = sum;
  s_cnt[lid] = cnt;
  workgroupBarrier();
  for (var w = ${WG / 2}u; w > 0u; w >>= 1u) {
    if (lid < w) {
      s_sum[lid] += s_sum[lid + w];
      s_cnt[lid] += s_cnt[lid + w];
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    count[0] = s_cnt[0];
    ${
    o.reduction === "mean"
      ? "loss[0] = s_sum[0] / s_cnt[0];"
      : o.reduction === "sum"
      ? "loss[0] = s_sum[0];"
      : ""
  }
  }
}
`;
}

/** Compiled kernel. */
export async function prepareLossReduce(ctx: GpuContext, o: LceOptions) {
  const k = await compileKernel(ctx, SIG, lossReduceWgsl(o), "loss_reduce");
  return {
    record(
      rec: Recorder,
      a: { lossRows: DeviceTensor; targets: DeviceTensor; loss: DeviceTensor; count: DeviceTensor },
    ) {
      const bg = k.bind(rec, { n: a.lossRows.rows }, {
        rows: a.lossRows.shards[0].buffer,
        targets: a.targets.shards[0].buffer,
        loss: a.loss.shards[0].buffer,
        count: a.count.shards[0].buffer,
      });
      rec.pass("loss_reduce", (p) => p.dispatch(k.pipeline, bg, 1));
    },
  };
}
