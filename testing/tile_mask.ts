/**
 * Test helpers of the passes that read the fused backward's tile mask (kernels/fused/dc_order.ts,
 * kernels/fused/dc_split.ts): a mask buffer from per-token-tile rows of bits, and vocab segments
 * of 64-row tiles.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../gpu/context.ts";
import { maskBytes, type TileSegment } from "../kernels/fused/backward_plan.ts";

/** The mask buffer of `bits[t][v]` (token tile t keeps vocab tile v): bit t·vTotal + v. */
export function maskBuffer(ctx: GpuContext, bits: boolean[][]): TrackedBuffer {
  const tTotal = bits.length, vTotal = bits[0].length;
  const words = new Uint32Array(maskBytes(tTotal, vTotal) / 4);
  bits.forEach((row, t) =>
    row.forEach((b, v) => {
      const i = t * vTotal + v;
      if (b) words[i >> 5] |= 1 << (i & 31);
    })
  );
  const mask = ctx.createBuffer({ size: words.byteLength, role: "workspace", label: "mask" });
  ctx.device.queue.writeBuffer(mask.buffer, 0, words);
  return mask;
}

/**
 * Vocab segments of `sizes[i]` tiles of 64 rows, one after the other; segment i's last tile
 * `short[i]` rows short (default none).
 */
export function vocabSegments(sizes: number[], short: number[] = []): TileSegment[] {
  let base = 0;
  return sizes.map((tiles, i) => {
    const seg = { start: base * 64, end: (base + tiles) * 64 - (short[i] ?? 0), tiles, base };
    base += tiles;
    return seg;
  });
}
