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
import { compileKernel, type KernelOf, signature } from "../gpu/signature.ts";

/** The f32 kernel's signature: `count` elements; the scalar s (1 f32), x (scaled in place). */
const SIG = signature({
  params: { count: "u32" },
  bindings: { s: { elem: "f32", access: "read" }, x: { elem: "f32", access: "read_write" } },
});
/** The 16-bit kernel's: x as `words` u32 words of two elements. */
const SIG16 = signature({
  params: { words: "u32" },
  bindings: { s: { elem: "f32", access: "read" }, x: { elem: "u32", access: "read_write" } },
});

/** WGSL of the f32 kernel. */
export const SCALE_BY_SCALAR_WGSL = `${SIG.wgsl}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let k = s[0];
  for (var i = gid.x; i < P.count; i += nwg.x * 256u) { x[i] = k * x[i]; }
}
`;

/**
 * WGSL for a packed 16-bit x: one thread per word (both halves), each product rounded to nearest
 * even; x is the 16-bit shard as u32 words.
 */
export function scaleByScalar16Wgsl(dtype: Dtype16): string {
  return `${SIG16.wgsl}
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
  const f32 = await compileKernel(ctx, SIG, SCALE_BY_SCALAR_WGSL, "scale_by_scalar");
  const k16 = new Map<string, KernelOf<typeof SIG16>>();
  for (const dt of dtypes16) {
    k16.set(dt, await compileKernel(ctx, SIG16, scaleByScalar16Wgsl(dt), `scale_by_scalar ${dt}`));
  }
  return {
    record(rec, a) {
      const k = k16.get(a.x.dtype);
      if ((a.x.dtype !== "f32" && !k) || a.scalar.dtype !== "f32") {
        throw new RangeError(`scale_by_scalar: ${a.x.dtype} tensor not prepared`);
      }
      rec.pass(`scale ${a.x.label}`, (p) => {
        for (const s of a.x.shards) {
          const count = s.rows * a.x.cols;
          const buffers = { s: a.scalar.shards[0].buffer, x: s.buffer };
          if (!k) {
            p.dispatch(f32.pipeline, f32.bind(rec, { count }, buffers), gridStrideGroups(count));
            continue;
          }
          const words = Math.ceil(count / 2);
          p.dispatch(k.pipeline, k.bind(rec, { words }, buffers), gridStrideGroups(words));
        }
      });
    },
  };
}
