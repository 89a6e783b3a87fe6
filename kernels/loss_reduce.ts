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

const WG = 256;

/** WGSL: bindings params{n}, loss rows, targets, loss (out: 1 or n values), count (out: 1 f32). */
export function lossReduceWgsl(o: LceOptions): string {
  return `const IGNORE: i32 = ${o.ignoreIndex};
struct Params { n: u32, _a: u32, _b: u32, _c: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> rows: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<i32>;
@group(0) @binding(3) var<storage, read_write> loss: array<f32>;
@group(0) @binding(4) var<storage, read_write> count: array<f32>;
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
  const pipeline = await ctx.pipeline(lossReduceWgsl(o), "loss_reduce");
  return {
    record(
      rec: Recorder,
      a: { lossRows: DeviceTensor; targets: DeviceTensor; loss: DeviceTensor; count: DeviceTensor },
    ) {
      const u = rec.uniform(new Uint32Array([a.lossRows.rows, 0, 0, 0]), "params");
      const bg = rec.bindGroup(pipeline, [
        u,
        a.lossRows.shards[0].buffer,
        a.targets.shards[0].buffer,
        a.loss.shards[0].buffer,
        a.count.shards[0].buffer,
      ]);
      rec.pass("loss_reduce", (p) => p.dispatch(pipeline, bg, 1));
    },
  };
}
