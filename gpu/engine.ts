/**
 * The WebGPU implementation a context runs on: `deno`, Deno's built-in WebGPU (wgpu, also
 * Firefox's), `dawn`, Chrome's WebGPU from the npm package `webgpu` made by the Dawn team,
 * loaded only when asked for (it needs `--allow-ffi`), or `dawn-unchecked`, Dawn with its
 * robustness off ({@link DAWN_UNCHECKED_TOGGLE}).
 *
 * Each Dawn engine's instance is created once per process with one set of toggles (see
 * {@link dawnToggles}): a second `enable-dawn-features=` entry would replace the first, so every
 * enabled toggle is in one entry. Loading Dawn also bounds the cost of its event polling
 * ({@link throttleDawnPolling}), and its adapter request keeps two known notices off stderr
 * ({@link DAWN_NOTICE}). docs/engines.md tells why.
 * @module
 */
import v8 from "node:v8";
import vm from "node:vm";
import { GpuError, InputError } from "../core/errors.ts";
import { choiceList } from "../core/cli.ts";

/**
 * A WebGPU implementation: `deno`, `dawn`, or `dawn-unchecked`, Dawn with its robustness off
 * ({@link DAWN_UNCHECKED_TOGGLE}).
 */
export type Engine = "deno" | "dawn" | "dawn-unchecked";

/** Every engine, in the order usage lines list them. */
export const ENGINES: readonly Engine[] = ["deno", "dawn", "dawn-unchecked"];

/** Whether `engine` is Dawn, with or without its robustness. */
export function isDawn(engine: Engine | undefined): boolean {
  return engine === "dawn" || engine === "dawn-unchecked";
}

/** The npm package that brings Dawn (pinned: reports name this version). */
export const DAWN_PACKAGE = "npm:webgpu@0.6.2";

/**
 * Toggles of the Dawn instance:
 * - `allow_unsafe_apis`: the experimental subgroup-matrix extension (tensor cores) is offered
 *   only with it;
 * - `vulkan_enable_f16_on_nvidia`: Dawn withholds shader-f16 on NVIDIA drivers older than 615.71
 *   for known wrong f16 results; the f16 parity tests on the GPU host are what decide whether the
 *   numbers are right there;
 * - `timestamp_quantization` off: Dawn rounds timestamp queries down to 65.536 µs (a browser's
 *   defence against timing attacks) unless told otherwise, which would quantise every kernel time.
 */
export const DAWN_INSTANCE_TOGGLES: readonly string[] = [
  "enable-dawn-features=allow_unsafe_apis,vulkan_enable_f16_on_nvidia",
  "disable-dawn-features=timestamp_quantization",
];

/**
 * The toggle of the `dawn-unchecked` engine: `disable_robustness` drops Tint's robustness
 * transform (the clamping of every array index, storage and workgroup alike) and Vulkan's
 * robustBufferAccess. The WGSL and every result stay the same as long as no access falls outside
 * its array; an access that does is undefined behaviour instead of a clamped one. The kernels'
 * own bounds tests are what keep them inside: the parity tests and `scripts/tc_check.ts` run on it
 * (docs/engines.md). What it is worth: the H200 tables of both Dawn engines.
 */
export const DAWN_UNCHECKED_TOGGLE = "disable_robustness";

/** The toggles of a Dawn engine's instance (every enabled one in one entry). */
export function dawnToggles(engine: Engine): string[] {
  const [enable, ...rest] = DAWN_INSTANCE_TOGGLES;
  const extra = engine === "dawn-unchecked" ? `,${DAWN_UNCHECKED_TOGGLE}` : "";
  return [enable + extra, ...rest];
}

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
  throw new InputError(`${what} must be ${choiceList(ENGINES)}, got '${value}'`);
}

/** A loaded engine: its GPU object and the words reports use for it. */
export interface LoadedEngine {
  engine: Engine;
  gpu: GPU;
  /** e.g. "wgpu (Deno 2.9.6)" or "Dawn (npm:webgpu@0.6.2)". */
  version: string;
  /**
   * `gpu.requestAdapter`, with Dawn's limit-clamping notices (see {@link DAWN_NOTICE}) kept off
   * the terminal; everything else it prints reaches stderr unchanged.
   */
  requestAdapter(options: GPURequestAdapterOptions): Promise<GPUAdapter | null>;
}

/**
 * The name reports give an engine: `wgpu` (Deno's), `Dawn`, or `Dawn, robustness off`; old
 * reports without one are wgpu.
 */
export function engineName(engine: Engine | undefined): string {
  return _ENGINE_NAMES[engine ?? "deno"];
}

const _ENGINE_NAMES: Record<Engine, string> = {
  deno: "wgpu",
  dawn: "Dawn",
  "dawn-unchecked": "Dawn, robustness off",
};

/**
 * A line Dawn's native code prints to stderr when it first enumerates a Vulkan adapter that
 * offers more dynamic buffers per pipeline layout than Dawn allocates room for (lavapipe and
 * NVIDIA's driver both do): a statement about a limit this project never uses, not an error.
 */
export const DAWN_NOTICE =
  /^Warning: maxDynamic(?:Uniform|Storage)BuffersPerPipelineLayout artificially reduced from \d+ to \d+ to fit dynamic offset allocation limit\.$/;

const _dawn = new Map<Engine, Promise<LoadedEngine>>();

/** The GPU object of `engine` (Dawn's module is imported, and its instance made, on first use). */
export function loadEngine(engine: Engine): Promise<LoadedEngine> {
  if (engine === "deno") {
    if (!("gpu" in navigator) || !navigator.gpu) {
      return Promise.reject(
        new GpuError("internal", "WebGPU is not available in this Deno (navigator.gpu missing)"),
      );
    }
    const gpu = navigator.gpu;
    return Promise.resolve({
      engine,
      gpu,
      version: `wgpu (Deno ${Deno.version.deno})`,
      requestAdapter: (o) => gpu.requestAdapter(o),
    });
  }
  let p = _dawn.get(engine);
  if (!p) {
    p = _loadDawn(engine).catch((e) => {
      _dawn.delete(engine);
      throw e;
    });
    _dawn.set(engine, p);
  }
  return p;
}

async function _loadDawn(engine: Engine): Promise<LoadedEngine> {
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
  throttleDawnPolling();
  let gpu: GPU;
  try {
    gpu = mod.create(dawnToggles(engine));
  } catch (e) {
    throw new GpuError(
      "internal",
      `Dawn (${DAWN_PACKAGE}) failed to start: ${(e as Error).message.split("\n")[0]}`,
    );
  }
  return {
    engine,
    gpu,
    version: `Dawn (${DAWN_PACKAGE}${engine === "dawn-unchecked" ? ", robustness off" : ""})`,
    requestAdapter: (o) => _requestDawnAdapter(gpu, o),
  };
}

/** What Dawn printed while it found no adapter, for the error's one line. */
let _noAdapterWhy: string | undefined;

/**
 * Dawn's requestAdapter with its stderr held back: the adapters are enumerated, and the notices
 * printed, inside the synchronous part of the call. When an adapter is found, what Dawn printed
 * (the known notices aside) goes to stderr; when none is, it becomes part of the error's line.
 */
async function _requestDawnAdapter(
  gpu: GPU,
  o: GPURequestAdapterOptions,
): Promise<GPUAdapter | null> {
  const { value, lines } = captureStderr(() => gpu.requestAdapter(o));
  const kept = lines.filter((l) => !DAWN_NOTICE.test(l));
  const adapter = await value;
  if (adapter) {
    if (kept.length > 0) Deno.stderr.writeSync(new TextEncoder().encode(kept.join("\n") + "\n"));
    _noAdapterWhy = undefined;
  } else {
    const said = kept.map((l) => l.trim().replace(/^Warning: /, "")).filter((l) =>
      l !== "" && !l.startsWith("at ")
    );
    _noAdapterWhy = said.length > 0 ? said.slice(0, 2).join("; ") : undefined;
  }
  return adapter;
}

/** Immediate polls of one wait before Dawn's polling falls back to a timer. */
const _IMMEDIATE_POLLS = 16;
/** A native poll later than this after the previous one starts a new wait (ms). */
const _NEW_WAIT_MS = 5;
/** Native polls between two forced garbage collections. */
export const DAWN_POLLS_PER_GC = 20000;

let _throttled = false;

/**
 * Bounds what Dawn's event polling costs. While a promise of Dawn's (a readback, a queue drain, an
 * error scope) is pending, dawn.node calls `setImmediate` with a fresh native function that
 * processes Dawn's events and schedules the next: about 15,000 function objects per second of
 * waiting, each with a native finalizer, and Deno runs a collection's finalizers in time that
 * grows faster than their number, so minutes of waiting on a slow adapter (a test suite on
 * lavapipe) left single collections that stalled the process for a minute and more, and the
 * spinning took a core from the adapter. The first {@link _IMMEDIATE_POLLS} polls of a wait stay
 * immediate (a short wait keeps its latency), later ones wait for a 1 ms timer; and every
 * {@link DAWN_POLLS_PER_GC} polls a full collection is forced while the batch is small (through
 * node:v8's flags; skipped where that is refused). Other callers of `setImmediate` are untouched:
 * only native callbacks are Dawn's.
 */
export function throttleDawnPolling(): void {
  if (_throttled) return;
  _throttled = true;
  const immediate = globalThis.setImmediate;
  const isNative = (f: unknown) =>
    typeof f === "function" && Function.prototype.toString.call(f).endsWith("{ [native code] }");
  const collect = _gcFunction();
  let polls = 0, last = 0, sinceGc = 0;
  const throttled = (cb: (...args: unknown[]) => void, ...args: unknown[]) => {
    if (!isNative(cb)) return immediate(cb, ...args);
    if (collect && ++sinceGc >= DAWN_POLLS_PER_GC) {
      sinceGc = 0;
      setTimeout(collect, 0);
    }
    const now = performance.now();
    polls = now - last > _NEW_WAIT_MS ? 1 : polls + 1;
    last = now;
    if (polls <= _IMMEDIATE_POLLS) return immediate(cb, ...args);
    return setTimeout(() => cb(...args), 1) as unknown as ReturnType<typeof immediate>;
  };
  globalThis.setImmediate = throttled as typeof globalThis.setImmediate;
}

/** V8's `gc`, exposed at run time (node:v8 sets the flag, node:vm hands out the function). */
function _gcFunction(): (() => void) | undefined {
  try {
    v8.setFlagsFromString("--expose-gc");
    const gc = vm.runInNewContext("gc");
    return typeof gc === "function" ? () => gc() : undefined;
  } catch {
    return undefined;
  }
}

interface _Libc {
  dup(fd: number): number;
  dup2(from: number, to: number): number;
  close(fd: number): number;
  creat(path: Uint8Array, mode: number): number;
}

let _libc: _Libc | null | undefined;

/** The few libc calls that redirect a file descriptor (Linux only; null elsewhere or without --allow-ffi). */
function _libcCalls(): _Libc | null {
  if (_libc !== undefined) return _libc;
  _libc = null;
  if (Deno.build.os !== "linux") return _libc;
  try {
    const lib = Deno.dlopen(
      "libc.so.6",
      {
        dup: { parameters: ["i32"], result: "i32" },
        dup2: { parameters: ["i32", "i32"], result: "i32" },
        close: { parameters: ["i32"], result: "i32" },
        creat: { parameters: ["buffer", "i32"], result: "i32" },
      } as const,
    );
    const f = lib.symbols;
    _libc = {
      dup: (fd) => f.dup(fd),
      dup2: (a, b) => f.dup2(a, b),
      close: (fd) => f.close(fd),
      creat: (path, mode) => f.creat(path, mode),
    };
  } catch {
    _libc = null;
  }
  return _libc;
}

/**
 * Runs `fn` with file descriptor 2 sent to a temporary file and returns what it printed there,
 * line by line: native code writes to the descriptor directly, so this is the one way to keep a
 * known notice off the terminal without losing anything else. Where the descriptor cannot be
 * redirected, `fn` simply runs (its output reaches stderr as usual) and no lines come back.
 */
export function captureStderr<T>(fn: () => T): { value: T; lines: string[] } {
  const libc = _libcCalls();
  if (!libc) return { value: fn(), lines: [] };
  let path: string;
  try {
    path = Deno.makeTempFileSync({ prefix: "lce-stderr-" });
  } catch {
    return { value: fn(), lines: [] };
  }
  const fd = libc.creat(new TextEncoder().encode(path + "\0"), 0o600);
  const saved = fd < 0 ? -1 : libc.dup(2);
  if (fd < 0 || saved < 0 || libc.dup2(fd, 2) < 0) {
    if (fd >= 0) libc.close(fd);
    if (saved >= 0) libc.close(saved);
    Deno.removeSync(path);
    return { value: fn(), lines: [] };
  }
  let value: T;
  try {
    value = fn();
  } finally {
    libc.dup2(saved, 2);
    libc.close(saved);
    libc.close(fd);
  }
  const text = Deno.readTextFileSync(path);
  Deno.removeSync(path);
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return { value, lines };
}

/**
 * What to install when an engine finds no adapter, for the one-line error (with what Dawn said
 * while it looked, when it said anything).
 */
export function noAdapterHint(engine: Engine): string {
  if (engine === "deno") {
    return "install a Vulkan driver, e.g. Debian's mesa-vulkan-drivers, or set LCE_ADAPTER";
  }
  return (_noAdapterWhy ? `Dawn said: ${_noAdapterWhy}; ` : "") +
    "Dawn needs a Vulkan driver: on Debian 12 without a GPU, Mesa 25's lavapipe " +
    "(apt-get install -t bookworm-backports mesa-vulkan-drivers; Mesa 22's is refused)";
}

/** What {@link deviceSummary} reads from an adapter report (old reports lack the engine fields). */
export interface EngineFacts {
  engine?: Engine;
  engineVersion?: string;
  features: readonly string[];
  subgroupMatrixConfigs?: readonly {
    componentType: string;
    resultComponentType: string;
    M: number;
    N: number;
    K: number;
  }[];
}

/** The device features the kernels can use, as reports name them, each with its WebGPU name. */
export const KERNEL_FEATURES: readonly (readonly [string, string])[] = [
  ["shader-f16", "shader-f16"],
  ["subgroups", "subgroups"],
  ["subgroup-matrix", "chromium-experimental-subgroup-matrix"],
  ["timestamp-query", "timestamp-query"],
];

/**
 * One phrase for reports: the engine and version, then which of {@link KERNEL_FEATURES} the
 * device had and which it lacked, e.g. `Dawn (npm:webgpu@0.6.2); shader-f16, subgroups,
 * subgroup-matrix (f16→f32 16×16×16), timestamp-query` or `wgpu (Deno 2.9.6); shader-f16,
 * timestamp-query; no subgroups, no subgroup-matrix`.
 */
export function deviceSummary(r: EngineFacts): string {
  const has: string[] = [], lacks: string[] = [];
  for (const [name, webgpu] of KERNEL_FEATURES) {
    if (!r.features.includes(webgpu)) {
      lacks.push(`no ${name}`);
      continue;
    }
    const configs = name === "subgroup-matrix" ? r.subgroupMatrixConfigs ?? [] : [];
    const sizes = [
      ...new Set(
        configs.map((c) => `${c.componentType}→${c.resultComponentType} ${c.M}×${c.N}×${c.K}`),
      ),
    ];
    has.push(sizes.length > 0 ? `${name} (${sizes.join(", ")})` : name);
  }
  const parts = [r.engineVersion ?? engineName(r.engine), has.join(", "), lacks.join(", ")];
  return parts.filter((p) => p !== "").join("; ");
}
