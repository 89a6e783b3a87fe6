/**
 * The GPU context: adapter choice and report, device with the limits the kernels need, tracked
 * allocations (live and peak bytes by role), a pipeline cache, and error capture that turns
 * validation errors, out-of-memory and device loss into {@link GpuError}s.
 * @module
 */
import { GpuError } from "../core/errors.ts";
import {
  type Engine,
  engineFromEnv,
  isDawn,
  loadEngine,
  noAdapterHint,
  parseEngine,
} from "./engine.ts";
import {
  bindingConflict,
  bindingRange,
  type BindingResource,
  bindingsOf,
  bufferBinding,
  layoutEntries,
  type PipelineBinding,
  rememberGroup,
  unusedBinding,
} from "./bindings.ts";

export { bindingConflict, bindingRange } from "./bindings.ts";
export type { BindingResource, BoundBuffer, PipelineBinding } from "./bindings.ts";
import { deviceReport } from "./device_report.ts";

/** Which adapter to use: `auto` (a hardware one if any), `software` (force the fallback one). */
export type AdapterChoice = "auto" | "software" | "hardware";

/** What an allocation is for; memory reports break peaks down by role. */
export type BufferRole = "input" | "workspace" | "output" | "params";

/** Options of {@link GpuContext.create}. */
export interface ContextOptions {
  /** Adapter choice; default from the environment variable LCE_ADAPTER, else `auto`. */
  adapter?: AdapterChoice;
  /** WebGPU implementation; default from the environment variable LCE_WEBGPU, else `deno`. */
  engine?: Engine;
  /**
   * Per-binding byte limit to use instead of the adapter's maxStorageBufferBindingSize (only
   * smaller values take effect). Tests use it to force sharding on small shapes.
   */
  maxBindingBytes?: number;
  /**
   * Fill every new storage buffer (not uniforms) with 0xFF bytes — NaN in every float dtype — so
   * a kernel that leaves an element unwritten, or relies on zero-initialised memory, shows up.
   */
  poison?: boolean;
}

/** A subgroup-matrix configuration the adapter offers (Dawn's experimental extension). */
export interface SubgroupMatrixConfig {
  componentType: string;
  resultComponentType: string;
  M: number;
  N: number;
  K: number;
}

/** A description of the adapter and device, for reports. */
export interface AdapterReport {
  /** The WebGPU implementation. */
  engine: Engine;
  /** The implementation and its version, e.g. "wgpu (Deno 2.9.6)", "Dawn (npm:webgpu@0.6.2)". */
  engineVersion: string;
  description: string;
  vendor: string;
  architecture: string;
  device: string;
  isFallbackAdapter: boolean;
  features: string[];
  limits: Record<string, number>;
  /** Per-binding limit in effect (may be lowered by ContextOptions.maxBindingBytes). */
  maxBindingBytes: number;
  /** Subgroup-matrix configurations of the device (empty without the extension). */
  subgroupMatrixConfigs: SubgroupMatrixConfig[];
}

/** Counters of tracked bytes: live now and peak since the last reset, in total and by role. */
export interface MemoryStats {
  liveBytes: number;
  peakBytes: number;
  liveByRole: Record<BufferRole, number>;
  peakByRole: Record<BufferRole, number>;
}

const ROLES: BufferRole[] = ["input", "workspace", "output", "params"];
const zeroRoles = (): Record<BufferRole, number> => ({
  input: 0,
  workspace: 0,
  output: 0,
  params: 0,
});

/** A GPUBuffer whose bytes are counted by the context until {@link TrackedBuffer.destroy}. */
export class TrackedBuffer {
  #ctx: GpuContext;
  #alive = true;
  /** The underlying buffer. */
  readonly buffer: GPUBuffer;
  /** Size in bytes. */
  readonly size: number;
  /** What it is for. */
  readonly role: BufferRole;
  /** @internal use {@link GpuContext.createBuffer}. */
  constructor(ctx: GpuContext, buffer: GPUBuffer, size: number, role: BufferRole) {
    this.#ctx = ctx;
    this.buffer = buffer;
    this.size = size;
    this.role = role;
  }
  /** Whether destroy() has not been called yet. */
  get alive(): boolean {
    return this.#alive;
  }
  /** Byte offset of the data in {@link buffer}: 0 here (a caller's buffer may start later). */
  get offset(): number {
    return 0;
  }
  /** What a bind group binds: the whole buffer here (a range of a caller's buffer otherwise). */
  get binding(): GPUBufferBinding {
    return { buffer: this.buffer };
  }
  /**
   * Frees the buffer (the GPU keeps it until work already submitted is done; the context may keep
   * it for reuse, see {@link GpuContext.cacheLimitBytes}). Idempotent.
   */
  destroy(): void {
    if (!this.#alive) return;
    this.#alive = false;
    this.#ctx._untrack(this);
    this.#ctx._recycle(this.buffer, this.size);
  }
}

/** Options of {@link GpuContext.createBuffer}. */
export interface BufferOptions {
  /** Bytes; rounded up to a multiple of 4. */
  size: number;
  role: BufferRole;
  label: string;
  /** Extra usages beyond STORAGE | COPY_SRC | COPY_DST. */
  usage?: number;
}

/** The adapter's choice from the environment (LCE_ADAPTER), default auto. */
export function adapterFromEnv(): AdapterChoice {
  let v: string | undefined;
  try {
    v = Deno.env.get("LCE_ADAPTER");
  } catch {
    v = undefined;
  }
  if (v === undefined || v === "") return "auto";
  if (v === "auto" || v === "software" || v === "hardware") return v;
  throw new GpuError("limits", `LCE_ADAPTER must be auto, software or hardware, got '${v}'`);
}

/**
 * The adapter and engine options of a command's `--adapter` and `--webgpu` flags (core/cli.ts's
 * ADAPTER_FLAG and WEBGPU_FLAG, which have validated them).
 */
export function deviceFlags(f: { adapter: string; webgpu: string }): ContextOptions {
  return { adapter: f.adapter as AdapterChoice, engine: parseEngine(f.webgpu) };
}

/** An open device with tracked allocations. Create with {@link GpuContext.create}. */
export class GpuContext {
  /** The adapter in use (undefined over a caller's device given without it: fromDevice). */
  readonly adapter: GPUAdapter | undefined;
  /** The device, created with the adapter's own limits. */
  readonly device: GPUDevice;
  /** Description for reports. */
  readonly report: AdapterReport;
  /** Whether WGSL `enable f16;` is available. */
  readonly hasF16: boolean;
  /** Whether compute passes can be timed with timestamp queries. */
  readonly hasTimestamps: boolean;
  /** The WebGPU implementation the device runs on. */
  readonly engine: Engine;
  /** Bytes one storage binding may span. */
  readonly maxBindingBytes: number;
  /** Bytes one buffer may hold. */
  readonly maxBufferBytes: number;
  /** Whether new buffers are poisoned (see ContextOptions.poison). */
  poison = false;
  /** Set when the device is lost: the reason. */
  lostReason: string | undefined;

  #live = zeroRoles();
  #peak = zeroRoles();
  #liveTotal = 0;
  #peakTotal = 0;
  #pipelines = new Map<string, GPUComputePipeline>();
  #layouts = new WeakMap<GPUComputePipeline, { label: string; bindings: PipelineBinding[] }>();
  #uncaptured: string[] = [];

  private constructor(
    adapter: GPUAdapter | undefined,
    device: GPUDevice,
    report: AdapterReport,
  ) {
    this.adapter = adapter;
    this.device = device;
    this.report = report;
    this.hasF16 = device.features.has("shader-f16");
    this.hasTimestamps = device.features.has("timestamp-query");
    this.engine = report.engine;
    this.maxBindingBytes = report.maxBindingBytes;
    this.maxBufferBytes = device.limits.maxBufferSize;
    device.lost.then((info) => {
      this.lostReason = `${info.reason ?? "unknown"}: ${info.message}`;
    });
    device.addEventListener("uncapturederror", (ev) => {
      ev.preventDefault(); // handled here (throwUncaptured): Dawn would also print it to stdout
      const e = (ev as GPUUncapturedErrorEvent).error;
      this.#uncaptured.push(`${e.constructor.name}: ${e.message.split("\n")[0]}`);
    });
  }

  /** Opens the chosen adapter and a device with every limit raised to the adapter's maximum. */
  static async create(opts: ContextOptions = {}): Promise<GpuContext> {
    const engine = opts.engine ?? engineFromEnv();
    const { requestAdapter, version } = await loadEngine(engine);
    const choice = opts.adapter ?? adapterFromEnv();
    let adapter: GPUAdapter | null;
    if (choice === "software") {
      adapter = await requestAdapter({ forceFallbackAdapter: true });
      if (adapter && !_isFallback(adapter)) {
        adapter = null; // asked for a software adapter, got hardware
      }
    } else {
      adapter = await requestAdapter({ powerPreference: "high-performance" });
      if (adapter && choice === "hardware" && _isFallback(adapter)) adapter = null;
    }
    if (!adapter) {
      throw new GpuError(
        "internal",
        `no ${choice === "auto" ? "" : choice + " "}WebGPU adapter found on ${engine} (${
          noAdapterHint(engine)
        })`,
      );
    }
    const requiredLimits: Record<string, number> = {};
    for (const k in adapter.limits) {
      const val = (adapter.limits as unknown as Record<string, number>)[k];
      if (typeof val === "number") requiredLimits[k] = val;
    }
    // subgroups and the subgroup-matrix extension serve the tensor-core kernels (Dawn offers them)
    const want = [
      "shader-f16",
      "timestamp-query",
      ...(isDawn(engine) ? ["subgroups", "chromium-experimental-subgroup-matrix"] : []),
    ] as GPUFeatureName[];
    const requiredFeatures = want.filter((f) => adapter!.features.has(f));
    let device: GPUDevice;
    try {
      device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
    } catch (e) {
      throw new GpuError("internal", `requestDevice failed: ${(e as Error).message}`);
    }
    return GpuContext.fromOpened(adapter, device, { ...opts, engine, engineVersion: version });
  }

  /**
   * A context on an adapter and a device this library opened: what {@link create} does once it has
   * them. Tools that emulate another adapter (the kernel manifest, testing/emulated_device.ts) pass
   * their own. (A program's own device: {@link fromDevice}.)
   */
  static fromOpened(
    adapter: GPUAdapter,
    device: GPUDevice,
    opts: ContextOptions & { engine: Engine; engineVersion: string },
  ): GpuContext {
    const { engine, engineVersion: version } = opts;
    const info = adapter.info;
    const limits: Record<string, number> = {};
    for (const k in device.limits) {
      const val = (device.limits as unknown as Record<string, number>)[k];
      if (typeof val === "number") limits[k] = val;
    }
    let maxBinding = device.limits.maxStorageBufferBindingSize;
    if (opts.maxBindingBytes !== undefined && opts.maxBindingBytes < maxBinding) {
      maxBinding = Math.max(256, Math.floor(opts.maxBindingBytes / 16) * 16);
    }
    const report: AdapterReport = {
      engine,
      engineVersion: version,
      description: adapterName(info),
      vendor: info.vendor,
      architecture: info.architecture,
      device: info.device,
      isFallbackAdapter: _isFallback(adapter),
      features: [...device.features].sort(),
      limits,
      maxBindingBytes: maxBinding,
      subgroupMatrixConfigs: _subgroupMatrixConfigs(adapter, device),
    };
    const ctx = new GpuContext(adapter, device, report);
    ctx.poison = opts.poison ?? false;
    return ctx;
  }

  #ownsDevice = true;

  /**
   * A context over a device the caller already has (its own WebGPU program's), so that methods run
   * on its buffers (methods/on_buffers.ts). The caller keeps the device: {@link destroy} leaves it
   * open. The kernels need the limits they need: a device requested with the adapter's limits (as
   * {@link create} does) runs every method, a device with the default limits may refuse some (a
   * pipeline's validation error names the limit). `adapter` only adds its description to reports;
   * `engine` defaults to `deno` when the device is Deno's own, else `dawn`.
   */
  static fromDevice(
    device: GPUDevice,
    opts: { adapter?: GPUAdapter; engine?: Engine; maxBindingBytes?: number; poison?: boolean } =
      {},
  ): GpuContext {
    const engine = opts.engine ??
      (typeof GPUDevice !== "undefined" && device instanceof GPUDevice ? "deno" : "dawn");
    const a = opts.adapter;
    const report = deviceReport(device, engine, {
      info: a?.info,
      isFallback: a ? _isFallback(a) : undefined,
      subgroupMatrixConfigs: a ? _subgroupMatrixConfigs(a, device) : [],
      maxBindingBytes: opts.maxBindingBytes,
    });
    const ctx = new GpuContext(a, device, report);
    ctx.#ownsDevice = false;
    ctx.poison = opts.poison ?? false;
    return ctx;
  }

  /** Allocates a tracked storage buffer. Throws GpuError when past the adapter's limits. */
  createBuffer(o: BufferOptions): TrackedBuffer {
    const size = Math.max(4, Math.ceil(o.size / 4) * 4);
    if (size > this.maxBufferBytes) {
      throw new GpuError(
        "limits",
        `${o.label}: a buffer of ${size} bytes exceeds the adapter's maxBufferSize ${this.maxBufferBytes}`,
      );
    }
    this.assertAlive();
    if (this.#liveTotal + size > this.allocationLimitBytes) {
      // refused before anything is allocated: a measurement caps a cell at its memory budget
      throw new GpuError(
        "out-of-memory",
        `${o.label}: ${size} more bytes would make ${this.#liveTotal + size} live, over the ` +
          `allocation limit of ${this.allocationLimitBytes}`,
      );
    }
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST |
      (o.usage ?? 0);
    const cached = this.#cache.get(`${size}:${usage}`)?.pop();
    let buffer: GPUBuffer;
    if (cached) {
      buffer = cached;
      this.#cachedBytes -= size;
      if (o.role !== "params" && !this.poison) {
        // a new buffer reads as zeros in WebGPU: so does a reused one
        const enc = this.device.createCommandEncoder();
        enc.clearBuffer(buffer);
        this.device.queue.submit([enc.finish()]);
      }
    } else {
      buffer = this.device.createBuffer({ size, usage, label: o.label });
    }
    const t = new TrackedBuffer(this, buffer, size, o.role);
    if (this.poison && o.role !== "params") {
      const chunk = new Uint8Array(Math.min(size, 1 << 24)).fill(0xff);
      for (let off = 0; off < size; off += chunk.byteLength) {
        this.device.queue.writeBuffer(
          buffer,
          off,
          chunk,
          0,
          Math.min(chunk.byteLength, size - off),
        );
      }
    }
    this.#live[o.role] += size;
    this.#liveTotal += size;
    if (this.#live[o.role] > this.#peak[o.role]) this.#peak[o.role] = this.#live[o.role];
    if (this.#liveTotal > this.#peakTotal) this.#peakTotal = this.#liveTotal;
    return t;
  }

  /** A small uniform buffer holding `words` (u32/i32/f32 as raw 32-bit words), tracked as params. */
  uniform(words: ArrayBuffer | ArrayBufferView, label: string): TrackedBuffer {
    const bytes = words instanceof ArrayBuffer ? new Uint8Array(words) : new Uint8Array(
      words.buffer,
      words.byteOffset,
      words.byteLength,
    );
    const size = Math.max(16, Math.ceil(bytes.byteLength / 16) * 16);
    const t = this.createBuffer({ size, role: "params", label, usage: GPUBufferUsage.UNIFORM });
    this.device.queue.writeBuffer(t.buffer, 0, bytes as Uint8Array<ArrayBuffer>);
    return t;
  }

  /** @internal called by TrackedBuffer.destroy. */
  _untrack(t: TrackedBuffer): void {
    this.#live[t.role] -= t.size;
    this.#liveTotal -= t.size;
  }

  /**
   * Most tracked bytes live at once: {@link GpuContext.createBuffer} refuses (GpuError
   * out-of-memory, nothing allocated) a buffer past it. Infinity by default; the measurement
   * layer sets it to the free memory a cell may use.
   */
  allocationLimitBytes = Infinity;

  /**
   * Freed buffers kept for reuse by a later {@link GpuContext.createBuffer} of the same size and
   * usage, at most this many bytes (the rest are destroyed), as PyTorch's caching allocator keeps
   * freed blocks: allocating gigabytes from the driver costs about 50 ms per GB on an H100, which
   * would otherwise be paid by every repetition of a materialising method. Tracked memory counts
   * live buffers only (like torch.cuda.memory_allocated); a reused buffer is cleared to zero (or
   * poisoned), as a new one would be. 0 turns the cache off.
   */
  cacheLimitBytes = 0;
  #cache = new Map<string, GPUBuffer[]>();
  #cachedBytes = 0;

  /** @internal called by TrackedBuffer.destroy: keeps the buffer for reuse or destroys it. */
  _recycle(buffer: GPUBuffer, size: number): void {
    if (this.lostReason || this.#cachedBytes + size > this.cacheLimitBytes) {
      buffer.destroy();
      return;
    }
    const key = `${size}:${buffer.usage}`;
    const list = this.#cache.get(key) ?? [];
    list.push(buffer);
    this.#cache.set(key, list);
    this.#cachedBytes += size;
  }

  /** Bytes of freed buffers kept for reuse now. */
  get cachedBytes(): number {
    return this.#cachedBytes;
  }

  /** Destroys every buffer kept for reuse (e.g. between methods, so one's blocks never crowd another's). */
  releaseCache(): void {
    for (const list of this.#cache.values()) for (const b of list) b.destroy();
    this.#cache.clear();
    this.#cachedBytes = 0;
  }

  /** Live and peak tracked bytes. */
  memory(): MemoryStats {
    return {
      liveBytes: this.#liveTotal,
      peakBytes: this.#peakTotal,
      liveByRole: { ...this.#live },
      peakByRole: { ...this.#peak },
    };
  }

  /** Resets the peaks to the bytes live now (call before a measured region). */
  resetPeak(): void {
    this.#peakTotal = this.#liveTotal;
    for (const r of ROLES) this.#peak[r] = this.#live[r];
  }

  /** A compute pipeline for `code` (cached by source text), compiled with errors turned into GpuError. */
  async pipeline(code: string, label: string): Promise<GPUComputePipeline> {
    const hit = this.#pipelines.get(code);
    if (hit) return hit;
    this.assertAlive();
    this.device.pushErrorScope("validation");
    const module = this.device.createShaderModule({ code, label });
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((m) => m.type === "error");
    let p: GPUComputePipeline | undefined;
    if (errors.length === 0) {
      try {
        const desc = this.#descriptor(code, label, module);
        // Dawn's asynchronous creation leaves garbage that V8 takes seconds to collect (see
        // docs/engines.md); the synchronous one reports its errors to the scope opened above
        p = isDawn(this.engine)
          ? this.device.createComputePipeline(desc)
          : await this.device.createComputePipelineAsync(desc);
      } catch (e) {
        await this.device.popErrorScope();
        throw new GpuError(
          "validation",
          `${label}: pipeline creation failed: ${(e as Error).message}`,
        );
      }
    }
    const err = await this.device.popErrorScope();
    if (errors.length > 0 || err || !p) {
      const first = errors[0];
      const msg = first?.message.split("\n").map((l) => l.trim()).filter((l) => l).join(" ")
        .slice(0, 400);
      const where = first ? ` at line ${first.lineNum}:${first.linePos}: ${msg}` : "";
      throw new GpuError(
        "validation",
        `${label}: WGSL compilation failed${where}${
          err?.message.split("\n")[0] ? ` (${err.message.split("\n")[0]})` : ""
        }`,
      );
    }
    this.#remember(p, code, label);
    return p;
  }

  /**
   * A compute pipeline for `code` compiled synchronously (sharing {@link pipeline}'s cache), for
   * kernel variants compiled only when a dispatch first needs one: a compilation error is then
   * the device's validation error, which the enclosing {@link scoped} call reports.
   */
  pipelineNow(code: string, label: string): GPUComputePipeline {
    const hit = this.#pipelines.get(code);
    if (hit) return hit;
    this.assertAlive();
    const module = this.device.createShaderModule({ code, label });
    const p = this.device.createComputePipeline(this.#descriptor(code, label, module));
    this.#remember(p, code, label);
    return p;
  }

  /** Caches a pipeline by its source and keeps its label and bindings for bind groups. */
  #remember(p: GPUComputePipeline, code: string, label: string): void {
    this.#pipelines.set(code, p);
    this.#layouts.set(p, { label, bindings: bindingsOf(code) });
  }

  /** The pipeline of `module`'s `main` with one bind group laid out from `code`'s bindings. */
  #descriptor(
    code: string,
    label: string,
    module: GPUShaderModule,
  ): GPUComputePipelineDescriptor {
    return {
      layout: this.device.createPipelineLayout({
        bindGroupLayouts: [this.device.createBindGroupLayout({ entries: layoutEntries(code) })],
      }),
      compute: { module, entryPoint: "main" },
      label,
    };
  }

  /**
   * A bind group of `pipeline`'s group 0 from resources in binding order (the i-th at binding i).
   * Refuses, naming the kernel and the two bindings, what WebGPU forbids within one dispatch
   * ({@link bindingConflict}): writable bindings of overlapping ranges of one buffer, or a buffer
   * bound writable and read-only at once.
   */
  bindGroup(
    pipeline: GPUComputePipeline,
    resources: BindingResource[],
    label: string,
  ): GPUBindGroup {
    const info = this.#layouts.get(pipeline);
    const bound = resources.map((r, i) => {
      const b = info?.bindings.find((x) => x.index === i);
      return { name: b?.name ?? `#${i}`, type: b?.type, ...bindingRange(r) };
    });
    const clash = bindingConflict(bound);
    if (clash) throw new GpuError("validation", `${info?.label ?? label}: ${clash}`);
    const entries = resources.map((r, i) => ({ binding: i, resource: bufferBinding(r) }));
    const group = this.device.createBindGroup({
      label,
      layout: pipeline.getBindGroupLayout(0),
      entries,
    });
    rememberGroup(group, info?.label ?? label, bound);
    return group;
  }

  /** The device's buffer for bindings a dispatch never accesses (see unusedBinding). */
  get unusedBinding(): GPUBuffer {
    return unusedBinding(this.device);
  }

  /**
   * Runs `fn` inside out-of-memory and validation error scopes; a captured error, an uncaptured
   * error or a lost device becomes a GpuError after `fn` settles.
   */
  async scoped<T>(fn: () => Promise<T>): Promise<T> {
    this.assertAlive();
    this.device.pushErrorScope("internal");
    this.device.pushErrorScope("out-of-memory");
    this.device.pushErrorScope("validation");
    let result: T | undefined;
    let thrown: unknown;
    try {
      result = await fn();
    } catch (e) {
      thrown = e;
    }
    const validation = await this.device.popErrorScope();
    const oom = await this.device.popErrorScope();
    const internal = await this.device.popErrorScope();
    if (this.lostReason) throw new GpuError("device-lost", `GPU device lost (${this.lostReason})`);
    if (oom) {
      throw new GpuError("out-of-memory", `GPU out of memory: ${oom.message.split("\n")[0]}`);
    }
    if (validation) {
      throw new GpuError(
        "validation",
        `WebGPU validation error: ${validation.message.split("\n")[0]}`,
      );
    }
    if (internal) {
      throw new GpuError("internal", `WebGPU internal error: ${internal.message.split("\n")[0]}`);
    }
    await this.device.queue.onSubmittedWorkDone(); // delivers pending uncapturederror events
    this.throwUncaptured();
    if (thrown !== undefined) throw thrown;
    return result as T;
  }

  /** Throws a GpuError if an uncaptured WebGPU error happened since the last call. */
  throwUncaptured(): void {
    if (this.#uncaptured.length > 0) {
      const msgs = this.#uncaptured.splice(0);
      throw new GpuError("validation", `uncaptured WebGPU error: ${msgs[0]}`);
    }
  }

  /** Throws GpuError("device-lost") when the device is gone. */
  assertAlive(): void {
    if (this.lostReason) throw new GpuError("device-lost", `GPU device lost (${this.lostReason})`);
  }

  /** Destroys the device (a caller's device, see fromDevice, stays open: only the cache goes). */
  destroy(): void {
    this.releaseCache();
    if (this.#ownsDevice) this.device.destroy();
  }
}

/**
 * The adapter's name for reports. Dawn's Vulkan backend on NVIDIA describes an adapter by its
 * driver ("NVIDIA: 580.159.04 580.159.4.0") and names the card in `device`
 * ("nvidia-h100-80gb-hbm3"): the card's name is taken there, so that both engines' reports of one
 * card carry one adapter name.
 */
export function adapterName(info: { description?: string; device?: string }): string {
  const d = info.description ?? "";
  if (/^[A-Za-z][\w .-]*: \d+(\.\d+)+/.test(d) && info.device) return info.device;
  return d || "(no description)";
}

/** The device's subgroup-matrix configurations, read from the adapter's info (Dawn only). */
function _subgroupMatrixConfigs(a: GPUAdapter, d: GPUDevice): SubgroupMatrixConfig[] {
  if (!d.features.has("chromium-experimental-subgroup-matrix" as GPUFeatureName)) return [];
  const info = a.info as GPUAdapterInfo & { subgroupMatrixConfigs?: SubgroupMatrixConfig[] };
  return (info.subgroupMatrixConfigs ?? []).map((c) => ({
    componentType: String(c.componentType),
    resultComponentType: String(c.resultComponentType),
    M: Number(c.M),
    N: Number(c.N),
    K: Number(c.K),
  }));
}

function _isFallback(a: GPUAdapter): boolean {
  const info = a.info as GPUAdapterInfo & { isFallbackAdapter?: boolean };
  const legacy = (a as unknown as { isFallbackAdapter?: boolean }).isFallbackAdapter;
  return Boolean(info.isFallbackAdapter ?? legacy);
}
