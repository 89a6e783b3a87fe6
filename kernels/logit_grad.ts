/**
 * The gradient of the loss with respect to materialised logits, G = w_n·(p − (1−β)[v = t_n] −
 * β/|V|)·∂z/∂x (∂z/∂x = 1 − (z/s)² with softcap), written as an n×v f32 tensor with the logits'
 * sharding. Input logits may be f32 or a 16-bit dtype; G may alias a f32 logits tensor (in place).
 * The logits may be a slice of the vocabulary (columns `colStart`..`colStart + cols` of every row:
 * the dense backward's vocab chunks); β/|V| and the target test use the whole vocabulary.
 *
 * With `tiledPart` it writes only the part the fused backward tiles, G = w_n·[p·∂z/∂x + (β/|V|)(z/s)²]
 * (the `(z/s)²` term with softcap and smoothing only; gradValue in kernels/fused/backward_wgsl.ts):
 * the fused backward's dense dE path (kernels/fused/dense_de.ts), whose exact target and β/|V|
 * terms come from kernels/fused/corrections.ts as on its filtered path.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { PassEncoder, Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor, TensorDtype } from "../gpu/tensor.ts";
import type { LceOptions } from "../core/options.ts";
import {
  dtypeHelpers,
  enableDirectives,
  loadF32,
  lossConstants,
  wgslStorageType,
} from "./wgsl_common.ts";
import { compileKernel, signature } from "../gpu/signature.ts";

/**
 * The signature of the kernel over a logits shard (`rows` rows from `rowStart`, columns from
 * `colStart`): the logits z (z4 in 16-byte vectors with `vec4`; absent in place, where G holds
 * them), targets, lse, the row weights w, and G (binding 1 in place, else 5).
 */
export function logitGradSignature(o: { logitsDtype: TensorDtype; inPlace: boolean }) {
  return signature({
    params: { rows: "u32", v: "u32", rowStart: "u32", colStart: "u32" },
    bindings: {
      z: { elem: wgslStorageType(o.logitsDtype), access: "read", when: !o.inPlace },
      g: { elem: "f32", access: "read_write", index: o.inPlace ? undefined : 5 },
      targets: { elem: "i32", access: "read" },
      lse: { elem: "f32", access: "read" },
      w: { elem: "f32", access: "read" },
    },
  });
}

/** {@link logitGradSignature} of the f32 kernel reading 4 columns a thread. */
function _vec4Signature(inPlace: boolean) {
  return signature({
    params: { rows: "u32", v: "u32", rowStart: "u32", colStart: "u32" },
    bindings: {
      z4: { elem: "vec4<f32>", access: "read", when: !inPlace },
      g: { elem: "vec4<f32>", access: "read_write", index: inPlace ? undefined : 5 },
      targets: { elem: "i32", access: "read" },
      lse: { elem: "f32", access: "read" },
      w: { elem: "f32", access: "read" },
    },
  });
}

/**
 * The f32 expression of G at capped logit `zc` (p, on_target and wr in scope): the whole gradient
 * or, with `tiledPart`, the part the fused backward tiles. Also the tensor-core products'
 * epilogue's (kernels/tc/tc_matmul_wgsl.ts).
 */
export function logitGradExpr(
  o: { opts: LceOptions; tiledPart?: boolean },
  zc: string,
  wr: string,
): string {
  if (!o.tiledPart) return `${wr} * (p - on_target - BETA / VOCAB) * softcap_grad(${zc})`;
  const smooth = o.opts.capped && o.opts.smoothing
    ? ` + (BETA / VOCAB) * (${zc} / SOFTCAP) * (${zc} / SOFTCAP)`
    : "";
  return `${wr} * (p * softcap_grad(${zc})${smooth})`;
}

/**
 * WGSL of the f32 kernel reading and writing 4 columns a thread (16-byte accesses; the row length
 * a multiple of 4), in place or into a separate G: the same arithmetic per element as
 * {@link logitGradWgsl}.
 */
function _vec4Wgsl(
  o: { opts: LceOptions; v: number; inPlace: boolean; tiledPart?: boolean },
): string {
  const cols = [0, 1, 2, 3].map((c) =>
    `{ let zc = softcap(z[${c}]); let p = exp(zc - l);
      let on_target = select(0.0, 1.0 - BETA, i32(4u * j + ${c}u + P.colStart) == t);
      out[${c}] = ${logitGradExpr(o, "zc", "wr")}; }`
  ).join("\n    ");
  return `${lossConstants(o.opts, o.v)}
${_vec4Signature(o.inPlace).wgsl}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let j = gid.x;
  if (4u * j >= P.v) { return; }
  for (var r = gid.y; r < P.rows; r += nwg.y) {
    let row = P.rowStart + r;
    let i = r * (P.v / 4u) + j;
    let z = ${o.inPlace ? "g" : "z4"}[i];
    let l = lse[row];
    let t = targets[row];
    let wr = w[row];
    var out = vec4<f32>(0.0);
    ${cols}
    g[i] = out;
  }
}
`;
}

/** WGSL of the kernel ({@link logitGradSignature}). */
export function logitGradWgsl(
  o: {
    logitsDtype: TensorDtype;
    opts: LceOptions;
    v: number;
    inPlace: boolean;
    vec4?: boolean;
    tiledPart?: boolean;
  },
): string {
  if (o.vec4 === true) {
    if (o.logitsDtype !== "f32") {
      throw new RangeError("logit_grad: 16-byte accesses need f32 logits");
    }
    return _vec4Wgsl(o);
  }
  const load = o.inPlace ? "g[i]" : loadF32("z", o.logitsDtype, "i");
  return `${enableDirectives([o.logitsDtype])}
${lossConstants(o.opts, o.v)}
${logitGradSignature(o).wgsl}
${o.inPlace ? "" : dtypeHelpers([{ name: "z", dtype: o.logitsDtype }])}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let j = gid.x;
  if (j >= P.v) { return; }
  for (var r = gid.y; r < P.rows; r += nwg.y) {
    let row = P.rowStart + r;
    let i = r * P.v + j;
    let zc = softcap(${load});
    let p = exp(zc - lse[row]);
    let on_target = select(0.0, 1.0 - BETA, i32(j + P.colStart) == targets[row]);
    g[i] = ${logitGradExpr(o, "zc", "w[row]")};
  }
}
`;
}

/** Workgroup rows of the 16-byte kernel's grid: each thread walks rows this far apart. */
const VEC4_ROW_GROUPS = 2048;

/** Compiled kernel. */
export async function prepareLogitGrad(
  ctx: GpuContext,
  o: {
    logitsDtype: TensorDtype;
    opts: LceOptions;
    v: number;
    inPlace: boolean;
    tiledPart?: boolean;
  },
) {
  const kernel = await compileKernel(ctx, logitGradSignature(o), logitGradWgsl(o), "logit_grad");
  // f32 logits: 4 columns a thread where the rows hold whole vec4s, and a few rows a thread
  const vec4 = o.logitsDtype === "f32"
    ? await compileKernel(
      ctx,
      _vec4Signature(o.inPlace),
      logitGradWgsl({ ...o, vec4: true }),
      "logit_grad vec4",
    )
    : undefined;
  return {
    /** `grad` must have the logits' row sharding (it is `logits` itself when in place). */
    record(
      rec: Recorder,
      a: {
        logits: DeviceTensor;
        targets: DeviceTensor;
        lse: DeviceTensor;
        w: DeviceTensor;
        grad: DeviceTensor;
        /** Vocabulary index of the logits' first column (default 0). */
        colStart?: number;
        /** Record into this pass instead of a pass of its own. */
        pass?: PassEncoder;
      },
    ) {
      const body = (p: PassEncoder) => {
        a.logits.shards.forEach((s, k) => {
          const gs = a.grad.shards[k];
          if (gs.rowStart !== s.rowStart || gs.rows !== s.rows) {
            throw new RangeError("logit_grad: shard mismatch");
          }
          const params = {
            rows: s.rows,
            v: a.logits.cols,
            rowStart: s.rowStart,
            colStart: a.colStart ?? 0,
          };
          const z = o.inPlace ? undefined : s.buffer;
          const common = {
            g: gs.buffer,
            targets: a.targets.shards[0].buffer,
            lse: a.lse.shards[0].buffer,
            w: a.w.shards[0].buffer,
          };
          if (vec4 !== undefined && a.logits.cols % 4 === 0) {
            const bg = vec4.bind(rec, params, { z4: z, ...common });
            p.dispatch(
              vec4.pipeline,
              bg,
              Math.ceil(a.logits.cols / 1024),
              Math.min(s.rows, VEC4_ROW_GROUPS),
            );
            return;
          }
          const bg = kernel.bind(rec, params, { z, ...common });
          p.dispatch(kernel.pipeline, bg, Math.ceil(a.logits.cols / 256), Math.min(s.rows, 65535));
        });
      };
      if (a.pass) body(a.pass);
      else rec.pass("logit_grad", body);
    },
  };
}
