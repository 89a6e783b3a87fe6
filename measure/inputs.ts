/**
 * Benchmark inputs built straight on the GPU, fast enough for the paper's shape (E 8192×2304,
 * C 256000×2304: 609 million values, generated and uploaded in seconds).
 *
 * The `cce` fixture takes a fast path: the recipe of fixtures/cce.ts (E = randn/d^¼,
 * C = randn/d^¼, C[0:min(n, v)] = E, targets uniform in [0, v)) with a different random source —
 * fixtures/mod.ts draws float64 Box–Muller normals in one sequential stream and rounds them
 * afterwards, which at this size needs tens of GB of host memory and minutes. Here every element
 * is a pure function of (seed, tensor, element index): a counter-based hash picks one of 2¹⁶
 * normal quantiles (inverse-CDF sampling on a 2¹⁶-level grid, tails cut at ±4.4σ; f32 interpolates
 * between neighbouring quantiles with 16 more bits), pre-scaled and pre-rounded to the dtype, and
 * the words are written in the dtype's packed GPU layout chunk by chunk, one shard at a time. So
 * the values do not depend on the adapter's shard size, need no host copy of the tensors, and are
 * the same distribution as the fixture's (though not the same bytes). Other fixtures go through
 * fixtures/mod.ts and are limited to shapes whose float64 copy fits the host.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { createTensor, type DeviceTensor, upload } from "../gpu/tensor.ts";
import { check } from "../core/errors.ts";
import { f32ToBf16Bits, f32ToF16Bits } from "../core/dtype.ts";
import { checkShape, type Dtype, DTYPE_BYTES, IGNORE_INDEX, type Shape } from "../core/options.ts";
import type { MemoryNeed } from "./memory.ts";
import { makeFixture, parseFixture } from "../fixtures/mod.ts";
import { counterKey, counterU32 } from "../fixtures/rng.ts";
import type { MethodInputs } from "../methods/types.ts";
import { uploadInputs } from "../methods/run.ts";

/** Options of {@link makeDeviceInputs}. */
export interface DeviceInputOptions extends Shape {
  /** Fixture name (fixtures/mod.ts): `cce` takes the fast path. */
  fixture: string;
  /** Dtype of E and C on the GPU. */
  dtype: Dtype;
  /** Seed (default 0). */
  seed?: number;
  /** Fraction of rows whose target is IGNORE_INDEX (default 0). */
  ignoreFraction?: number;
}

/** Inputs on the GPU and how they were made. */
export interface DeviceInputs {
  inputs: MethodInputs;
  /** `cce-fast` (this module's generator) or `fixtures` (fixtures/mod.ts, then uploaded). */
  generator: "cce-fast" | "fixtures";
  /** Milliseconds spent generating and uploading (upload finished). */
  ms: number;
  /** Frees the three tensors. */
  destroy(): void;
}

/**
 * Host and GPU bytes {@link makeDeviceInputs} needs for `o`, at most: on the GPU E and C in the
 * dtype and the i32 targets (each shard rounded up to 16 bytes); on the host the `cce` path's
 * targets array and its upload copy, one chunk of words and the upload staging between flushes,
 * the other fixtures' float64 draws, their rounded f32 copies and the upload of both.
 */
export function inputNeed(o: Shape & { fixture: string; dtype: Dtype }): MemoryNeed {
  const b = DTYPE_BYTES[o.dtype];
  const pad = 16 * 64; // rounding of each shard of three tensors, generously
  const gpuBytes = (o.n + o.v) * o.d * b + o.n * 4 + pad;
  const hostBytes = o.fixture === "cce"
    ? o.n * 4 * 2 + CHUNK * 4 + FLUSH_BYTES + (1 << TABLE_BITS) * 4
    : (o.n + o.v) * o.d * (8 + 4 + b) + o.n * 4 * 3;
  return { hostBytes, gpuBytes };
}

/** Largest (n + v)·d that non-`cce` fixtures generate on the host (float64 copy ≈ 0.5 GB). */
export const HOST_FIXTURE_MAX_VALUES = 2 ** 26;

/** Elements generated per chunk (even, so 16-bit chunks fill whole words). */
const CHUNK = 1 << 22;
/** Bytes uploaded between flushes of the queue's staging memory. */
const FLUSH_BYTES = 256 * 2 ** 20;
const TABLE_BITS = 16;

/**
 * Builds E, C and the targets of fixture `o.fixture` on the GPU (role `input`). Throws
 * InputError for an unknown fixture or a shape too large for the host path.
 */
export async function makeDeviceInputs(
  ctx: GpuContext,
  o: DeviceInputOptions,
): Promise<DeviceInputs> {
  const t0 = performance.now();
  const name = parseFixture(o.fixture).name;
  checkShape(o);
  let inputs: MethodInputs;
  let generator: DeviceInputs["generator"];
  if (name === "cce") {
    const gen = new CceGenerator(o);
    generator = "cce-fast";
    const targets = createTensor(ctx, {
      dtype: "i32",
      rows: o.n,
      cols: 1,
      role: "input",
      label: "targets",
    });
    upload(ctx, targets, gen.targets());
    const e = createTensor(ctx, {
      dtype: o.dtype,
      rows: o.n,
      cols: o.d,
      role: "input",
      label: "E",
    });
    const c = createTensor(ctx, {
      dtype: o.dtype,
      rows: o.v,
      cols: o.d,
      role: "input",
      label: "C",
    });
    inputs = { e, c, targets };
    try {
      await _fill(ctx, e, (start, count, out) => gen.fill("e", start, count, out));
      await _fill(ctx, c, (start, count, out) => gen.fill("c", start, count, out));
    } catch (err) {
      for (const t of [e, c, targets]) t.destroy();
      throw err;
    }
  } else {
    const values = (o.n + o.v) * o.d;
    check(
      values <= HOST_FIXTURE_MAX_VALUES,
      `fixture '${name}' is generated on the host in float64 and (n + v)·d = ${values} values ` +
        `exceeds ${HOST_FIXTURE_MAX_VALUES}; use --fixture cce (fast generator) or a smaller shape`,
    );
    const x = makeFixture(o.fixture, {
      n: o.n,
      v: o.v,
      d: o.d,
      dtype: o.dtype,
      seed: o.seed,
      ignoreFraction: o.ignoreFraction,
    });
    generator = "fixtures";
    inputs = uploadInputs(ctx, x, o.dtype);
  }
  ctx.device.queue.submit([]);
  await ctx.device.queue.onSubmittedWorkDone();
  ctx.assertAlive();
  const done = inputs;
  return {
    inputs: done,
    generator,
    ms: performance.now() - t0,
    destroy() {
      for (const t of [done.e, done.c, done.targets]) t.destroy();
    },
  };
}

/** Fills every shard of `t` chunk by chunk with the words `fill` writes. */
async function _fill(
  ctx: GpuContext,
  t: DeviceTensor,
  fill: (start: number, count: number, out: Uint32Array) => number,
): Promise<void> {
  const words = new Uint32Array(t.dtype === "f32" ? CHUNK : CHUNK / 2);
  let pending = 0;
  for (const s of t.shards) {
    const first = s.rowStart * t.cols, end = first + s.rows * t.cols;
    for (let start = first; start < end; start += CHUNK) {
      const count = Math.min(CHUNK, end - start);
      const n = fill(start, count, words);
      const byteOffset = (start - first) * (t.dtype === "f32" ? 4 : 2);
      ctx.device.queue.writeBuffer(s.buffer.buffer, byteOffset, words, 0, n);
      pending += n * 4;
      if (pending >= FLUSH_BYTES) {
        ctx.device.queue.submit([]); // uploads staged by writeBuffer go with the next submission
        await ctx.device.queue.onSubmittedWorkDone();
        pending = 0;
      }
    }
  }
}

/** Options of {@link CceGenerator}. */
export interface CceGeneratorOptions extends Shape {
  dtype: Dtype;
  seed?: number;
  ignoreFraction?: number;
}

/**
 * The fast `cce` generator (see the module documentation): element `i` of E or C, and target `i`,
 * as pure functions of the seed and `i`.
 */
export class CceGenerator {
  readonly n: number;
  readonly v: number;
  readonly d: number;
  readonly dtype: Dtype;
  readonly ignoreFraction: number;
  #keys: { e: number; c: number; targets: number; ignore: number };
  #table16: Uint16Array | undefined;
  #table32: Float32Array | undefined;

  constructor(o: CceGeneratorOptions) {
    checkShape(o);
    const seed = o.seed ?? 0;
    check(o.v * o.d < 2 ** 32, `v·d = ${o.v * o.d} must be below 2^32 for the cce generator`);
    this.n = o.n;
    this.v = o.v;
    this.d = o.d;
    this.dtype = o.dtype;
    this.ignoreFraction = o.ignoreFraction ?? 0;
    check(
      Number.isFinite(this.ignoreFraction) && this.ignoreFraction >= 0 &&
        this.ignoreFraction <= 1,
      `ignore fraction must be in [0, 1], got ${this.ignoreFraction}`,
    );
    const key = (stream: number) => counterKey(seed, stream);
    this.#keys = { e: key(1), c: key(2), targets: key(3), ignore: key(4) };
    const scale = o.d ** -0.25;
    const size = 1 << TABLE_BITS;
    if (o.dtype === "f32") {
      this.#table32 = new Float32Array(size + 1);
      for (let i = 0; i < size; i++) this.#table32[i] = scale * _normalQuantile((i + 0.5) / size);
      this.#table32[size] = this.#table32[size - 1];
    } else {
      const bits = o.dtype === "bf16" ? f32ToBf16Bits : f32ToF16Bits;
      this.#table16 = new Uint16Array(size);
      for (let i = 0; i < size; i++) {
        this.#table16[i] = bits(scale * _normalQuantile((i + 0.5) / size));
      }
    }
  }

  /**
   * Writes elements [start, start + count) of E or C (row-major) into `out` in the dtype's GPU
   * layout (f32 words, or two 16-bit values per word, element `start` in the low half of word 0;
   * `start` must be even for 16-bit dtypes). Returns the number of words written.
   */
  fill(which: "e" | "c", start: number, count: number, out: Uint32Array): number {
    const wide = this.dtype === "f32";
    check(wide || start % 2 === 0, `16-bit chunks start at even elements, got ${start}`);
    const words = wide ? count : Math.ceil(count / 2);
    check(out.length >= words, `output holds ${out.length} words, needs ${words}`);
    // C[0:min(n, v)] = E: those elements of C are E's elements with the same flat index
    const copied = which === "c" ? Math.min(this.n, this.v) * this.d : 0;
    const end = start + count;
    let i = start;
    if (i < copied) {
      const stop = Math.min(end, copied);
      this.#fillRange(this.#keys.e, i, stop, start, out);
      i = stop;
    }
    if (i < end) this.#fillRange(which === "e" ? this.#keys.e : this.#keys.c, i, end, start, out);
    return words;
  }

  /** Elements [from, to) drawn with `key` into `out`, whose element 0 is element `start`. */
  #fillRange(key: number, from: number, to: number, start: number, out: Uint32Array) {
    if (this.#table32) {
      const t = this.#table32;
      const f = new Float32Array(out.buffer, out.byteOffset, out.length);
      for (let i = from; i < to; i++) {
        const h = counterU32(key, i);
        const k = h >>> 16;
        f[i - start] = t[k] + (t[k + 1] - t[k]) * ((h & 0xffff) / 65536);
      }
      return;
    }
    const t = this.#table16!;
    let i = from;
    if (i % 2 === 1) {
      // the high half of a word whose low half an earlier range wrote
      const w = (i - start) >> 1;
      out[w] = (out[w] & 0xffff) | (t[counterU32(key, i) >>> 16] << 16);
      i++;
    }
    for (; i + 1 < to; i += 2) {
      const lo = t[counterU32(key, i) >>> 16];
      const hi = t[counterU32(key, i + 1) >>> 16];
      out[(i - start) >> 1] = (lo | (hi << 16)) >>> 0;
    }
    if (i < to) {
      // a trailing single element: the high half is the next range's (or zero padding)
      out[(i - start) >> 1] = t[counterU32(key, i) >>> 16];
    }
  }

  /** The targets: uniform in [0, v), round(ignoreFraction·n) of them IGNORE_INDEX. */
  targets(): Int32Array<ArrayBuffer> {
    const out = new Int32Array(this.n);
    const key = this.#keys.targets;
    for (let i = 0; i < this.n; i++) {
      out[i] = Math.floor((counterU32(key, i) / 2 ** 32) * this.v);
    }
    const ignored = Math.round(this.ignoreFraction * this.n);
    if (ignored > 0) {
      const order = Array.from({ length: this.n }, (_, i) => i);
      const rank = order.map((i) => counterU32(this.#keys.ignore, i));
      order.sort((a, b) => rank[a] - rank[b] || a - b);
      for (let k = 0; k < ignored; k++) out[order[k]] = IGNORE_INDEX;
    }
    return out;
  }
}

/** Φ⁻¹(p) for p in (0, 1) (Acklam's rational approximation, relative error < 1.2e-9). */
function _normalQuantile(p: number): number {
  const a = [
    -3.969683028665376e+01,
    2.209460984245205e+02,
    -2.759285104469687e+02,
    1.383577518672690e+02,
    -3.066479806614716e+01,
    2.506628277459239e+00,
  ];
  const b = [
    -5.447609879822406e+01,
    1.615858368580409e+02,
    -1.556989798598866e+02,
    6.680131188771972e+01,
    -1.328068155288572e+01,
  ];
  const c = [
    -7.784894002430293e-03,
    -3.223964580411365e-01,
    -2.400758277161838e+00,
    -2.549732539343734e+00,
    4.374664141464968e+00,
    2.938163982698783e+00,
  ];
  const d = [
    7.784695709041462e-03,
    3.224671290700398e-01,
    2.445134137142996e+00,
    3.754408661907416e+00,
  ];
  const lo = 0.02425;
  if (p < lo || p > 1 - lo) {
    const q = Math.sqrt(-2 * Math.log(p < lo ? p : 1 - p));
    const x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
      ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    return p < lo ? x : -x;
  }
  const q = p - 0.5;
  const r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
    (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}
