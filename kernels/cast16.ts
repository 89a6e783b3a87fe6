/**
 * Casting f32 to the packed 16-bit storage types: the WGSL rounding function every kernel that
 * writes bf16 or f16 uses (`fn to16(x: f32) -> u32`, round to nearest even, the same bits as the
 * host's f32ToBf16Bits / f32ToF16Bits), and a kernel that casts an f32 tensor into a 16-bit tensor
 * of the same shape and row sharding (autograd's `.to(bf16)` of a gradient). One thread writes one
 * whole u32 word (two elements), so no two threads share a word.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import { compileKernel, signature } from "../gpu/signature.ts";

/** The 16-bit dtypes a kernel can write. */
export type Dtype16 = "bf16" | "f16";

/**
 * WGSL `fn to16(x: f32) -> u32`: the 16-bit pattern of x in `dtype`, rounded to nearest even
 * (NaN stays NaN; f16 overflows to ±Inf and keeps subnormals), in the low half of the result.
 * Written with integer operations so that rounding does not depend on the implementation's f32 →
 * f16 conversion, which WGSL leaves free to round either way.
 */
export function wgslTo16(dtype: Dtype16): string {
  if (dtype === "bf16") {
    return `fn to16(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu) != 0u) { return (b >> 16u) | 0x40u; }
  return ((b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u) & 0xffffu;
}
`;
  }
  return `fn to16(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let sign = (b >> 16u) & 0x8000u;
  let ex = (b >> 23u) & 0xffu;
  var mant = b & 0x7fffffu;
  if (ex == 0xffu) { return sign | 0x7c00u | select(0u, 0x200u, mant != 0u); }
  let e = i32(ex) - 112;
  if (e >= 31) { return sign | 0x7c00u; }
  if (e <= 0) {
    if (e < -10) { return sign; }
    mant = mant | 0x800000u;
    let shift = u32(14 - e);
    let half = 1u << (shift - 1u);
    let rest = mant & ((1u << shift) - 1u);
    var m = mant >> shift;
    if (rest > half || (rest == half && (m & 1u) == 1u)) { m = m + 1u; }
    return sign | m;
  }
  let rest = mant & 0x1fffu;
  var h = sign | (u32(e) << 10u) | (mant >> 13u);
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) == 1u)) { h = h + 1u; }
  return h;
}
`;
}

/**
 * WGSL `fn from16(h: u32) -> f32`: the value of the 16-bit pattern in the low half of h (exact:
 * every bf16 and f16 value is an f32).
 */
export function wgslFrom16(dtype: Dtype16): string {
  return dtype === "bf16"
    ? "fn from16(h: u32) -> f32 { return bitcast<f32>((h & 0xffffu) << 16u); }\n"
    : "fn from16(h: u32) -> f32 { return unpack2x16float(h & 0xffffu).x; }\n";
}

const WG = 256;

/** Workgroups of a grid-stride loop over `items`, within the 65535 limit of one dimension. */
export function gridStrideGroups(items: number, wg = WG): number {
  return Math.max(1, Math.min(Math.ceil(items / wg), 65535));
}

/** The cast's signature: src f32, dst 16-bit as u32 words. */
const SIG = signature({
  params: { count: "u32", words: "u32", srcOff: "u32", dstOff: "u32" },
  bindings: { src: { elem: "f32", access: "read" }, dst: { elem: "u32", access: "read_write" } },
});

/**
 * WGSL of the cast of `count` elements (`words` words) from element `srcOff` of src to word
 * `dstOff` of dst (an even element).
 */
export function cast16Wgsl(dtype: Dtype16): string {
  return `${SIG.wgsl}
${wgslTo16(dtype)}
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var w = gid.x; w < P.words; w += nwg.x * ${WG}u) {
    let e0 = 2u * w;
    var bits = to16(src[P.srcOff + e0]);
    if (e0 + 1u < P.count) { bits = bits | (to16(src[P.srcOff + e0 + 1u]) << 16u); }
    dst[P.dstOff + w] = bits;
  }
}
`;
}

/** Compiled cast for one 16-bit dtype. */
export interface PreparedCast16 {
  /**
   * Records dst = src rounded to dst's dtype. Both have the same shape; their row shardings may
   * differ as long as every shard of either starts at an even element of dst's shard (true when
   * the columns are even, or every shard start is an even row), so that no two threads share a
   * word: one dispatch per piece of rows inside one shard of each.
   */
  record(rec: Recorder, a: { src: DeviceTensor; dst: DeviceTensor }): void;
}

/** Compiles the cast to `dtype`. */
export async function prepareCast16(ctx: GpuContext, dtype: Dtype16): Promise<PreparedCast16> {
  const k = await compileKernel(ctx, SIG, cast16Wgsl(dtype), `cast f32→${dtype}`);
  return {
    record(rec, a) {
      if (
        a.src.dtype !== "f32" || a.dst.dtype !== dtype || a.src.rows !== a.dst.rows ||
        a.src.cols !== a.dst.cols
      ) {
        throw new RangeError(
          `cast16: ${a.src.rows}×${a.src.cols} ${a.src.dtype} → ${a.dst.rows}×${a.dst.cols} ${a.dst.dtype}`,
        );
      }
      const cols = a.src.cols;
      const cuts = new Set<number>();
      for (const t of [a.src, a.dst]) for (const s of t.shards) cuts.add(s.rowStart);
      const starts = [...cuts].filter((r) => r < a.src.rows).sort((x, y) => x - y);
      rec.pass(`cast f32→${dtype}`, (p) => {
        starts.forEach((r0, i) => {
          const r1 = i + 1 < starts.length ? starts[i + 1] : a.src.rows;
          const s = a.src.shardOf(r0), ds = a.dst.shardOf(r0);
          const dstEl = (r0 - ds.rowStart) * cols;
          if (dstEl % 2 !== 0) throw new RangeError("cast16: a piece starts inside a word");
          const count = (r1 - r0) * cols;
          const words = Math.ceil(count / 2);
          const params = { count, words, srcOff: (r0 - s.rowStart) * cols, dstOff: dstEl / 2 };
          const bg = k.bind(rec, params, { src: s.buffer, dst: ds.buffer });
          p.dispatch(k.pipeline, bg, gridStrideGroups(words));
        });
      });
    },
  };
}
