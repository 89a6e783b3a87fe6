/**
 * The gradient of the loss with respect to materialised logits written straight in a 16-bit dtype:
 * G = w_n·(p − (1−β)[v = t_n] − β/|V|)·∂z/∂x computed in f32 from logits of any dtype and rounded
 * to nearest even once (what a fused torch.compile backward stores for bf16 logits). G has the
 * logits' shape and row sharding; one thread writes one u32 word (two elements) and loops over the
 * shard, so no word is shared. The logits may hold rows [rowOffset, …) of the problem (a chunk).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor, TensorDtype } from "../gpu/tensor.ts";
import type { LceOptions } from "../core/options.ts";
import {
  dtypeHelpers,
  enableDirectives,
  loadF32,
  lossConstants,
  wgslStorageType,
} from "./wgsl_common.ts";
import { type Dtype16, gridStrideGroups, wgslTo16 } from "./cast16.ts";
import { compileKernel, signature } from "../gpu/signature.ts";

/** Kernel options. */
export interface LogitGrad16Options {
  logitsDtype: TensorDtype;
  gradDtype: Dtype16;
  opts: LceOptions;
  v: number;
}

/**
 * The signature: a logits shard z (`rows` rows from `rowStart`), targets, lse, the row weights w,
 * and G's shard as `words` u32 words.
 */
function _signature(logitsDtype: TensorDtype) {
  return signature({
    params: { rows: "u32", v: "u32", rowStart: "u32", words: "u32" },
    bindings: {
      z: { elem: wgslStorageType(logitsDtype), access: "read" },
      targets: { elem: "i32", access: "read" },
      lse: { elem: "f32", access: "read" },
      w: { elem: "f32", access: "read" },
      g: { elem: "u32", access: "read_write" },
    },
  });
}

/** WGSL of the kernel. */
export function logitGrad16Wgsl(o: LogitGrad16Options): string {
  return `${enableDirectives([o.logitsDtype])}
${lossConstants(o.opts, o.v)}
${_signature(o.logitsDtype).wgsl}
${dtypeHelpers([{ name: "z", dtype: o.logitsDtype }])}
${wgslTo16(o.gradDtype)}
fn grad_at(e: u32) -> f32 {
  let r = e / P.v;
  let j = e - r * P.v;
  let row = P.rowStart + r;
  let zc = softcap(${loadF32("z", o.logitsDtype, "e")});
  let p = exp(zc - lse[row]);
  let on_target = select(0.0, 1.0 - BETA, i32(j) == targets[row]);
  return w[row] * (p - on_target - BETA / VOCAB) * softcap_grad(zc);
}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let count = P.rows * P.v;
  for (var wd = gid.x; wd < P.words; wd += nwg.x * 256u) {
    let e0 = 2u * wd;
    var bits = to16(grad_at(e0));
    if (e0 + 1u < count) { bits = bits | (to16(grad_at(e0 + 1u)) << 16u); }
    g[wd] = bits;
  }
}
`;
}

/** Arguments of {@link PreparedLogitGrad16.record}. */
export interface LogitGrad16Args {
  /** Logits of rows [rowOffset, rowOffset + logits.rows) (default offset 0). */
  logits: DeviceTensor;
  rowOffset?: number;
  /** Full n×1 vectors. */
  targets: DeviceTensor;
  lse: DeviceTensor;
  w: DeviceTensor;
  /** 16-bit, the logits' shape and sharding. */
  grad: DeviceTensor;
}

/** Compiled kernel. */
export interface PreparedLogitGrad16 {
  record(rec: Recorder, a: LogitGrad16Args): void;
}

/** Compiles the kernel. */
export async function prepareLogitGrad16(
  ctx: GpuContext,
  o: LogitGrad16Options,
): Promise<PreparedLogitGrad16> {
  const label = `logit_grad→${o.gradDtype}`;
  const kernel = await compileKernel(ctx, _signature(o.logitsDtype), logitGrad16Wgsl(o), label);
  return {
    record(rec, a) {
      const off = a.rowOffset ?? 0;
      if (
        a.logits.cols !== o.v || a.grad.dtype !== o.gradDtype || a.grad.rows !== a.logits.rows ||
        a.grad.cols !== o.v || off + a.logits.rows > a.targets.rows
      ) {
        throw new RangeError(
          `logit_grad16: ${a.logits.rows}×${a.logits.cols} logits at row ${off} → ` +
            `${a.grad.rows}×${a.grad.cols} ${a.grad.dtype}`,
        );
      }
      rec.pass(`logit_grad→${o.gradDtype}`, (p) => {
        a.logits.shards.forEach((s, k) => {
          const gs = a.grad.shards[k];
          if (!gs || gs.rowStart !== s.rowStart || gs.rows !== s.rows) {
            throw new RangeError("logit_grad16: shard mismatch");
          }
          const words = Math.ceil((s.rows * o.v) / 2);
          const bg = kernel.bind(rec, { rows: s.rows, v: o.v, rowStart: off + s.rowStart, words }, {
            z: s.buffer,
            targets: a.targets.shards[0].buffer,
            lse: a.lse.shards[0].buffer,
            w: a.w.shards[0].buffer,
            g: gs.buffer,
          });
          p.dispatch(kernel.pipeline, bg, gridStrideGroups(words));
        });
      });
    },
  };
}
