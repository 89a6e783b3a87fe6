import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import {
  assertGrads,
  assertRounded16,
  type GradCase,
  gradCaseOptions,
  type PeakedCase,
  peakedCaseInputs,
  runBackward,
} from "../../testing/fused_backward.ts";
import { BACKWARD_TILE_SMALL, BACKWARD_TILE_WIDE, type BackwardTile } from "./backward_tiles.ts";
import { dCDirectChunk, dCDirectProductWgsl } from "./dc_product.ts";
import { backwardGemmTiles, backwardSharedBytes } from "./backward_tiles.ts";

Deno.test("dC direct product: chunks of 8 columns a thread, no barrier, P read as vectors", () => {
  const t = backwardGemmTiles(BACKWARD_TILE_WIDE).dC;
  assert.equal(dCDirectChunk(t), 256);
  const w = dCDirectProductWgsl({ tile: t, dtype: "bf16", vec: true, out16: true, split: true });
  assert.ok(!w.includes("workgroupBarrier"), "no barrier in the product");
  assert.ok(w.includes("dc += 256u") && w.includes("Ps[(35u + 4u * tm) * 32u + g]"), w);
  // with E's 16-byte loads a row lane's 8 columns are one 16-byte read-modify-write
  assert.equal((w.match(/select\(outp\[wi\], vec4<u32>\(0u\), fresh\)/g) ?? []).length, 8);
  // a whole tile over a whole chunk takes the loop without bounds tests, E's index stepped
  assert.ok(w.includes("if (kdepth == 128u && dc + 256u <= P.d)") && w.includes("ei = ni;"), w);
  const scalar = dCDirectProductWgsl({
    tile: t,
    dtype: "bf16",
    vec: false,
    out16: true,
    split: true,
  });
  assert.ok(!scalar.includes("kdepth == 128u"), "8 scalar loads: the general loop only");
  // and 4 words a row lane, each its own read-modify-write
  assert.equal((scalar.match(/select\(outp\[wi\], 0u, fresh\)/g) ?? []).length, 8 * 4);
});

Deno.test({
  name: "dC direct product: against float64 at odd shapes, and dC bit for bit the staged product's",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    type Case = GradCase & PeakedCase & {
      tile: BackwardTile;
      filter?: false;
      split?: boolean;
      shardRows?: number;
      /** Also run the logits on [k][row] staging, checked bit for bit against the staged. */
      stage2d?: boolean;
    };
    // the hardware tile where the adapter has its workgroup memory (not lavapipe's 32 KiB)
    const small = BACKWARD_TILE_SMALL;
    const fits = backwardSharedBytes(BACKWARD_TILE_WIDE) <=
      ctx.device.limits.maxComputeWorkgroupStorageSize;
    const wide = fits ? BACKWARD_TILE_WIDE : small;
    const cases: Case[] = [
      // bf16, d a multiple of 8: 16-byte loads of E, dC in place in 16 bits, split walks
      {
        tile: wide,
        dtype: "bf16",
        beta: 0.1,
        d: 40,
        gradDtype: "input",
        sort: false,
        hot: [5, 600],
        split: true,
        stage2d: true,
      },
      // sorted rows, softcap, d even but not a multiple of 8: scalar loads, 16-bit pairs
      {
        tile: wide,
        dtype: "bf16",
        beta: 1,
        softcap: 30,
        d: 34,
        gradDtype: "input",
        sort: true,
        hot: [5, 70, 140],
        stage2d: true,
      },
      // d odd: dC in an f32 scratch, without the filter (every tile); f32 inputs and gradients
      {
        tile: small,
        dtype: "bf16",
        beta: 0,
        d: 33,
        gradDtype: "input",
        sort: false,
        hot: [500],
        filter: false,
        otherTargets: true,
      },
      {
        tile: wide,
        dtype: "f32",
        beta: 0.1,
        d: 33,
        gradDtype: "f32",
        sort: true,
        hot: [5, 70],
        split: true,
      },
      { tile: small, dtype: "f32", beta: 0.1, d: 20, gradDtype: "f32", sort: true, hot: [9, 300] },
      // E and C in shards of 300 rows: several token segments, a chunk past d = 264; the whole
      // token tiles' whole chunks take the loop without bounds tests, the rest the general one
      {
        tile: wide,
        dtype: "bf16",
        beta: 0.1,
        d: 264,
        gradDtype: "input",
        sort: false,
        hot: [5, 400],
        shardRows: 300,
        stage2d: true,
      },
    ];
    const report: string[] = [];
    for (const [i, cs] of cases.entries()) {
      const { o, b: caseB } = gradCaseOptions(cs);
      const x = peakedCaseInputs(cs, { seed: 90 + i, logit: 40, ignoreEvery: 11 });
      const b = {
        ...caseB,
        tile: cs.tile,
        shardRows: cs.shardRows,
        filterEps: cs.filter === false ? null : caseB.filterEps,
        dCSplit: cs.split ? { slots: 64, lMin: 1 } : false as const,
      };
      // the logits on flat staging here, on [k][row] staging below (each the default somewhere)
      const direct = await runBackward(ctx, x, o, cs.dtype, {
        ...b,
        dCProduct: "direct",
        dCStage2d: false,
      });
      const staged = await runBackward(ctx, x, o, cs.dtype, { ...b, dCProduct: "staged" });
      const tag = JSON.stringify({ ...cs, tile: cs.tile.tokens });
      const kept = (direct.got.stats.tilesTotal ?? 0) - (direct.got.stats.tilesSkipped ?? 0);
      assert.ok(kept > 0, `${tag}: some tile kept (${JSON.stringify(direct.got.stats)})`);
      if (cs.split) assert.ok((direct.got.stats.dCSplits ?? 0) > 0, `${tag}: walks split`);
      assert.deepEqual(direct.got.dC, staged.got.dC, `${tag}: dC bit for bit the staged product's`);
      assert.deepEqual(direct.again.dC, direct.got.dC, `${tag}: dC bitwise reproducible`);
      assert.deepEqual(direct.got.dE, staged.got.dE, `${tag}: dE untouched`);
      if (cs.stage2d) {
        const s2d = { ...b, dCProduct: "direct" as const, dCStage2d: true };
        const s2 = await runBackward(ctx, x, o, cs.dtype, s2d);
        assert.deepEqual(s2.got.dC, staged.got.dC, `${tag}: [k][row] logits, dC bit for bit`);
      }
      if (cs.gradDtype === "f32") {
        assertGrads(`${tag} direct`, direct.got, direct.ref, x.d);
      } else {
        assertRounded16(`${tag} direct dC`, direct.got.dC, direct.ref.dC, {
          roundings: direct.bwd.roundings.dC,
          cols: x.d,
        });
      }
      report.push(`${tag}: ${kept} of ${direct.got.stats.tilesTotal} tiles kept`);
    }
    console.log(report.join("\n"));
  },
});
