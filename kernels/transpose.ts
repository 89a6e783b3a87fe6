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
import { compileKernel, signature } from "../gpu/signature.ts";

const TILE = 32;
/** Most workgroups along one grid dimension (WebGPU's default limit). */
const MAX_GROUPS = 65535;

/** The signature: src and dst are f32 shards. */
const SIG = signature({
  params: { rows: "u32", cols: "u32", srcLd: "u32", dstLd: "u32", srcOff: "u32", dstOff: "u32" },
  bindings: { src: { elem: "f32", access: "read" }, dst: { elem: "f32", access: "read_write" } },
  layout: { breaks: [4] },
});

/** WGSL: dst[dstOff + j·dstLd + i] = src[srcOff + i·srcLd + j] for i < rows, j < cols. */
export const TRANSPOSE_WGSL = `${SIG.wgsl}
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
  const k = await compileKernel(ctx, SIG, TRANSPOSE_WGSL, "transpose");
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
            // rows: the block's source rows; cols: its source columns (destination rows)
            const params = {
              rows: s.rows,
              cols: d.rows,
              srcLd: src.cols,
              dstLd: dst.cols,
              srcOff: d.rowStart,
              dstOff: s.rowStart,
            };
            p.dispatch(
              k.pipeline,
              k.bind(rec, params, { src: s.buffer, dst: d.buffer }),
              Math.ceil(d.rows / TILE),
              Math.ceil(s.rows / TILE),
            );
          }
        }
      });
    },
  };
}
