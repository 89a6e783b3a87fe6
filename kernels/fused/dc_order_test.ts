import assert from "node:assert/strict";
import { GPU_TEST, readWords, testContext } from "../../testing/gpu.ts";
import { caseInputs } from "../../testing/parity.ts";
import { assertGrads, runBackward } from "../../testing/fused_backward.ts";
import { type HostInputs, IGNORE_INDEX, resolveOptions } from "../../core/options.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { dCOrderBytes, defaultFilterEps } from "./backward_plan.ts";
import { maskBuffer, vocabSegments } from "../../testing/tile_mask.ts";
import { Rng } from "../../fixtures/rng.ts";
import { BACKWARD_TILE_SMALL } from "./backward_tiles.ts";
import { prepareDCOrder } from "./dc_order.ts";
import { tilePassWgsl } from "./kept_tiles.ts";

/** The order on the host: per segment its tiles by kept count, larger first, ties by index. */
function hostOrder(bits: boolean[][], segs: { base: number; tiles: number }[]): number[] {
  const vTotal = bits[0].length;
  const count = (v: number) => bits.reduce((s, row) => s + (row[v] ? 1 : 0), 0);
  const out = new Array<number>(vTotal).fill(-1);
  for (const s of segs) {
    const local = [...Array(s.tiles).keys()];
    local.sort((a, b) => count(s.base + b) - count(s.base + a) || a - b);
    local.forEach((j, r) => out[s.base + r] = j);
  }
  return out;
}

Deno.test({
  name: "dC order: each segment's vocab tiles by kept count, larger first, ties by index",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const order = await prepareDCOrder(ctx);
    // 7 token tiles × 344 vocab tiles in segments of 5, 300 (2 × 2 rank workgroups) and 39 tiles
    const tTotal = 7, sizes = [5, 300, 39];
    const vTotal = sizes.reduce((a, b) => a + b, 0);
    const rng = new Rng(11);
    const rnd = () => rng.uniform();
    // counts 0…7 with many ties; tile 3 kept by every token tile
    const bits = [...Array(tTotal)].map(() => [...Array(vTotal)].map(() => rnd() < 0.3));
    for (const row of bits) row[3] = true;
    const mask = maskBuffer(ctx, bits);
    const ord = ctx.createBuffer({ size: dCOrderBytes(vTotal), role: "workspace", label: "ord" });
    const segs = vocabSegments(sizes);
    const rec = new Recorder(ctx);
    order.record({ rec, mask, ord, voc: segs, tTotal, vTotal });
    await rec.finish();
    const got = [...(await readWords(ctx, ord.buffer, 2 * vTotal))];
    const counts = got.slice(vTotal);
    assert.deepEqual(counts, [...Array(vTotal).keys()].map((v) => bits.filter((r) => r[v]).length));
    assert.deepEqual(got.slice(0, vTotal), hostOrder(bits, segs));
    assert.equal(got[0], 3, "the tile every token tile keeps comes first");
    mask.destroy();
    ord.destroy();
  },
});

/**
 * Peaked inputs (as in backward_test.ts): every token's embedding a copy of one of three "hot"
 * classifier rows scaled to a logit of 40, so that only the hot rows' vocab tiles are kept, by
 * 3, 2 and 1 of the 3 token tiles of 64: the order (4, 2, 1, then the rest) is not the
 * vocabulary's.
 */
function peaked(dtype: "f32" | "bf16", d: number): HostInputs {
  const n = 150, v = 333, hot = [270, 150, 77];
  const base = caseInputs({ n, v, d, dtype, beta: 0, seed: 9 });
  for (const j of hot) for (let k = 0; k < d; k++) base.c[j * d + k] *= 3;
  const e = new Float32Array(n * d), targets = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const tt = Math.floor(i / 64);
    const j = i % 3 === 1 && tt < 2 ? hot[1] : i % 3 === 2 && tt < 1 ? hot[2] : hot[0];
    let nrm = 0;
    for (let k = 0; k < d; k++) nrm += base.c[j * d + k] ** 2;
    for (let k = 0; k < d; k++) e[i * d + k] = Math.fround((40 / nrm) * base.c[j * d + k]);
    targets[i] = i % 7 === 0 ? IGNORE_INDEX : j;
  }
  return { ...base, e, targets };
}

Deno.test({
  name: "dC order: the dC pass in either order gives the same bits, against float64",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const cases = [
      { dtype: "f32" as const, d: 33, grad: "f32" as const, shardRows: undefined, kept: 6 },
      // bf16 gradients accumulated in place; E and C in shards of 50 rows (several segments)
      { dtype: "bf16" as const, d: 40, grad: "input" as const, shardRows: 50, kept: 8 },
    ];
    for (const cs of cases) {
      const o = resolveOptions({ beta: 0.1, reduction: "mean" });
      const x = peaked(cs.dtype, cs.d);
      const run = (dCOrder: boolean) =>
        runBackward(ctx, x, o, cs.dtype, {
          filterEps: defaultFilterEps("bf16"),
          sort: false,
          tile: BACKWARD_TILE_SMALL,
          gradDtype: cs.grad,
          shardRows: cs.shardRows,
          dCOrder,
          // the split's segments would sum in another order (kernels/fused/dc_split_test.ts)
          dCSplit: false,
        });
      const ordered = await run(true), seq = await run(false);
      const tag = JSON.stringify(cs);
      if (cs.grad === "f32") assertGrads(tag, ordered.got, ordered.ref, cs.d);
      // 6 of 3 × 6 tiles kept (shards of 50 rows cut tiles: 8 of 5 × 8)
      const { tilesTotal, tilesSkipped } = ordered.got.stats;
      assert.equal(tilesTotal - tilesSkipped, cs.kept, tag);
      assert.deepEqual(ordered.got.dC, seq.got.dC, `${tag}: dC in either order`);
      assert.deepEqual(ordered.again.dC, ordered.got.dC, `${tag}: dC reproducible`);
      assert.deepEqual(ordered.got.dE, seq.got.dE, `${tag}: dE`);
    }
    // the pass binds the order only with the filter
    const base = {
      kind: "dC" as const,
      tile: BACKWARD_TILE_SMALL,
      dtype: "f32" as const,
      opts: resolveOptions({ beta: 0.1 }),
      v: 333,
      sort: false,
      ordered: true,
    };
    assert.match(tilePassWgsl({ ...base, eps: 2 ** -28 }), /let vt = order\[P\.vBase \+ ot\];/);
    assert.doesNotMatch(tilePassWgsl({ ...base, eps: null }), /order/);
  },
});
