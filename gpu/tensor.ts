/**
 * Row-major 2-D tensors on the GPU, split by rows into shards so that no shard is larger than one
 * storage binding (the adapter's maxStorageBufferBindingSize). Kernels bind one shard at a time
 * and take the shard's first row as a parameter. f32/i32/u32 take a word per element; bf16 and f16
 * are packed two per u32 (element 2i in the low half), and shards of them start at even elements.
 * @module
 */
import { type BufferRole, type GpuContext, TrackedBuffer } from "./context.ts";
import { check, GpuError } from "../core/errors.ts";
import { decode, encode } from "../core/dtype.ts";
import type { Dtype } from "../core/options.ts";

/** Element types of device tensors. */
export type TensorDtype = Dtype | "i32" | "u32";

/** One slice of rows held in one buffer. */
export interface Shard {
  buffer: TrackedBuffer;
  /** First row of the tensor held by this shard. */
  rowStart: number;
  /** Number of rows held. */
  rows: number;
}

/** Bytes per element (2 for the packed 16-bit types). */
export function elementBytes(dtype: TensorDtype): number {
  return dtype === "bf16" || dtype === "f16" ? 2 : 4;
}

/** A sharded row-major tensor. Create with {@link createTensor}. */
export class DeviceTensor {
  constructor(
    readonly dtype: TensorDtype,
    readonly rows: number,
    readonly cols: number,
    readonly shards: Shard[],
    readonly label: string,
  ) {}
  /** Logical bytes (rows·cols·elementBytes). */
  get bytes(): number {
    return this.rows * this.cols * elementBytes(this.dtype);
  }
  /** Bytes actually allocated (padded shards). */
  get allocatedBytes(): number {
    return this.shards.reduce((s, sh) => s + sh.buffer.size, 0);
  }
  /** Frees every shard. */
  destroy(): void {
    for (const s of this.shards) s.buffer.destroy();
  }
  /** The shard holding `row`. */
  shardOf(row: number): Shard {
    for (const s of this.shards) if (row < s.rowStart + s.rows) return s;
    throw new RangeError(`${this.label}: row ${row} out of range`);
  }
}

/** Options of {@link createTensor}. */
export interface TensorOptions {
  dtype: TensorDtype;
  rows: number;
  cols: number;
  role: BufferRole;
  label: string;
  /** Largest number of rows in one shard (default: as many as fit one binding). */
  maxRowsPerShard?: number;
  /** Extra buffer usages (e.g. INDIRECT for dispatch arguments). */
  usage?: number;
}

/**
 * Shards of at least {@link SHARD_ALIGN_MIN} rows hold a multiple of this many rows: a product's
 * output tile (at most 256 rows or columns, kernels/gemm_tiles.ts) then never straddles a shard
 * boundary, so no dispatch runs a partly empty tile row. Unaligned, the paper's f32 logits
 * (8192 rows of 256,000) went into shards of 2097 rows: 66 row tiles of 128 for 64 tiles of work.
 */
export const SHARD_ALIGN = 256;
/** Fewer rows per binding than this are not aligned (the alignment would cost over 1/8 of them). */
export const SHARD_ALIGN_MIN = 8 * SHARD_ALIGN;

/**
 * Rows that fit one binding, for a tensor of `cols` columns of `dtype`: a multiple of
 * {@link SHARD_ALIGN} where at least {@link SHARD_ALIGN_MIN} rows fit, else all that fit (an even
 * count for 16-bit tensors of odd width).
 */
export function rowsPerBinding(ctx: GpuContext, dtype: TensorDtype, cols: number): number {
  const rowBytes = cols * elementBytes(dtype);
  let rows = Math.floor(ctx.maxBindingBytes / rowBytes);
  if (rows >= SHARD_ALIGN_MIN) rows -= rows % SHARD_ALIGN;
  if (elementBytes(dtype) === 2 && cols % 2 === 1) rows -= rows % 2; // shards start at even elements
  if (rows < 1 || (elementBytes(dtype) === 2 && cols % 2 === 1 && rows < 2)) {
    throw new GpuError(
      "limits",
      `one row of ${cols} ${dtype} values (${rowBytes} bytes) exceeds the per-binding limit of ${ctx.maxBindingBytes} bytes`,
    );
  }
  return rows;
}

/** Rows of each shard of a tensor of `rows` rows, `per` to a shard (none for 0 rows). */
export function shardRows(rows: number, per: number): number[] {
  const out: number[] = [];
  for (let r = 0; r < rows; r += per) out.push(Math.min(per, rows - r));
  return out;
}

/** Allocates a sharded tensor (contents undefined: zero on creation in WebGPU). */
export function createTensor(ctx: GpuContext, o: TensorOptions): DeviceTensor {
  let per = rowsPerBinding(ctx, o.dtype, o.cols);
  if (o.maxRowsPerShard !== undefined) {
    per = Math.min(per, Math.max(1, o.maxRowsPerShard));
    if (elementBytes(o.dtype) === 2 && o.cols % 2 === 1 && per > 1) per -= per % 2;
  }
  const shards: Shard[] = [];
  try {
    for (let r = 0; r < Math.max(o.rows, 1); r += per) {
      const rows = Math.min(per, o.rows - r);
      const bytes = Math.max(rows, 1) * o.cols * elementBytes(o.dtype);
      const buffer = ctx.createBuffer({
        size: Math.ceil(bytes / 16) * 16,
        role: o.role,
        label: shards.length === 0 && rows === o.rows ? o.label : `${o.label}[${shards.length}]`,
        usage: o.usage,
      });
      shards.push({ buffer, rowStart: r, rows });
    }
  } catch (e) {
    for (const s of shards) s.buffer.destroy();
    throw e;
  }
  return new DeviceTensor(o.dtype, o.rows, o.cols, shards, o.label);
}

/** Writes host values into a tensor (converted to its dtype). */
export function upload(
  ctx: GpuContext,
  t: DeviceTensor,
  data: Float32Array | Int32Array | Uint32Array | ArrayLike<number>,
): void {
  if (data.length !== t.rows * t.cols) {
    throw new RangeError(`${t.label}: upload of ${data.length} values into ${t.rows}×${t.cols}`);
  }
  for (const s of t.shards) {
    const lo = s.rowStart * t.cols, hi = lo + s.rows * t.cols;
    let bytes: Uint8Array;
    if (t.dtype === "i32") {
      const a = data instanceof Int32Array ? data.subarray(lo, hi) : Int32Array.from(
        Array.prototype.slice.call(data, lo, hi) as number[],
      );
      bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    } else if (t.dtype === "u32") {
      const a = data instanceof Uint32Array ? data.subarray(lo, hi) : Uint32Array.from(
        Array.prototype.slice.call(data, lo, hi) as number[],
      );
      bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    } else {
      const slice = data instanceof Float32Array ? data.subarray(lo, hi) : Float32Array.from(
        Array.prototype.slice.call(data, lo, hi) as number[],
      );
      bytes = encode(slice, t.dtype);
    }
    // writeBuffer needs a multiple of 4 bytes
    if (bytes.byteLength % 4 !== 0) {
      const padded = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
      padded.set(bytes);
      bytes = padded;
    }
    ctx.device.queue.writeBuffer(
      s.buffer.buffer,
      s.buffer.offset,
      bytes as Uint8Array<ArrayBuffer>,
    );
  }
}

/** Creates a tensor and uploads `data` into it. */
export function fromHost(
  ctx: GpuContext,
  o: TensorOptions,
  data: Float32Array | Int32Array | Uint32Array,
): DeviceTensor {
  const t = createTensor(ctx, o);
  upload(ctx, t, data);
  return t;
}

/** Reads a tensor back as f32 (integers as their values). Waits for queued work. */
export async function download(ctx: GpuContext, t: DeviceTensor): Promise<Float32Array> {
  const out = new Float32Array(t.rows * t.cols);
  for (const s of t.shards) {
    const count = s.rows * t.cols;
    const bytes = Math.ceil((count * elementBytes(t.dtype)) / 4) * 4;
    const staging = ctx.device.createBuffer({
      size: Math.max(4, bytes),
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    const enc = ctx.device.createCommandEncoder();
    enc.copyBufferToBuffer(s.buffer.buffer, s.buffer.offset, staging, 0, Math.max(4, bytes));
    ctx.device.queue.submit([enc.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const raw = new Uint8Array(staging.getMappedRange().slice(0));
    staging.unmap();
    staging.destroy();
    let vals: ArrayLike<number>;
    if (t.dtype === "i32") vals = new Int32Array(raw.buffer, 0, count);
    else if (t.dtype === "u32") vals = new Uint32Array(raw.buffer, 0, count);
    else vals = decode(raw, t.dtype, count);
    out.set(vals as ArrayLike<number>, s.rowStart * t.cols);
  }
  ctx.assertAlive();
  return out;
}

/**
 * Fills every byte of a tensor with 0xFF: NaN in f32, bf16 and f16, −1 in i32. Kernels under
 * test must overwrite every element they own, so any NaN left after a run marks an unwritten one.
 */
export function poison(ctx: GpuContext, t: DeviceTensor): void {
  for (const s of t.shards) {
    const chunk = new Uint8Array(Math.min(s.buffer.size, 1 << 24)).fill(0xff);
    for (let off = 0; off < s.buffer.size; off += chunk.byteLength) {
      const n = Math.min(chunk.byteLength, s.buffer.size - off);
      ctx.device.queue.writeBuffer(s.buffer.buffer, s.buffer.offset + off, chunk, 0, n);
    }
  }
}

/**
 * Reads the given rows of a tensor back as f32, `rows.length × cols` row-major (in the order
 * given; a row may repeat), with one copy per row into one staging buffer: the check of a
 * benchmark run reads a few sampled rows of gradients that may be gigabytes. Waits for queued work.
 */
export async function readRows(
  ctx: GpuContext,
  t: DeviceTensor,
  rows: ArrayLike<number>,
): Promise<Float32Array> {
  const eb = elementBytes(t.dtype);
  const spans: { lo: number; at: number; skip: number }[] = [];
  const enc = ctx.device.createCommandEncoder();
  let total = 0;
  const copies: [GPUBuffer, number, number][] = [];
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i];
    if (!Number.isInteger(r) || r < 0 || r >= t.rows) {
      throw new RangeError(`${t.label}: row ${r} out of range [0, ${t.rows})`);
    }
    const s = t.shardOf(r);
    const start = s.buffer.offset + (r - s.rowStart) * t.cols * eb;
    const lo = Math.floor(start / 4) * 4;
    const hi = Math.ceil((start + t.cols * eb) / 4) * 4;
    spans.push({ lo, at: total, skip: (start - lo) / eb });
    copies.push([s.buffer.buffer, lo, hi - lo]);
    total += hi - lo;
  }
  const staging = ctx.device.createBuffer({
    size: Math.max(4, total),
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  let at = 0;
  for (const [buf, lo, size] of copies) {
    enc.copyBufferToBuffer(buf, lo, staging, at, size);
    at += size;
  }
  ctx.device.queue.submit([enc.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const raw = new Uint8Array(staging.getMappedRange().slice(0));
  staging.unmap();
  staging.destroy();
  ctx.assertAlive();
  const out = new Float32Array(rows.length * t.cols);
  spans.forEach((sp, i) => {
    const bytes = raw.subarray(sp.at, sp.at + Math.ceil(((sp.skip + t.cols) * eb) / 4) * 4);
    let vals: ArrayLike<number>;
    if (t.dtype === "i32") vals = new Int32Array(bytes.slice().buffer, 0, t.cols);
    else if (t.dtype === "u32") vals = new Uint32Array(bytes.slice().buffer, 0, t.cols);
    else vals = decode(bytes.slice(), t.dtype, sp.skip + t.cols).subarray(sp.skip);
    out.set(vals, i * t.cols);
  });
  return out;
}

/**
 * A range of a GPUBuffer the caller owns, as the one shard of a tensor: bound at its offset, never
 * counted in the context's memory, never destroyed or reused by it (destroy() does nothing).
 */
export class ExternalBuffer extends TrackedBuffer {
  readonly #offset: number;
  /** @internal use {@link tensorOnBuffer}. */
  constructor(ctx: GpuContext, buffer: GPUBuffer, offset: number, size: number, role: BufferRole) {
    super(ctx, buffer, size, role);
    this.#offset = offset;
  }
  override get offset(): number {
    return this.#offset;
  }
  override get binding(): GPUBufferBinding {
    return { buffer: this.buffer, offset: this.#offset, size: this.size };
  }
  /** The caller owns the buffer: nothing is freed. */
  override destroy(): void {}
}

/** A tensor's place in a caller's buffer. */
export interface BufferRegion {
  buffer: GPUBuffer;
  /** Byte offset of element 0 (default 0): a multiple of minStorageBufferOffsetAlignment. */
  offset?: number;
}

/** Options of {@link tensorOnBuffer}. */
export interface BufferTensorOptions {
  dtype: TensorDtype;
  rows: number;
  cols: number;
  /** Name in messages ("E", "dC"...). */
  label: string;
  role: BufferRole;
}

/**
 * Bytes a tensor spans in a caller's buffer: its elements rounded up to 16 bytes, since kernels
 * may read whole 16-byte vectors (bf16 and f16 pack two elements per 32-bit word).
 */
export function regionBytes(o: Pick<BufferTensorOptions, "dtype" | "rows" | "cols">): number {
  return Math.ceil((o.rows * o.cols * elementBytes(o.dtype)) / 16) * 16;
}

/**
 * A row-major tensor over `region` of a caller's buffer, with no copy. Refused with one line
 * (InputError) when the shape is not positive integers, the buffer lacks STORAGE usage or is
 * mapped, the offset is not a multiple of the device's minStorageBufferOffsetAlignment, the
 * buffer is too small for {@link regionBytes} from the offset, or the tensor exceeds one binding.
 */
export function tensorOnBuffer(
  ctx: GpuContext,
  region: BufferRegion,
  o: BufferTensorOptions,
): DeviceTensor {
  const { label } = o;
  check(
    Number.isSafeInteger(o.rows) && o.rows >= 1 && Number.isSafeInteger(o.cols) && o.cols >= 1,
    `${label}: shape must be positive integers, got ${o.rows}×${o.cols}`,
  );
  const b = region.buffer;
  check(
    b !== null && typeof b === "object" && typeof b.size === "number" &&
      typeof b.usage === "number",
    `${label}: not a GPUBuffer`,
  );
  check(
    (b.usage & GPUBufferUsage.STORAGE) !== 0,
    `${label}: the buffer lacks STORAGE usage (usage ${b.usage}); create it with ` +
      "GPUBufferUsage.STORAGE",
  );
  check(b.mapState === "unmapped", `${label}: the buffer is ${b.mapState}; unmap it first`);
  const offset = region.offset ?? 0;
  const align = ctx.device.limits.minStorageBufferOffsetAlignment;
  check(
    Number.isSafeInteger(offset) && offset >= 0 && offset % align === 0,
    `${label}: offset ${offset} is not a multiple of the device's ` +
      `minStorageBufferOffsetAlignment ${align}`,
  );
  const bytes = regionBytes(o);
  check(
    offset + bytes <= b.size,
    `${label}: ${o.rows}×${o.cols} ${o.dtype} needs bytes [${offset}, ${offset + bytes}) (its ` +
      `elements rounded up to 16 bytes) but the buffer has ${b.size}`,
  );
  check(
    bytes <= ctx.maxBindingBytes,
    `${label}: ${bytes} bytes exceed one storage binding (${ctx.maxBindingBytes} bytes)`,
  );
  const shard = {
    buffer: new ExternalBuffer(ctx, b, offset, bytes, o.role),
    rowStart: 0,
    rows: o.rows,
  };
  return new DeviceTensor(o.dtype, o.rows, o.cols, [shard], label);
}
