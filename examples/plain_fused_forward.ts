/**
 * An example of a method brought from outside the project (`--method-module`), written against
 * the public API (mod.ts) only: a plain fused forward (each row's log-sum-exp computed on the fly,
 * the logits never stored) and a materialised backward (the n×|V| gradient of the logits stored,
 * then two plain products). Every kernel is one thread per output, no tiling: a template to start
 * from, not a fast method.
 *
 *   ./dev task table3 --method-module examples/plain_fused_forward.ts --methods baseline,plain-fused
 *
 * What the harness expects of a method (methods/types.ts, docs/harness.md): allocate every buffer
 * through the context (createTensor, ctx.createBuffer) so that its memory is counted, record
 * every kernel into the Recorder it is given (one `rec.pass` each: the recorder times them), and
 * hand temporaries to `rec.release` (or destroy them in `dispose`).
 * @module
 */
import {
  createTensor,
  type DeviceTensor,
  dtypeHelpers,
  enableDirectives,
  type LceMethod,
  type LceOptions,
  loadF32,
  lossConstants,
  type ProblemSpec,
  type Recorder,
  type TrackedBuffer,
  wgslStorageType,
} from "../mod.ts";

const WG = 64;

/** Workgroups for a grid-stride loop over `items` threads. */
const groups = (items: number) => Math.max(1, Math.min(Math.ceil(items / WG), 65535));

/** The shader header every kernel shares: constants, E, C and targets, and `logit(row, col)`. */
function header(s: ProblemSpec, o: LceOptions, bindings: string): string {
  const { v, d, dtype } = s;
  return `${enableDirectives([dtype])}${lossConstants(o, v)}
@group(0) @binding(0) var<storage, read> e: array<${wgslStorageType(dtype)}>;
@group(0) @binding(1) var<storage, read> c: array<${wgslStorageType(dtype)}>;
@group(0) @binding(2) var<storage, read> targets: array<i32>;
${bindings}
${dtypeHelpers([{ name: "e", dtype }, { name: "c", dtype }])}
fn logit(row: u32, col: u32) -> f32 {
  var z = 0.0;
  for (var k = 0u; k < ${d}u; k++) {
    z += ${loadF32("e", dtype, `row * ${d}u + k`)} * ${loadF32("c", dtype, `col * ${d}u + k`)};
  }
  return z;
}
@compute @workgroup_size(${WG})
`;
}

/** Forward: one thread per row, the vocabulary in one online pass; each row's LSE and loss. */
function forwardWgsl(s: ProblemSpec, o: LceOptions): string {
  return `${
    header(
      s,
      o,
      `@group(0) @binding(3) var<storage, read_write> lse: array<f32>;
@group(0) @binding(4) var<storage, read_write> rowLoss: array<f32>;`,
    )
  }fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var r = id.x; r < ${s.n}u; r += nwg.x * ${WG}u) {
    var m = NEG_INF;
    var sum = 0.0;
    var zsum = 0.0;
    var zt = 0.0;
    for (var j = 0u; j < ${s.v}u; j++) {
      let z = logit(r, j);
      if (z > m) { sum = sum * exp(m - z) + 1.0; m = z; } else { sum += exp(z - m); }
      zsum += z;
      if (i32(j) == targets[r]) { zt = z; }
    }
    lse[r] = m + log(sum);
    let loss = lse[r] - (1.0 - BETA) * zt - (BETA / VOCAB) * zsum;
    rowLoss[r] = select(loss, 0.0, targets[r] == IGNORE);
  }
}`;
}

/** The reduction (mean or sum) and the count of valid rows, in one thread. */
function reduceWgsl(s: ProblemSpec, o: LceOptions): string {
  return `${lossConstants(o, s.v)}
@group(0) @binding(0) var<storage, read> targets: array<i32>;
@group(0) @binding(1) var<storage, read> rowLoss: array<f32>;
@group(0) @binding(2) var<storage, read_write> loss: array<f32>;
@group(0) @binding(3) var<storage, read_write> count: array<f32>;
@compute @workgroup_size(1)
fn main() {
  var total = 0.0;
  var valid = 0.0;
  for (var r = 0u; r < ${s.n}u; r++) {
    total += rowLoss[r];
    if (targets[r] != IGNORE) { valid += 1.0; }
  }
  loss[0] = ${o.reduction === "mean" ? "total / max(valid, 1.0)" : "total"};
  count[0] = valid;
}`;
}

/** The materialised gradient G[r, j] = w_r·(p − (1−β)[j = t] − β/|V|), one thread per element. */
function gradWgsl(s: ProblemSpec, o: LceOptions): string {
  const up = `gradOut[${o.reduction === "none" ? "r" : "0u"}]`;
  return `${
    header(
      s,
      o,
      `@group(0) @binding(3) var<storage, read> lse: array<f32>;
@group(0) @binding(4) var<storage, read> count: array<f32>;
@group(0) @binding(5) var<storage, read> gradOut: array<f32>;
@group(0) @binding(6) var<storage, read_write> g: array<f32>;`,
    )
  }fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = id.x; i < ${s.n * s.v}u; i += nwg.x * ${WG}u) {
    let r = i / ${s.v}u;
    let j = i % ${s.v}u;
    let w = select(${up}${o.reduction === "mean" ? " / count[0]" : ""}, 0.0, targets[r] == IGNORE);
    let p = exp(logit(r, j) - lse[r]);
    g[i] = w * (p - select(0.0, 1.0 - BETA, i32(j) == targets[r]) - BETA / VOCAB);
  }
}`;
}

/** dE = G·C or dC = Gᵀ·E, one thread per output element. */
function productWgsl(s: ProblemSpec, o: LceOptions, out: "dE" | "dC"): string {
  const { n, v, d, dtype } = s;
  const term = out === "dE"
    ? `g[a * ${v}u + b] * ${loadF32("c", dtype, `b * ${d}u + k`)}`
    : `g[b * ${v}u + a] * ${loadF32("e", dtype, `b * ${d}u + k`)}`;
  return `${
    header(
      s,
      o,
      `@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read_write> outp: array<f32>;`,
    )
  }fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = id.x; i < ${(out === "dE" ? n : v) * d}u; i += nwg.x * ${WG}u) {
    let a = i / ${d}u;
    let k = i % ${d}u;
    var acc = 0.0;
    for (var b = 0u; b < ${out === "dE" ? v : n}u; b++) { acc += ${term}; }
    outp[i] = acc;
  }
}`;
}

/** The example method: name `plain-fused` on the command line. */
export const plainFused: LceMethod = {
  name: "plain-fused",
  label: "Plain fused forward (example)",
  description: "per-row log-sum-exp on the fly, then the logits' gradient materialised",
  unsupported(ctx, spec, opts) {
    if (opts.capped) return "no softcap in this example";
    const bytes = spec.dtype === "f32" ? 4 : 2;
    const big = Math.max(spec.v * spec.d * bytes, spec.n * spec.v * 4);
    return big > ctx.maxBindingBytes
      ? "C or the n×|V| gradient would not fit one binding"
      : undefined;
  },
  estimateBytes: (spec) => ({ fwd: spec.n * 8 + 16, bwd: spec.n * spec.v * 4 }),
  async prepare(ctx, spec, opts) {
    const { n, v, d } = spec;
    const forward = await ctx.pipeline(forwardWgsl(spec, opts), "plain fused forward");
    const reduce = await ctx.pipeline(reduceWgsl(spec, opts), "plain fused reduce");
    const grad = await ctx.pipeline(gradWgsl(spec, opts), "plain materialised gradient");
    const dEPipe = await ctx.pipeline(productWgsl(spec, opts, "dE"), "plain dE");
    const dCPipe = await ctx.pipeline(productWgsl(spec, opts, "dC"), "plain dC");
    const f32 = (rows: number, cols: number, role: "workspace" | "output", label: string) =>
      createTensor(ctx, { dtype: "f32", rows, cols, role, label });
    const buf = (t: DeviceTensor) => t.shards[0].buffer; // one shard: see unsupported()
    const run = (
      rec: Recorder,
      label: string,
      p: GPUComputePipeline,
      b: TrackedBuffer[],
      x: number,
    ) => rec.pass(label, (pass) => pass.dispatch(p, rec.bindGroup(p, b), x));
    return {
      forward(rec, x) {
        const lse = f32(n, 1, "workspace", "lse");
        const count = f32(1, 1, "workspace", "count");
        const rowLoss = f32(n, 1, opts.reduction === "none" ? "output" : "workspace", "row loss");
        const input = [buf(x.e), buf(x.c), buf(x.targets)];
        run(rec, "fused forward", forward, [...input, buf(lse), buf(rowLoss)], groups(n));
        if (opts.reduction === "none") {
          return Promise.resolve({ loss: rowLoss, saved: { tensors: [lse, count] } });
        }
        const loss = f32(1, 1, "output", "loss");
        run(rec, "reduce", reduce, [buf(x.targets), buf(rowLoss), buf(loss), buf(count)], 1);
        rec.release(buf(rowLoss));
        return Promise.resolve({ loss, saved: { tensors: [lse, count] } });
      },
      backward(rec, x, saved, gradOut) {
        const [lse, count] = saved.tensors;
        const g = f32(n, v, "workspace", "dlogits");
        const input = [buf(x.e), buf(x.c), buf(x.targets)];
        run(rec, "G", grad, [...input, buf(lse), buf(count), buf(gradOut), buf(g)], groups(n * v));
        const dE = f32(n, d, "output", "dE"), dC = f32(v, d, "output", "dC");
        run(rec, "dE = G·C", dEPipe, [...input, buf(g), buf(dE)], groups(n * d));
        run(rec, "dC = Gᵀ·E", dCPipe, [...input, buf(g), buf(dC)], groups(v * d));
        rec.release(buf(g));
        return Promise.resolve({ dE, dC });
      },
      dispose(saved) {
        for (const t of saved.tensors) t.destroy();
      },
    };
  },
};

export default plainFused;
