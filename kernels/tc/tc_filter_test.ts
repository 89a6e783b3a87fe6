/** The tensor-core filter's dispatch tile and WGSL switches (kernels/tc/tc_filter*.ts). */
import assert from "node:assert/strict";
import { resolveOptions } from "../../core/options.ts";
import { validateTile } from "../gemm_tiles.ts";
import { BACKWARD_TILE_LARGE, BACKWARD_TILE_SMALL } from "../fused/backward_tiles.ts";
import { TC_FILTER_TILE_EMULATED, tcFilterDispatchTile } from "./tc_filter.ts";
import { type TcFilterKernelOptions, tcFilterWgsl } from "./tc_filter_wgsl.ts";
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

Deno.test("tc filter: the WGSL's switches for entry bits", () => {
  const base: TcFilterKernelOptions = {
    tile: BACKWARD_TILE_LARGE,
    filterTile: tcFilterDispatchTile(TC_FORWARD_TILE),
    dtype: "bf16",
    opts: resolveOptions({ beta: 0.1 }),
    v: 256000,
    eps: 2 ** -12,
    sort: false,
    vecLoads: true,
    scales: true,
    tcTile: TC_FORWARD_TILE,
    sgSize: 32,
  };
  const plain = tcFilterWgsl(base);
  assert.doesNotMatch(plain, /s_hot|cb \|=|&hot\[/);
  // one token tile a filter tile (128 rows): a kept element sets a bit of the thread's column
  // register (4 × 4 matrices of 8 columns a thread each), and each matrix column's 8 bits go into
  // `hot` with one atomicOr after the test, with no workgroup set
  const entry = tcFilterWgsl({ ...base, entryBits: true });
  assert.equal(entry.match(/cb \|= /g)?.length, 4 * 4 * 8);
  assert.equal(entry.match(/atomicOr\(&hot\[hr \+ \(hv >> 5u\)\], m << /g)?.length, 4);
  assert.doesNotMatch(entry, /s_hot/);
  // a filter tile two token tiles tall keeps the workgroup set and its flush
  const tall = tcFilterWgsl({ ...base, tile: BACKWARD_TILE_SMALL, entryBits: true });
  assert.doesNotMatch(tall, /cb \|= /);
  assert.equal(tall.match(/atomicOr\(&s_hot/g)?.length, 4 * 4 * 8);
  assert.match(tall, /atomicOr\(&hot\[row \* P.hotWords/);
});
