/**
 * lce-webgpu: label-smoothed linear cross-entropy kernels in WGSL, run through WebGPU, measured
 * and checked against a float64 reference. The public API, layer by layer:
 *
 * - GPU context and tensors: {@link GpuContext}, {@link Recorder}, {@link createTensor}, ...
 * - Methods (the Table 3 rows): {@link METHODS}, {@link methodByName}, {@link runMethod}
 * - Reference and fixtures: {@link lceReference}, {@link makeFixture}
 * - Calibration: {@link calibrationMetrics}, {@link entropyLowerBound}
 *
 * @example
 * ```ts
 * import { GpuContext, makeFixture, methodByName, resolveOptions, runMethod } from "./mod.ts";
 * const ctx = await GpuContext.create();
 * const x = makeFixture("cce", { n: 64, v: 500, d: 32, dtype: "bf16", seed: 1 });
 * const r = await runMethod(ctx, methodByName("baseline"), x, resolveOptions({ beta: 0.1 }), { dtype: "bf16" });
 * console.log(r.loss[0]);
 * ```
 * @module
 */
export { GpuError, InputError } from "./core/errors.ts";
export {
  checkInputs,
  type Dtype,
  type HostInputs,
  IGNORE_INDEX,
  type LceOptions,
  type Reduction,
  resolveOptions,
  type Shape,
} from "./core/options.ts";
export { type AdapterReport, GpuContext, type MemoryStats } from "./gpu/context.ts";
export { Recorder, type Timing } from "./gpu/recorder.ts";
export { createTensor, DeviceTensor, download, fromHost, upload } from "./gpu/tensor.ts";
export { methodByName, METHODS } from "./methods/mod.ts";
export type {
  Gradients,
  LceMethod,
  MethodInputs,
  PreparedMethod,
  ProblemSpec,
} from "./methods/types.ts";
export { runMethod, type RunResult } from "./methods/run.ts";
export { lceReference } from "./reference/lce_reference.ts";
export { FIXTURES, makeFixture } from "./fixtures/mod.ts";
export { readNpy, writeNpy } from "./io/npy.ts";
export { calibrationMetrics } from "./calibration/metrics.ts";
export { entropyLowerBound } from "./calibration/entropy_bound.ts";
