/**
 * Dawn's null backend for tests: a device that compiles and validates WGSL (parsing, types,
 * builtins, the uniformity analysis, pipeline creation against its limits) without running it.
 * It offers the subgroup-matrix extension (with no configurations), so the tensor-core kernels
 * can be validated on a machine without a GPU. Its limits are WebGPU's defaults (16 KiB of
 * workgroup memory, 256 invocations) and its largest subgroup size is 128.
 * @module
 */
import { DAWN_PACKAGE } from "../gpu/engine.ts";

/** The null device, or why npm:webgpu could not be loaded. */
export type NullDevice = { device: GPUDevice; skip?: undefined } | {
  device?: undefined;
  skip: string;
};

let _device: Promise<NullDevice> | undefined;
/** The instance and adapter, kept alive with the device (collected, Dawn's instance is freed). */
const _keep: unknown[] = [];

/** The null backend's device (one per process), with shader-f16, subgroups, subgroup matrices. */
export function nullDevice(): Promise<NullDevice> {
  _device ??= _open();
  return _device;
}

async function _open(): Promise<NullDevice> {
  let mod: { create: (flags: string[]) => GPU };
  try {
    mod = await import(DAWN_PACKAGE);
  } catch (e) {
    return { skip: `${DAWN_PACKAGE} cannot be loaded: ${(e as Error).message.split("\n")[0]}` };
  }
  // its own instance, with the toggles of gpu/engine.ts's (in one entry: a second replaces it)
  const gpu = mod.create([
    "backend=null",
    "enable-dawn-features=allow_unsafe_apis,vulkan_enable_f16_on_nvidia",
  ]);
  const adapter = await gpu.requestAdapter();
  if (!adapter) throw new Error("Dawn's null backend gave no adapter");
  _keep.push(gpu, adapter);
  const want = [
    "shader-f16",
    "subgroups",
    "chromium-experimental-subgroup-matrix",
  ] as GPUFeatureName[];
  const missing = want.filter((f) => !adapter.features.has(f));
  if (missing.length > 0) throw new Error(`Dawn's null backend lacks ${missing.join(", ")}`);
  const device = await adapter.requestDevice({ requiredFeatures: want });
  return { device };
}

/** What the null device said about a shader. */
export interface ShaderVerdict {
  /** Error messages of the shader module (WGSL), one line each with its position. */
  errors: string[];
  /** The pipeline's error, if any (undefined when created). */
  pipelineError?: string;
  /** The pipeline error names only a limit of the null device (workgroup memory or size). */
  limitOnly: boolean;
}

/**
 * Pipeline errors that come from the null device's default limits, not from the shader: the
 * kernels are generated for the real adapter's limits (48 KiB of workgroup memory on NVIDIA
 * through Vulkan, up to 1024 invocations, more than 8 storage buffers per stage).
 */
const LIMIT_ERRORS = [
  /^The total use of workgroup storage \(\d+ bytes\) is larger than the maximum allowed \(\d+ bytes\)\.$/,
  /^Entry-point uses workgroup_size\(\d+, 1, 1\) that exceeds the maximum allowed \(\d+, \d+, \d+\)\.$/,
  /^The total number of workgroup invocations \(\d+\) exceeds the maximum allowed \(\d+\)\.$/,
  /^The number of storage buffers \(\d+\) in the Compute stage exceeds the maximum per-stage limit \(\d+\)\.$/,
];

/**
 * Compiles `code` on the null device and creates its compute pipeline (entry point `main`, the
 * layout inferred from the shader).
 */
export async function validateShader(device: GPUDevice, code: string): Promise<ShaderVerdict> {
  device.pushErrorScope("validation");
  const module = device.createShaderModule({ code });
  const info = await module.getCompilationInfo();
  const errors = info.messages.filter((m) => m.type === "error").map((m) =>
    `${m.lineNum}:${m.linePos}: ${m.message.split("\n")[0]}`
  );
  let pipelineError: string | undefined;
  if (errors.length === 0) {
    try {
      await device.createComputePipelineAsync({
        layout: "auto",
        compute: { module, entryPoint: "main" },
      });
    } catch (e) {
      pipelineError = (e as Error).message.split("\n")[0].trim();
    }
  }
  const scoped = await device.popErrorScope();
  if (!pipelineError && scoped && errors.length === 0) {
    pipelineError = scoped.message.split("\n")[0].trim();
  }
  const limitOnly = pipelineError !== undefined && LIMIT_ERRORS.some((r) => r.test(pipelineError!));
  return { errors, pipelineError, limitOnly };
}
