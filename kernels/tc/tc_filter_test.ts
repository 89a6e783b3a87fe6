/** The tensor-core filter's dispatch tile and WGSL switches (kernels/tc/tc_filter*.ts). */
import assert from "node:assert/strict";
import { resolveOptions } from "../../core/options.ts";
import { validateTile } from "../gemm_tiles.ts";
import { BACKWARD_TILE_LARGE } from "../fused/backward_tiles.ts";
import { TC_FILTER_TILE, TC_FILTER_TILE_EMULATED, tcFilterDispatchTile } from "./tc_filter.ts";
import { type TcFilterKernelOptions, tcFilterWgsl } from "./tc_filter_wgsl.ts";
import { TC_TILE_128, tileCols, tileRows } from "./tc_tiles.ts";

Deno.test("tc filter: the dispatch tile of every tile the methods use is a valid GEMM tile", () => {
  for (const t of [TC_FILTER_TILE, TC_FILTER_TILE_EMULATED, TC_TILE_128]) {
    const d = tcFilterDispatchTile(t);
    assert.equal(d.bm, tileRows(t));
    assert.equal(d.bn, tileCols(t));
    assert.doesNotThrow(() => validateTile(d), JSON.stringify(d));
  }
});

Deno.test("tc filter: the WGSL's switches for entry bits", () => {
  const base: TcFilterKernelOptions = {
    tile: BACKWARD_TILE_LARGE,
    filterTile: tcFilterDispatchTile(TC_FILTER_TILE),
    dtype: "bf16",
    opts: resolveOptions({ beta: 0.1 }),
    v: 256000,
    eps: 2 ** -12,
    sort: false,
    vecLoads: true,
    scales: true,
    tcTile: TC_FILTER_TILE,
    sgSize: 32,
  };
  assert.doesNotMatch(tcFilterWgsl(base), /s_hot|&hot\[/);
  // a kept element sets its bit in the workgroup set (4 × 4 matrices of 8 columns a thread), which
  // is flushed into `hot` after the barrier: on Dawn 0.7 ms faster than a register of the
  // thread's 32 column bits ORed straight into `hot` (docs/tensor_cores.md)
  const entry = tcFilterWgsl({ ...base, entryBits: true });
  assert.equal(entry.match(/atomicOr\(&s_hot/g)?.length, 4 * 4 * 8);
  assert.match(entry, /atomicOr\(&hot\[row \* P.hotWords/);
});
