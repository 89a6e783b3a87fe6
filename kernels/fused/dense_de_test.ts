import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import { caseInputs } from "../../testing/parity.ts";
import {
  assertGrads,
  assertRounded16,
  type GradCase,
  gradCaseOptions,
  maxAbs,
  peakedInputs,
  runBackward,
  UNIT_ROUNDOFF,
} from "../../testing/fused_backward.ts";
import { resolveOptions } from "../../core/options.ts";
import { assertClose } from "../../reference/compare.ts";
import { defaultFilterEps } from "./backward_plan.ts";
import { BACKWARD_TILE_SMALL } from "./backward_tiles.ts";

Deno.test({
  name: "dense dE: both dE paths forced, against float64, at odd shapes",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // |V| odd and not a multiple of the 64-row chunks; n not a multiple of the tiles
    const cases: (GradCase & { v?: number })[] = [
      { dtype: "bf16", beta: 0.1, d: 40, gradDtype: "input", sort: true },
      { dtype: "bf16", beta: 1, softcap: 4, d: 34, gradDtype: "input", sort: false },
      { dtype: "f32", beta: 0.1, softcap: 5, d: 33, gradDtype: "f32", sort: true },
      { dtype: "bf16", beta: 0, d: 33, gradDtype: "f32", sort: false },
      // little free storage: 24 chunks of 64 rows, more than one gated pass holds
      { dtype: "bf16", beta: 0.1, d: 8, gradDtype: "input", sort: false, v: 1500 },
    ];
    for (const [i, cs] of cases.entries()) {
      const { o, b: base } = gradCaseOptions(cs);
      const x = caseInputs({
        n: 70,
        v: cs.v ?? 1031,
        d: cs.d,
        dtype: cs.dtype,
        beta: cs.beta,
        ignoreFraction: 0.2,
        seed: 90 + i,
      });
      const dense = await runBackward(ctx, x, o, cs.dtype, { ...base, denseDE: "always" });
      const kept = await runBackward(ctx, x, o, cs.dtype, { ...base, denseDE: "never" });
      const tag = JSON.stringify(cs);
      assert.equal(dense.got.stats.denseDE, 1, `${tag}: the dense path taken`);
      if (cs.v === 1500) assert.equal(dense.bwd.lastDenseDEChunkRows, 64, `${tag}: chunk rows`);
      assert.equal(kept.got.stats.denseDE, undefined, `${tag}: no dense path recorded`);
      assert.deepEqual(dense.again.dE, dense.got.dE, `${tag}: dense dE bitwise reproducible`);
      // dC does not depend on the dE path
      assert.deepEqual(dense.got.dC, kept.got.dC, `${tag}: dC the same on both paths`);
      if (cs.gradDtype === "f32") {
        assertGrads(`${tag} dense`, dense.got, dense.ref, x.d);
        assertGrads(`${tag} kept tiles`, kept.got, kept.ref, x.d);
      } else {
        // one rounding of each dE element to the 16-bit output
        assertRounded16(`${tag} dense dE`, dense.got.dE, dense.ref.dE, {
          roundings: 1,
          cols: x.d,
        });
      }
      // the dense path is the unfiltered dE: the kept tiles' differs from it by the filter's
      // dropped terms at most (each below ε·|w|·Σ|C|) and the roundings
      const s = maxAbs(dense.ref.dE);
      assertClose(kept.got.dE, dense.got.dE, {
        atol: (cs.gradDtype === "f32" ? 4e-5 : 2 * UNIT_ROUNDOFF.bf16) * s,
        rtol: 0,
        name: `${tag} kept against dense dE`,
        cols: x.d,
      });
    }
  },
});

Deno.test({
  name:
    "dense dE: the decision takes the dense path where most tiles are kept, else the kept tiles",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 70, v = 1031, d = 40;
    const o = resolveOptions({ beta: 0.1, reduction: "mean" });
    // Flat: random logits of a few units keep every tile (p ≥ ε everywhere)
    const flat = caseInputs({ n, v, d, dtype: "f32", beta: 0.1, seed: 5 });
    // Peaked: each token's embedding a scaled copy of one of 3 classifier rows, so one vocab tile
    // holds every softmax term above ε
    const base = caseInputs({ n, v, d, dtype: "f32", beta: 0.1, seed: 6 });
    const peaked = peakedInputs(base, { hot: [5, 6, 7], logit: 60, ignoreEvery: 9 });
    const b = {
      filterEps: defaultFilterEps("bf16"),
      sort: true,
      tile: BACKWARD_TILE_SMALL,
      gradDtype: "input" as const,
      denseDE: "auto" as const,
    };
    const runs = {
      flat: await runBackward(ctx, flat, o, "bf16", b),
      peaked: await runBackward(ctx, peaked, o, "bf16", b),
    };
    const k = (r: typeof runs.flat) => 1 - r.got.stats.tilesSkipped / r.got.stats.tilesTotal;
    assert.ok(k(runs.flat) > 0.75, `flat keeps ${k(runs.flat)}`);
    assert.equal(runs.flat.got.stats.denseDE, 1);
    assert.ok(k(runs.peaked) < 0.75, `peaked keeps ${k(runs.peaked)}`);
    assert.equal(runs.peaked.got.stats.denseDE, 0);
    // what was decided is what forcing that path gives, bit for bit
    const forced = {
      flat: await runBackward(ctx, flat, o, "bf16", { ...b, denseDE: "always" }),
      peaked: await runBackward(ctx, peaked, o, "bf16", { ...b, denseDE: "never" }),
    };
    for (const f of ["flat", "peaked"] as const) {
      assert.deepEqual(runs[f].got.dE, forced[f].got.dE, `${f}: dE as forced`);
      assert.deepEqual(runs[f].got.dC, forced[f].got.dC, `${f}: dC as forced`);
    }
  },
});
