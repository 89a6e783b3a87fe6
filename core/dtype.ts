/**
 * Host-side conversions between f32 and the 16-bit storage formats (bf16, f16), round to nearest
 * even, and packing two 16-bit values per u32 as the shaders read them (element 2i in the low half).
 * @module
 */
import type { Dtype } from "./options.ts";
import { InputError } from "./errors.ts";

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** bf16 bits of x, rounded to nearest even (NaN stays NaN). */
export function f32ToBf16Bits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  if ((b & 0x7f800000) === 0x7f800000 && (b & 0x7fffff) !== 0) return (b >>> 16) | 0x40;
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

/** The f32 value of bf16 bits. */
export function bf16BitsToF32(h: number): number {
  u32[0] = (h & 0xffff) << 16;
  return f32[0];
}

/** f16 bits of x, rounded to nearest even, with subnormals and overflow to ±Inf. */
export function f32ToF16Bits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = mant & ((1 << shift) - 1);
    let m = mant >>> shift;
    if (rest > half || (rest === half && (m & 1))) m++;
    return sign | m;
  }
  const rest = mant & 0x1fff;
  let h = sign | (e << 10) | (mant >>> 13);
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1))) h++;
  return h;
}

/** The f32 value of f16 bits. */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 0x1f) return m ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** x rounded to the nearest value representable in `dtype` (as f32). */
export function roundTo(x: number, dtype: Dtype): number {
  if (dtype === "bf16") return bf16BitsToF32(f32ToBf16Bits(x));
  if (dtype === "f16") return f16BitsToF32(f32ToF16Bits(x));
  return Math.fround(x);
}

/** A copy of `a` with every value rounded to `dtype`. */
export function roundArray(a: ArrayLike<number>, dtype: Dtype): Float32Array {
  const out = new Float32Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = roundTo(a[i], dtype);
  return out;
}

/** Largest finite value of each dtype (the finite range is ±this). */
export const DTYPE_MAX: Readonly<Record<Dtype, number>> = {
  f32: 3.4028234663852886e38,
  bf16: 3.3895313892515355e38,
  f16: 65504,
};

/**
 * {@link roundArray} for user input: InputError naming the tensor, row, column and index of the
 * first value that is not finite (`E has a non-finite value NaN at row 1, column 2`) or that is
 * finite but overflows `dtype` when rounded (`E value 100000 at row 0, column 3 (index 3)
 * overflows f16 (finite range ±65504)`). `cols` is the row length (for row and column).
 */
export function roundInput(
  a: ArrayLike<number>,
  dtype: Dtype,
  o: { tensor: string; cols: number },
): Float32Array {
  const out = new Float32Array(a.length);
  const where = (i: number) => `row ${Math.floor(i / o.cols)}, column ${i % o.cols}`;
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    if (!Number.isFinite(x)) {
      throw new InputError(`${o.tensor} has a non-finite value ${x} at ${where(i)}`);
    }
    const r = roundTo(x, dtype);
    if (!Number.isFinite(r)) {
      throw new InputError(
        `${o.tensor} value ${x} at ${where(i)} (index ${i}) overflows ${dtype} ` +
          `(finite range ±${DTYPE_MAX[dtype]})`,
      );
    }
    out[i] = r;
  }
  return out;
}

/** Machine epsilon of a dtype (spacing of 1.0): 2⁻⁷ bf16, 2⁻¹⁰ f16, 2⁻²³ f32. */
export function machineEps(dtype: Dtype): number {
  return dtype === "bf16" ? 2 ** -7 : dtype === "f16" ? 2 ** -10 : 2 ** -23;
}

/**
 * Encodes values in the GPU storage layout of `dtype`: f32 as is; bf16/f16 as 16-bit halves packed
 * two per u32 (a trailing odd element is padded with zero). Returns the bytes to upload.
 */
export function encode(a: ArrayLike<number>, dtype: Dtype): Uint8Array {
  if (dtype === "f32") {
    const out = a instanceof Float32Array ? a : Float32Array.from(a);
    return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
  }
  const words = new Uint32Array(Math.ceil(a.length / 2));
  const to = dtype === "bf16" ? f32ToBf16Bits : f32ToF16Bits;
  for (let i = 0; i < a.length; i++) {
    words[i >> 1] |= to(a[i]) << ((i & 1) * 16);
  }
  return new Uint8Array(words.buffer);
}

/** Decodes `count` values stored in `dtype`'s GPU layout (inverse of {@link encode}). */
export function decode(bytes: Uint8Array, dtype: Dtype, count: number): Float32Array {
  if (dtype === "f32") {
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + count * 4));
  }
  const halves = new Uint16Array(bytes.buffer, bytes.byteOffset, Math.ceil(count / 2) * 2);
  const from = dtype === "bf16" ? bf16BitsToF32 : f16BitsToF32;
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = from(halves[i]);
  return out;
}
