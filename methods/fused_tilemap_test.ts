import assert from "node:assert/strict";
import { fusedMethod, fusedNoSort, fusedTileMap } from "./fused.ts";
import { METHODS } from "./mod.ts";
import { runMethod } from "./run.ts";
import { assertParity } from "../testing/parity.ts";
import { assertMatchesReference, methodTolerance } from "../testing/fuzz.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { bufferBytes, methodPeaks } from "../testing/method_peaks.ts";
import { GpuContext } from "../gpu/context.ts";
import { resolveOptions } from "../core/options.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { defaultFilterEps } from "../kernels/fused/backward_plan.ts";
import { defaultFusedTile } from "../kernels/fused/forward.ts";
import { forwardMapTile, tileMapLayout } from "../kernels/fused/tile_map.ts";

Deno.test("fused-tilemap: registered, labelled, after the other fused rows; bad variants refused", () => {
  const names = METHODS.map((m) => m.name);
  assert.ok(names.includes("fused-tilemap"));
  assert.ok(names.indexOf("fused-tilemap") > names.indexOf("fused-nosort"));
  assert.equal(fusedTileMap.label, "Ours + tile map");
  assert.throws(
    () =>
      fusedMethod({
        name: "x",
        label: "x",
        description: "x",
        filter: true,
        sort: true,
        fusedForwardBackward: false,
        gradDtype: "input",
        tileMap: true,
      }),
    /the tile map needs the filter, no sorting, no Fused Version/,
  );
});

Deno.test({
  // (its parity at odd shapes, every β, reduction, dtype and softcap: methods/fused_test.ts)
  name: "fused-tilemap: parity with sharded E, C, dE, dC and at 1×1×1",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    await assertParity(ctx, fusedTileMap, { n: 1, v: 1, d: 1, dtype: "f32", beta: 0.5, seed: 12 });
    // E, C, dE and dC over several bindings: backward segments finer than the forward's tiles
    const sharded = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      await assertParity(sharded, fusedTileMap, {
        n: 70,
        v: 257,
        d: 33,
        dtype: "bf16",
        beta: 0.1,
        softcap: 5,
        ignoreFraction: 0.2,
        seed: 4,
      });
    } finally {
      sharded.destroy();
    }
  },
});

Deno.test({
  name: "fused-tilemap: on the cce recipe it skips tiles, keeps the exact filter's, deterministic",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 200, v = 700, d = 512;
    for (
      const [i, c] of [
        { beta: 0.1, reduction: "mean" as const, dtype: "bf16" as const },
        { beta: 0, softcap: 30, reduction: "sum" as const, dtype: "bf16" as const },
        { beta: 0.1, reduction: "mean" as const, dtype: "bf16" as const, d: 200 },
      ].entries()
    ) {
      const x = makeFixture("cce", {
        n,
        v,
        d: c.d ?? d,
        dtype: c.dtype,
        seed: 5 + i,
        ignoreFraction: 0.1,
      });
      const o = resolveOptions({ beta: c.beta, softcap: c.softcap, reduction: c.reduction });
      const g = 1.3;
      const map = await runMethod(ctx, fusedTileMap, x, o, { dtype: c.dtype, gradOutput: g });
      const exact = await runMethod(ctx, fusedNoSort, x, o, { dtype: c.dtype, gradOutput: g });
      const tag = JSON.stringify(c);
      const s = map.stats!, e = exact.stats!;
      console.log(
        `${tag}: skipped ${s.tilesSkipped} (exact filter ${e.tilesSkipped}) of ${s.tilesTotal}`,
      );
      assert.equal(s.tilesTotal, e.tilesTotal, tag);
      assert.ok(s.tilesSkipped! > 0, `${tag}: the map filter skips tiles`);
      assert.ok(s.tilesSkipped! <= e.tilesSkipped!, `${tag}: it keeps at least the exact filter's`);
      if (s.tilesSkipped === e.tilesSkipped) {
        // the same tiles kept (a superset of equal size): the same passes, bit for bit
        for (const k of ["loss", "dE", "dC"] as const) {
          assert.deepEqual(map[k], exact[k], `${tag} ${k}`);
        }
      }
      // against float64, with what a filter may drop (as the filtered rows are checked)
      const tol = methodTolerance(fusedTileMap, { n, v, d: x.d, dtype: c.dtype, beta: c.beta });
      assertMatchesReference(map, x, o, g, tol, defaultFilterEps(c.dtype));
      // a second run: bitwise the same
      const again = await runMethod(ctx, fusedTileMap, x, o, { dtype: c.dtype, gradOutput: g });
      for (const k of ["loss", "dE", "dC"] as const) {
        assert.deepEqual(again[k], map[k], `${tag} ${k}`);
      }
      assert.deepEqual(again.stats, map.stats);
    }
  },
});

Deno.test({
  name: "fused-tilemap: the map counts in the forward's memory, the backward's is fused-nosort's",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const [dtype, d] of [["f32", 33], ["bf16", 34]] as const) {
      const c = { n: 70, v: 257, d, dtype, beta: 0.1, seed: 6 };
      const opts = resolveOptions({ beta: 0.1 });
      const map = await methodPeaks(ctx, fusedTileMap, c, opts);
      const plain = await methodPeaks(ctx, fusedNoSort, c, opts);
      const l = tileMapLayout([c.n], [c.v], forwardMapTile(defaultFusedTile(ctx)));
      assert.equal(map.fwd, plain.fwd + bufferBytes(l.rows * l.cols, 4), `${dtype}: fwd`);
      assert.equal(map.bwd, plain.bwd, `${dtype}: bwd`);
    }
  },
});
