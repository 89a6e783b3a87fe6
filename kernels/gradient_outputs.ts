/**
 * The gradient outputs every backward returns: dE (n×d) and dC (v×d) in f32, tracked as outputs
 * and sharded by rows like any tensor.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { createTensor, type DeviceTensor } from "../gpu/tensor.ts";
import type { Shape } from "../core/options.ts";

/** Allocates f32 dE (n×d) and dC (v×d) output tensors. */
export function gradientOutputs(ctx: GpuContext, s: Shape): { dE: DeviceTensor; dC: DeviceTensor } {
  return {
    dE: createTensor(ctx, { dtype: "f32", rows: s.n, cols: s.d, role: "output", label: "dE" }),
    dC: createTensor(ctx, { dtype: "f32", rows: s.v, cols: s.d, role: "output", label: "dC" }),
  };
}
