/**
 * Memory before allocation: what a step (the inputs of a problem, one method's cell, a command's
 * host arrays) needs of host and GPU memory, what is free now, and whether it fits. A step whose
 * need exceeds the free memory is refused before anything is allocated, with a reason that names
 * the sizes; a step that runs is capped at the free memory (GpuContext.allocationLimitBytes), so
 * an estimate that falls short fails the step instead of exhausting the machine.
 *
 * Free memory: the host's MemAvailable; on a software adapter the GPU's memory is the host's, so
 * both needs come out of it; on an NVIDIA adapter nvidia-smi's free memory of the first GPU;
 * elsewhere the GPU's is unknown (Infinity: WebGPU does not tell), and a failed allocation is
 * caught instead.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { GpuError } from "../core/errors.ts";
import { freeHostBytes } from "./host.ts";

/** Bytes a step needs of host memory (JavaScript arrays, staging) and of GPU memory. */
export interface MemoryNeed {
  hostBytes: number;
  gpuBytes: number;
}

/** Free memory now. */
export interface FreeMemory {
  hostBytes: number;
  /** The GPU's (Infinity when unknown); on a software adapter the same memory as the host's. */
  gpuBytes: number;
  /** The GPU's memory is the host's (a software adapter). */
  shared: boolean;
}

/** Host memory left free for everything else (the runtime, the driver, other processes). */
export const HOST_HEADROOM_BYTES = 512 * 2 ** 20;
/** GPU memory left free for the driver and the allocator's rounding. */
export const GPU_HEADROOM_BYTES = 512 * 2 ** 20;

/** Free GPU memory of the first NVIDIA GPU from nvidia-smi, or undefined where it is absent. */
export async function nvidiaFreeBytes(): Promise<number | undefined> {
  try {
    const out = await new Deno.Command("nvidia-smi", {
      args: ["--query-gpu=memory.free", "--format=csv,noheader,nounits"],
      stdout: "piped",
      stderr: "null",
    }).output();
    const mib = Number(new TextDecoder().decode(out.stdout).split("\n")[0].trim());
    return out.success && Number.isFinite(mib) && mib >= 0 ? mib * 2 ** 20 : undefined;
  } catch {
    return undefined;
  }
}

/** The memory free now for a context's steps (see the module documentation). */
export async function freeMemory(ctx: GpuContext): Promise<FreeMemory> {
  const hostBytes = freeHostBytes();
  if (ctx.report.isFallbackAdapter) return { hostBytes, gpuBytes: hostBytes, shared: true };
  return { hostBytes, gpuBytes: (await nvidiaFreeBytes()) ?? Infinity, shared: false };
}

/** Bytes as GiB or MiB for a message: `32.0 GiB`, `512 MiB`. */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes)) return String(bytes);
  return bytes >= 2 ** 30
    ? `${(bytes / 2 ** 30).toFixed(1)} GiB`
    : `${Math.ceil(bytes / 2 ** 20).toLocaleString("en-US")} MiB`;
}

/**
 * Why `need` does not fit `free` — `needs 168.0 GiB of host memory (… GPU memory is host memory
 * on a software adapter), 21.8 GiB free` — or undefined when it fits with the headroom left.
 */
export function whyNotFit(need: MemoryNeed, free: FreeMemory, what: string): string | undefined {
  if (free.shared) {
    const total = need.hostBytes + need.gpuBytes;
    if (total + HOST_HEADROOM_BYTES <= free.hostBytes) return undefined;
    return `${what} needs ${formatBytes(total)} of host memory (${formatBytes(need.gpuBytes)} ` +
      `of it GPU buffers, which a software adapter keeps in host memory), ` +
      `${formatBytes(free.hostBytes)} free`;
  }
  if (need.hostBytes + HOST_HEADROOM_BYTES > free.hostBytes) {
    return `${what} needs ${formatBytes(need.hostBytes)} of host memory, ` +
      `${formatBytes(free.hostBytes)} free`;
  }
  if (need.gpuBytes + GPU_HEADROOM_BYTES > free.gpuBytes) {
    return `${what} needs ${formatBytes(need.gpuBytes)} of GPU memory, ` +
      `${formatBytes(free.gpuBytes)} free`;
  }
  return undefined;
}

/**
 * The GPU bytes a step may allocate given the free memory (a software adapter's host memory, of
 * which its host arrays take `hostBytes`): the cap of GpuContext.allocationLimitBytes above the
 * bytes live now.
 */
export function gpuBudget(free: FreeMemory, hostBytes = 0): number {
  return free.shared
    ? Math.max(0, free.hostBytes - hostBytes - HOST_HEADROOM_BYTES)
    : Math.max(0, free.gpuBytes - GPU_HEADROOM_BYTES);
}

/**
 * Runs `fn` with the context's allocations capped at `limit` live bytes: a buffer past it is
 * refused (GpuError out-of-memory) before it is allocated.
 */
export async function capAllocations<T>(
  ctx: GpuContext,
  limit: number,
  fn: () => Promise<T>,
): Promise<T> {
  const before = ctx.allocationLimitBytes;
  ctx.allocationLimitBytes = Math.min(before, limit);
  try {
    return await fn();
  } finally {
    ctx.allocationLimitBytes = before;
  }
}

/**
 * Host bytes a command needs to read `.npy` inputs and keep what it makes of them: the files as
 * read, and four float32 copies of E and C (converted, rounded to the dtype, the gradients read
 * back, their `.npy` encoding), each at most the files' bytes since every value takes at least
 * four bytes in a file. InputError-free: a file that cannot be stat'ed counts as empty (reading
 * it reports the problem).
 */
export function npyInputsHostNeed(paths: { e: string; c: string; targets: string }): number {
  const size = (p: string) => {
    try {
      return Deno.statSync(p).size;
    } catch {
      return 0;
    }
  };
  const ec = size(paths.e) + size(paths.c);
  return ec + size(paths.targets) + 4 * ec;
}

/**
 * Throws GpuError out-of-memory (a failure at run time, exit 1) naming the sizes when `need` does
 * not fit the memory free now (the host's alone without a context).
 */
export async function requireFits(
  ctx: GpuContext | undefined,
  need: MemoryNeed,
  what: string,
): Promise<FreeMemory> {
  const free = ctx
    ? await freeMemory(ctx)
    : { hostBytes: freeHostBytes(), gpuBytes: Infinity, shared: false };
  const why = whyNotFit(need, free, what);
  if (why !== undefined) throw new GpuError("out-of-memory", why);
  return free;
}
