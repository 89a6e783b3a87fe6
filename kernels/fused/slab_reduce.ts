/**
 * The sum of the dE pass's split partials (kernels/fused/kept_tiles.ts): each split of the per-tile
 * dE pass accumulates into its own f32 slab part; they are added to dE in split order, so the
 * result does not depend on which split finishes first.
 * @module
 */
import type { Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
import type { DESlab } from "./backward_plan.ts";
import { type KernelOf, signature } from "../../gpu/signature.ts";

/**
 * The signature: `count` elements, the partials `stride` apart from sOff in src, dE from dOff in
 * dst; `inPlace`: one binding src holds both (the slab holding dE's accumulator and its partials).
 */
export function slabReduceSignature(inPlace: boolean) {
  return signature({
    params: { count: "u32", stride: "u32", sOff: "u32", dOff: "u32" },
    bindings: {
      src: { elem: "f32", access: inPlace ? "read_write" : "read" },
      dst: { elem: "f32", access: "read_write", when: !inPlace },
    },
  });
}

/**
 * WGSL adding `parts` partial dE blocks to dE in split order: dst[dOff + i] += Σ_j src[sOff + i +
 * j·stride] for i < count ({@link slabReduceSignature}).
 */
export function slabReduceWgsl(parts: number, inPlace: boolean): string {
  const adds = Array.from(
    { length: parts },
    (_, j) => `s = s + src[P.sOff + i + ${j}u * P.stride];`,
  )
    .join(" ");
  const dst = inPlace ? "src" : "dst";
  const sig = slabReduceSignature(inPlace);
  return `${sig.struct}
${sig.line("P")}
${sig.line("src")}
${inPlace ? "" : sig.line("dst")}
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
  kernel: KernelOf<ReturnType<typeof slabReduceSignature>>;
  slabs: DESlab[];
  d: number;
  dEOut: DeviceTensor;
  inPlace: boolean;
}): void {
  const { rec, kernel, d, dEOut } = o;
  rec.pass("fused backward dE splits", (p) => {
    for (const sl of o.slabs) {
      const stride = sl.rows * d;
      if (o.inPlace) {
        const params = { count: stride, stride, sOff: stride, dOff: 0 };
        p.dispatch(
          kernel.pipeline,
          kernel.bind(rec, params, { src: sl.buffer }),
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
        const params = { count, stride, sOff: (r0 - sl.r0) * d, dOff: (r0 - os.rowStart) * d };
        p.dispatch(
          kernel.pipeline,
          kernel.bind(rec, params, { src: sl.buffer, dst: os.buffer }),
          Math.min(Math.ceil(count / 256), 65535),
        );
      });
    }
  });
}
