import assert from "node:assert/strict";
import { GPU_TEST, readWords, testContext } from "../../testing/gpu.ts";
import {
  assertGrads,
  assertRounded16,
  type GradCase,
  gradCaseOptions,
  type PeakedCase,
  peakedCaseInputs,
  runBackward,
} from "../../testing/fused_backward.ts";
import { resolveOptions } from "../../core/options.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { dCOrderBytes } from "./backward_plan.ts";
import { maskBuffer, vocabSegments } from "../../testing/tile_mask.ts";
import { Rng } from "../../fixtures/rng.ts";
import { BACKWARD_TILE_SMALL } from "./backward_tiles.ts";
import { prepareDCOrder } from "./dc_order.ts";
import { prepareDCSplit } from "./dc_split.ts";

/**
 * The plan on the host: per segment its counts in rank order (larger first), L, each rank's
 * extras while the usable empty tiles last, the slot starts S_r; and the extras in all.
 */
function hostPlan(
  counts: number[][],
  o: { slots: number; lMin: number; ragged: boolean[] },
): { starts: number[][]; extras: number } {
  let extras = 0;
  const starts = counts.map((cs, i) => {
    const ranked = [...cs].sort((a, b) => b - a);
    const kept = cs.reduce((a, b) => a + b, 0);
    const l = Math.max(o.lMin, Math.ceil(kept / o.slots));
    const last = cs[cs.length - 1];
    const usable = cs.filter((c) => c === 0).length - (o.ragged[i] && last === 0 ? 1 : 0);
    // the ranks take their extras while the usable tiles last
    let want = 0;
    const s = ranked.map((c, r) => {
      const start = r + Math.min(want, usable);
      want += c > 0 ? Math.ceil(c / l) - 1 : 0;
      return start;
    });
    const used = Math.min(want, usable);
    extras += used;
    return s;
  });
  return { starts, extras };
}

Deno.test({
  name: "dC split plan: slot starts over the ranks, the extras while the empty tiles last",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const order = await prepareDCOrder(ctx);
    const split = await prepareDCSplit(ctx, {
      vocab: 64,
      sort: false,
      opts: resolveOptions({ beta: 0.1 }),
    });
    // 9 token tiles; segments of 6, 300 (two scan chunks) and 11 tiles, the first's and the
    // last's last tile 20 rows short
    const tTotal = 9, sizes = [6, 300, 11], short = [20, 0, 20];
    const vTotal = sizes.reduce((a, b) => a + b, 0);
    const rng = new Rng(3);
    const rnd = () => rng.uniform();
    const bits = [...Array(tTotal)].map(() => [...Array(vTotal)].map(() => false));
    const keep = (v: number, k: number) => {
      for (let t = 0; t < k; t++) bits[(t * 5 + v) % tTotal][v] = true;
    };
    // segment 0: one long walk, the rest empty (the short last tile cannot lend)
    keep(1, 9);
    // segment 1: walks of every length, a fifth of the tiles empty
    for (let v = 6; v < 306; v++) if (rnd() < 0.8) keep(v, 1 + Math.floor(rnd() * tTotal));
    // segment 2: four long walks and too few empty tiles for all their segments
    for (const v of [306, 308, 309, 311]) keep(v, 9);
    for (const v of [307, 310, 312, 313]) keep(v, 1);
    const mask = maskBuffer(ctx, bits);
    const ord = ctx.createBuffer({ size: dCOrderBytes(vTotal), role: "workspace", label: "ord" });
    const counter = ctx.createBuffer({ size: 16, role: "workspace", label: "counter" });
    const segs = vocabSegments(sizes, short);
    const counts = sizes.map((tiles, i) =>
      [...Array(tiles).keys()].map((j) => bits.filter((r) => r[segs[i].base + j]).length)
    );
    for (const o of [{ slots: 64, lMin: 2 }, { slots: 1024, lMin: 1 }, { slots: 4, lMin: 2 }]) {
      const rec = new Recorder(ctx);
      rec.clear(counter);
      order.record({ rec, mask, ord, voc: segs, tTotal, vTotal });
      split.plan({ rec, ord, counter, voc: segs, vTotal, ...o });
      await rec.finish();
      const got = [...(await readWords(ctx, ord.buffer, 3 * vTotal))];
      const want = hostPlan(counts, { ...o, ragged: short.map((s) => s > 0) });
      const tag = JSON.stringify(o);
      for (const [i, s] of segs.entries()) {
        const part = got.slice(2 * vTotal + s.base, 2 * vTotal + s.base + s.tiles);
        assert.deepEqual(part, want.starts[i], `${tag}: segment ${i}'s slot starts`);
      }
      const [, , extras] = await readWords(ctx, counter.buffer, 3);
      assert.equal(extras, want.extras, `${tag}: extras`);
      if (o.lMin === 1) assert.ok(extras > 10, `${tag}: ${extras} extras`);
    }
    for (const b of [mask, ord, counter]) b.destroy();
  },
});

Deno.test({
  name: "dC split: long walks in segments, against float64 at odd shapes, bitwise reproducible",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // otherTargets where β = 0 (else dC vanishes); hotScale where f32's ε needs the other logits
    // further below
    const cases: (GradCase & PeakedCase & { shardRows?: number })[] = [
      { dtype: "bf16", beta: 0.1, d: 40, gradDtype: "input", sort: true, hot: [5, 6, 7] },
      // four long walks, borrowed tiles for the first only
      {
        dtype: "bf16",
        beta: 1,
        softcap: 60,
        d: 34,
        gradDtype: "input",
        sort: false,
        hot: [5, 70, 140, 600],
      },
      {
        dtype: "f32",
        beta: 0.1,
        hotScale: 3,
        d: 33,
        gradDtype: "f32",
        sort: true,
        hot: [5, 70, 140, 600],
      },
      // d odd: dC in an f32 scratch, then cast
      {
        dtype: "bf16",
        beta: 0,
        d: 33,
        gradDtype: "input",
        sort: false,
        hot: [500],
        otherTargets: true,
      },
      // E and C in shards of 300 rows: several token segments (walks counted from the first)
      {
        dtype: "bf16",
        beta: 0.1,
        d: 40,
        gradDtype: "input",
        sort: true,
        hot: [5, 400],
        shardRows: 300,
      },
    ];
    const report: string[] = [];
    for (const [i, cs] of cases.entries()) {
      const { o, b: caseB } = gradCaseOptions(cs);
      const x = peakedCaseInputs(cs, { seed: 70 + i, logit: 50, ignoreEvery: 9 });
      const b = { ...caseB, tile: BACKWARD_TILE_SMALL, shardRows: cs.shardRows };
      const split = await runBackward(ctx, x, o, cs.dtype, {
        ...b,
        dCSplit: { slots: 64, lMin: 1 },
      });
      const whole = await runBackward(ctx, x, o, cs.dtype, { ...b, dCSplit: false });
      const tag = JSON.stringify(cs);
      const extras = split.got.stats.dCSplits ?? 0;
      assert.ok(
        extras > 0,
        `${tag}: walks split (${extras} extra segments; ${JSON.stringify(split.got.stats)})`,
      );
      assert.equal(whole.got.stats.dCSplits, undefined, `${tag}: no split recorded`);
      assert.deepEqual(split.again.dC, split.got.dC, `${tag}: dC bitwise reproducible`);
      assert.deepEqual(split.got.dE, whole.got.dE, `${tag}: dE untouched`);
      if (cs.gradDtype === "f32") {
        assertGrads(`${tag} split`, split.got, split.ref, x.d);
        assertGrads(`${tag} whole`, whole.got, whole.ref, x.d);
      } else {
        const roundings = split.bwd.roundings.dC;
        for (const [name, r] of [["split", split], ["whole", whole]] as const) {
          assertRounded16(`${tag} ${name} dC`, r.got.dC, r.ref.dC, { roundings, cols: x.d });
        }
      }
      report.push(`${tag}: ${extras} extra segments`);
    }
    console.log(report.join("\n"));
  },
});
