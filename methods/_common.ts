/**
 * Pieces several methods share: allocating per-token vectors and the loss, and choosing the GEMM
 * tile for a context.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { createTensor, type DeviceTensor } from "../gpu/tensor.ts";
import type { BufferRole } from "../gpu/context.ts";
import type { LceOptions } from "../core/options.ts";
import { type GemmTile, TILE_LARGE, TILE_SMALL } from "../kernels/gemm_codegen.ts";

/** An n×1 f32 vector. */
export function vector(ctx: GpuContext, n: number, role: BufferRole, label: string): DeviceTensor {
  return createTensor(ctx, { dtype: "f32", rows: n, cols: 1, role, label });
}

/** The loss output: 1×1 for mean/sum, n×1 for none. */
export function lossTensor(ctx: GpuContext, n: number, o: LceOptions): DeviceTensor {
  return vector(ctx, o.reduction === "none" ? n : 1, "output", "loss");
}

/** The GEMM tile for plain products: 128×128 on hardware adapters, 64×64 on software ones. */
export function defaultTile(ctx: GpuContext): GemmTile {
  return ctx.report.isFallbackAdapter ? TILE_SMALL : TILE_LARGE;
}
