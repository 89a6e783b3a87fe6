/**
 * The smallest buffer binding each tensor-core kernel accepts, and a guard that checks a
 * dispatch's buffers against it before the bind group is made.
 *
 * WebGPU derives a pipeline's minimum binding size from each variable's type: SizeOf(T) for a
 * fixed-size array, one element's stride for a runtime-sized one. Dawn adds the footprint of the
 * subgroup matrices a binding is loaded from or stored into: a 16×16 f32 matrix with the smallest
 * stride (16) spans 16·16·4 = 1,024 bytes, and an `array<f32>` taking a subgroupMatrixStore must
 * be bound with at least that (on the H100 an unsplit product's 16-byte partials binding was
 * refused with "requires a buffer binding which is at least 1024 bytes"; Dawn's null backend
 * refuses it the same way, which kernels/tc/tc_bindings_test.ts checks for every kernel of the
 * catalog). Of our kernels only the product stores matrices into storage (its `outp` and `part`,
 * in the variant with straight stores); every other matrix load and store is in workgroup memory.
 * @module
 */
import type { BindingResource } from "../../gpu/bindings.ts";
import { bindingRange } from "../../gpu/bindings.ts";
import type { Signature } from "../../gpu/signature.ts";
import { GpuError } from "../../core/errors.ts";
import { MMA_16X16X16, type MmaShape } from "./tc_tiles.ts";

/** Bytes of a matrix binding's footprint: an f32 result matrix of the MMA shape (1,024 at 16×16). */
export function tcMatrixBindingBytes(mma: MmaShape = MMA_16X16X16): number {
  return mma.m * mma.n * 4;
}

/** Bytes of one element of a storage array's element type. */
export function elementBytes(elem: string): number {
  const vec = /^vec([234])<(\w+)>$/.exec(elem);
  if (vec) {
    const n = Number(vec[1]), s = vec[2] === "f16" ? 2 : 4;
    // vec3's stride is a vec4's
    return (n === 3 ? 4 : n) * s;
  }
  if (elem === "f16") return 2;
  if (/^(f32|u32|i32|atomic<u32>|atomic<i32>)$/.test(elem)) return 4;
  throw new RangeError(`tc bindings: unknown element type ${elem}`);
}

/**
 * The smallest binding (bytes) of each storage binding of `sig`: one element for a runtime-sized
 * array, the whole array for a fixed-size one (rounded up to 4 bytes, as every storage binding
 * is), at least {@link tcMatrixBindingBytes} for the
 * bindings named in `matrices` (those taking subgroup-matrix loads or stores).
 */
export function tcMinBindingBytes(
  sig: Signature,
  matrices: readonly string[] = [],
  mma: MmaShape = MMA_16X16X16,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const b of sig.bindings) {
    if (b.access === "uniform") continue;
    const m = /^array<(.+?)(?:, (\d+))?>$/.exec(b.type);
    if (!m) throw new RangeError(`tc bindings: ${b.name} is not an array (${b.type})`);
    const one = elementBytes(m[1]);
    const own = m[2] === undefined ? one : one * Number(m[2]);
    const least = matrices.includes(b.name) ? Math.max(own, tcMatrixBindingBytes(mma)) : own;
    // a storage binding's size is a multiple of 4 bytes
    out[b.name] = Math.ceil(least / 4) * 4;
  }
  return out;
}

/**
 * Throws a GpuError naming the kernel and the binding where a buffer of `buffers` is bound with
 * fewer bytes than `min` asks: Dawn would refuse the bind group with a less precise message, and
 * wgpu might run it out of bounds.
 */
export function checkTcBindings(
  label: string,
  min: Record<string, number>,
  buffers: Record<string, BindingResource | undefined>,
): void {
  for (const [name, r] of Object.entries(buffers)) {
    if (r === undefined || min[name] === undefined) continue;
    const { size } = bindingRange(r);
    if (size < min[name]) {
      throw new GpuError(
        "validation",
        `${label}: binding '${name}' is bound with ${size} bytes, below the ${
          min[name]
        } bytes the pipeline requires`,
      );
    }
  }
}
