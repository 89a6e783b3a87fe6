import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import {
  assertGrads,
  assertRounded16,
  type BackwardCase,
  peakedInputs,
  runBackward,
} from "../../testing/fused_backward.ts";
import { caseInputs } from "../../testing/parity.ts";
import { resolveOptions } from "../../core/options.ts";
import { roundArray } from "../../core/dtype.ts";
import { BACKWARD_TILE_SMALL } from "./backward_tiles.ts";
import { defaultFilterEps } from "./backward_plan.ts";
import { FILTER_SAMPLE_SHARE, filterSampleRows } from "./filter_sample.ts";

// 150 tokens: the sample is the first 64-row token tile, the rest two tiles, the last ragged
const N = 150, V = 1031;

Deno.test("filter sample: whole tiles of rows, about a share of n, none where nothing is left", () => {
  assert.equal(filterSampleRows(150, 64), 64);
  assert.equal(filterSampleRows(4096, 128), 512);
  assert.equal(filterSampleRows(8192, 128), 1024);
  assert.equal(filterSampleRows(64, 64), 0);
  assert.equal(filterSampleRows(4096 + 37, 128), 512);
  assert.ok(Math.abs(filterSampleRows(1 << 20, 128) / (1 << 20) - FILTER_SAMPLE_SHARE) < 1e-3);
});

Deno.test({
  name:
    "filter sample: both dense paths where the sample keeps most tiles, else the whole filter; bit for bit as without the sample",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const opts = resolveOptions({ beta: 0.1, reduction: "mean" });
    const flat = caseInputs({ n: N, v: V, d: 40, dtype: "f32", beta: 0.1, seed: 31 });
    const base = caseInputs({ n: N, v: V, d: 40, dtype: "f32", beta: 0.1, seed: 32 });
    const peaked = peakedInputs(base, { hot: [5, 6, 7], logit: 60, ignoreEvery: 9 });
    const b: BackwardCase = {
      filterEps: defaultFilterEps("bf16"),
      sort: true,
      tile: BACKWARD_TILE_SMALL,
      gradDtype: "input",
      denseDE: "auto",
      denseDC: "auto",
    };
    for (const [name, x, taken] of [["flat", flat, 1], ["peaked", peaked, 0]] as const) {
      const run = await runBackward(ctx, x, opts, "bf16", b);
      const whole = await runBackward(ctx, x, opts, "bf16", { ...b, filterSample: "never" });
      const s = run.got.stats;
      assert.equal(s.filterSampled, taken, `${name}: the sample taken`);
      assert.equal(whole.got.stats.filterSampled, undefined, `${name}: no sample recorded`);
      // the whole filter's decisions are the sample's where it is taken
      assert.equal(s.denseDE, whole.got.stats.denseDE, `${name}: dE's path`);
      assert.equal(s.denseDC, whole.got.stats.denseDC, `${name}: dC's path`);
      assert.equal(s.denseDE, taken ? 1 : 0, `${name}: dE's path`);
      if (taken) {
        // the estimate within a tenth of every tile of the whole filter's count
        const err = Math.abs(s.tilesSkipped - whole.got.stats.tilesSkipped) / s.tilesTotal;
        assert.ok(err < 0.1, `${name}: estimate off by ${err}`);
      } else {
        assert.equal(s.tilesSkipped, whole.got.stats.tilesSkipped, `${name}: the whole count`);
      }
      assert.deepEqual(run.got.dE, whole.got.dE, `${name}: dE as without the sample`);
      assert.deepEqual(run.got.dC, whole.got.dC, `${name}: dC as without the sample`);
    }
  },
});

Deno.test({
  name:
    "filter sample forced: both dense paths after the sample, against float64 at odd shapes, reproducible",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const cases = [
      { dtype: "bf16", beta: 0.1, d: 40, gradDtype: "input", softcap: undefined },
      { dtype: "f32", beta: 0.3, d: 33, gradDtype: "f32", softcap: 5 },
    ] as const;
    for (const [i, cs] of cases.entries()) {
      const opts = resolveOptions({ beta: cs.beta, softcap: cs.softcap, reduction: "mean" });
      const base = caseInputs({
        n: N,
        v: V,
        d: cs.d,
        dtype: cs.dtype,
        beta: cs.beta,
        seed: 40 + i,
      });
      // peaked: the sample alone would not take the dense paths
      const x = peakedInputs(base, { hot: [5, 6, 7], logit: 60, ignoreEvery: 9 });
      // the reference sees the values the kernels read
      x.e = roundArray(x.e, cs.dtype);
      const b: BackwardCase = {
        filterEps: defaultFilterEps(cs.dtype),
        sort: true,
        tile: BACKWARD_TILE_SMALL,
        gradDtype: cs.gradDtype,
        denseDE: "auto",
        denseDC: "auto",
        filterSample: "always",
      };
      const run = await runBackward(ctx, x, opts, cs.dtype, b);
      const tag = JSON.stringify(cs);
      const s = run.got.stats;
      assert.equal(s.filterSampled, 1, `${tag}: the sample taken`);
      assert.equal(s.denseDE, 1, `${tag}: dense dE`);
      assert.equal(s.denseDC, 1, `${tag}: dense dC`);
      assert.deepEqual(run.again.dE, run.got.dE, `${tag}: dE reproducible`);
      assert.deepEqual(run.again.dC, run.got.dC, `${tag}: dC reproducible`);
      // what both dense paths forced give without the sample, bit for bit
      const forced = await runBackward(ctx, x, opts, cs.dtype, {
        ...b,
        denseDE: "always",
        denseDC: "always",
        filterSample: "never",
      });
      assert.deepEqual(run.got.dE, forced.got.dE, `${tag}: dE as both dense paths forced`);
      assert.deepEqual(run.got.dC, forced.got.dC, `${tag}: dC as both dense paths forced`);
      if (cs.gradDtype === "f32") assertGrads(tag, run.got, run.ref, x.d);
      else {
        for (const g of ["dE", "dC"] as const) {
          assertRounded16(`${tag} ${g}`, run.got[g], run.ref[g], {
            roundings: run.bwd.roundings[g],
            cols: x.d,
          });
        }
      }
    }
  },
});
