/**
 * The tensor-core filter pass as the fused backward takes it (FusedBackwardOptions.filterKernel,
 * kernels/fused/backward_types.ts): the generator of tc_filter_wgsl.ts bound to a tile and a
 * subgroup size, and the FMA-core tile shape the backward dispatches by (only its bm × bn matter).
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import type { GemmTile } from "../gemm_tiles.ts";
import type { FusedBackwardOptions } from "../fused/backward_types.ts";
import type { TcMode } from "./tc_codegen.ts";
import { tcFilterWgsl } from "./tc_filter_wgsl.ts";
import { TC_TILE_128X256_K32, tcSupport, type TcTile, tileCols, tileRows } from "./tc_tiles.ts";

/**
 * The filter's tile on hardware: 128×256, 8 subgroups of 4×4 matrices, K-step 32, one copy (the
 * forward's tile before the 128×128 one; the filter's atomics would take a 128×128 tile past
 * 24 KiB of workgroup memory).
 */
export const TC_FILTER_TILE: TcTile = TC_TILE_128X256_K32;

/** The filter's tile when emulated: 64×64, the software adapters' backward tile. */
export const TC_FILTER_TILE_EMULATED: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 2, bk: 16 };

/**
 * The FMA-core tile shape the backward dispatches a tensor-core filter tile by: its bm × bn and
 * K-step; tm × tn only make the shape a valid GEMM tile (at most 1,024 threads), since the
 * kernel's own workgroup is the tile's subgroups.
 */
export function tcFilterDispatchTile(tcTile: TcTile): GemmTile {
  const bm = tileRows(tcTile), bn = tileCols(tcTile);
  const tn = (bm / 4) * (bn / 4) > 1024 ? 8 : 4;
  return { bm, bn, bk: tcTile.bk, tm: 4, tn, vec: true };
}

/** The filter kernel of the tensor-core backward ({@link TC_FILTER_TILE} on hardware). */
export function tcFilterKernel(
  ctx: GpuContext,
  o: { mode?: TcMode; tile?: TcTile } = {},
): NonNullable<FusedBackwardOptions["filterKernel"]> {
  const mode = o.mode ?? "native";
  const tcTile = o.tile ?? (mode === "native" ? TC_FILTER_TILE : TC_FILTER_TILE_EMULATED);
  const sgSize = mode === "native" ? tcSupport(ctx).sgSize : 32;
  // the dispatch shape; vec with the K-step lets the backward enable 16-byte loads where d allows
  const tile = tcFilterDispatchTile(tcTile);
  return { tile, wgsl: (f) => tcFilterWgsl({ ...f, tcTile, sgSize, mode }) };
}
