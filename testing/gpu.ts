/**
 * Test helpers: one shared GPU context per test file (software adapter in CI), a small seeded
 * random source for kernel tests, and options that turn off Deno's resource sanitizers (WebGPU
 * objects outlive single tests).
 * @module
 */
import { GpuContext } from "../gpu/context.ts";

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

/** Deterministic uniform numbers in [−1, 1) (mulberry32). */
export function randomArray(n: number, seed: number, scale = 1): Float32Array {
  let s = seed >>> 0;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = scale * ((((t ^ (t >>> 14)) >>> 0) / 4294967296) * 2 - 1);
  }
  return out;
}
