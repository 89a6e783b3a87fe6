/**
 * The fused forward's stream split: the tiles pass as W workgroups, each taking an equal share of
 * the (token block, vocab tile) pairs in block-major order, instead of a grid of (vocab split) ×
 * (token block) workgroups.
 *
 * Why: a grid of splits runs its workgroups in whole waves of the GPU's slots. At the paper's
 * shape (64 token blocks of 128 rows, 1,000 vocab tiles of 256) every split count S ≤ 16 gives
 * waves of at most 97% of the slots of a 132-SM GPU: 64·S workgroups of ⌈1000/S⌉ tiles against
 * 64,000/132 = 484.8 tiles an SM. With W workgroups, workgroup w holding the tiles ⌊w·total/W⌋
 * … ⌊(w + 1)·total/W⌋ − 1, the pass ends after ⌈total/W⌉ tiles an SM, whatever the block count
 * (on an H200 at the paper's shape the forward 212.5 → 210.4 ms on wgpu; where it is the default:
 * kernels/fused/forward.ts `defaultStreamWorkgroups`).
 *
 * A workgroup's share may begin or end inside a token block, so it walks one or more *pieces*
 * (runs of vocab tiles of one block), each with the running row state of the split grid, and
 * leaves one partial per row and piece. A piece's slot in the row's partials is its workgroup's
 * index minus that of the first workgroup that touches the block, so the slots follow the vocab
 * order and the merge pass (kernels/fused/forward_merge.ts) merges them in that fixed order, as it
 * merges splits. A block touched by fewer workgroups than the row has slots gets neutral partials
 * in the rest, from the workgroup holding its last tile (an LSE of NEG_INF, a pair (NEG_INF, 0), a
 * zero Σz and zero stats leave the merge's result bit for bit what it was). Deterministic: which
 * workgroup holds a tile, and so every sum's order, depends only on (n, |V|, W).
 * @module
 */

/** The stream split of one (E shard, C shard) dispatch. */
export interface StreamPlan {
  /** Workgroups (≤ the tiles in all). */
  wgs: number;
  /** Token blocks and vocab tiles of the shards. */
  blocks: number;
  tiles: number;
  /** Partial slots per row: the most workgroups that touch one token block. */
  slots: number;
}

/** The workgroup holding tile x of `total` among `wgs`: ⌊((x + 1)·W − 1) / total⌋. */
export function streamOwner(x: number, total: number, wgs: number): number {
  return Math.floor(((x + 1) * wgs - 1) / total);
}

/**
 * The stream split of `blocks` token blocks × `tiles` vocab tiles over up to `wgs` workgroups, or
 * undefined where the kernel's u32 arithmetic (total·W) would overflow.
 */
export function streamPlan(blocks: number, tiles: number, wgs: number): StreamPlan | undefined {
  const total = blocks * tiles;
  const w = Math.max(1, Math.min(wgs, total));
  if (total * w >= 2 ** 32) return undefined;
  let slots = 1;
  for (let b = 0; b < blocks; b++) {
    const first = streamOwner(b * tiles, total, w),
      last = streamOwner((b + 1) * tiles - 1, total, w);
    slots = Math.max(slots, last - first + 1);
  }
  return { wgs: w, blocks, tiles, slots };
}

/** The params a stream kernel adds to the split grid's: the token blocks and the workgroups. */
export const STREAM_PARAMS = "blocks wgs";

/**
 * `main`'s body in a stream kernel: the workgroup's pieces, each with `m0`, `tBegin`, `tEnd`,
 * `blk` and `slot` defined before `piece` (the split grid's body from its state's init to its
 * finish), and a barrier between pieces (the next piece's init writes the block's targets).
 */
export function streamPiecesWgsl(bm: number, piece: string): string {
  return `let total = P.blocks * P.tiles;
  var x = (wg.x * total) / P.wgs;
  let xEnd = ((wg.x + 1u) * total) / P.wgs;
  loop {
    if (x >= xEnd) { break; }
    let blk = x / P.tiles;
    let tBegin = x - blk * P.tiles;
    let tEnd = min(P.tiles, tBegin + (xEnd - x));
    // the piece's place among the workgroups that touch the block (streamOwner of its first tile)
    let slot = wg.x - ((blk * P.tiles + 1u) * P.wgs - 1u) / total;
    let m0 = blk * ${bm}u;
  ${piece}
    x += tEnd - tBegin;
    workgroupBarrier();
  }`;
}

/**
 * The finish's lines in a stream kernel, after a row's partial went to index o: where the piece
 * ends the block, the row's later slots get `ws` (the neutral partial) and the terms' `fills`.
 */
export function streamNeutralFill(ws: string, fills: string): string {
  return `
      if (tEnd == P.tiles) {
        for (var q = o + 1u; q < (P.rowStart + lr + 1u) * P.sTotal; q++) {
          let o = q;
          ws[o] = ${ws};${fills}
        }
      }`;
}
