/**
 * A WebGPU device that compiles and runs nothing: a context on it ({@link emulatedContext}) makes
 * the same choices the kernels and methods make on a real adapter with the emulated limits,
 * features and fallback flag (tiles, variants, sharding), records every WGSL source handed to the
 * pipeline cache, and lets a method be prepared and recorded at any shape (the paper's included)
 * without memory or a GPU. Buffers hold no data; mapped ranges read as zeros.
 * @module
 */
import { GpuContext } from "../gpu/context.ts";
import type { Engine } from "../gpu/engine.ts";

/** What an emulated adapter looks like to the kernels. */
export interface AdapterProfile {
  /** Name in manifests and reports. */
  name: string;
  description: string;
  isFallbackAdapter: boolean;
  features: string[];
  /** Device limits (every limit a kernel or method reads; the rest at WebGPU's defaults). */
  limits: Record<string, number>;
}

/** WebGPU's default limits, the base of every profile. */
const DEFAULT_LIMITS: Record<string, number> = {
  maxBindGroups: 4,
  maxBindingsPerBindGroup: 1000,
  maxStorageBuffersPerShaderStage: 8,
  maxUniformBuffersPerShaderStage: 12,
  maxUniformBufferBindingSize: 65536,
  maxStorageBufferBindingSize: 134217728,
  minUniformBufferOffsetAlignment: 256,
  minStorageBufferOffsetAlignment: 256,
  maxBufferSize: 268435456,
  maxComputeWorkgroupStorageSize: 16384,
  maxComputeInvocationsPerWorkgroup: 256,
  maxComputeWorkgroupSizeX: 256,
  maxComputeWorkgroupSizeY: 256,
  maxComputeWorkgroupSizeZ: 64,
  maxComputeWorkgroupsPerDimension: 65535,
};

/** Mesa's lavapipe (llvmpipe) through Deno's wgpu: the software adapter tests and CI run on. */
export const SOFTWARE_PROFILE: AdapterProfile = {
  name: "software",
  description: "llvmpipe (emulated)",
  isFallbackAdapter: true,
  features: ["shader-f16"],
  limits: {
    ...DEFAULT_LIMITS,
    maxBindGroups: 8,
    maxStorageBuffersPerShaderStage: 48,
    maxStorageBufferBindingSize: 134217728,
    minUniformBufferOffsetAlignment: 32,
    minStorageBufferOffsetAlignment: 32,
    maxBufferSize: 2147483647,
    maxComputeWorkgroupStorageSize: 32768,
    maxComputeInvocationsPerWorkgroup: 1024,
    maxComputeWorkgroupSizeX: 1024,
    maxComputeWorkgroupSizeY: 1024,
    maxComputeWorkgroupSizeZ: 1024,
  },
};

/** An NVIDIA H100 (or H200) through Deno's wgpu on Vulkan: the GPU host's adapter. */
export const H100_PROFILE: AdapterProfile = {
  name: "h100",
  description: "NVIDIA H100 80GB HBM3 (emulated)",
  isFallbackAdapter: false,
  features: ["shader-f16"],
  limits: {
    ...DEFAULT_LIMITS,
    maxBindGroups: 8,
    maxStorageBuffersPerShaderStage: 524288,
    maxStorageBufferBindingSize: 2147483644,
    minUniformBufferOffsetAlignment: 64,
    minStorageBufferOffsetAlignment: 32,
    maxBufferSize: 4292870144,
    maxComputeWorkgroupStorageSize: 49152,
    maxComputeInvocationsPerWorkgroup: 1024,
    maxComputeWorkgroupSizeX: 1024,
    maxComputeWorkgroupSizeY: 1024,
    maxComputeWorkgroupSizeZ: 64,
  },
};

/** One WGSL source handed to the context's pipeline cache. */
export interface CapturedKernel {
  label: string;
  code: string;
  /** `pipeline` (compiled when prepared) or `pipelineNow` (compiled on first dispatch). */
  via: "pipeline" | "pipelineNow";
}

/** An emulated context and the kernels handed to it so far. */
export interface EmulatedContext {
  ctx: GpuContext;
  kernels: CapturedKernel[];
}

const noop = () => {};

function _buffer(d: GPUBufferDescriptor): GPUBuffer {
  return {
    size: d.size,
    usage: d.usage,
    label: d.label ?? "",
    mapState: "unmapped",
    destroy: noop,
    unmap: noop,
    mapAsync: () => Promise.resolve(),
    getMappedRange: (_o?: number, size?: number) => new ArrayBuffer(size ?? d.size),
  } as unknown as GPUBuffer;
}

function _pass(): GPUComputePassEncoder {
  return {
    setPipeline: noop,
    setBindGroup: noop,
    dispatchWorkgroups: noop,
    dispatchWorkgroupsIndirect: noop,
    end: noop,
  } as unknown as GPUComputePassEncoder;
}

function _encoder(): GPUCommandEncoder {
  return {
    beginComputePass: _pass,
    clearBuffer: noop,
    copyBufferToBuffer: noop,
    resolveQuerySet: noop,
    finish: () => ({}) as GPUCommandBuffer,
  } as unknown as GPUCommandEncoder;
}

function _pipeline(label: string): GPUComputePipeline {
  return { label, getBindGroupLayout: () => ({}) } as unknown as GPUComputePipeline;
}

/** A device of `profile` that accepts every call and does nothing. */
export function emulatedDevice(
  profile: AdapterProfile,
): { adapter: GPUAdapter; device: GPUDevice } {
  const features = new Set(profile.features) as unknown as GPUSupportedFeatures;
  const limits = { ...profile.limits } as unknown as GPUSupportedLimits;
  const device = {
    features,
    limits,
    lost: new Promise(noop),
    addEventListener: noop,
    queue: {
      writeBuffer: noop,
      submit: noop,
      onSubmittedWorkDone: () => Promise.resolve(),
    },
    createBuffer: _buffer,
    createCommandEncoder: _encoder,
    createQuerySet: () => ({ destroy: noop }),
    createShaderModule: () => ({ getCompilationInfo: () => Promise.resolve({ messages: [] }) }),
    createComputePipeline: (d: GPUComputePipelineDescriptor) => _pipeline(d.label ?? ""),
    createComputePipelineAsync: (d: GPUComputePipelineDescriptor) =>
      Promise.resolve(_pipeline(d.label ?? "")),
    createBindGroupLayout: () => ({}),
    createPipelineLayout: () => ({}),
    createBindGroup: () => ({}),
    pushErrorScope: noop,
    popErrorScope: () => Promise.resolve(null),
    destroy: noop,
  } as unknown as GPUDevice;
  const adapter = {
    features,
    limits,
    info: {
      description: profile.description,
      vendor: "emulated",
      architecture: "",
      device: "",
      isFallbackAdapter: profile.isFallbackAdapter,
    },
  } as unknown as GPUAdapter;
  return { adapter, device };
}

/**
 * A context on an {@link emulatedDevice} that records the WGSL handed to `pipeline` and
 * `pipelineNow`; `maxBindingBytes` lowers the per-binding limit as ContextOptions does, and
 * `engine` (default `deno`) picks the engine whose defaults the methods take.
 */
export function emulatedContext(
  profile: AdapterProfile,
  o: { maxBindingBytes?: number; engine?: Engine } = {},
): EmulatedContext {
  const { adapter, device } = emulatedDevice(profile);
  const ctx = GpuContext.fromOpened(adapter, device, {
    engine: o.engine ?? "deno",
    engineVersion: "emulated",
    maxBindingBytes: o.maxBindingBytes,
  });
  const kernels: CapturedKernel[] = [];
  const pipeline = ctx.pipeline.bind(ctx), pipelineNow = ctx.pipelineNow.bind(ctx);
  ctx.pipeline = (code: string, label: string) => {
    kernels.push({ label, code, via: "pipeline" });
    return pipeline(code, label);
  };
  ctx.pipelineNow = (code: string, label: string) => {
    kernels.push({ label, code, via: "pipelineNow" });
    return pipelineNow(code, label);
  };
  return { ctx, kernels };
}
