import assert from "node:assert/strict";
import { resolveOptions } from "../../core/options.ts";
import { BACKWARD_TILE_SMALL } from "./backward_tiles.ts";
import { tilePassWgsl } from "./kept_tiles.ts";
import { slabReduceWgsl } from "./slab_reduce.ts";

Deno.test("fused backward tile passes: each switch of the WGSL", () => {
  const base = {
    tile: BACKWARD_TILE_SMALL,
    dtype: "bf16" as const,
    opts: resolveOptions({ beta: 0.1 }),
    v: 1000,
    eps: 2 ** -12,
    sort: false,
  };
  // with the filter the dE pass walks mask words; balanced splits bind their bounds
  const dE = tilePassWgsl({ ...base, kind: "dE", splits: 4, balanced: true });
  assert.match(dE, /var<storage, read> bounds: array<u32>/);
  assert.match(dE, /countTrailingZeros/);
  // without the filter: no mask, no bounds, the splits are equal ranges of vocab tiles
  const plain = tilePassWgsl({ ...base, kind: "dE", eps: null, splits: 4, balanced: true });
  assert.doesNotMatch(plain, /bounds|mask|countTrailingZeros/);
  assert.match(plain, /let lo_ = \(split \* P\.hi\) \/ 4u;/);
  // dC: packed 16-bit output updated in place, or f32; out16 is ignored by the dE pass
  const dC16 = tilePassWgsl({ ...base, kind: "dC", out16: "bf16" });
  assert.match(dC16, /outp: array<u32>/);
  assert.match(dC16, /to16\(from16\(old & 0xffffu\) \+ /);
  assert.match(tilePassWgsl({ ...base, kind: "dC" }), /outp: array<f32>/);
  assert.match(tilePassWgsl({ ...base, kind: "dE", out16: "bf16" }), /outp: array<f32>/);
  // sorted: a vocab tile's rows are read through perm once per tile
  assert.match(tilePassWgsl({ ...base, kind: "dC", sort: true }), /s_rows\[i\] = perm\[/);
  assert.doesNotMatch(tilePassWgsl({ ...base, kind: "dC" }), /perm/);
  assert.throws(
    () => tilePassWgsl({ ...base, dtype: "f16", kind: "dE", vecLoads: true }),
    /only for bf16/,
  );
  assert.throws(() => tilePassWgsl({ ...base, kind: "dE", rowSlices: 32 }), RangeError);
  // the split partials' sum: S − 1 parts in place, or S parts into the output
  assert.match(slabReduceWgsl(3, true), /s = s \+ src\[P\.sOff \+ i \+ 2u \* P\.stride\];/);
  assert.doesNotMatch(slabReduceWgsl(3, true), /dst/);
  assert.match(slabReduceWgsl(3, false), /dst\[P\.dOff \+ i\] = s;/);
});
