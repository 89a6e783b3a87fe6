/**
 * Transposes an f32 matrix into another (dst = srcᵀ, both row-major, either sharded by rows): how
 * a product formed transposed (the compiled method's dEᵀ = Cᵀ·Gᵀ, faster than G·C on the H100)
 * lands in its output. One dispatch per (source shard, destination shard) pair, each copying the
 * block the two share through a 32×32 tile of workgroup memory (reads and writes both along rows).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";

const TILE = 32;
/** Most workgroups along one grid dimension (WebGPU's default limit). */
const MAX_GROUPS = 65535;

/**
 * WGSL: bindings params {rows, cols, srcLd, dstLd, srcOff, dstOff}, src (f32 shard), dst (f32
 * shard): dst[dstOff + j·dstLd + i] = src[srcOff + i·srcLd + j] for i < rows, j < cols.
 */
export const TRANSPOSE_WGSL = `struct Params { rows: u32, cols: u32, srcLd: u32, dstLd: u32,
  srcOff: u32, dstOff: u32, _a: u32, _b: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
var<workgroup> tile: array<array<f32, ${TILE + 1}>, ${TILE}>;
@compute @workgroup_size(${TILE}, 8)
fn main(@builtin(local_invocation_id) l: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
  let i0 = wg.y * ${TILE}u;
  let j0 = wg.x * ${TILE}u;
  for (var r = 0u; r < ${TILE}u; r += 8u) {
    let i = i0 + l.y + r;
    let j = j0 + l.x;
    if (i < P.rows && j < P.cols) { tile[l.y + r][l.x] = src[P.srcOff + i * P.srcLd + j]; }
  }
  workgroupBarrier();
  for (var r = 0u; r < ${TILE}u; r += 8u) {
    let j = j0 + l.y + r;
    let i = i0 + l.x;
    if (i < P.rows && j < P.cols) { dst[P.dstOff + j * P.dstLd + i] = tile[l.x][l.y + r]; }
  }
}
`;

/** Compiled kernel. */
export interface PreparedTranspose {
  /** dst ← srcᵀ (src r×c, dst c×r, both f32); throws on other shapes or dtypes. */
  record(rec: Recorder, a: { src: DeviceTensor; dst: DeviceTensor; label?: string }): void;
}

/** Whether {@link PreparedTranspose.record} takes an r×c source (grid limits). */
export function transposeFits(rows: number, cols: number): boolean {
  return Math.ceil(rows / TILE) <= MAX_GROUPS && Math.ceil(cols / TILE) <= MAX_GROUPS;
}

/** Compiles the kernel. */
export async function prepareTranspose(ctx: GpuContext): Promise<PreparedTranspose> {
  const pl = await ctx.pipeline(TRANSPOSE_WGSL, "transpose");
  return {
    record(rec, { src, dst, label }) {
      if (
        src.dtype !== "f32" || dst.dtype !== "f32" || dst.rows !== src.cols ||
        dst.cols !== src.rows || !transposeFits(src.rows, src.cols)
      ) {
        throw new RangeError(
          `transpose: ${src.rows}×${src.cols} ${src.dtype} into ${dst.rows}×${dst.cols} ` +
            `${dst.dtype} is not an f32 transpose within the grid's limits`,
        );
      }
      rec.pass(label ?? `${dst.label} = ${src.label}ᵀ`, (p) => {
        for (const s of src.shards) {
          for (const d of dst.shards) {
            // the block: the source rows of shard s × the source columns that are shard d's rows
            if (s.rows === 0 || d.rows === 0) continue;
            const u = rec.uniform(
              new Uint32Array([s.rows, d.rows, src.cols, dst.cols, d.rowStart, s.rowStart, 0, 0]),
              "transpose params",
            );
            p.dispatch(
              pl,
              rec.bindGroup(pl, [u, s.buffer, d.buffer]),
              Math.ceil(d.rows / TILE),
              Math.ceil(s.rows / TILE),
            );
          }
        }
      });
    },
  };
}
