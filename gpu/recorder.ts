/**
 * Records compute passes into command buffers, times each pass with timestamp queries, submits,
 * and waits. Buffers handed to {@link Recorder.release} are destroyed once the work that uses them
 * has been submitted. One Recorder per measured call.
 * @module
 */
import type { BindingResource, GpuContext, TrackedBuffer } from "./context.ts";
import { checkIndirect } from "./bindings.ts";

/** GPU time of one compute pass. */
export interface PassTiming {
  label: string;
  /** GPU time from the pass's begin to its end timestamp, in milliseconds (NaN without timestamps). */
  gpuMs: number;
}

/** Timing of everything a Recorder submitted. */
export interface Timing {
  /**
   * GPU time in milliseconds: for each submission, from the first pass's begin timestamp to the
   * last pass's end timestamp, summed over submissions (NaN without timestamp-query).
   */
  gpuMs: number;
  /** Milliseconds from the Recorder's creation to the completion of its last submission. */
  wallMs: number;
  /** Per pass. */
  passes: PassTiming[];
}

/** A compute pass being recorded: dispatches in it run in order with barriers between them. */
export interface PassEncoder {
  /** Dispatches `pipeline` with bind group 0 over `x × y × z` workgroups. */
  dispatch(
    pipeline: GPUComputePipeline,
    bindGroup: GPUBindGroup,
    x: number,
    y?: number,
    z?: number,
  ): void;
  /**
   * Dispatches `pipeline` over the workgroup counts (x, y, z: three u32) that `args` holds at byte
   * `offset`, written on the GPU by an earlier dispatch (the buffer needs INDIRECT usage).
   */
  dispatchIndirect(
    pipeline: GPUComputePipeline,
    bindGroup: GPUBindGroup,
    args: TrackedBuffer,
    offset: number,
  ): void;
}

/**
 * Rewrites the dispatches of the passes recorded under it ({@link Recorder.under}): gpu/gate.ts
 * turns them into indirect dispatches whose workgroup counts a flag on the GPU zeroes.
 */
export interface PassHook {
  /**
   * Called as a pass begins, with the pass's own encoder: returns the encoder the pass's code
   * records into and a `close` run before the pass ends.
   */
  open(pass: PassEncoder, label: string): { encoder: PassEncoder; close(): void };
}

const MAX_QUERIES = 2048; // per submission (pairs of begin/end)

/** See module doc. */
export class Recorder {
  readonly #ctx: GpuContext;
  readonly #t0 = performance.now();
  #encoder: GPUCommandEncoder;
  #passLabels: string[] = [];
  #pending: TrackedBuffer[] = [];
  #querySet: GPUQuerySet | undefined;
  #readbacks: { buffer: GPUBuffer; labels: string[] }[] = [];
  #passes: PassTiming[] = [];
  #gpuMs = 0;
  #hooks: PassHook[] = [];

  constructor(ctx: GpuContext) {
    this.#ctx = ctx;
    this.#encoder = ctx.device.createCommandEncoder();
    if (ctx.hasTimestamps) {
      this.#querySet = ctx.device.createQuerySet({ type: "timestamp", count: MAX_QUERIES });
    }
  }

  /** The command encoder of the current submission (for copies and clears). */
  get encoder(): GPUCommandEncoder {
    return this.#encoder;
  }

  /** Records one timed compute pass. */
  pass(label: string, fn: (p: PassEncoder) => void): void {
    this.#ctx.assertAlive();
    if (this.#querySet && this.#passLabels.length * 2 >= MAX_QUERIES) this.#submitCurrent();
    const i = this.#passLabels.length;
    const desc: GPUComputePassDescriptor = { label };
    if (this.#querySet) {
      desc.timestampWrites = {
        querySet: this.#querySet,
        beginningOfPassWriteIndex: 2 * i,
        endOfPassWriteIndex: 2 * i + 1,
      };
    }
    const enc = this.#encoder.beginComputePass(desc);
    const raw: PassEncoder = {
      dispatch(pipeline, bindGroup, x, y = 1, z = 1) {
        if (x === 0 || y === 0 || z === 0) return;
        enc.setPipeline(pipeline);
        enc.setBindGroup(0, bindGroup);
        enc.dispatchWorkgroups(x, y, z);
      },
      dispatchIndirect: (pipeline, bindGroup, args, offset) => {
        checkIndirect(bindGroup, args.buffer);
        enc.setPipeline(pipeline);
        enc.setBindGroup(0, bindGroup);
        enc.dispatchWorkgroupsIndirect(args.buffer, offset);
      },
    };
    try {
      // each hook wraps the encoder of the hook outside it: the innermost records the pass's code
      let encoder = raw;
      const closes: (() => void)[] = [];
      for (const hook of this.#hooks) {
        const hooked = hook.open(encoder, label);
        encoder = hooked.encoder;
        closes.unshift(() => hooked.close());
      }
      fn(encoder);
      for (const close of closes) close();
    } finally {
      enc.end(); // a pass that threw still ends, so the encoder stays usable
    }
    this.#passLabels.push(label);
  }

  /**
   * Records `fn`'s passes through `hook` ({@link PassHook}); under another hook, through both, the
   * outer one's encoder given to the inner one's `open`.
   */
  under(hook: PassHook, fn: () => void): void {
    this.#hooks.push(hook);
    try {
      fn();
    } finally {
      this.#hooks.pop();
    }
  }

  /** The context this recorder submits to. */
  get ctx(): GpuContext {
    return this.#ctx;
  }

  /** A uniform buffer holding `words`, released after the next submission. */
  uniform(words: ArrayBufferView, label: string): TrackedBuffer {
    const u = this.#ctx.uniform(words, label);
    this.#pending.push(u);
    return u;
  }

  /** A bind group of `pipeline` from resources in binding order (GpuContext.bindGroup). */
  bindGroup(
    pipeline: GPUComputePipeline,
    resources: BindingResource[],
    label = "",
  ): GPUBindGroup {
    return this.#ctx.bindGroup(pipeline, resources, label);
  }

  /** Zero-fills `size` bytes of `buf` at `offset` (untimed copy-engine work). */
  clear(buf: TrackedBuffer, offset = 0, size?: number): void {
    this.#encoder.clearBuffer(buf.buffer, offset, size);
  }

  /** Destroys these buffers after the next submission. */
  release(...bufs: (TrackedBuffer | undefined)[]): void {
    for (const b of bufs) if (b) this.#pending.push(b);
  }

  /** Submits what is recorded so far and waits for it; released buffers are destroyed. */
  async flush(): Promise<void> {
    this.#submitCurrent();
    await this.#ctx.device.queue.onSubmittedWorkDone();
    this.#ctx.assertAlive();
  }

  /** Submits the rest, waits for completion, reads the timestamps, and returns the timing. */
  async finish(): Promise<Timing> {
    this.#submitCurrent();
    await this.#ctx.device.queue.onSubmittedWorkDone();
    const wallMs = performance.now() - this.#t0;
    this.#ctx.assertAlive();
    for (const rb of this.#readbacks) {
      await rb.buffer.mapAsync(GPUMapMode.READ);
      const ts = new BigUint64Array(rb.buffer.getMappedRange().slice(0));
      rb.buffer.unmap();
      rb.buffer.destroy();
      let first = Infinity, last = -Infinity;
      rb.labels.forEach((label, i) => {
        const b = Number(ts[2 * i]), e = Number(ts[2 * i + 1]);
        this.#passes.push({ label, gpuMs: (e - b) / 1e6 });
        first = Math.min(first, b);
        last = Math.max(last, e);
      });
      if (rb.labels.length > 0) this.#gpuMs += (last - first) / 1e6;
    }
    this.#readbacks = [];
    this.#querySet?.destroy();
    const timed = this.#querySet !== undefined;
    if (!timed) this.#gpuMs = NaN;
    return { gpuMs: this.#gpuMs, wallMs, passes: this.#passes };
  }

  #submitCurrent(): void {
    const n = this.#passLabels.length;
    if (this.#querySet && n > 0) {
      const bytes = n * 2 * 8;
      const resolve = this.#ctx.device.createBuffer({
        size: bytes,
        usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
      });
      const read = this.#ctx.device.createBuffer({
        size: bytes,
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      });
      this.#encoder.resolveQuerySet(this.#querySet, 0, 2 * n, resolve, 0);
      this.#encoder.copyBufferToBuffer(resolve, 0, read, 0, bytes);
      this.#readbacks.push({ buffer: read, labels: this.#passLabels });
      this.#ctx.device.queue.submit([this.#encoder.finish()]);
      resolve.destroy();
    } else {
      if (!this.#querySet) {
        for (const label of this.#passLabels) this.#passes.push({ label, gpuMs: NaN });
      }
      this.#ctx.device.queue.submit([this.#encoder.finish()]);
    }
    this.#passLabels = [];
    for (const b of this.#pending) b.destroy();
    this.#pending = [];
    this.#encoder = this.#ctx.device.createCommandEncoder();
  }
}
