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
import { compileKernel, signature } from "../gpu/signature.ts";

/** The signature: n rows; grad_out (1 or n), targets, count (1) in; w (n) out. */
const SIG = signature({
  params: { n: "u32" },
  bindings: {
    grad_out: { elem: "f32", access: "read" },
    targets: { elem: "i32", access: "read" },
    count: { elem: "f32", access: "read" },
    w: { elem: "f32", access: "read_write" },
  },
});

/** WGSL of the weights. */
export function rowWeightsWgsl(o: LceOptions): string {
  const g = o.reduction === "none" ? "grad_out[i]" : "grad_out[0]";
  const scale = o.reduction === "mean" ? " / count[0]" : "";
  return `const IGNORE: i32 = ${o.ignoreIndex};
${SIG.wgsl}
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
  const k = await compileKernel(ctx, SIG, rowWeightsWgsl(o), "row_weights");
  return {
    record(
      rec: Recorder,
      a: { gradOut: DeviceTensor; targets: DeviceTensor; count: DeviceTensor; w: DeviceTensor },
    ) {
      const n = a.targets.rows;
      const bg = k.bind(rec, { n }, {
        grad_out: a.gradOut.shards[0].buffer,
        targets: a.targets.shards[0].buffer,
        count: a.count.shards[0].buffer,
        w: a.w.shards[0].buffer,
      });
      rec.pass("row_weights", (p) => p.dispatch(k.pipeline, bg, Math.ceil(n / 256)));
    },
  };
}
