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
import { compileKernel, signature } from "../gpu/signature.ts";

const WG = 256;

/** The signature: n targets in; w (n) and count (1 f32) out. */
const SIG = signature({
  params: { n: "u32" },
  bindings: {
    targets: { elem: "i32", access: "read" },
    w: { elem: "f32", access: "read_write" },
    count: { elem: "f32", access: "read_write" },
  },
});

/** WGSL of the weights. */
export function unitRowWeightsWgsl(o: LceOptions): string {
  return `const IGNORE: i32 = ${o.ignoreIndex};
${SIG.wgsl}
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
  const k = await compileKernel(ctx, SIG, unitRowWeightsWgsl(o), "unit_row_weights");
  return {
    record(rec, a) {
      const bg = k.bind(rec, { n: a.targets.rows }, {
        targets: a.targets.shards[0].buffer,
        w: a.w.shards[0].buffer,
        count: a.count.shards[0].buffer,
      });
      rec.pass("unit_row_weights", (p) => p.dispatch(k.pipeline, bg, 1));
    },
  };
}
