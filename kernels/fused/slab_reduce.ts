/**
 * The sum of the dE pass's split partials (kernels/fused/kept_tiles.ts): each split of the per-tile
 * dE pass accumulates into its own f32 slab part; they are added to dE in split order, so the
 * result does not depend on which split finishes first.
 * @module
 */
import type { Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
import type { DESlab } from "./backward_plan.ts";

/**
 * WGSL adding `parts` partial dE blocks to dE in split order: dst[dOff + i] += Σ_j src[sOff + i +
 * j·stride] for i < count (`inPlace`: src and dst are one binding, the slab holding dE's
 * accumulator and its partials). Bindings: params {count, stride, sOff, dOff}, src, [dst].
 */
export function slabReduceWgsl(parts: number, inPlace: boolean): string {
  const adds = Array.from(
    { length: parts },
    (_, j) => `s = s + src[P.sOff + i + ${j}u * P.stride];`,
  )
    .join(" ");
  const dst = inPlace ? "src" : "dst";
  return `struct Params { count: u32, stride: u32, sOff: u32, dOff: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, ${inPlace ? "read_write" : "read"}> src: array<f32>;
${inPlace ? "" : "@group(0) @binding(2) var<storage, read_write> dst: array<f32>;"}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < P.count; i += nwg.x * 256u) {
    var s = ${dst}[P.dOff + i];
    ${adds}
    ${dst}[P.dOff + i] = s;
  }
}
`;
}

/**
 * Records the addition of the dE split partials ({@link slabReduceWgsl}): `inPlace` (16-bit
 * output) part 0 of each slab (the accumulator) += parts 1…S−1; else parts 0…S−1 into the f32
 * output, piece by piece of its shards.
 */
export function recordSlabReduce(o: {
  rec: Recorder;
  pipeline: GPUComputePipeline;
  slabs: DESlab[];
  d: number;
  dEOut: DeviceTensor;
  inPlace: boolean;
}): void {
  const { rec, pipeline: reduce, d, dEOut } = o;
  rec.pass("fused backward dE splits", (p) => {
    for (const sl of o.slabs) {
      const stride = sl.rows * d;
      if (o.inPlace) {
        const u = rec.uniform(new Uint32Array([stride, stride, stride, 0]), "reduce params");
        p.dispatch(
          reduce,
          rec.bindGroup(reduce, [u, sl.buffer]),
          Math.min(Math.ceil(stride / 256), 65535),
        );
        continue;
      }
      const cuts = [sl.r0, ...dEOut.shards.map((sh) => sh.rowStart)].filter((r) =>
        r >= sl.r0 && r < sl.r0 + sl.rows
      );
      const starts = [...new Set(cuts)].sort((x, y) => x - y);
      starts.forEach((r0, i) => {
        const r1 = i + 1 < starts.length ? starts[i + 1] : sl.r0 + sl.rows;
        const os = dEOut.shardOf(r0);
        const count = (r1 - r0) * d;
        const u = rec.uniform(
          new Uint32Array([count, stride, (r0 - sl.r0) * d, (r0 - os.rowStart) * d]),
          "reduce params",
        );
        p.dispatch(
          reduce,
          rec.bindGroup(reduce, [u, sl.buffer, os.buffer]),
          Math.min(Math.ceil(count / 256), 65535),
        );
      });
    }
  });
}
