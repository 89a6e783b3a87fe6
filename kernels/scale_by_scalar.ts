/**
 * Scales an f32 tensor in place by a scalar held on the GPU (x ← s[0]·x): how a method that
 * computed its gradients in the forward applies the upstream gradient in the backward without
 * reading it back (Liger's element_mul_kernel).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import { gridStrideGroups } from "./cast16.ts";

/** WGSL: bindings params {count}, scalar (1 f32), x (f32 shard, in place). */
export const SCALE_BY_SCALAR_WGSL = `struct Params { count: u32, _a: u32, _b: u32, _c: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> s: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let k = s[0];
  for (var i = gid.x; i < P.count; i += nwg.x * 256u) { x[i] = k * x[i]; }
}
`;

/** Compiled kernel. */
export interface PreparedScaleByScalar {
  /** x ← scalar[0]·x for an f32 tensor x; `scalar` is a tensor whose first element is used. */
  record(rec: Recorder, a: { x: DeviceTensor; scalar: DeviceTensor }): void;
}

/** Compiles the kernel. */
export async function prepareScaleByScalar(ctx: GpuContext): Promise<PreparedScaleByScalar> {
  const pipeline = await ctx.pipeline(SCALE_BY_SCALAR_WGSL, "scale_by_scalar");
  return {
    record(rec, a) {
      if (a.x.dtype !== "f32" || a.scalar.dtype !== "f32") {
        throw new RangeError("scale_by_scalar: f32 tensors only");
      }
      rec.pass(`scale ${a.x.label}`, (p) => {
        for (const s of a.x.shards) {
          const count = s.rows * a.x.cols;
          const u = rec.uniform(new Uint32Array([count, 0, 0, 0]), "params");
          const bg = rec.bindGroup(pipeline, [u, a.scalar.shards[0].buffer, s.buffer]);
          p.dispatch(pipeline, bg, gridStrideGroups(count));
        }
      });
    },
  };
}
