/**
 * The report of a device a caller opened itself (GpuContext.fromDevice): what a context built by
 * GpuContext.create says of its own device, read from the device and, when given, its adapter.
 * @module
 */
import type { AdapterReport, SubgroupMatrixConfig } from "./context.ts";
import type { Engine } from "./engine.ts";

/** The adapter's facts, when the caller gave the adapter. */
export interface DeviceReportOptions {
  /** The adapter's info (else the device's adapterInfo, where the implementation has it). */
  info?: GPUAdapterInfo;
  isFallback?: boolean;
  subgroupMatrixConfigs: SubgroupMatrixConfig[];
  /** A per-binding limit below the device's (as ContextOptions.maxBindingBytes). */
  maxBindingBytes?: number;
}

/** The report of `device` on `engine`. */
export function deviceReport(
  device: GPUDevice,
  engine: Engine,
  o: DeviceReportOptions,
): AdapterReport {
  const info = (o.info ?? (device as GPUDevice & { adapterInfo?: GPUAdapterInfo }).adapterInfo) as
    | (GPUAdapterInfo & { isFallbackAdapter?: boolean })
    | undefined;
  const limits: Record<string, number> = {};
  for (const k in device.limits) {
    const val = (device.limits as unknown as Record<string, number>)[k];
    if (typeof val === "number") limits[k] = val;
  }
  let maxBinding = device.limits.maxStorageBufferBindingSize;
  if (o.maxBindingBytes !== undefined && o.maxBindingBytes < maxBinding) {
    maxBinding = Math.max(256, Math.floor(o.maxBindingBytes / 16) * 16);
  }
  return {
    engine,
    engineVersion: engine === "deno"
      ? `wgpu (Deno ${Deno.version.deno})`
      : "Dawn (a device given by the caller)",
    description: info?.description || "(no description)",
    vendor: info?.vendor ?? "",
    architecture: info?.architecture ?? "",
    device: info?.device ?? "",
    isFallbackAdapter: o.isFallback ?? Boolean(info?.isFallbackAdapter),
    features: [...device.features].sort(),
    limits,
    maxBindingBytes: maxBinding,
    subgroupMatrixConfigs: o.subgroupMatrixConfigs,
  };
}
