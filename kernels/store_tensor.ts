/**
 * Stores a tensor into another of the same shape and possibly another dtype (f32, bf16, f16):
 * how a method's loss and gradients reach the buffers of a caller's own WebGPU program
 * (methods/on_buffers.ts) with no host round trip. The destination is one shard, typically a
 * range of the caller's buffer, and nothing outside its elements is written: where a 16-bit
 * destination's first or last word holds an element of the caller's neighbouring data, that
 * half is read and written back unchanged (one thread per word, so no two threads share one).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor, TensorDtype } from "../gpu/tensor.ts";
import type { Dtype } from "../core/options.ts";
import { gridStrideGroups, wgslTo16 } from "./cast16.ts";
import { dtypeHelpers, enableDirectives, loadF32, wgslStorageType } from "./wgsl_common.ts";

const WG = 256;

/**
 * WGSL of the store of `count` elements of one source shard to elements [first, first + count)
 * of the destination. Bindings: params {count, first, words, _}, src shard, dst (read_write).
 */
export function storeTensorWgsl(src: Dtype, dst: Dtype): string {
  const load = (i: string) => loadF32("src", src, i);
  const body = dst === "f32"
    ? `for (var i = gid.x; i < P.count; i += nwg.x * ${WG}u) { dst[P.first + i] = ${load("i")}; }`
    : `let w0 = P.first / 2u;
  for (var w = gid.x; w < P.words; w += nwg.x * ${WG}u) {
    let word = w0 + w;
    var lo = dst[word] & 0xffffu;
    var hi = dst[word] >> 16u;
    let e0 = 2u * word;
    if (e0 >= P.first && e0 < P.first + P.count) { lo = to16(${load("e0 - P.first")}); }
    if (e0 + 1u >= P.first && e0 + 1u < P.first + P.count) {
      hi = to16(${load("e0 + 1u - P.first")});
    }
    dst[word] = lo | (hi << 16u);
  }`;
  return `${enableDirectives([src])}
struct Params { count: u32, first: u32, words: u32, _a: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> src: array<${wgslStorageType(src)}>;
@group(0) @binding(2) var<storage, read_write> dst: array<${dst === "f32" ? "f32" : "u32"}>;
${dtypeHelpers([{ name: "src", dtype: src }])}
${dst === "f32" ? "" : wgslTo16(dst)}
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  ${body}
}
`;
}

/** Float dtypes a store reads and writes. */
function _float(t: TensorDtype): t is Dtype {
  return t === "f32" || t === "bf16" || t === "f16";
}

/**
 * Records dst = src (converted to dst's dtype; rounded to nearest even into 16 bits). Same shape;
 * dst is one shard. Compiles the store on first use of a dtype pair.
 */
export async function recordStore(
  ctx: GpuContext,
  rec: Recorder,
  a: { src: DeviceTensor; dst: DeviceTensor },
): Promise<void> {
  const { src, dst } = a;
  if (
    !_float(src.dtype) || !_float(dst.dtype) || src.rows !== dst.rows || src.cols !== dst.cols ||
    dst.shards.length !== 1
  ) {
    throw new RangeError(
      `store: ${src.rows}×${src.cols} ${src.dtype} → ${dst.rows}×${dst.cols} ${dst.dtype} ` +
        `(${dst.shards.length} shards)`,
    );
  }
  const pipe = await ctx.pipeline(
    storeTensorWgsl(src.dtype, dst.dtype),
    `store ${src.dtype}→${dst.dtype}`,
  );
  rec.pass(`store ${dst.label}`, (p) => {
    for (const s of src.shards) {
      const count = s.rows * src.cols, first = s.rowStart * src.cols;
      const words = dst.dtype === "f32"
        ? count
        : Math.floor((first + count - 1) / 2) - Math.floor(first / 2) + 1;
      const u = rec.uniform(new Uint32Array([count, first, words, 0]), "store params");
      const bg = rec.bindGroup(pipe, [u, s.buffer, dst.shards[0].buffer]);
      p.dispatch(pipe, bg, gridStrideGroups(words));
    }
  });
}
