import assert from "node:assert/strict";
import { resolveOptions } from "../../core/options.ts";
import { TILE_HW, TILE_SMALL } from "../gemm_codegen.ts";
import { BACKWARD_TILE_SMALL, BACKWARD_TILE_WIDE } from "./backward_tiles.ts";
import { filterPassWgsl, keptBoundsWgsl } from "./filter.ts";
import { sortedOrderWins } from "./order_decision.ts";

Deno.test("fused backward filter: the order decision's margin", () => {
  // the order decision's margin: sorted only with at least 5% fewer kept tiles
  assert.equal(sortedOrderWins(5173, 4726), true); // llm fixture, H200, 4096×24,576
  assert.equal(sortedOrderWins(2044, 2029), false);
  assert.equal(sortedOrderWins(100, 95), false);
  assert.equal(sortedOrderWins(100, 94), true);
  assert.equal(sortedOrderWins(0, 0), false);
});

Deno.test("fused backward filter: the WGSL's switches", () => {
  const base = {
    tile: BACKWARD_TILE_WIDE,
    filterTile: TILE_HW,
    dtype: "bf16" as const,
    opts: resolveOptions({ beta: 0.1, softcap: 30 }),
    v: 1000,
    eps: 2 ** -12,
    sort: false,
  };
  const plain = filterPassWgsl(base);
  // the smoothing term of g only with softcap and β > 0; entry bits only when asked for
  assert.match(plain, /\(BETA \/ VOCAB\) \* \(z \/ SOFTCAP\)/);
  assert.doesNotMatch(filterPassWgsl({ ...base, opts: resolveOptions({ beta: 0.1 }) }), /BETA \//);
  assert.doesNotMatch(plain, /s_hot|perm/);
  const entry = filterPassWgsl({ ...base, entryBits: true });
  assert.match(entry, /var<storage, read_write> hot: array<atomic<u32>>/);
  // one token tile a filter tile: a kept element sets a bit of the thread's column register, and
  // each of the thread's 8 columns is flushed into `hot` after the test, with no workgroup set;
  // taller filter tiles set s_hot inline
  assert.equal(entry.match(/cb \|= /g)?.length, 64);
  assert.equal(entry.match(/atomicOr\(&hot\[hr \+ /g)?.length, 8);
  assert.doesNotMatch(entry, /s_hot/);
  const tall = filterPassWgsl({ ...base, tile: BACKWARD_TILE_SMALL, entryBits: true });
  assert.doesNotMatch(tall, /cb \|= /);
  assert.equal(tall.match(/atomicOr\(&s_hot/g)?.length, 64);
  assert.match(filterPassWgsl({ ...base, sort: true }), /var<storage, read> perm/);
  // a filter tile covers whole backward tiles, entry bits are taken in the own order
  assert.throws(
    () =>
      filterPassWgsl({ ...base, tile: BACKWARD_TILE_SMALL, filterTile: { ...TILE_SMALL, bm: 96 } }),
    RangeError,
  );
  assert.throws(() => filterPassWgsl({ ...base, sort: true, entryBits: true }), /own order/);
  assert.match(keptBoundsWgsl(4), /bounds\[o \+ 4u\] = P.vTotal/);
});
