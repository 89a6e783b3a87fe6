/**
 * Row weights of a unit upstream gradient, before any loss exists: counts the non-ignored targets
 * (Liger's `(target != ignore_index).sum()`) and writes w_n = 1/count (mean) or 1 (sum, none), 0
 * for ignored rows, plus the count. For methods that form gradients inside the forward. One
 * workgroup; the count is summed in a fixed order.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import type { LceOptions } from "../core/options.ts";

const WG = 256;

/** WGSL: bindings params {n}, targets, w (out, n), count (out, 1 f32). */
export function unitRowWeightsWgsl(o: LceOptions): string {
  return `const IGNORE: i32 = ${o.ignoreIndex};
struct Params { n: u32, _a: u32, _b: u32, _c: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> targets: array<i32>;
@group(0) @binding(2) var<storage, read_write> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> count: array<f32>;
var<workgroup> s_cnt: array<f32, ${WG}>;
@compute @workgroup_size(${WG})
fn main(@builtin(local_invocation_index) lid: u32) {
  var cnt = 0.0;
  for (var i = lid; i < P.n; i += ${WG}u) { cnt += select(0.0, 1.0, targets[i] != IGNORE); }
  s_cnt[lid] = cnt;
  workgroupBarrier();
  for (var k = ${WG / 2}u; k > 0u; k >>= 1u) {
    if (lid < k) { s_cnt[lid] += s_cnt[lid + k]; }
    workgroupBarrier();
  }
  let total = s_cnt[0];
  let unit = ${o.reduction === "mean" ? "1.0 / total" : "1.0"};
  for (var i = lid; i < P.n; i += ${WG}u) {
    w[i] = select(unit, 0.0, targets[i] == IGNORE);
  }
  if (lid == 0u) { count[0] = total; }
}
`;
}

/** Compiled kernel. */
export interface PreparedUnitRowWeights {
  /** targets, w: n×1; count: 1×1. */
  record(rec: Recorder, a: { targets: DeviceTensor; w: DeviceTensor; count: DeviceTensor }): void;
}

/** Compiles the kernel. */
export async function prepareUnitRowWeights(
  ctx: GpuContext,
  o: LceOptions,
): Promise<PreparedUnitRowWeights> {
  const pipeline = await ctx.pipeline(unitRowWeightsWgsl(o), "unit_row_weights");
  return {
    record(rec, a) {
      const u = rec.uniform(new Uint32Array([a.targets.rows, 0, 0, 0]), "params");
      const bg = rec.bindGroup(pipeline, [
        u,
        a.targets.shards[0].buffer,
        a.w.shards[0].buffer,
        a.count.shards[0].buffer,
      ]);
      rec.pass("unit_row_weights", (p) => p.dispatch(pipeline, bg, 1));
    },
  };
}
