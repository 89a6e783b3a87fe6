/**
 * The contract of a Table 3 row: a method prepares its kernels for one problem, then records a
 * forward (loss, plus whatever it saves for the backward) and a backward (dE, dC) into a
 * {@link Recorder}. The measurement layer times the recorder and reads the tracked memory, so a
 * method allocates every buffer through the context (tensors or ctx.createBuffer) and hands
 * temporaries to `rec.release` (destroyed after the submission that uses them).
 *
 * The same contract holds for a method brought from outside (`--method-module`, docs/harness.md;
 * examples/plain_fused_forward.ts is one, written against mod.ts):
 * - Allocate through the context: `createTensor`, `ctx.createBuffer`, `ctx.uniform` or
 *   `rec.uniform`. Those bytes are what the memory columns report (the peak above the bytes live
 *   before the call) and what the leak check counts; a buffer made with `device.createBuffer`
 *   is invisible to both.
 * - Release: a temporary of a recorded call goes to `rec.release` (or `rec.uniform`, released for
 *   you); what the backward needs goes into {@link SavedState.tensors} and is freed by
 *   {@link PreparedMethod.dispose}; the loss and the gradients are handed to the caller, who
 *   destroys them; buffers made by `prepare` are freed by {@link PreparedMethod.release}. After
 *   every call the live bytes must be back where they were (otherwise the row reports a leak).
 * - What is timed: the recorder's GPU time, from the first timed pass's begin to the last one's
 *   end in each submission (timestamp queries; wall time on an adapter without them). Record every
 *   kernel with `rec.pass(label, …)`: a pass is timed and named in the per-pass breakdown; copies
 *   and clears through `rec.encoder`/`rec.clear` run in the same submission (inside the timed
 *   span between two passes, outside it before the first or after the last). Work submitted
 *   outside the recorder is not measured at all.
 * - Values: `forward` and `backward` only record; the tensors they return hold their values once
 *   the recorder has finished. `backward` must not consume the saved state (the `bwd` mode runs
 *   it several times on one forward).
 * - Correctness: table3 and the sweep check every cell's loss, sampled dE rows and sampled dC rows
 *   against a reference kernel before they rank it (measure/check.ts); a method that fails is
 *   marked incorrect with its error.
 * - Stats ({@link MethodStats}): numbers or strings shown in a report's details. Two conventions
 *   are read: `tilesSkipped`/`tilesTotal` (a gradient filter's work, in the report's notes) and
 *   `gradDtype` with `dERoundings`/`dCRoundings` (16-bit gradient outputs: each rounding widens
 *   the check's and the parity tests' tolerance by one unit roundoff of that dtype).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import type { Dtype, LceOptions, Shape } from "../core/options.ts";

/** The problem a method is prepared for: shape and storage dtype of E and C. */
export interface ProblemSpec extends Shape {
  dtype: Dtype;
}

/**
 * Inputs on the GPU: E (n×d) and C (v×d) in the problem's dtype, targets (n×1, i32; entries equal
 * to ignoreIndex are skipped).
 */
export interface MethodInputs {
  e: DeviceTensor;
  c: DeviceTensor;
  targets: DeviceTensor;
}

/** What a forward returns. */
export interface ForwardOutput {
  /** f32 loss: 1×1 for mean/sum, n×1 for reduction none (ignored rows 0). */
  loss: DeviceTensor;
  /** Whatever the backward needs (LSE, logits, ...), freed by {@link PreparedMethod.dispose}. */
  saved: SavedState;
}

/** State kept between forward and backward; its tensors count as live memory until disposed. */
export interface SavedState {
  tensors: DeviceTensor[];
  /** Any extra data the method needs (not GPU memory). */
  // deno-lint-ignore no-explicit-any
  [key: string]: any;
}

/**
 * Gradients of the loss with respect to E (n×d) and C (v×d), in the dtype the method produces:
 * the input dtype for the filtered fused rows (`fused`, `fused-nosort`, `fused-fb`: bf16 or f16
 * for 16-bit inputs), f32 for the materialised rows, the no-filter rows and `fused-f32grad`.
 * runMethod downloads them widened to f32.
 */
export interface Gradients {
  dE: DeviceTensor;
  dC: DeviceTensor;
}

/**
 * Statistics a method may report about its last backward (e.g. the gradient filter): shown in a
 * report's details; `tilesSkipped`/`tilesTotal` and `gradDtype`/`dERoundings`/`dCRoundings` are
 * read as the module doc says.
 */
export interface MethodStats {
  /** Tiles whose products were skipped by the gradient filter / tiles in all. */
  tilesSkipped?: number;
  tilesTotal?: number;
  [key: string]: number | string | undefined;
}

/** A method with compiled kernels for one problem and option set. */
export interface PreparedMethod {
  /** Records the forward. The returned tensors are valid once the recorder has finished. */
  forward(rec: Recorder, x: MethodInputs): Promise<ForwardOutput>;
  /**
   * Records the backward given the forward's saved state and the upstream gradient `gradOut`
   * (f32; 1×1 for mean/sum, n×1 for none). Does not consume `saved`.
   */
  backward(
    rec: Recorder,
    x: MethodInputs,
    saved: SavedState,
    gradOut: DeviceTensor,
  ): Promise<Gradients>;
  /** Frees saved state. */
  dispose(saved: SavedState): void;
  /** Statistics of the last backward, read after its recorder finished (may read the GPU). */
  stats?(): Promise<MethodStats>;
  /** Frees buffers the method made when it was prepared (e.g. a counter read by stats). */
  release?(): void;
  /**
   * Tracked bytes a call will allocate above the bytes live before it (the inputs; for `bwd`
   * the saved state too, which `bwd` counts as measured: the gradients it hands over included),
   * per mode, from the prepared plan: at least the peak the measurement reports, so a run can
   * refuse a cell that cannot fit before it allocates anything.
   */
  estimateBytes?(): Partial<Record<"fwd" | "bwd" | "fwd+bwd", number>>;
}

/** A Table 3 row. */
export interface LceMethod {
  /** Name on the command line (`--method`). */
  readonly name: string;
  /** Label in the table (the paper's row name where there is one). */
  readonly label: string;
  /** One sentence on what it does. */
  readonly description: string;
  /**
   * The arithmetic of its products, for the table's arithmetic column; absent: fp32 FMA in WGSL
   * (16-bit inputs widened), what every row without tensor cores does.
   */
  readonly arithmetic?: string;
  /** Why it cannot run on this context and problem, or undefined when it can. */
  unsupported?(ctx: GpuContext, spec: ProblemSpec, opts: LceOptions): string | undefined;
  /**
   * Tracked bytes the method will allocate above its inputs, in total or per mode, so a run can
   * skip (and mark) a method that cannot fit before trying it.
   */
  estimateBytes?(
    spec: ProblemSpec,
    opts: LceOptions,
  ): number | Partial<Record<"fwd" | "bwd" | "fwd+bwd", number>> | undefined;
  /** Compiles the kernels. */
  prepare(ctx: GpuContext, spec: ProblemSpec, opts: LceOptions): Promise<PreparedMethod>;
}
