/**
 * What a bind group holds, and the rules of the WebGPU specification on buffers shared between
 * the bindings of one dispatch ({@link bindingConflict}), which GpuContext.bindGroup enforces.
 * @module
 */

import { GpuError } from "../core/errors.ts";

/** A tracked buffer (gpu/context.ts TrackedBuffer): the GPUBuffer it holds. */
export interface BufferHolder {
  readonly buffer: GPUBuffer;
  readonly role: string;
  /** The range a bind group binds, when not the whole buffer (a range of a caller's buffer). */
  readonly binding?: GPUBufferBinding;
}

/**
 * What one binding of a bind group holds: a whole buffer, or `size` bytes of it from `offset`
 * (default: the rest of the buffer).
 */
export type BindingResource =
  | BufferHolder
  | GPUBuffer
  | { buffer: BufferHolder | GPUBuffer; offset?: number; size?: number };

/** A resource as bound: the shader's name and type of its binding, its buffer and byte range. */
export interface BoundBuffer {
  name: string;
  /** Binding type (undefined where the pipeline's bindings are unknown). */
  type?: GPUBufferBindingType;
  buffer: GPUBuffer;
  offset: number;
  size: number;
}

/**
 * What the WebGPU specification forbids among the buffers bound for one dispatch, or undefined:
 * two writable ("storage") bindings whose byte ranges of one buffer overlap ("encoder bind groups
 * alias a writable resource"), or one buffer bound writable and also read-only or as a uniform,
 * whatever the ranges (a buffer is one subresource, and a writable usage is compatible with no
 * other in a usage scope). Read-only bindings may share a buffer freely.
 */
export function bindingConflict(bound: BoundBuffer[]): string | undefined {
  for (let i = 0; i < bound.length; i++) {
    for (let j = i + 1; j < bound.length; j++) {
      const a = bound[i], b = bound[j];
      if (a.buffer !== b.buffer) continue;
      const wa = a.type === "storage", wb = b.type === "storage";
      if (!wa && !wb) continue;
      const where = `bindings '${a.name}' and '${b.name}' share the buffer "${a.buffer.label}"`;
      const ra = `[${a.offset}, ${a.offset + a.size})`, rb = `[${b.offset}, ${b.offset + b.size})`;
      if (wa && wb) {
        if (a.offset < b.offset + b.size && b.offset < a.offset + a.size) {
          return `${where}: two writable bindings of overlapping byte ranges ${ra} and ${rb}`;
        }
        continue;
      }
      return `${where}: one writable, the other read-only (${ra} and ${rb})`;
    }
  }
  return undefined;
}

/** A binding of a compiled pipeline's group 0 as its shader declares it. */
export interface PipelineBinding {
  index: number;
  name: string;
  type: GPUBufferBindingType;
}

/**
 * The bind group layout declared by a shader's group-0 bindings, so that a binding the shader
 * does not use still belongs to the layout (an "auto" layout would drop it).
 */
export function bindingsOf(code: string): PipelineBinding[] {
  const re =
    /@group\(0\)\s*@binding\((\d+)\)\s*var<(uniform|storage)\s*(?:,\s*(read_write|read))?\s*>\s*(\w+)/g;
  const out: PipelineBinding[] = [];
  for (const m of code.matchAll(re)) {
    const type: GPUBufferBindingType = m[2] === "uniform"
      ? "uniform"
      : m[3] === "read_write"
      ? "storage"
      : "read-only-storage";
    out.push({ index: Number(m[1]), name: m[4], type });
  }
  return out.sort((a, b) => a.index - b.index);
}

const _isHolder = (x: object): x is BufferHolder => "role" in x && "buffer" in x;

/** The bind group layout entries of a shader's group-0 bindings. */
export function layoutEntries(code: string): GPUBindGroupLayoutEntry[] {
  return bindingsOf(code).map((b) => ({
    binding: b.index,
    visibility: GPUShaderStage.COMPUTE,
    buffer: { type: b.type },
  }));
}

/** The GPUBufferBinding of a resource. */
export function bufferBinding(r: BindingResource): GPUBufferBinding {
  if (_isHolder(r)) return r.binding ?? { buffer: r.buffer };
  if ("buffer" in r && !("usage" in r)) {
    if (_isHolder(r.buffer) && r.buffer.binding && r.buffer.binding.offset) {
      throw new RangeError("a range of a buffer that is itself a range of a caller's buffer");
    }
    const buffer = _isHolder(r.buffer) ? r.buffer.buffer : r.buffer;
    return { buffer, offset: r.offset, size: r.size };
  }
  return { buffer: r as GPUBuffer };
}

/** The buffer and the byte range [offset, offset + size) a binding resource covers. */
export function bindingRange(
  r: BindingResource,
): { buffer: GPUBuffer; offset: number; size: number } {
  const b = bufferBinding(r);
  const offset = b.offset ?? 0;
  return { buffer: b.buffer, offset, size: b.size ?? Math.max(0, b.buffer.size - offset) };
}

const _groups = new WeakMap<GPUBindGroup, { label: string; bound: BoundBuffer[] }>();

/** Keeps what a bind group binds (GpuContext.bindGroup), for {@link checkIndirect}. */
export function rememberGroup(group: GPUBindGroup, label: string, bound: BoundBuffer[]): void {
  _groups.set(group, { label, bound });
}

/**
 * Throws a GpuError when `args`, the indirect arguments of a dispatch with `group`, is bound
 * writable in the group (a buffer read as dispatch input cannot be written in that dispatch).
 */
export function checkIndirect(group: GPUBindGroup, args: GPUBuffer): void {
  const g = _groups.get(group);
  const w = g?.bound.find((b) => b.buffer === args && b.type === "storage");
  const what = `writes the buffer "${args.label}" that holds the dispatch's indirect arguments`;
  if (w) throw new GpuError("validation", `${g!.label}: binding '${w.name}' ${what}`);
}

const _unused = new WeakMap<GPUDevice, GPUBuffer>();

/**
 * A 64 KiB storage buffer of `device` (untracked, made once) for a binding a dispatch declares
 * but never accesses (an unsplit product's partials): it aliases no other binding's buffer. Its
 * size is above what Dawn asked of such a binding on an H100 (a pipeline's minimum binding size:
 * 1,024 bytes for an unsplit product's partials), so no engine refuses it.
 */
export function unusedBinding(device: GPUDevice): GPUBuffer {
  let b = _unused.get(device);
  if (!b) {
    b = device.createBuffer({
      size: 1 << 16,
      usage: GPUBufferUsage.STORAGE,
      label: "unused binding",
    });
    _unused.set(device, b);
  }
  return b;
}
