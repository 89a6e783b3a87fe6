/**
 * NumPy `.npy` files: reading (format versions 1.0, 2.0 and 3.0; little-endian f4, f8, i4, i8 in
 * C order) and atomic writing (version 1.0), with conversions to the arrays the benchmark uses.
 * Every problem with a file is an InputError of one line naming the file.
 * @module
 */
import { check, InputError } from "../core/errors.ts";

/** Element types this module reads and writes (NumPy's `<f4`, `<f8`, `<i4`, `<i8`). */
export type NpyDtype = "f4" | "f8" | "i4" | "i8";

/** An array read from an `.npy` file. */
export interface NpyArray {
  /** Element type. */
  dtype: NpyDtype;
  /** Shape, C order ([] for a scalar). */
  shape: number[];
  /** The values, row-major. */
  data: Float32Array | Float64Array | Int32Array | BigInt64Array;
}

/** Arrays {@link writeNpy} accepts. */
export type NpyData = Float32Array | Float64Array | Int32Array | BigInt64Array;

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
const ITEM_BYTES: Record<NpyDtype, number> = { f4: 4, f8: 8, i4: 4, i8: 8 };

/** A value of the Python literal subset NPY headers use. */
type PyValue = string | number | boolean | null | PyValue[] | Map<string, PyValue>;

/** Parses the Python dict literal of an NPY header (strings, ints, True/False/None, tuples). */
function _parsePython(text: string): PyValue {
  let i = 0;
  const fail = (what: string): never => {
    throw new Error(`${what} at character ${i} of the header`);
  };
  const ws = () => {
    while (i < text.length && /\s/.test(text[i])) i++;
  };
  const value = (): PyValue => {
    ws();
    const ch = text[i];
    if (ch === "{" || ch === "(" || ch === "[") {
      const close = ch === "{" ? "}" : ch === "(" ? ")" : "]";
      i++;
      const items: PyValue[] = [];
      const map = new Map<string, PyValue>();
      for (;;) {
        ws();
        if (text[i] === close) break;
        const item = value();
        if (ch === "{") {
          ws();
          if (text[i] !== ":") fail("expected ':'");
          i++;
          if (typeof item !== "string") fail("dict keys must be strings");
          map.set(item as string, value());
        } else items.push(item);
        ws();
        if (text[i] === ",") i++;
        else if (text[i] !== close) fail(`expected ',' or '${close}'`);
      }
      i++;
      return ch === "{" ? map : items;
    }
    if (ch === "'" || ch === '"') {
      const end = text.indexOf(ch, i + 1);
      if (end < 0) fail("unterminated string");
      const s = text.slice(i + 1, end);
      i = end + 1;
      return s;
    }
    const m = /^(True|False|None|-?\d+L?)/.exec(text.slice(i));
    if (!m) return fail("unexpected input");
    i += m[0].length;
    if (m[0] === "True") return true;
    if (m[0] === "False") return false;
    if (m[0] === "None") return null;
    return Number(m[0].replace("L", ""));
  };
  const v = value();
  ws();
  if (i !== text.length) fail("unexpected input after the dict");
  return v;
}

/** Parses a dtype descriptor, throwing a one-line reason for anything unsupported. */
function _dtype(descr: PyValue): NpyDtype {
  if (typeof descr !== "string") throw new Error("structured dtypes are not supported");
  const m = /^([<>|=])([a-zA-Z])(\d+)$/.exec(descr);
  if (m && m[1] === ">" && m[3] !== "1") {
    throw new Error(`big-endian dtype '${descr}' is not supported (save it little-endian)`);
  }
  if (m && m[1] === "<" && `${m[2]}${m[3]}` in ITEM_BYTES) return `${m[2]}${m[3]}` as NpyDtype;
  throw new Error(`unsupported dtype '${descr}' (expected <f4, <f8, <i4 or <i8)`);
}

/** Longest header this module reads (NumPy itself refuses headers over 10,000 bytes). */
export const MAX_HEADER_BYTES = 1 << 20;

/** What the header of an `.npy` file declares. */
export interface NpyHeader {
  dtype: NpyDtype;
  shape: number[];
  /** Number of values (product of the shape). */
  count: number;
  /** Bytes of data the header declares (count × item size). */
  dataBytes: number;
  /** Offset of the data: the length of magic, version, length field and header. */
  dataOffset: number;
}

/**
 * Bytes needed to know the header's length: 10 (version 1) or 12 (versions 2 and 3); throws a
 * one-line reason for a bad magic string or version.
 */
function _prefixBytes(bytes: Uint8Array): number {
  if (bytes.length < 8 || MAGIC.some((b, i) => bytes[i] !== b)) {
    throw new Error("not an NPY file (bad magic string)");
  }
  const major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3) throw new Error(`unsupported NPY format version ${major}.${minor}`);
  return major === 1 ? 10 : 12;
}

/** The header's length field (after {@link _prefixBytes} bytes are there). */
function _headerLength(bytes: Uint8Array): number {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLen = bytes[6] === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  if (headerLen > MAX_HEADER_BYTES) {
    throw new Error(`header of ${headerLen} bytes is too long (at most ${MAX_HEADER_BYTES})`);
  }
  return headerLen;
}

/** Parses the header from the file's first bytes (prefix and header, data not needed). */
function _parseHeader(bytes: Uint8Array): NpyHeader {
  const prefix = _prefixBytes(bytes);
  if (bytes.length < prefix) throw new Error("truncated header");
  const headerLen = _headerLength(bytes);
  const offset = prefix + headerLen;
  if (offset > bytes.length) {
    throw new Error(
      `truncated header: ${headerLen} bytes announced, ${bytes.length - prefix} left`,
    );
  }
  const text = new TextDecoder(bytes[6] === 3 ? "utf-8" : "latin1").decode(
    bytes.subarray(prefix, offset),
  );
  let header: PyValue;
  try {
    header = _parsePython(text.trim());
  } catch (err) {
    throw new Error(`bad header: ${(err as Error).message}`);
  }
  if (!(header instanceof Map)) throw new Error("bad header: not a dict");
  for (const key of ["descr", "fortran_order", "shape"]) {
    if (!header.has(key)) throw new Error(`bad header: no '${key}'`);
  }
  const dtype = _dtype(header.get("descr")!);
  const fortran = header.get("fortran_order");
  if (typeof fortran !== "boolean") throw new Error("bad header: fortran_order is not a bool");
  if (fortran) throw new Error("Fortran-order arrays are not supported (save it in C order)");
  const shape = header.get("shape");
  if (!Array.isArray(shape) || !shape.every((s) => Number.isSafeInteger(s) && (s as number) >= 0)) {
    throw new Error("bad header: shape is not a tuple of sizes");
  }
  const dims = shape as number[];
  const count = dims.reduce((a, b) => a * b, 1);
  const dataBytes = count * ITEM_BYTES[dtype];
  if (!Number.isSafeInteger(dataBytes)) {
    throw new Error(`shape (${dims.join(", ")}) declares more data than any file can hold`);
  }
  return { dtype, shape: dims, count, dataBytes, dataOffset: offset };
}

/** The typed array over `buf` for `dtype`. */
function _typed(dtype: NpyDtype, buf: ArrayBuffer): NpyArray["data"] {
  return dtype === "f4"
    ? new Float32Array(buf)
    : dtype === "f8"
    ? new Float64Array(buf)
    : dtype === "i4"
    ? new Int32Array(buf)
    : new BigInt64Array(buf);
}

/** Throws unless `have` bytes after the header are exactly the declared data. */
function _checkSize(h: NpyHeader, have: number): void {
  if (have < h.dataBytes) {
    throw new Error(
      `truncated data: header says ${h.count} values (${h.dataBytes} bytes), file has ${have}`,
    );
  }
  if (have > h.dataBytes) {
    throw new Error(`${have - h.dataBytes} bytes of trailing data after ${h.count} values`);
  }
}

/**
 * Decodes the bytes of an `.npy` file; `name` (the file name) prefixes every error message.
 * Throws InputError for a bad magic string or version, an unreadable header, Fortran order,
 * big-endian or unsupported dtypes, and truncated or over-long data.
 */
export function parseNpy(bytes: Uint8Array, name: string): NpyArray {
  try {
    const h = _parseHeader(bytes);
    _checkSize(h, bytes.length - h.dataOffset);
    const buf = bytes.slice(h.dataOffset, h.dataOffset + h.dataBytes).buffer; // aligned copy
    return { dtype: h.dtype, shape: h.shape, data: _typed(h.dtype, buf) };
  } catch (err) {
    if (err instanceof InputError) throw err;
    throw new InputError(`${name}: ${(err as Error).message}`);
  }
}

/** Limits of {@link readNpy}: what the caller can hold, checked against the header. */
export interface ReadNpyOptions {
  /** Most bytes of data the caller accepts (e.g. what the adapter can bind). */
  maxBytes?: number;
  /** What {@link maxBytes} is, for the message (default `the adapter can bind`). */
  maxBytesWhat?: string;
  /**
   * Most bytes of one row (the last dimension's values) the caller accepts; a row of a tensor
   * must fit one storage binding.
   */
  maxRowBytes?: number;
  /** Bytes per value the caller will hold (for the limits; default the file's item size). */
  boundItemBytes?: number;
  /** Counts the bytes read from the file (tests). */
  stats?: { bytesRead: number };
}

function _kind(info: Deno.FileInfo): string {
  if (info.isDirectory) return "a directory";
  if (info.isFifo) return "a FIFO (named pipe)";
  if (info.isCharDevice) return "a character device";
  if (info.isBlockDevice) return "a block device";
  if (info.isSocket) return "a socket";
  return "not a regular file";
}

/** Reads exactly `buf.length` bytes at the file's position; false at an early end of file. */
async function _readFully(
  file: Deno.FsFile,
  buf: Uint8Array,
  stats?: { bytesRead: number },
): Promise<boolean> {
  let off = 0;
  while (off < buf.length) {
    const n = await file.read(buf.subarray(off));
    if (n === null) return false;
    off += n;
    if (stats) stats.bytesRead += n;
  }
  return true;
}

/**
 * Reads an `.npy` file, bounded: refuses anything but a regular file before opening it, reads
 * the header first, and refuses — before reading any data — a header whose declared data is
 * more than the file holds (or less), more than `o.maxBytes`, or whose rows are longer than
 * `o.maxRowBytes`; then reads exactly the declared bytes, never more. Every problem is one
 * InputError line naming the file.
 */
export async function readNpy(path: string, o: ReadNpyOptions = {}): Promise<NpyArray> {
  const fail = (msg: string): never => {
    throw new InputError(`${path}: ${msg}`);
  };
  const cannot = (err: unknown) => fail(`cannot read: ${(err as Error).message.split("\n")[0]}`);
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(path);
  } catch (err) {
    return cannot(err);
  }
  if (!info.isFile) fail(`${_kind(info)}, not a regular file`);
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (err) {
    return cannot(err);
  }
  try {
    const st = await file.stat(); // the file opened, not the one stat'ed
    if (!st.isFile) fail(`${_kind(st)}, not a regular file`);
    const size = st.size;
    let h: NpyHeader;
    try {
      const prefix = new Uint8Array(12);
      const n = Math.min(12, size);
      if (!await _readFully(file, prefix.subarray(0, n), o.stats)) throw new Error("file shrank");
      const need = _prefixBytes(prefix.subarray(0, n));
      if (n < need) throw new Error("truncated header");
      const headerLen = _headerLength(prefix);
      if (need + headerLen > size) {
        throw new Error(`truncated header: ${headerLen} bytes announced, ${size - need} left`);
      }
      const head = new Uint8Array(need + headerLen);
      head.set(prefix.subarray(0, Math.min(n, head.length)));
      const got = Math.min(n, head.length);
      await file.seek(got, Deno.SeekMode.Start);
      if (!await _readFully(file, head.subarray(got), o.stats)) throw new Error("truncated header");
      h = _parseHeader(head);
      _checkSize(h, size - h.dataOffset);
    } catch (err) {
      if (err instanceof InputError) throw err;
      return fail((err as Error).message);
    }
    const item = o.boundItemBytes ?? ITEM_BYTES[h.dtype];
    const bound = h.count * item;
    if (o.maxBytes !== undefined && bound > o.maxBytes) {
      fail(
        `shape (${h.shape.join(", ")}) declares ${bound} bytes, more than the ${o.maxBytes} ` +
          (o.maxBytesWhat ?? "the adapter can bind"),
      );
    }
    const rowBytes = (h.shape.length === 0 ? 1 : h.shape[h.shape.length - 1]) * item;
    if (o.maxRowBytes !== undefined && rowBytes > o.maxRowBytes) {
      fail(
        `rows of ${rowBytes} bytes are longer than one storage binding of the adapter ` +
          `(${o.maxRowBytes} bytes)`,
      );
    }
    const data = new Uint8Array(h.dataBytes);
    await file.seek(h.dataOffset, Deno.SeekMode.Start);
    let complete: boolean;
    try {
      complete = await _readFully(file, data, o.stats);
    } catch (err) {
      return cannot(err);
    }
    if (!complete) fail(`truncated data: the file shrank while it was read`);
    return { dtype: h.dtype, shape: h.shape, data: _typed(h.dtype, data.buffer) };
  } finally {
    file.close();
  }
}

function _descr(data: NpyData): string {
  if (data instanceof Float32Array) return "<f4";
  if (data instanceof Float64Array) return "<f8";
  if (data instanceof Int32Array) return "<i4";
  if (data instanceof BigInt64Array) return "<i8";
  throw new InputError("writeNpy needs a Float32Array, Float64Array, Int32Array or BigInt64Array");
}

/**
 * The bytes of an `.npy` file holding `data` with `shape` (format 1.0, or 2.0 for a header over
 * 64 KiB); throws InputError unless `shape` is a list of sizes whose product is `data.length`.
 */
export function encodeNpy(data: NpyData, shape: readonly number[]): Uint8Array {
  check(
    shape.every((s) => Number.isSafeInteger(s) && s >= 0),
    `shape must be a list of non-negative integers, got [${shape.join(", ")}]`,
  );
  const count = shape.reduce((a, b) => a * b, 1);
  check(
    count === data.length,
    `shape [${shape.join(", ")}] holds ${count} values, the data has ${data.length}`,
  );
  const tuple = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
  let header = `{'descr': '${_descr(data)}', 'fortran_order': False, 'shape': ${tuple}, }`;
  const v1 = header.length + 64 < 0xffff; // room for the padding
  const prefix = v1 ? 10 : 12;
  header += " ".repeat((64 - ((prefix + header.length + 1) % 64)) % 64) + "\n";
  const out = new Uint8Array(prefix + header.length + data.byteLength);
  out.set(MAGIC);
  out[6] = v1 ? 1 : 2;
  out[7] = 0;
  const view = new DataView(out.buffer);
  if (v1) view.setUint16(8, header.length, true);
  else view.setUint32(8, header.length, true);
  out.set(new TextEncoder().encode(header), prefix);
  out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), prefix + header.length);
  return out;
}

/**
 * Writes `data` with `shape` as an `.npy` file (format 1.0), atomically: to `path.tmp-<pid>`,
 * then renamed over `path`. On failure the temporary file is removed and an InputError naming
 * the file is thrown, leaving no file behind.
 */
export async function writeNpy(
  path: string,
  data: NpyData,
  shape: readonly number[],
): Promise<void> {
  let bytes;
  try {
    bytes = encodeNpy(data, shape);
  } catch (err) {
    throw new InputError(`${path}: ${(err as Error).message}`);
  }
  const tmp = `${path}.tmp-${Deno.pid}`;
  try {
    await Deno.writeFile(tmp, bytes);
    await Deno.rename(tmp, path);
  } catch (err) {
    await Deno.remove(tmp).catch(() => {});
    throw new InputError(`${path}: cannot write: ${(err as Error).message.split("\n")[0]}`);
  }
}

/** E or C as float32 from an f4 or f8 array (f8 values are rounded; overflow throws). */
export function toFloat32(npy: NpyArray, name: string): Float32Array {
  if (npy.data instanceof Float32Array) return npy.data;
  check(
    npy.data instanceof Float64Array,
    `${name}: expected a float array (f4 or f8), got ${npy.dtype}`,
  );
  const out = Float32Array.from(npy.data);
  for (let i = 0; i < out.length; i++) {
    check(
      Number.isFinite(out[i]) || !Number.isFinite(npy.data[i]),
      `${name}: value ${npy.data[i]} at index ${i} overflows f32 (finite range ` +
        `±3.4028234663852886e+38)`,
    );
  }
  return out;
}

/** Targets as int32 from an i4 or i8 array; i8 values outside int32 throw. */
export function toInt32Targets(npy: NpyArray, name: string): Int32Array {
  if (npy.data instanceof Int32Array) return npy.data;
  check(
    npy.data instanceof BigInt64Array,
    `${name}: expected an integer array (i4 or i8), got ${npy.dtype}`,
  );
  const src = npy.data;
  const out = new Int32Array(src.length);
  for (let i = 0; i < src.length; i++) {
    check(
      src[i] >= -2147483648n && src[i] <= 2147483647n,
      `${name}: value ${src[i]} at index ${i} is outside int32`,
    );
    out[i] = Number(src[i]);
  }
  return out;
}
