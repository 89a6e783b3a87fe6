/**
 * Tracked memory of a method's forward and backward, for memory tests: each is recorded into its
 * own Recorder after {@link GpuContext.resetPeak}, and its peak is reported above the bytes live
 * just before it, split into uniform parameter blocks and everything else (the buffers a design
 * accounts for). A method frees nothing before its recorder submits, so the peak of a call is the
 * sum of what it allocated, and the non-parameter part can be compared exactly with a formula.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import type { LceOptions } from "../core/options.ts";
import type { LceMethod } from "../methods/types.ts";
import { uploadGradOut, uploadInputs } from "../methods/run.ts";
import { caseInputs, type ParityCase } from "./parity.ts";

/** Peaks of one forward and one backward, in bytes above the live bytes before each call. */
export interface MethodPeaks {
  /** Forward peak without uniform blocks. */
  fwd: number;
  /** Backward peak without uniform blocks (gradients handed over from the saved state included). */
  bwd: number;
  /** Bytes of uniform blocks in each call. */
  fwdParams: number;
  bwdParams: number;
}

/** Runs the forward then the backward of `method` on the case's inputs and reports their peaks. */
export async function methodPeaks(
  ctx: GpuContext,
  method: LceMethod,
  c: ParityCase,
  opts: LceOptions,
): Promise<MethodPeaks> {
  const x = caseInputs(c);
  const spec = { n: c.n, v: c.v, d: c.d, dtype: c.dtype };
  return await ctx.scoped(async () => {
    const prepared = await method.prepare(ctx, spec, opts);
    const inputs = uploadInputs(ctx, x, c.dtype);
    const gradOut = uploadGradOut(ctx, c.n, opts, 1.3);
    await ctx.device.queue.onSubmittedWorkDone();
    const measure = async <T>(fn: (rec: Recorder) => Promise<T>) => {
      const before = ctx.memory();
      ctx.resetPeak();
      const rec = new Recorder(ctx);
      const out = await fn(rec);
      await rec.finish();
      const m = ctx.memory();
      const params = m.peakByRole.params - before.liveByRole.params;
      return { out, peak: m.peakBytes - before.liveBytes - params, params };
    };
    const f = await measure((rec) => prepared.forward(rec, inputs));
    const savedBuffers = new Set(f.out.saved.tensors.flatMap((t) => t.shards.map((s) => s.buffer)));
    const b = await measure((rec) => prepared.backward(rec, inputs, f.out.saved, gradOut));
    // Gradients that are tensors of the saved state were allocated in the forward but are the
    // backward's output: count them in the backward, as measure/ does.
    let handedOver = 0;
    for (const t of [b.out.dE, b.out.dC]) {
      for (const s of t.shards) if (savedBuffers.has(s.buffer)) handedOver += s.buffer.size;
    }
    prepared.dispose(f.out.saved);
    for (const t of [f.out.loss, b.out.dE, b.out.dC, gradOut, inputs.e, inputs.c, inputs.targets]) {
      t.destroy();
    }
    return { fwd: f.peak, bwd: b.peak + handedOver, fwdParams: f.params, bwdParams: b.params };
  });
}

/** Bytes a tensor of `elements` elements of `bytesPerElement` takes: one buffer, 16-byte padded. */
export function bufferBytes(elements: number, bytesPerElement: number): number {
  return Math.ceil((Math.max(elements, 1) * bytesPerElement) / 16) * 16;
}
