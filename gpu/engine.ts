/**
 * The WebGPU implementation a context runs on: `deno`, Deno's built-in WebGPU (wgpu, also
 * Firefox's), or `dawn`, Chrome's WebGPU from the npm package `webgpu` made by the Dawn team,
 * loaded only when asked for (it needs `--allow-ffi`).
 *
 * Dawn's instance is created once per process with one set of toggles (see
 * {@link DAWN_INSTANCE_TOGGLES}): a second `enable-dawn-features=` entry would replace the first,
 * so every enabled toggle is in one entry.
 * @module
 */
import { GpuError, InputError } from "../core/errors.ts";

/** A WebGPU implementation. */
export type Engine = "deno" | "dawn";

/** Every engine, in the order usage lines list them. */
export const ENGINES: readonly Engine[] = ["deno", "dawn"];

/** The npm package that brings Dawn (pinned: reports name this version). */
export const DAWN_PACKAGE = "npm:webgpu@0.6.2";

/**
 * Toggles of the Dawn instance:
 * - `allow_unsafe_apis`: the experimental subgroup-matrix extension (tensor cores) is offered
 *   only with it;
 * - `vulkan_enable_f16_on_nvidia`: Dawn withholds shader-f16 on NVIDIA drivers older than 615.71
 *   for known wrong f16 results; the f16 parity tests on the GPU host are what decide whether the
 *   numbers are right there;
 * - `timestamp_quantization` off: Dawn rounds timestamp queries down (a browser's defence against
 *   timing attacks) unless told otherwise, which would quantise every kernel time.
 */
export const DAWN_INSTANCE_TOGGLES: readonly string[] = [
  "enable-dawn-features=allow_unsafe_apis,vulkan_enable_f16_on_nvidia",
  "disable-dawn-features=timestamp_quantization",
];

/** The engine named by the environment (LCE_WEBGPU), default `deno`. */
export function engineFromEnv(): Engine {
  let v: string | undefined;
  try {
    v = Deno.env.get("LCE_WEBGPU");
  } catch {
    v = undefined;
  }
  if (v === undefined || v === "") return "deno";
  return parseEngine(v, "LCE_WEBGPU");
}

/** `value` as an engine, or an InputError naming `what` and the choices. */
export function parseEngine(value: string, what = "--webgpu"): Engine {
  if ((ENGINES as readonly string[]).includes(value)) return value as Engine;
  throw new InputError(`${what} must be ${ENGINES.join(" or ")}, got '${value}'`);
}

/** A loaded engine: its GPU object and the words reports use for it. */
export interface LoadedEngine {
  engine: Engine;
  gpu: GPU;
  /** e.g. "wgpu (Deno 2.9.6)" or "Dawn (npm:webgpu@0.6.2)". */
  version: string;
}

let _dawn: Promise<LoadedEngine> | undefined;

/** The GPU object of `engine` (Dawn's module is imported, and its instance made, on first use). */
export function loadEngine(engine: Engine): Promise<LoadedEngine> {
  if (engine === "deno") {
    if (!("gpu" in navigator) || !navigator.gpu) {
      return Promise.reject(
        new GpuError("internal", "WebGPU is not available in this Deno (navigator.gpu missing)"),
      );
    }
    return Promise.resolve({
      engine,
      gpu: navigator.gpu,
      version: `wgpu (Deno ${Deno.version.deno})`,
    });
  }
  _dawn ??= _loadDawn().catch((e) => {
    _dawn = undefined;
    throw e;
  });
  return _dawn;
}

async function _loadDawn(): Promise<LoadedEngine> {
  let mod: { create: (flags: string[]) => GPU };
  try {
    mod = await import(DAWN_PACKAGE);
  } catch (e) {
    throw new GpuError(
      "internal",
      `Dawn could not be loaded (${DAWN_PACKAGE}: ${(e as Error).message.split("\n")[0]}); ` +
        "it is fetched from npm on first use and needs deno run --allow-ffi (the tasks run with -A)",
    );
  }
  let gpu: GPU;
  try {
    gpu = mod.create([...DAWN_INSTANCE_TOGGLES]);
  } catch (e) {
    throw new GpuError(
      "internal",
      `Dawn (${DAWN_PACKAGE}) failed to start: ${(e as Error).message.split("\n")[0]}`,
    );
  }
  return { engine: "dawn", gpu, version: `Dawn (${DAWN_PACKAGE})` };
}

/** What to install when an engine finds no adapter, for the one-line error. */
export function noAdapterHint(engine: Engine): string {
  return engine === "dawn"
    ? "Dawn needs a Vulkan driver: on Debian 12 without a GPU, Mesa 25's lavapipe " +
      "(apt-get install -t bookworm-backports mesa-vulkan-drivers; Mesa 22's is refused)"
    : "install a Vulkan driver, e.g. Debian's mesa-vulkan-drivers, or set LCE_ADAPTER";
}
