/**
 * Training parity in miniature (the paper's Figure 6): plain SGD on a linear LM head C (and
 * optionally the hidden states E) with the mean label-smoothed loss, one step at a time through any
 * method's forward and backward, so that two methods (the fused kernel and the materialised
 * baseline) can be trained from the same initial state on the same data and their loss curves and
 * gradient norms compared step by step.
 *
 * Data: the tokens are cut into ⌊n/B⌋ consecutive batches of B (full batch by default), used in
 * order, cyclically, so two runs with the same inputs see the same batches at the same steps.
 *
 * Everything stays on the GPU between steps: C and every batch's E and targets are uploaded once
 * (f32). Each step records the method's forward (mean loss) and backward (upstream gradient 1),
 * then one SGD kernel per parameter, x ← x − lr·g, which also writes per-workgroup partial sums of
 * g² (dE is only measured, not applied, unless E is trained). The host reads back, in one copy per
 * step, the loss and a few hundred bytes of partial sums (the norm is their float64 sum, square
 * rooted); the parameters are downloaded once at the end. Training is f32 only: 16-bit dtypes
 * would need f32 master weights.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { type DeviceTensor, download, fromHost } from "../gpu/tensor.ts";
import { check } from "../core/errors.ts";
import { checkInputs, type HostInputs, resolveOptions } from "../core/options.ts";
import type { LceMethod } from "../methods/types.ts";
import { uploadGradOut } from "../methods/run.ts";
import { compileKernel, signature } from "../gpu/signature.ts";

/** Workgroups of one SGD dispatch (one per tensor shard): partial sums per shard. */
export const SGD_GROUPS = 64;
const WG = 256;

/** The SGD step's signature: `count` values, update (0 or 1), lr, slot; g, x, the partials. */
const SGD_SIG = signature({
  params: { count: "u32", update: "u32", lr: "f32", slot: "u32" },
  bindings: {
    g: { elem: "f32", access: "read" },
    x: { elem: "f32", access: "read_write" },
    partial: { elem: "f32", access: "read_write" },
  },
});

/**
 * WGSL of the SGD step: x ← x − lr·g over `count` f32 values when `update` ≠ 0, and the
 * workgroup's Σ g² into partial[slot·SGD_GROUPS + workgroup]. Grid: SGD_GROUPS workgroups.
 */
export const SGD_WGSL = `${SGD_SIG.wgsl}
var<workgroup> red: array<f32, ${WG}>;
@compute @workgroup_size(${WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  var s = 0.0;
  for (var i = wg.x * ${WG}u + lid; i < P.count; i += ${SGD_GROUPS * WG}u) {
    let gi = g[i];
    s += gi * gi;
    if (P.update != 0u) { x[i] = x[i] - P.lr * gi; }
  }
  red[lid] = s;
  workgroupBarrier();
  for (var w = ${WG / 2}u; w > 0u; w >>= 1u) {
    if (lid < w) { red[lid] += red[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) { partial[P.slot * ${SGD_GROUPS}u + wg.x] = red[0]; }
}
`;

/** Arguments of {@link PreparedSgd.record}. */
export interface SgdArgs {
  /** Parameter (f32), updated in place; sharded like `g`. */
  x: DeviceTensor;
  /** Gradient (f32). */
  g: DeviceTensor;
  /** Learning rate; 0 measures the norm without updating x. */
  lr: number;
  /** Partial sums buffer: SGD_GROUPS f32 per slot. */
  partials: TrackedBuffer;
  /** First slot to write (one per shard). */
  slot: number;
}

/** The compiled SGD step. */
export interface PreparedSgd {
  /** Records x ← x − lr·g and the partial sums of g²; returns the next free slot. */
  record(rec: Recorder, a: SgdArgs): number;
}

/** Compiles the SGD step. */
export async function prepareSgd(ctx: GpuContext): Promise<PreparedSgd> {
  const k = await compileKernel(ctx, SGD_SIG, SGD_WGSL, "sgd_step");
  return {
    record(rec, a) {
      const { x, g } = a;
      if (
        x.dtype !== "f32" || g.dtype !== "f32" || x.rows !== g.rows || x.cols !== g.cols ||
        x.shards.length !== g.shards.length ||
        x.shards.some((s, i) => s.rows !== g.shards[i].rows)
      ) {
        throw new RangeError(`sgd: ${x.label} and ${g.label} must be equally sharded f32 tensors`);
      }
      let slot = a.slot;
      rec.pass(`sgd ${x.label}`, (p) => {
        g.shards.forEach((gs, i) => {
          const params = {
            count: gs.rows * g.cols,
            update: a.lr === 0 ? 0 : 1,
            lr: a.lr,
            slot: slot++,
          };
          const bg = k.bind(rec, params, {
            g: gs.buffer,
            x: x.shards[i].buffer,
            partial: a.partials,
          });
          p.dispatch(k.pipeline, bg, SGD_GROUPS);
        });
      });
      return slot;
    },
  };
}

/** The L2 norm from partial sums of squares in slots [from, to). */
export function normFromPartials(partials: Float32Array, from: number, to: number): number {
  let s = 0;
  for (let i = from * SGD_GROUPS; i < to * SGD_GROUPS; i++) s += partials[i];
  return Math.sqrt(s);
}

/** One step of a training run: the state before its update. */
export interface StepRecord {
  /** 0-based step. */
  step: number;
  /** Mean training loss of this step's batch at this step's parameters. */
  loss: number;
  /** ‖∂L/∂C‖₂ at this step's parameters. */
  gradNormC: number;
  /** ‖∂L/∂E‖₂ at this step's parameters (measured even when E is not trained). */
  gradNormE: number;
}

/** Options of {@link trainLinearHead}. */
export interface TrainOptions {
  /** Method whose forward and backward give the loss and gradients. */
  method: LceMethod;
  /** Training tokens: E (initial hidden states), C (initial head), targets; f32 values. */
  data: HostInputs;
  /** Label smoothing β. */
  beta: number;
  /** Softcap of the logits (default none). */
  softcap?: number;
  /** SGD steps. */
  steps: number;
  /** Learning rate. */
  lr: number;
  /**
   * Tokens per step B (default: all, full-batch gradient descent). The tokens are cut into
   * ⌊n/B⌋ consecutive batches (a remainder is left out), used in order, cyclically.
   */
  batchSize?: number;
  /** Also train E (default false: E is fixed, C alone is learnt). */
  trainE?: boolean;
  /** Called after every step (progress). */
  onStep?: (r: StepRecord) => void;
}

/** What {@link trainLinearHead} returns. */
export interface TrainResult {
  /** The method's name. */
  method: string;
  /** One record per step. */
  records: StepRecord[];
  /** Final C (v×d) and E (the rows used, B·⌊n/B⌋ × d; the initial E unless trained). */
  c: Float32Array;
  e: Float32Array;
  /** Wall time of the steps in ms. */
  wallMs: number;
}

/**
 * Trains C (and E with `trainE`) by plain SGD on the mean label-smoothed loss, step by step on
 * the GPU (see the module documentation). Throws InputError on bad inputs or options, and when
 * the method cannot run here.
 */
export async function trainLinearHead(ctx: GpuContext, o: TrainOptions): Promise<TrainResult> {
  const opts = resolveOptions({ beta: o.beta, softcap: o.softcap, reduction: "mean" });
  const x = o.data;
  checkInputs(x, opts);
  check(
    Number.isInteger(o.steps) && o.steps >= 1,
    `steps must be a positive integer, got ${o.steps}`,
  );
  check(Number.isFinite(o.lr) && o.lr > 0, `lr must be > 0, got ${o.lr}`);
  const b = o.batchSize ?? x.n;
  check(
    Number.isInteger(b) && b >= 1 && b <= x.n,
    `batch size must be an integer in [1, ${x.n}], got ${b}`,
  );
  const batches = Math.floor(x.n / b);
  for (let k = 0; k < batches; k++) {
    const t = x.targets.subarray(k * b, (k + 1) * b);
    check(
      opts.reduction !== "mean" || t.some((y) => y !== opts.ignoreIndex),
      `batch ${k} has only ignored targets`,
    );
  }
  const spec = { n: b, v: x.v, d: x.d, dtype: "f32" as const };
  const why = o.method.unsupported?.(ctx, spec, opts);
  check(why === undefined, `method ${o.method.name} cannot run here: ${why}`);
  const prepared = await o.method.prepare(ctx, spec, opts);
  const sgd = await prepareSgd(ctx);
  const c = fromHost(ctx, { dtype: "f32", rows: x.v, cols: x.d, role: "input", label: "C" }, x.c);
  const data: { e: DeviceTensor; targets: DeviceTensor }[] = [];
  const gradOut = uploadGradOut(ctx, b, opts, 1);
  const tensors = [c, gradOut];
  let partials: TrackedBuffer | undefined;
  try {
    for (let k = 0; k < batches; k++) {
      const e = fromHost(
        ctx,
        { dtype: "f32", rows: b, cols: x.d, role: "input", label: `E[${k}]` },
        x.e.subarray(k * b * x.d, (k + 1) * b * x.d),
      );
      tensors.push(e);
      const targets = fromHost(
        ctx,
        { dtype: "i32", rows: b, cols: 1, role: "input", label: `targets[${k}]` },
        x.targets.subarray(k * b, (k + 1) * b),
      );
      tensors.push(targets);
      data.push({ e, targets });
    }
    const slots = data[0].e.shards.length + c.shards.length;
    partials = ctx.createBuffer({
      size: (slots * SGD_GROUPS + 1) * 4, // the partial sums, then the loss
      role: "workspace",
      label: "sgd partial sums",
    });
    const sums = partials;
    const records: StepRecord[] = [];
    const t0 = performance.now();
    for (let step = 0; step < o.steps; step++) {
      const inputs = { ...data[step % batches], c };
      const r = await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        const fwd = await prepared.forward(rec, inputs);
        const g = await prepared.backward(rec, inputs, fwd.saved, gradOut);
        const mid = sgd.record(rec, { x: c, g: g.dC, lr: o.lr, partials: sums, slot: 0 });
        sgd.record(rec, {
          x: inputs.e,
          g: g.dE,
          lr: o.trainE ? o.lr : 0,
          partials: sums,
          slot: mid,
        });
        const tail = slots * SGD_GROUPS * 4;
        rec.encoder.copyBufferToBuffer(fwd.loss.shards[0].buffer.buffer, 0, sums.buffer, tail, 4);
        await rec.finish();
        const squares = await _readBuffer(ctx, sums, slots * SGD_GROUPS + 1);
        const loss = squares[slots * SGD_GROUPS];
        prepared.dispose(fwd.saved);
        for (const t of [fwd.loss, g.dE, g.dC]) t.destroy();
        return {
          step,
          loss,
          gradNormC: normFromPartials(squares, 0, mid),
          gradNormE: normFromPartials(squares, mid, slots),
        };
      });
      check(Number.isFinite(r.loss), `step ${step}: the loss is ${r.loss} (lr ${o.lr} too large?)`);
      records.push(r);
      o.onStep?.(r);
    }
    const wallMs = performance.now() - t0;
    const e = new Float32Array(batches * b * x.d);
    for (let k = 0; k < batches; k++) e.set(await download(ctx, data[k].e), k * b * x.d);
    return { method: o.method.name, records, c: await download(ctx, c), e, wallMs };
  } finally {
    for (const t of tensors) t.destroy();
    partials?.destroy();
  }
}

/** Reads `count` f32 values of a tracked buffer. */
async function _readBuffer(ctx: GpuContext, b: TrackedBuffer, count: number) {
  const staging = ctx.device.createBuffer({
    size: count * 4,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  const enc = ctx.device.createCommandEncoder();
  enc.copyBufferToBuffer(b.buffer, 0, staging, 0, count * 4);
  ctx.device.queue.submit([enc.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = new Float32Array(staging.getMappedRange().slice(0));
  staging.unmap();
  staging.destroy();
  return out;
}

/** Largest step-wise relative differences of two training runs. */
export interface CurveAgreement {
  /** max over steps of |a − b| / |b| for the loss. */
  maxRelLoss: number;
  /** The same for ‖∂L/∂C‖. */
  maxRelGradNormC: number;
  /** The same for ‖∂L/∂E‖. */
  maxRelGradNormE: number;
  /** Step of the largest loss difference. */
  worstLossStep: number;
}

/** Step-wise relative differences of run `a` against run `b` (same number of steps). */
export function compareCurves(a: readonly StepRecord[], b: readonly StepRecord[]): CurveAgreement {
  check(a.length === b.length, `runs have ${a.length} and ${b.length} steps`);
  const rel = (x: number, y: number) => (x === y ? 0 : Math.abs(x - y) / Math.abs(y));
  const out = { maxRelLoss: 0, maxRelGradNormC: 0, maxRelGradNormE: 0, worstLossStep: 0 };
  for (let i = 0; i < a.length; i++) {
    const l = rel(a[i].loss, b[i].loss);
    if (l > out.maxRelLoss) {
      out.maxRelLoss = l;
      out.worstLossStep = i;
    }
    out.maxRelGradNormC = Math.max(out.maxRelGradNormC, rel(a[i].gradNormC, b[i].gradNormC));
    out.maxRelGradNormE = Math.max(out.maxRelGradNormE, rel(a[i].gradNormE, b[i].gradNormE));
  }
  return out;
}

/**
 * Splits the tokens into the first n − heldOut (training) and the last heldOut (held out); both
 * share C. Throws InputError unless 1 ≤ heldOut < n.
 */
export function splitTokens(
  x: HostInputs,
  heldOut: number,
): { train: HostInputs; heldOut: HostInputs } {
  check(
    Number.isInteger(heldOut) && heldOut >= 1 && heldOut < x.n,
    `held-out tokens must be an integer in [1, ${x.n}), got ${heldOut}`,
  );
  const k = x.n - heldOut;
  const part = (from: number, to: number): HostInputs => ({
    n: to - from,
    v: x.v,
    d: x.d,
    e: x.e.slice(from * x.d, to * x.d),
    c: x.c.slice(),
    targets: x.targets.slice(from, to),
  });
  return { train: part(0, k), heldOut: part(k, x.n) };
}
