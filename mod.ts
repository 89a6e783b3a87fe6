/**
 * lce-webgpu: label-smoothed linear cross-entropy kernels in WGSL, run through WebGPU, measured
 * and checked against a float64 reference. The user's API, and nothing internal:
 *
 * - Methods (the Table 3 rows): {@link METHODS}, {@link methodByName}
 * - Running one on your tensors: {@link GpuContext}, {@link resolveOptions}, {@link runMethod}
 *   (bad input throws {@link InputError}, a GPU failure {@link GpuError})
 * - The float64 reference: {@link lceReference}
 * - Table 3 reports (a saved JSON report rendered again): {@link formatMarkdown},
 *   {@link formatCsv}, {@link writeReport}
 * - `.npy` files: {@link readNpy}, {@link writeNpy}
 *
 * @example
 * ```ts
 * import { GpuContext, methodByName, resolveOptions, runMethod } from "./mod.ts";
 * const ctx = await GpuContext.create();
 * const n = 4, v = 10, d = 8;
 * const x = {
 *   n, v, d,
 *   e: Float32Array.from({ length: n * d }, (_, i) => Math.sin(i)),
 *   c: Float32Array.from({ length: v * d }, (_, i) => Math.cos(i)),
 *   targets: Int32Array.from([1, 3, -100, 7]),
 * };
 * const r = await runMethod(ctx, methodByName("fused"), x, resolveOptions({ beta: 0.1 }), { dtype: "bf16" });
 * console.log(r.loss[0], r.dE.length, r.dC.length);
 * ctx.destroy();
 * ```
 * @module
 */
export { GpuError, InputError } from "./core/errors.ts";
export {
  type Dtype,
  type HostInputs,
  IGNORE_INDEX,
  type LceOptions,
  type LossOptions,
  type Reduction,
  resolveOptions,
} from "./core/options.ts";
export { type AdapterChoice, GpuContext } from "./gpu/context.ts";
export { methodByName, METHODS } from "./methods/mod.ts";
export type { LceMethod } from "./methods/types.ts";
export { runMethod, type RunOptions, type RunResult } from "./methods/run.ts";
export { lceReference, type LceReferenceResult } from "./reference/lce_reference.ts";
export { formatMarkdown, type Table3Report } from "./report/table3.ts";
export { formatCsv } from "./report/table3_csv.ts";
export { writeReport } from "./report/table3_files.ts";
export { readNpy, writeNpy } from "./io/npy.ts";
