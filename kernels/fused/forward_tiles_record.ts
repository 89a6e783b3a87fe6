/**
 * The record of the fused forward's tiles pass (kernels/fused/forward_tiles.ts generates it): per
 * (E shard, C shard) one dispatch of the split grid, or one of the stream split's workgroups
 * (kernels/fused/forward_stream.ts), its params and bindings packed through the pass's signature.
 * @module
 */
import type { TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor, Shard } from "../../gpu/tensor.ts";
import type { KernelOf } from "../../gpu/signature.ts";
import type { GemmTile } from "../gemm_codegen.ts";
import type { TileMapLayout } from "./tile_map.ts";
import type { StreamPlan } from "./forward_stream.ts";
import type { fusedTilesSignature } from "./forward_tiles.ts";

/** Arguments of {@link recordTilesPass}. */
export interface TilesPassArgs {
  kernel: KernelOf<ReturnType<typeof fusedTilesSignature>>;
  tile: GemmTile;
  /** E and C (sharded by rows), targets (one shard). */
  e: DeviceTensor;
  c: DeviceTensor;
  targets: DeviceTensor;
  /** Per C shard: its vocab tiles, its splits and the global index of its first split. */
  shards: { tiles: number; splits: number; base: number }[];
  /** Splits in all (workspace columns). */
  sTotal: number;
  /** The split workspaces: (max, Σexp) or log-sum-exp, [Σz], [stats]. */
  ws: TrackedBuffer;
  wsz?: TrackedBuffer;
  wsx?: TrackedBuffer;
  /** Where the target logits go (n f32). */
  zt: TrackedBuffer;
  /** The tile map and its layout (kernels with `tileMax`). */
  map?: { buffer: TrackedBuffer; layout: TileMapLayout };
  /** The stream split (a `stream` kernel: one E shard and one C shard); else the split grid. */
  stream?: StreamPlan;
}

/**
 * The split grid's params of the dispatch of E shard `es` (of `e`) and C shard `i` (`cs`, its
 * splits `sp`): the tiles pass's, and the tensor-core forward's, which declares the same.
 */
export function splitGridParams(o: {
  e: DeviceTensor;
  es: Shard;
  cs: Shard;
  i: number;
  sp: { tiles: number; splits: number; base: number };
  sTotal: number;
  map?: { layout: TileMapLayout };
}) {
  const { es, cs, sp, map } = o;
  return {
    rows: es.rows,
    rowStart: es.rowStart,
    vRows: cs.rows,
    vStart: cs.rowStart,
    d: o.e.cols,
    tiles: sp.tiles,
    splits: sp.splits,
    splitBase: sp.base,
    sTotal: o.sTotal,
    mapRow0: map ? map.layout.rowBase[o.e.shards.indexOf(es)] : 0,
    mapCol0: map ? map.layout.colBase[o.i] : 0,
    mapCols: map ? map.layout.cols : 0,
  };
}

/**
 * Records the tiles pass: one dispatch of splits × token blocks per (E shard, C shard), or with
 * the stream split one of its workgroups.
 */
export function recordTilesPass(rec: Recorder, a: TilesPassArgs): void {
  const { kernel, tile, e, c, stream } = a;
  if (stream && (e.shards.length !== 1 || c.shards.length !== 1)) {
    throw new RangeError("fused forward: the stream split needs one E shard and one C shard");
  }
  rec.pass("fused forward tiles", (p) => {
    for (const es of e.shards) {
      const blocks = Math.ceil(es.rows / tile.bm);
      if (blocks > 65535) throw new RangeError(`fused forward: ${blocks} token blocks`);
      c.shards.forEach((cshard, i) => {
        const sp = a.shards[i];
        const params = {
          ...splitGridParams({ e, es, cs: cshard, i, sp, sTotal: a.sTotal, map: a.map }),
          ...(stream ? { blocks: stream.blocks, wgs: stream.wgs } : {}),
        };
        const bg = kernel.bind(rec, params, {
          e: es.buffer,
          c: cshard.buffer,
          targets: a.targets.shards[0].buffer,
          ws: a.ws,
          wsz: a.wsz,
          wsx: a.wsx,
          zt: a.zt,
          tmap: a.map?.buffer,
        });
        if (stream) p.dispatch(kernel.pipeline, bg, stream.wgs);
        else p.dispatch(kernel.pipeline, bg, sp.splits, blocks);
      });
    }
  });
}
