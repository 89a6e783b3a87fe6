/**
 * Scales an f32 tensor in place by a scalar held on the GPU (x ← s[0]·x): how a method that
 * computed its gradients in the forward applies the upstream gradient in the backward without
 * reading it back (Liger's element_mul_kernel).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import { type Dtype16, gridStrideGroups, wgslFrom16, wgslTo16 } from "./cast16.ts";

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

/**
 * WGSL for a packed 16-bit x: one thread per word (both halves), each product rounded to nearest
 * even. Bindings: params {words}, scalar (1 f32), x (16-bit shard as u32 words, in place).
 */
export function scaleByScalar16Wgsl(dtype: Dtype16): string {
  return `struct Params { words: u32, _a: u32, _b: u32, _c: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> s: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<u32>;
${wgslTo16(dtype)}${wgslFrom16(dtype)}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let k = s[0];
  for (var i = gid.x; i < P.words; i += nwg.x * 256u) {
    let w = x[i];
    x[i] = to16(k * from16(w & 0xffffu)) | (to16(k * from16(w >> 16u)) << 16u);
  }
}
`;
}

/** Compiled kernel. */
export interface PreparedScaleByScalar {
  /**
   * x ← scalar[0]·x for an f32 tensor x (or a 16-bit one of a prepared dtype: each product
   * rounded once); `scalar` is an f32 tensor whose first element is used.
   */
  record(rec: Recorder, a: { x: DeviceTensor; scalar: DeviceTensor }): void;
}

/** Compiles the kernel for f32 tensors and the given 16-bit dtypes. */
export async function prepareScaleByScalar(
  ctx: GpuContext,
  dtypes16: Dtype16[] = [],
): Promise<PreparedScaleByScalar> {
  const pipeline = await ctx.pipeline(SCALE_BY_SCALAR_WGSL, "scale_by_scalar");
  const p16 = new Map<string, GPUComputePipeline>();
  for (const dt of dtypes16) {
    p16.set(dt, await ctx.pipeline(scaleByScalar16Wgsl(dt), `scale_by_scalar ${dt}`));
  }
  return {
    record(rec, a) {
      const pl = a.x.dtype === "f32" ? pipeline : p16.get(a.x.dtype);
      if (!pl || a.scalar.dtype !== "f32") {
        throw new RangeError(`scale_by_scalar: ${a.x.dtype} tensor not prepared`);
      }
      rec.pass(`scale ${a.x.label}`, (p) => {
        for (const s of a.x.shards) {
          const count = s.rows * a.x.cols;
          const items = pl === pipeline ? count : Math.ceil(count / 2);
          const u = rec.uniform(new Uint32Array([items, 0, 0, 0]), "params");
          const bg = rec.bindGroup(pl, [u, a.scalar.shards[0].buffer, s.buffer]);
          p.dispatch(pl, bg, gridStrideGroups(items));
        }
      });
    },
  };
}
