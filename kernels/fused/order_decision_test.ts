import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import type { GpuContext } from "../../gpu/context.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { compileKernel, signature } from "../../gpu/signature.ts";
import { createTensor, type DeviceTensor, download, fromHost, upload } from "../../gpu/tensor.ts";
import { Rng } from "../../fixtures/rng.ts";
import { BACKWARD_TILE_SMALL } from "./backward_tiles.ts";
import {
  prepareSortBound,
  SORTED_MASK_SIG,
  sortedMaskWgsl,
  sortedOrderWins,
} from "./order_decision.ts";

const VT = BACKWARD_TILE_SMALL.vocab;

/** Entry bits of `tTotal` token tiles over v rows, token tile r's hot rows from `rows(r)`. */
function _hotBits(tTotal: number, v: number, rows: (r: number) => number[]) {
  const words = Math.ceil(v / 32);
  const hot = new Uint32Array(tTotal * words);
  let bound = 0;
  for (let r = 0; r < tTotal; r++) {
    const set = new Set(rows(r));
    for (const row of set) hot[r * words + (row >> 5)] |= 1 << (row & 31);
    bound += Math.ceil(set.size / VT);
  }
  return { hot, words, bound };
}

// a gated marker: adds 1 to x[0]
const MARK_SIG = signature({ params: {}, bindings: { x: { elem: "u32", access: "read_write" } } });
const MARK_WGSL = `${MARK_SIG.wgsl}
@compute @workgroup_size(1)
fn main() { x[0] = x[0] + 1u; }
`;

const _u32 = (ctx: GpuContext, data: Uint32Array, label: string): DeviceTensor =>
  fromHost(ctx, { dtype: "u32", rows: data.length, cols: 1, role: "input", label }, data);

Deno.test({
  name: "order decision: the sorted order's bound from the entry bits, its verdict and its gate",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const bound = await prepareSortBound(ctx, BACKWARD_TILE_SMALL);
    const mark = await compileKernel(ctx, MARK_SIG, MARK_WGSL, "gated mark");
    // 6 token tiles over 1,001 rows: none hot, one, 64, 65, about half, rows in the last word
    const v = 1001, tTotal = 6;
    const rng = new Rng(12345);
    const pick = (k: number) => Array.from({ length: k }, () => rng.int(v));
    const sets = [[], [77], pick(64), pick(65), pick(500), [990, 991, 1000]];
    const { hot, words, bound: want } = _hotBits(tTotal, v, (r) => sets[r]);
    const hotT = _u32(ctx, hot, "entry bits");
    const marker = createTensor(ctx, {
      dtype: "u32",
      rows: 1,
      cols: 1,
      role: "output",
      label: "m",
    });
    const counter = createTensor(ctx, {
      dtype: "u32",
      rows: 4,
      cols: 1,
      role: "output",
      label: "c",
    });
    // own counts at and around the margin's edge against the bound
    const owns = [
      0,
      want,
      Math.floor((want * 20) / 19),
      Math.floor((want * 20) / 19) + 1,
      3 * want,
    ];
    for (const own of owns) {
      // counter[1] and [2] poisoned: the verdict writes [1] only where it skips, never [2]
      upload(ctx, counter, Uint32Array.of(own, 0xdead, 0xbeef, 0));
      upload(ctx, marker, Uint32Array.of(5));
      await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        bound.record(rec, {
          hot: hotT.shards[0].buffer,
          counter: counter.shards[0].buffer,
          tTotal,
          hotWords: words,
        });
        bound.under(rec, () =>
          rec.pass("gated mark", (p) =>
            p.dispatch(
              mark.pipeline,
              mark.bind(rec, undefined, { x: marker.shards[0].buffer }),
              1,
            )));
        await rec.finish();
      });
      const got = Array.from(await download(ctx, counter));
      const worth = sortedOrderWins(own, want);
      assert.deepEqual(got, [own, worth ? 0xdead : want, 0xbeef, want], `own ${own}`);
      assert.equal((await download(ctx, marker))[0], worth ? 6 : 5, `own ${own}: gated pass`);
    }
    // both verdicts came up
    assert.ok(
      owns.some((o) => sortedOrderWins(o, want)) && owns.some((o) => !sortedOrderWins(o, want)),
    );
    for (const t of [hotT, marker, counter]) t.destroy();
    bound.release();
  },
});

Deno.test({
  name: "order decision: the bound never exceeds the sorted mask's count, and is reached",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const bound = await prepareSortBound(ctx, BACKWARD_TILE_SMALL);
    const masks = await compileKernel(
      ctx,
      SORTED_MASK_SIG,
      sortedMaskWgsl(BACKWARD_TILE_SMALL),
      "sorted mask",
    );
    const v = 777, tTotal = 5, vTotal = Math.ceil(v / VT);
    const rng = new Rng(99);
    // token tile r's hot rows: a run of 20·r + 3 rows from a tile's first row (clustered: the
    // identity order reaches the bound), or scattered
    const cases = {
      clustered: (r: number) => Array.from({ length: 20 * r + 3 }, (_, i) => r * 2 * VT + i),
      scattered: (r: number) => Array.from({ length: 20 * r + 3 }, () => rng.int(v)),
    };
    for (const [tag, rows] of Object.entries(cases)) {
      const { hot, words, bound: want } = _hotBits(tTotal, v, rows);
      // a random permutation, and the identity
      const shuffled = Uint32Array.from({ length: v }, (_, i) => i);
      for (let i = v - 1; i > 0; i--) {
        const j = rng.int(i + 1);
        [shuffled[i], shuffled[j]] = [shuffled[j], shuffled[i]];
      }
      for (
        const [order, perm] of [["identity", Uint32Array.from({ length: v }, (_, i) => i)], [
          "shuffled",
          shuffled,
        ]] as const
      ) {
        const hotT = _u32(ctx, hot, "entry bits");
        const permT = _u32(ctx, perm, "perm");
        const maskS = _u32(ctx, new Uint32Array(Math.ceil((tTotal * vTotal) / 32)), "maskS");
        const counter = _u32(ctx, Uint32Array.of(1000, 0, 0, 0), "counter");
        const cb = counter.shards[0].buffer;
        await ctx.scoped(async () => {
          const rec = new Recorder(ctx);
          bound.record(rec, { hot: hotT.shards[0].buffer, counter: cb, tTotal, hotWords: words });
          rec.pass("sorted mask", (p) => {
            const params = {
              vS: 0,
              vE: v,
              vBase: 0,
              vTotal,
              tTotal,
              hotWords: words,
              tiles: vTotal,
            };
            const buffers = {
              perm: permT.shards[0].buffer,
              hot: hotT.shards[0].buffer,
              maskS: maskS.shards[0].buffer,
              counter: cb,
            };
            p.dispatch(
              masks.pipeline,
              masks.bind(rec, params, buffers),
              Math.ceil(vTotal / 64),
              tTotal,
            );
          });
          await rec.finish();
        });
        const got = await download(ctx, counter);
        // own 1,000 tiles: the bound leaves sorting a chance, so counter[1] is the mask's count
        assert.equal(got[3], want, `${tag}, ${order}: the bound`);
        assert.ok(
          got[1] >= want,
          `${tag}, ${order}: ${got[1]} kept tiles against the bound ${want}`,
        );
        if (tag === "clustered" && order === "identity") assert.equal(got[1], want);
        if (tag === "scattered" && order === "shuffled") assert.ok(got[1] > want);
        for (const t of [hotT, permT, maskS, counter]) t.destroy();
      }
    }
    bound.release();
  },
});
