/** The tensor-core filter's dispatch tile (kernels/tc/tc_filter.ts). */
import assert from "node:assert/strict";
import { validateTile } from "../gemm_tiles.ts";
import { TC_FILTER_TILE_EMULATED, tcFilterDispatchTile } from "./tc_filter.ts";
import { TC_FORWARD_TILE } from "./tc_forward.ts";
import { TC_TILE_128, tileCols, tileRows } from "./tc_tiles.ts";

Deno.test("tc filter: the dispatch tile of every tile the methods use is a valid GEMM tile", () => {
  for (const t of [TC_FORWARD_TILE, TC_FILTER_TILE_EMULATED, TC_TILE_128]) {
    const d = tcFilterDispatchTile(t);
    assert.equal(d.bm, tileRows(t));
    assert.equal(d.bn, tileCols(t));
    assert.doesNotThrow(() => validateTile(d), JSON.stringify(d));
  }
});
