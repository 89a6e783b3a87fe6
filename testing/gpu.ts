/**
 * Test helpers: one shared GPU context per test file (software adapter in CI), seeded uniform
 * arrays for kernel tests, and options that turn off Deno's resource sanitizers (WebGPU
 * objects outlive single tests).
 * @module
 */
import { GpuContext } from "../gpu/context.ts";
import { type DeviceTensor, fromHost } from "../gpu/tensor.ts";
import { uniformArray } from "../fixtures/rng.ts";

let shared: Promise<GpuContext> | undefined;

/**
 * The test context (created once per process; LCE_ADAPTER picks the adapter). Every buffer it
 * creates is poisoned with NaN bytes, so unwritten outputs and zero-init assumptions fail tests.
 */
export function testContext(): Promise<GpuContext> {
  shared ??= GpuContext.create({ poison: true });
  return shared;
}

/** Deno.test options for GPU tests. */
export const GPU_TEST = { sanitizeResources: false, sanitizeOps: false } as const;

/**
 * Seeded uniform values in [−scale, scale) for kernel tests: {@link uniformArray} of
 * fixtures/rng.ts, the project's one random source.
 */
export function randomArray(n: number, seed: number, scale = 1): Float32Array {
  return uniformArray(n, seed, scale);
}

/** The first `count` u32 words of a buffer, exactly (gpu/tensor.ts's download converts to f32). */
export async function readWords(
  ctx: GpuContext,
  b: GPUBuffer,
  count: number,
): Promise<Uint32Array> {
  const size = Math.max(4, count * 4);
  const staging = ctx.device.createBuffer({
    size,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  const enc = ctx.device.createCommandEncoder();
  enc.copyBufferToBuffer(b, 0, staging, 0, size);
  ctx.device.queue.submit([enc.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = new Uint32Array(staging.getMappedRange().slice(0));
  staging.unmap();
  staging.destroy();
  return out.subarray(0, count);
}

/** An input column vector (rows×1, one shard) of f32 values, or i32 ones (targets). */
export function columnVector(
  ctx: GpuContext,
  data: Float32Array | Int32Array,
  label: string,
): DeviceTensor {
  const dtype = data instanceof Int32Array ? "i32" : "f32";
  return fromHost(ctx, { dtype, rows: data.length, cols: 1, role: "input", label }, data);
}
