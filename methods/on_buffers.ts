/**
 * A method on a WebGPU program's own buffers: E, C and the targets are read where the program
 * keeps them, and the loss and gradients are written into its buffers, all on the GPU, with no
 * host round trip. Open the context over the program's device with
 * {@link GpuContext.fromDevice}; prepare once ({@link LceOnBuffers.prepare}: compiles the
 * method's kernels for the shape and options), then {@link LceOnBuffers.run} every step.
 *
 * Buffers are given as {@link BufferRegion}s (a GPUBuffer and a byte offset): each needs STORAGE
 * usage, an offset that is a multiple of the device's minStorageBufferOffsetAlignment, and room
 * for its tensor rounded up to 16 bytes (gpu/tensor.ts tensorOnBuffer). A bad shape, usage, size
 * or offset is refused with one line (InputError) before anything is recorded. The method's own
 * loss and gradients live in tracked buffers of the context for the length of a call and are
 * stored into the program's buffers (converted to the dtype asked for, kernels/store_tensor.ts);
 * nothing of the program's buffers outside those tensors is written.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { Recorder, type Timing } from "../gpu/recorder.ts";
import { type BufferRegion, type DeviceTensor, tensorOnBuffer } from "../gpu/tensor.ts";
import { check } from "../core/errors.ts";
import { checkShape, type Dtype, type LceOptions, parseDtype } from "../core/options.ts";
import { recordStore } from "../kernels/store_tensor.ts";
import type { LceMethod, MethodInputs, PreparedMethod, ProblemSpec } from "./types.ts";
import { uploadGradOut } from "./run.ts";

export type { BufferRegion } from "../gpu/tensor.ts";

/** An output region and the dtype to write there (default f32). */
export interface OutputRegion extends BufferRegion {
  dtype?: Dtype;
}

/**
 * The program's buffers for one call. The targets stay on the GPU and are not validated: each
 * must be in [0, v) or the ignore_index (another value gives an undefined loss).
 */
export interface LceBuffers {
  /** E, n×d in the problem's dtype. */
  e: BufferRegion;
  /** C, v×d in the problem's dtype. */
  c: BufferRegion;
  /** Targets, n i32 (ignore_index rows are skipped). */
  targets: BufferRegion;
  /** Where the loss goes: 1 f32 (mean, sum) or n (none); omitted: not stored. */
  loss?: BufferRegion;
  /** Where dE (n×d) goes; omitted with dC too: no backward is run. */
  dE?: OutputRegion;
  /** Where dC (v×d) goes. */
  dC?: OutputRegion;
  /** Upstream gradient: a number (default 1), or n values for reduction none. */
  gradOut?: number | ArrayLike<number>;
}

/** A method prepared for one problem, run on a program's buffers. */
export class LceOnBuffers {
  readonly #ctx: GpuContext;
  readonly #prepared: PreparedMethod;
  /** The problem it was prepared for. */
  readonly spec: ProblemSpec;
  /** The loss options. */
  readonly opts: LceOptions;
  /** The method. */
  readonly method: LceMethod;

  private constructor(
    ctx: GpuContext,
    method: LceMethod,
    prepared: PreparedMethod,
    spec: ProblemSpec,
    opts: LceOptions,
  ) {
    this.#ctx = ctx;
    this.method = method;
    this.#prepared = prepared;
    this.spec = spec;
    this.opts = opts;
  }

  /**
   * Compiles `method` for the problem (InputError for a bad shape or dtype, or when the method
   * cannot run there: its `unsupported` reason).
   */
  static async prepare(
    ctx: GpuContext,
    method: LceMethod,
    spec: ProblemSpec,
    opts: LceOptions,
  ): Promise<LceOnBuffers> {
    checkShape(spec);
    parseDtype(spec.dtype);
    const why = method.unsupported?.(ctx, spec, opts);
    check(why === undefined, `method ${method.name} cannot run here: ${why}`);
    const prepared = await ctx.scoped(() => method.prepare(ctx, spec, opts));
    return new LceOnBuffers(ctx, method, prepared, { ...spec }, opts);
  }

  /**
   * Runs the forward (and the backward when dE or dC is asked for) on the program's buffers,
   * stores what is asked for, and waits for the GPU. Returns the recorder's timing.
   */
  async run(b: LceBuffers): Promise<Timing> {
    const ctx = this.#ctx, p = this.#prepared;
    const { n, v, d, dtype } = this.spec;
    const on = (r: BufferRegion, label: string, dt: Dtype | "i32", rows: number, cols: number) =>
      tensorOnBuffer(ctx, r, { dtype: dt, rows, cols, label, role: "input" });
    check(b && b.e && b.c && b.targets, "buffers: e, c and targets are required");
    const x: MethodInputs = {
      e: on(b.e, "E", dtype, n, d),
      c: on(b.c, "C", dtype, v, d),
      targets: on(b.targets, "targets", "i32", n, 1),
    };
    const out = (r: OutputRegion | undefined, label: string, rows: number, cols: number) =>
      r === undefined ? undefined : tensorOnBuffer(ctx, r, {
        dtype: r.dtype === undefined ? "f32" : parseDtype(r.dtype),
        rows,
        cols,
        label,
        role: "output",
      });
    const lossRows = this.opts.reduction === "none" ? n : 1;
    const dst = {
      loss: out(b.loss, "loss", lossRows, 1),
      dE: out(b.dE, "dE", n, d),
      dC: out(b.dC, "dC", v, d),
    };
    const backward = dst.dE !== undefined || dst.dC !== undefined;
    const gradOut = uploadGradOut(ctx, n, this.opts, b.gradOut); // checks the values first
    const owned: { destroy(): void }[] = [gradOut];
    try {
      return await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        const f = await p.forward(rec, x);
        owned.push(f.loss, { destroy: () => p.dispose(f.saved) });
        const pairs: [DeviceTensor, DeviceTensor | undefined][] = [[f.loss, dst.loss]];
        if (backward) {
          const g = await p.backward(rec, x, f.saved, gradOut);
          owned.push(g.dE, g.dC);
          pairs.push([g.dE, dst.dE], [g.dC, dst.dC]);
        }
        for (const [src, to] of pairs) if (to) await recordStore(ctx, rec, { src, dst: to });
        return await rec.finish();
      });
    } finally {
      for (const t of owned) t.destroy();
    }
  }

  /** Frees what the method made when it was prepared. */
  release(): void {
    this.#prepared.release?.();
  }
}

/**
 * One call of `method` on a program's buffers: prepare, run, release (see {@link LceOnBuffers}
 * to run many steps with one compilation).
 */
export async function lceOnBuffers(
  ctx: GpuContext,
  method: LceMethod,
  spec: ProblemSpec,
  buffers: LceBuffers,
  opts: LceOptions,
): Promise<Timing> {
  const m = await LceOnBuffers.prepare(ctx, method, spec, opts);
  try {
    return await m.run(buffers);
  } finally {
    m.release();
  }
}
