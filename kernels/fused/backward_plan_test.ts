import assert from "node:assert/strict";
import { resolveOptions } from "../../core/options.ts";
import {
  defaultDERowSlices,
  defaultDESplits,
  defaultFilteredDESplits,
  dESlabsFitDC,
  fusedBackwardWorkspaceBytes,
} from "./backward_plan.ts";
import {
  BACKWARD_TILE_SMALL,
  BACKWARD_TILE_WIDE,
  backwardGemmTiles,
  type BackwardTile,
  dESliceTile,
} from "./backward_tiles.ts";

Deno.test("fused backward plan: default splits and row slices", () => {
  const paper = { n: 8192, v: 256000, d: 2304 };
  assert.equal(defaultDESplits(paper, BACKWARD_TILE_WIDE), 4); // without the filter: 3 partials
  assert.equal(defaultDESplits({ n: 70, v: 257, d: 33 }, BACKWARD_TILE_SMALL), 4);
  // with the filter (S = 1): 64 token tiles × 4 slices of 32 rows = 256 workgroups
  assert.equal(defaultDERowSlices(paper, BACKWARD_TILE_WIDE, 1), 4);
  assert.equal(defaultDERowSlices(paper, BACKWARD_TILE_WIDE, 4), 1);
  assert.equal(defaultDERowSlices({ n: 70, v: 257, d: 33 }, BACKWARD_TILE_SMALL, 1), 4);
  // the dE pass's slice: the dC pass's thread shape is not the slice's
  assert.deepEqual(dESliceTile(BACKWARD_TILE_WIDE, 4), {
    tokens: 32,
    vocab: 64,
    bk: 16,
    tokensPerThread: 4,
    vocabPerThread: 4,
    gradWiden: 2,
  });
  assert.deepEqual(backwardGemmTiles(BACKWARD_TILE_WIDE), {
    dE: { bm: 128, bn: 64, bk: 16, tm: 8, tn: 4 },
    dC: { bm: 64, bn: 128, bk: 16, tm: 8, tn: 4 },
  });
  // with the filter: splits of the kept tiles, their slabs inside dC's storage (|V| ≥ 2·S·n)
  const hw = 2 ** 31 - 4;
  const fits = (shape: typeof paper, out16: boolean) => (k: number) =>
    dESlabsFitDC(shape, k, out16, hw);
  assert.equal(defaultFilteredDESplits(paper, BACKWARD_TILE_WIDE, fits(paper, true)), 4);
  assert.equal(defaultDERowSlices(paper, BACKWARD_TILE_WIDE, 4), 1);
  const llm = { n: 4096, v: 24576, d: 2304 };
  // 32 token tiles want 8 splits; bf16 dC holds 24576·2 bytes per column: 3 f32 copies of dE
  assert.equal(defaultFilteredDESplits(llm, BACKWARD_TILE_WIDE, fits(llm, true)), 3);
  // f32 gradients: dC holds 6 partials (added to dE at the end)
  assert.equal(defaultFilteredDESplits(llm, BACKWARD_TILE_WIDE, fits(llm, false)), 6);
  assert.equal(
    defaultFilteredDESplits({ n: 70, v: 100, d: 33 }, BACKWARD_TILE_SMALL, () => false),
    1,
  );
  assert.throws(() => dESliceTile(BACKWARD_TILE_SMALL, 32), RangeError);
  // a 4-token slice cannot be cut further: the default falls back to what the tile allows
  const thin: BackwardTile = { ...BACKWARD_TILE_SMALL, tokens: 8, tokensPerThread: 4 };
  assert.equal(defaultDERowSlices({ n: 70, v: 257, d: 33 }, thin, 1), 2);
});

Deno.test("fused backward plan: workspace ≤ 2 MiB at the paper's shape with the filter", () => {
  const spec = { n: 8192, v: 256000, d: 2304, dtype: "bf16" } as const;
  // a hardware adapter's bindings: E, C and dE in one binding each, dC in two (233,016 rows)
  const layout = { maxBindingBytes: 2 ** 31 - 4 };
  const ws = (beta: number, filter: boolean, sort: boolean, dESplits = 1) =>
    fusedBackwardWorkspaceBytes({
      spec,
      opts: resolveOptions({ beta }),
      filter,
      sort,
      tile: BACKWARD_TILE_WIDE,
      dESplits,
      layout,
    });
  const MiB = 2 ** 20, rowWeights = 8192 * 4; // the method's backward also makes w (n f32)
  const eParts = 32 * 2304 * 4, cParts = 32 * 2304 * 4, vec = 2304 * 4;
  const mask = Math.ceil((64 * (3641 + 360)) / 32) * 4 + 8; // 256,064 bits, 16-byte padded
  // coefficients, (target, token) pairs, the dC pass's folded-target flags
  const target = 8192 * 4 + 8192 * 8 + 8192 * 4;
  // the dC pass's order: count, rank and tile of each vocab tile (u32 each), 16-byte padded
  const order = Math.ceil((4001 * 12) / 16) * 16;
  // sort: order (|V| u32), Ē, key range, the sorted order's mask (the order decision; its entry
  // bits, 64 × 8000 words, live in dC's storage); smoothing: ΣC, Σw·E, C's column-sum partials
  const fused = 256000 * 4 + eParts + vec + 16 + 2 * mask + order + target + 2 * vec + cParts;
  assert.equal(ws(0.1, true, true), fused);
  assert.equal(fused, 1_884_608);
  assert.equal(ws(0, true, true), 256000 * 4 + eParts + vec + 16 + 2 * mask + order + target);
  assert.equal(ws(0.1, true, false), eParts + mask + order + target + 2 * vec + cParts);
  assert.equal(ws(0, true, false), mask + order + target);
  for (const beta of [0.1, 0]) {
    for (const sort of [true, false]) {
      const b = ws(beta, true, sort);
      assert.ok(b + rowWeights <= 2 * MiB, `β ${beta}, sort ${sort}: ${b} bytes`);
    }
  }
  // without the filter: the default 4 splits' dE partials (4·n·d·4 = 288 MiB) live in dC's
  // f32 storage (formed and reduced before dC is written), so they cost no workspace; one split
  // (row slices only) as well
  assert.equal(ws(0.1, false, true, 4), fused - 2 * mask - order);
  assert.ok(ws(0.1, false, true, 1) + rowWeights <= 2 * MiB);
});

Deno.test("fused backward plan: 16-bit gradients at the paper's shape within 2 MiB of the bound", () => {
  const spec = { n: 8192, v: 256000, d: 2304, dtype: "bf16" } as const;
  const layout = { maxBindingBytes: 2 ** 31 - 4 };
  const ws = (gradDtype: "f32" | "input", d = 2304, dESplits = 1) =>
    fusedBackwardWorkspaceBytes({
      spec: { ...spec, d },
      opts: resolveOptions({ beta: 0.1 }),
      filter: true,
      sort: true,
      tile: BACKWARD_TILE_WIDE,
      dESplits,
      gradDtype,
      layout,
    });
  // dE's f32 accumulator (n·d·4) lives in dC's 16-bit storage (v·d·2 ≥ n·d·4) until dE is cast;
  // 16-bit dC fits one binding (one vocab segment: 4000 vocab tiles, not 3641 + 360), so both
  // masks and the dC pass's order are 16 bytes smaller
  assert.equal(ws("input"), ws("f32") - 3 * 16);
  const MiB = 2 ** 20;
  const bound = (8192 + 256000) * 2304 * 2;
  const peak = bound + ws("input") + 8192 * 4;
  assert.ok(peak <= bound + 2 * MiB, `${(peak - bound) / MiB} MiB above the bound`);
  // the default 4 balanced splits: the accumulator and 3 partials in dC's storage, 64 × 5 bounds
  assert.equal(ws("input", 2304, 4), ws("input") + 64 * 5 * 4);
  assert.ok(bound + ws("input", 2304, 4) + 8192 * 4 <= bound + 2 * MiB);
  // d odd: dC's f32 scratch (v·d·4, rows made even); dE's accumulator still in dC's output
  const dOdd = 2303;
  const extra = ws("input", dOdd) - ws("f32", dOdd);
  assert.ok(extra >= 256000 * dOdd * 4 && extra < 256000 * dOdd * 4 + MiB);
});
