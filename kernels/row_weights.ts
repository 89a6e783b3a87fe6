/**
 * Per-token weight of the backward: w_n = ∂L/∂loss_n, i.e. the upstream gradient divided by the
 * count of non-ignored tokens (mean), the upstream gradient (sum), or its n-th entry (none); 0 for
 * ignored tokens. Every backward scales its per-token gradient by w_n.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import type { LceOptions } from "../core/options.ts";

/** WGSL: bindings params{n}, gradOut (1 or n), targets, count (1), w (out, n). */
export function rowWeightsWgsl(o: LceOptions): string {
  const g = o.reduction === "none" ? "grad_out[i]" : "grad_out[0]";
  const scale = o.reduction === "mean" ? " / count[0]" : "";
  return `const IGNORE: i32 = ${o.ignoreIndex};
struct Params { n: u32, _a: u32, _b: u32, _c: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad_out: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<i32>;
@group(0) @binding(3) var<storage, read> count: array<f32>;
@group(0) @binding(4) var<storage, read_write> w: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= P.n) { return; }
  w[i] = select(${g}${scale}, 0.0, targets[i] == IGNORE);
}
`;
}

/** Compiled kernel. */
export async function prepareRowWeights(ctx: GpuContext, o: LceOptions) {
  const pipeline = await ctx.pipeline(rowWeightsWgsl(o), "row_weights");
  return {
    record(
      rec: Recorder,
      a: { gradOut: DeviceTensor; targets: DeviceTensor; count: DeviceTensor; w: DeviceTensor },
    ) {
      const n = a.targets.rows;
      const u = rec.uniform(new Uint32Array([n, 0, 0, 0]), "params");
      const bg = rec.bindGroup(pipeline, [
        u,
        a.gradOut.shards[0].buffer,
        a.targets.shards[0].buffer,
        a.count.shards[0].buffer,
        a.w.shards[0].buffer,
      ]);
      rec.pass("row_weights", (p) => p.dispatch(pipeline, bg, Math.ceil(n / 256)));
    },
  };
}
