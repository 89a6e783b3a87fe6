/**
 * Power-of-two scales of the tensor-core operands. f16 holds magnitudes in [2⁻¹⁴, 65504] at full
 * precision (11 significant bits); bf16 (8 bits) and f32 values convert to f16 exactly or to
 * nearest only inside that range. Each bf16 or f32 tensor is therefore multiplied, while it is
 * staged, by 2^s with s = 14 − ⌊log₂ max|x|⌋, which puts its largest magnitude in [2¹⁴, 2¹⁵)
 * (no overflow) and moves its small values 2^s up into the normal range; the products are
 * multiplied by 2^−(s_a + s_b) when stored, which is exact. A bf16 value converts exactly when
 * |x|·2^s ≥ 2⁻¹⁴ (and down to 2⁻¹⁷·2^−s with its 8 bits); below that it becomes an f16
 * subnormal, rounded to a multiple of 2⁻²⁴: an absolute error of at most 2⁻²⁵·2^−s per value
 * ({@link subnormalErrorBound}), which a tensor spanning more than about 30 binades incurs on its
 * smallest values instead of being refused.
 *
 * One pass: the recorded slots' maxima cleared, `absmax` the largest |x| of each tensor as f32 bits
 * (integer atomicMax, order independent), then `scales`: scale[i] = 2^s (1 for a tensor that is
 * all zero or f16). Each is a dispatch, so that a record can join a gated pass (gpu/gate.ts).
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { PassEncoder, Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
import { compileKernel, signature, u32s } from "../../gpu/signature.ts";

/** Most tensors one scale buffer holds. */
export const TC_SCALE_SLOTS = 4;

/** Where f16's largest magnitude lands after scaling: [2^TOP, 2^(TOP+1)). */
export const SCALE_TOP = 14;

const WG = 256;

/** Pass `absmax`: `words` u32 words of one shard, into slot `slot` of the maxima's bits. */
export const ABSMAX_SIGNATURE = signature({
  params: u32s("words slot"),
  bindings: {
    x: { elem: "u32", access: "read" },
    bits: { elem: "atomic<u32>", access: "read_write" },
  },
});

/** The clear: slots [first, first + count) of the maxima's bits set to 0. */
export const CLEAR_SIGNATURE = signature({
  params: u32s("first count"),
  bindings: { bits: { elem: "u32", access: "read_write" } },
});

/** WGSL of the clear ({@link CLEAR_SIGNATURE}, one workgroup). */
export function clearWgsl(): string {
  return `${CLEAR_SIGNATURE.wgsl}
@compute @workgroup_size(${TC_SCALE_SLOTS})
fn main(@builtin(local_invocation_index) i: u32) {
  if (i < P.count) { bits[P.first + i] = 0u; }
}
`;
}

/** Pass `scales`: every slot's scale from its maximum's bits. */
export const SCALES_SIGNATURE = signature({
  bindings: {
    bits: { elem: "u32", access: "read" },
    scales: { elem: "f32", access: "read_write" },
  },
});

/** WGSL of pass `absmax` over one shard (u32 words: bf16 pairs or f32 bits). */
export function absmaxWgsl(dtype: "bf16" | "f32"): string {
  const abs = dtype === "bf16"
    ? "max((w & 0x7fffu) << 16u, w & 0x7fff0000u)"
    : "select(w & 0x7fffffffu, 0u, (w & 0x7f800000u) == 0x7f800000u)";
  return `${ABSMAX_SIGNATURE.wgsl}
var<workgroup> s_max: atomic<u32>;
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  var m = 0u;
  for (var i = gid.x; i < P.words; i += nwg.x * ${WG}u) {
    let w = x[i];
    m = max(m, ${abs});
  }
  atomicMax(&s_max, m);
  workgroupBarrier();
  if (lid == 0u) { atomicMax(&bits[P.slot], atomicLoad(&s_max)); }
}
`;
}

/** WGSL of pass `scales`: scale[i] = 2^(TOP − ⌊log₂ max⌋) from the bits (1 where max is 0). */
export function scalesWgsl(): string {
  return `${SCALES_SIGNATURE.wgsl}
@compute @workgroup_size(${TC_SCALE_SLOTS})
fn main(@builtin(local_invocation_index) i: u32) {
  let b = bits[i];
  let e = i32(b >> 23u) - 127;
  let s = clamp(${SCALE_TOP} - e, -126, 126);
  scales[i] = select(bitcast<f32>(u32(s + 127) << 23u), 1.0, b == 0u);
}
`;
}

/** The scales of one record: f32 powers of two, and the maxima's bits they came from. */
export interface TcScaleBuffers {
  /** f32 per slot: the scale 2^s. */
  scales: TrackedBuffer;
  /** u32 per slot: the bits of max|x| (0 for f16 tensors, which are not scaled). */
  maxBits: TrackedBuffer;
}

/** A compiled scale computation. */
export interface PreparedTcScales {
  /** Allocates a pair of buffers (workspace, {@link TC_SCALE_SLOTS} slots). */
  allocate(ctx: GpuContext): TcScaleBuffers;
  /**
   * Records the scales of `tensors` into slots `first`, `first + 1`, …: all slots of the buffer
   * are recomputed from their bits, so every tensor of a buffer is recorded before it is read.
   * f16 tensors keep scale 1. With `pass`, its dispatches go into that pass.
   */
  record(
    rec: Recorder,
    o: { tensors: DeviceTensor[]; first?: number; into: TcScaleBuffers; pass?: PassEncoder },
  ): void;
  /** Dispatches a record of these tensors makes at most (the clear, a shard each, the scales). */
  dispatches(tensors: DeviceTensor[]): number;
}

/** Compiles the scale passes. */
export async function prepareTcScales(ctx: GpuContext): Promise<PreparedTcScales> {
  const absmax = {
    bf16: await compileKernel(ctx, ABSMAX_SIGNATURE, absmaxWgsl("bf16"), "tc absmax bf16"),
    f32: await compileKernel(ctx, ABSMAX_SIGNATURE, absmaxWgsl("f32"), "tc absmax f32"),
  };
  const final = await compileKernel(ctx, SCALES_SIGNATURE, scalesWgsl(), "tc scales");
  const clear = await compileKernel(ctx, CLEAR_SIGNATURE, clearWgsl(), "tc scales clear");
  const scaled = (t: DeviceTensor) => t.dtype === "bf16" || t.dtype === "f32";
  return {
    dispatches: (tensors) => 2 + tensors.reduce((s, t) => s + (scaled(t) ? t.shards.length : 0), 0),
    allocate(c) {
      const bytes = TC_SCALE_SLOTS * 4;
      return {
        scales: c.createBuffer({ size: bytes, role: "workspace", label: "tc scales" }),
        maxBits: c.createBuffer({ size: bytes, role: "workspace", label: "tc max bits" }),
      };
    },
    record(rec, o) {
      const first = o.first ?? 0;
      if (first + o.tensors.length > TC_SCALE_SLOTS) throw new RangeError("tc scales: too many");
      const inPass = (fn: (p: PassEncoder) => void) =>
        o.pass ? fn(o.pass) : rec.pass("tc scales", fn);
      inPass((p) => {
        const cp = { first, count: o.tensors.length };
        p.dispatch(clear.pipeline, clear.bind(rec, cp, { bits: o.into.maxBits }), 1);
        o.tensors.forEach((t, i) => {
          if (t.dtype !== "bf16" && t.dtype !== "f32") return;
          const k = absmax[t.dtype];
          for (const s of t.shards) {
            const words = Math.ceil((s.rows * t.cols * (t.dtype === "bf16" ? 2 : 4)) / 4);
            if (words === 0) continue;
            const bg = k.bind(rec, { words, slot: first + i }, {
              x: s.buffer,
              bits: o.into.maxBits,
            });
            p.dispatch(k.pipeline, bg, Math.min(65535, Math.ceil(words / (WG * 16))));
          }
        });
        const bg = final.bind(rec, undefined, { bits: o.into.maxBits, scales: o.into.scales });
        p.dispatch(final.pipeline, bg, 1);
      });
    },
  };
}

/** 2^s for the bits of max|x| (as the `scales` pass computes it; 1 for 0). */
export function scaleOfMaxBits(bits: number): number {
  if (bits === 0) return 1;
  const e = ((bits >>> 23) & 0xff) - 127;
  return 2 ** Math.max(-126, Math.min(126, SCALE_TOP - e));
}

/**
 * The largest absolute error of one value's conversion to f16 at scale 2^s, in the tensor's own
 * units: 2⁻²⁵ / 2^s (values below 2⁻¹⁴/2^s become f16 subnormals; others of a bf16 tensor convert
 * exactly, of an f32 tensor with a relative error of at most 2⁻¹¹).
 */
export function subnormalErrorBound(scale: number): number {
  return 2 ** -25 / scale;
}
