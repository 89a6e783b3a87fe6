/**
 * Layouts of the GEMM core that no shipped configuration uses, kept for the tuning tools and for a
 * later kernel that may want them:
 *
 * - `dbuf`: double-buffered workgroup staging, two copies of the A and B slices, so one barrier
 *   per K-step instead of two (twice the staging memory);
 * - `warpTile`: each 32-thread group maps to 4 × 8 threads of the tile's thread grid (rows ×
 *   columns) instead of 2 × 16, so its reads of the staged B operand span 128 bytes instead of
 *   256 (where the thread grid allows; the row-major mapping otherwise);
 * - `mFirst` (plain products): consecutive workgroups walk down the output's rows instead of
 *   along its columns, so the workgroups in flight share B's tiles.
 *
 * None beat the core's layout on an H100 (docs/performance.md). A tile takes a layout through its
 * own generator (GemmTile's GEMM_CODEGEN, kernels/gemm_tiles.ts), so every kernel built on the
 * GEMM core honours it; the product never imports this module.
 * @module
 */
import {
  CORE_CODEGEN,
  GEMM_CODEGEN,
  type GemmCodegen,
  type GemmTile,
  type MainloopOptions,
  mainloopParts,
  rowMajorThreadCoords,
  stagingBytes,
  stagingDecls,
} from "../kernels/gemm_codegen.ts";

/** The experimental layout switches (see the module doc). */
export interface TileLayout {
  dbuf?: boolean;
  warpTile?: boolean;
  mFirst?: boolean;
}

/** A generator that remembers the layout it writes. */
interface _LayoutCodegen extends GemmCodegen {
  readonly layout: TileLayout;
}

/** The main loop with two staging copies: one barrier per K-step. */
function _dbufMainloop(o: MainloopOptions, declare: boolean): string {
  // The loop body runs two steps so that every read and write of the staging has a constant copy
  // index (a dynamic one costs a bounds clamp per read). A step stashes the next slice into the
  // copy the previous step read: every thread passed the barrier after that read, so the write
  // is safe. The loop ends with a barrier so that code after it may reuse the staging.
  const p = mainloopParts(o, declare);
  const bk = o.tile.bk;
  return [
    ...p.decls,
    `{
  ${p.kTiles}
  ${p.fetch("0u")}
  ${p.stash(0)}
  workgroupBarrier();
  for (var kt = 0u; kt < k_tiles; kt += 2u) {
    ${p.fetch(`(kt + 1u) * ${bk}u`)}
    ${p.compute(0)}
    if (kt + 1u < k_tiles) {
      ${p.stash(1)}
      workgroupBarrier();
      ${p.fetch(`(kt + 2u) * ${bk}u`)}
      ${p.compute(1)}
      ${p.stash(0)}
      workgroupBarrier();
    }
  }
  workgroupBarrier();
}`,
  ].join("\n");
}

/** Each 32-thread group covering 4 × 8 of the thread grid, where the grid allows it. */
function _warpThreadCoords(t: GemmTile): string {
  const tx = t.bn / t.tn, ty = t.bm / t.tm;
  if (tx % 8 !== 0 || ty % 4 !== 0 || tx * ty < 32) return rowMajorThreadCoords(t);
  const wx = tx / 8;
  return `let tm = (lid / 32u / ${wx}u) * 4u + (lid % 32u) / 8u;\n` +
    `let tn = ((lid / 32u) % ${wx}u) * 8u + lid % 8u;`;
}

/** The generator of a layout. */
function _codegen(layout: TileLayout): _LayoutCodegen {
  const copies = layout.dbuf ? 2 : 1;
  return {
    layout: { ...layout },
    shared: (o) => stagingDecls(o, copies),
    sharedBytes: (t) => stagingBytes(t, copies),
    threadCoords: layout.warpTile ? _warpThreadCoords : CORE_CODEGEN.threadCoords,
    mainloop: layout.dbuf ? _dbufMainloop : CORE_CODEGEN.mainloop,
    origin: layout.mFirst ? () => ({ m: "x", n: "y" }) : CORE_CODEGEN.origin,
    grid: layout.mFirst ? (tilesM, tilesN) => [tilesM, tilesN] : CORE_CODEGEN.grid,
  };
}

/** `t` written with `layout` (the switches given replace the tile's own). */
export function withLayout(t: GemmTile, layout: TileLayout): GemmTile {
  const all: TileLayout = { ...tileLayout(t) };
  for (const k of ["dbuf", "warpTile", "mFirst"] as const) {
    if (layout[k] !== undefined) all[k] = layout[k];
    if (!all[k]) delete all[k];
  }
  return { ...t, [GEMM_CODEGEN]: _codegen(all) };
}

/** The experimental layout switches a tile carries (none for a core tile). */
export function tileLayout(t: GemmTile): TileLayout {
  const cg = t[GEMM_CODEGEN] as _LayoutCodegen | undefined;
  return { ...cg?.layout };
}

/** The tile with its layout switches as plain fields, for reports and names. */
export function describeTile(t: GemmTile): GemmTile & TileLayout {
  return { ...t, ...tileLayout(t) };
}

/** The tile a {@link describeTile} description stands for. */
export function tileFromDescription(d: GemmTile & TileLayout): GemmTile {
  const { dbuf, warpTile, mFirst, ...t } = d;
  return dbuf || warpTile || mFirst ? withLayout(t, { dbuf, warpTile, mFirst }) : t;
}
