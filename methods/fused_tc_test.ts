/**
 * The tensor-core fused rows. Where the adapter offers no f16 subgroup matrices (Deno's wgpu,
 * lavapipe) the registered rows are unsupported with the reason; the same rows built on the
 * emulated kernels (kernels/tc/tc_codegen.ts: every line of the native kernels but the
 * subgroup-matrix builtins) run here against float64. The emulation runs under Deno's WebGPU
 * only: under Dawn its shaders take minutes each to compile through lavapipe within `deno test`
 * (Dawn's own WGSL is validated for every kernel by kernels/tc/tc_null_test.ts).
 */
import assert from "node:assert/strict";
import { METHODS } from "./mod.ts";
import { runMethod } from "./run.ts";
import { fused, fusedMethod, fusedTileMap } from "./fused.ts";
import { fusedTc, fusedTcMethod, fusedTileMapTc, tcUnsupported } from "./fused_tc.ts";
import { assertParity, caseInputs } from "../testing/parity.ts";
import { peakedInputs, peakedSoftmaxInputs } from "../testing/fused_backward.ts";
import { roundArray } from "../core/dtype.ts";
import { assertMatchesReference, methodTolerance } from "../testing/fuzz.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { methodPeaks } from "../testing/method_peaks.ts";
import { prepareTcForward } from "../kernels/tc/tc_forward.ts";
import { tcSupport } from "../kernels/tc/tc_tiles.ts";
import { prepareFusedForward } from "../kernels/fused/forward.ts";
import { tileMapBytes, tileMapLayout } from "../kernels/fused/tile_map.ts";
import { GpuContext } from "../gpu/context.ts";
import { resolveOptions } from "../core/options.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { defaultFilterEps } from "../kernels/fused/backward_plan.ts";
import { BENCH_BASE } from "../tuning/fused_backward_configs.ts";

const ctx0 = await testContext();
/** The emulated kernels run under Deno's WebGPU (see the module doc). */
const EMULATE = { ...GPU_TEST, ignore: ctx0.engine !== "deno" };

const EMULATED_TC = {
  name: "fused-tc-emulated",
  label: "x",
  description: "x",
  sort: true,
  tileMap: false,
  mode: "emulated" as const,
};
const emulatedTc = fusedTcMethod(EMULATED_TC);
const EMULATED_MAP = {
  name: "fused-tilemap-tc-emulated",
  label: "x",
  description: "x",
  sort: false,
  tileMap: true,
  mode: "emulated" as const,
};
const emulatedMap = fusedTcMethod(EMULATED_MAP);

/** An odd f16 parity case with softcap, β and ignored rows (each test its own seed). */
const ODD_F16 = {
  n: 45,
  v: 177,
  d: 32,
  dtype: "f16",
  beta: 0.1,
  softcap: 5,
  ignoreFraction: 0.2,
} as const;

Deno.test(
  "fused-tc rows: registered; unsupported here with the reason; f32 refused",
  GPU_TEST,
  () => {
    const names = METHODS.map((m) => m.name);
    for (const n of ["baseline-tc", "fused-tc", "fused-tilemap-tc"]) {
      assert.ok(
        names.includes(n),
        n,
      );
    }
    const spec = { n: 8, v: 16, d: 8, dtype: "bf16" as const };
    const o = resolveOptions({});
    for (const m of [fusedTc, fusedTileMapTc]) {
      const why = m.unsupported!(ctx0, spec, o);
      if (ctx0.engine === "deno") assert.match(why ?? "", /need Dawn's subgroup-matrix extension/);
      // Dawn on an adapter that offers f16 subgroup matrices (the GPU host's) supports the rows
      else if (tcSupport(ctx0).reason === undefined) assert.equal(why, undefined);
      else assert.match(why ?? "", /subgroup-matrix|does not offer/);
      assert.match(m.unsupported!(ctx0, { ...spec, dtype: "f32" }, o) ?? "", /f32 inputs/);
    }
    assert.equal(
      tcUnsupported(ctx0, spec, "emulated"),
      ctx0.hasF16 ? undefined : "the emulation needs shader-f16",
    );
    assert.throws(
      () => fusedTcMethod({ name: "x", label: "x", description: "x", sort: true, tileMap: true }),
      /the tile map needs no sorting/,
    );
  },
);

Deno.test({
  name: "fused-tc (emulated): parity at odd shapes, every β, softcap, reductions, ignored rows",
  ...EMULATE,
  async fn() {
    const base = { ignoreFraction: 0.2 };
    await assertParity(ctx0, emulatedTc, {
      ...base,
      n: 37,
      v: 131,
      d: 29,
      dtype: "bf16",
      beta: 0.1,
      seed: 1,
    });
    await assertParity(ctx0, emulatedTc, {
      ...base,
      n: 70,
      v: 300,
      d: 48,
      dtype: "f16",
      beta: 1,
      softcap: 20,
      reduction: "sum",
      seed: 2,
    });
    await assertParity(ctx0, emulatedTc, {
      ...base,
      n: 33,
      v: 200,
      d: 40,
      dtype: "bf16",
      beta: 0,
      reduction: "none",
      gradOutput: "vector",
      seed: 3,
    });
  },
});

Deno.test({
  name: "fused-tilemap-tc (emulated): parity, also with sharded E, C, dE and dC",
  ...EMULATE,
  async fn() {
    await assertParity(ctx0, emulatedMap, { ...ODD_F16, seed: 4 });
    const sharded = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      await assertParity(sharded, emulatedMap, {
        n: 70,
        v: 257,
        d: 33,
        dtype: "bf16",
        beta: 1,
        ignoreFraction: 0.2,
        seed: 5,
      });
    } finally {
      sharded.destroy();
    }
  },
});

Deno.test({
  name:
    "fused-tc (emulated): on the cce recipe its filter keeps the FMA filter's tiles; deterministic",
  ...EMULATE,
  async fn() {
    const n = 200, v = 700, d = 512;
    const x = makeFixture("cce", { n, v, d, dtype: "bf16", seed: 9, ignoreFraction: 0.1 });
    const o = resolveOptions({ beta: 0.1 });
    const g = 1.3;
    const tc = await runMethod(ctx0, emulatedTc, x, o, { dtype: "bf16", gradOutput: g });
    const fma = await runMethod(ctx0, fused, x, o, { dtype: "bf16", gradOutput: g });
    const s = tc.stats!, e = fma.stats!;
    console.log(`cce: skipped ${s.tilesSkipped} (FMA filter ${e.tilesSkipped}) of ${s.tilesTotal}`);
    assert.equal(s.tilesTotal, e.tilesTotal);
    assert.ok(s.tilesSkipped! > 0, "the tensor-core filter skips tiles");
    assert.equal(s.tilesSkipped, e.tilesSkipped, "the same tiles as the FMA filter");
    const tol = methodTolerance(fusedTc, { n, v, d, dtype: "bf16", beta: 0.1 });
    assertMatchesReference(tc, x, o, g, tol, defaultFilterEps("bf16"));
    const again = await runMethod(ctx0, emulatedTc, x, o, { dtype: "bf16", gradOutput: g });
    for (const k of ["loss", "dE", "dC"] as const) assert.deepEqual(again[k], tc[k], k);
    // with the order decision's bound (off on software adapters by default), which reads the
    // filter's entry bits: on this recipe each token tile's hot rows fill as few tiles as any order
    // could, so the bound skips the sort, with either filter's bits, and the gradients stay
    const bound = { backward: { sortBound: true } };
    const opt = { dtype: "bf16" as const, gradOutput: g };
    const tcB = await runMethod(ctx0, fusedTcMethod(EMULATED_TC, bound), x, o, opt);
    const fmaB = await runMethod(ctx0, fusedMethod({ ...BENCH_BASE, name: "b" }, bound), x, o, opt);
    assert.equal(fmaB.stats!.sortSkipped, 1, "the FMA filter's bits: the bound skips the sort");
    assert.equal(tcB.stats!.sortSkipped, 1, "the tensor-core filter's bits: the bound skips it");
    for (const k of ["loss", "dE", "dC"] as const) assert.deepEqual(tcB[k], tc[k], k);
  },
});

Deno.test({
  name: "fused-tc (emulated): the order decision's sorted mask from the filter's entry bits",
  ...EMULATE,
  async fn() {
    // 5 hot classifier rows scattered over 4 vocab tiles, each token a copy of one of them: the
    // sorted order keeps one vocab tile a token tile, the own order up to four, so the decision
    // takes the sorted order, its mask formed from the tensor-core filter's entry bits; it must
    // keep what always sorting keeps (the filter's own sorted mask), with the same gradients
    const n = 70, v = 257, d = 48, hot = [3, 77, 150, 201, 250];
    const base = caseInputs({ n, v, d, dtype: "bf16", beta: 0, seed: 3 });
    for (const j of hot) for (let k = 0; k < d; k++) base.c[j * d + k] *= 3;
    const p = peakedInputs(base, { hot, logit: 40, ignoreEvery: 7 });
    const x = { ...p, e: roundArray(p.e, "bf16") };
    const o = resolveOptions({ beta: 0.1 });
    const run = (decideOrder: boolean) =>
      runMethod(ctx0, fusedTcMethod(EMULATED_TC, { backward: { decideOrder } }), x, o, {
        dtype: "bf16",
      });
    const decided = await run(true), always = await run(false);
    const own = await runMethod(ctx0, fusedTcMethod({ ...EMULATED_TC, sort: false }), x, o, {
      dtype: "bf16",
    });
    const kept = (r: typeof decided) => r.stats!.tilesTotal! - r.stats!.tilesSkipped!;
    console.log(`peaked: kept ${kept(decided)} decided, ${kept(always)} sorted, ${kept(own)} own`);
    assert.equal(kept(decided), kept(always));
    assert.ok(kept(always) < kept(own), "sorting keeps fewer");
    for (const k of ["loss", "dE", "dC"] as const) assert.deepEqual(decided[k], always[k], k);
    const tol = methodTolerance(fusedTc, { n, v, d, dtype: "bf16", beta: 0.1 });
    assertMatchesReference(decided, x, o, 1, tol, defaultFilterEps("bf16"));
  },
});

Deno.test({
  name: "fused-tilemap-tc (emulated): its refine is the tensor-core filter over every tile, " +
    "fused-tc's own-order tiles and gradients bit for bit",
  ...EMULATE,
  async fn() {
    // a peaked softmax over a classifier with a non-zero column mean: the map's bound keeps
    // tiles the exact filter drops (methods/fused_test.ts, the FMA map's refine)
    const n = 140, v = 1000, d = 33;
    const x = peakedSoftmaxInputs({ n, v, d, alpha: 18, dtype: "bf16" });
    const o = resolveOptions({ beta: 0.1 });
    const opt = { dtype: "bf16" as const, gradOutput: 1.3 };
    const map = (mapRefine: "always" | "never") =>
      runMethod(ctx0, fusedTcMethod(EMULATED_MAP, { backward: { mapRefine } }), x, o, opt);
    const refined = await map("always"), unrefined = await map("never");
    const own = await runMethod(ctx0, fusedTcMethod({ ...EMULATED_TC, sort: false }), x, o, opt);
    const kept = (r: typeof own) => r.stats!.tilesTotal! - r.stats!.tilesSkipped!;
    console.log(
      `map keeps ${kept(unrefined)}, refined ${kept(refined)}, fused-tc ${kept(own)} ` +
        `of ${own.stats!.tilesTotal}`,
    );
    assert.equal(refined.stats!.mapRefined, 1);
    assert.equal(refined.stats!.mapKeptTiles, kept(unrefined), "the map's own count");
    assert.ok(kept(unrefined) > kept(own), "the map keeps tiles the filter drops");
    assert.equal(kept(refined), kept(own), "refined: the tensor-core filter's count");
    for (const k of ["loss", "dE", "dC"] as const) {
      assert.deepEqual(refined[k], own[k], `${k} bit for bit fused-tc's in its own order`);
    }
    const tol = methodTolerance(fusedTileMapTc, { n, v, d, dtype: "bf16", beta: 0.1 });
    assertMatchesReference(refined, x, o, 1.3, tol, defaultFilterEps("bf16"));
    // E, C and the gradients over 4 KiB bindings: the refine's passes a segment pair at a time
    const sharded = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      const always = fusedTcMethod(EMULATED_MAP, { backward: { mapRefine: "always" } });
      const r = await runMethod(sharded, always, x, o, opt);
      const own1 = await runMethod(
        sharded,
        fusedTcMethod({ ...EMULATED_TC, sort: false }),
        x,
        o,
        opt,
      );
      assert.equal(r.stats!.mapRefined, 1);
      assert.ok(Number(r.stats!.mapKeptTiles) > kept(own1), "sharded: the map keeps more");
      assert.equal(kept(r), kept(own1), "sharded: the count");
      for (const k of ["loss", "dE", "dC"] as const) {
        assert.deepEqual(r[k], own1[k], `sharded: ${k} bit for bit`);
      }
    } finally {
      sharded.destroy();
    }
  },
});

Deno.test({
  name: "fused-tilemap-tc (emulated): its refine takes the filter's sample, nested in the " +
    "refine's gate; bit for bit as without the sample",
  ...EMULATE,
  async fn() {
    // 150 tokens: the sample is the first 64-row token tile, the rest two tiles, the last ragged
    const n = 150, v = 1031, d = 33;
    const o = resolveOptions({ beta: 0.1 });
    const opt = { dtype: "bf16" as const, gradOutput: 1.3 };
    const flat = caseInputs({ n, v, d, dtype: "bf16", beta: 0.1, seed: 41 });
    // every row's softmax on one of three hot entries: a few tiles kept
    const p = peakedInputs(caseInputs({ n, v, d, dtype: "bf16", beta: 0.1, seed: 42 }), {
      hot: [5, 6, 7],
      logit: 60,
      ignoreEvery: 9,
    });
    const peaked = { ...p, e: roundArray(p.e, "bf16") };
    const base = { denseDE: "auto", denseDC: "auto" } as const;
    const run = (x: typeof flat, b: Record<string, unknown>) =>
      runMethod(ctx0, fusedTcMethod(EMULATED_MAP, { backward: { ...base, ...b } }), x, o, opt);
    const kept = (r: Awaited<ReturnType<typeof run>>) =>
      r.stats!.tilesTotal! - r.stats!.tilesSkipped!;
    for (const [name, x, taken] of [["flat", flat, 1], ["peaked", peaked, 0]] as const) {
      const r = await run(x, { mapRefine: "always" });
      const whole = await run(x, { mapRefine: "always", filterSample: "never" });
      const s = r.stats!, w = whole.stats!;
      console.log(
        `${name}: kept ${kept(r)} (whole refine ${kept(whole)}) of ${s.tilesTotal}, ` +
          `sampled ${s.filterSampled}, dense dE ${s.denseDE}, dC ${s.denseDC}`,
      );
      assert.equal(s.mapRefined, 1, `${name}: refined`);
      assert.equal(s.filterSampled, taken, `${name}: the sample taken`);
      assert.equal(w.filterSampled, undefined, `${name}: no sample recorded`);
      assert.equal(s.denseDE, taken, `${name}: dE's path`);
      assert.equal(s.denseDC, taken, `${name}: dC's path`);
      assert.equal(w.denseDE, taken, `${name}: the whole refine's dE path`);
      assert.equal(w.denseDC, taken, `${name}: the whole refine's dC path`);
      // not taken: the rest refined under both gates, every count the whole refine's
      if (!taken) assert.equal(kept(r), kept(whole), `${name}: the kept tiles`);
      for (const k of ["loss", "dE", "dC"] as const) {
        assert.deepEqual(r[k], whole[k], `${name}: ${k} bit for bit`);
      }
    }
    // forced on the peaked fixture: both dense paths, against float64 and bit for bit both
    // forced under the whole refine
    const forced = await run(peaked, { mapRefine: "always", filterSample: "always" });
    const dense = await run(peaked, {
      mapRefine: "always",
      filterSample: "never",
      denseDE: "always",
      denseDC: "always",
    });
    assert.equal(forced.stats!.filterSampled, 1, "forced: the sample taken");
    assert.equal(forced.stats!.denseDE, 1, "forced: dense dE");
    assert.equal(forced.stats!.denseDC, 1, "forced: dense dC");
    for (const k of ["loss", "dE", "dC"] as const) {
      assert.deepEqual(forced[k], dense[k], `forced: ${k} bit for bit both dense paths forced`);
    }
    const tol = methodTolerance(fusedTileMapTc, { n, v, d, dtype: "bf16", beta: 0.1 });
    assertMatchesReference(forced, peaked, o, 1.3, tol, defaultFilterEps("bf16"));
    // the refine skipped (the map keeps nearly every tile): the sample's decision under the
    // refine's gate does not run, the dense decisions read the map's count
    const skipped = await run(flat, { mapRefine: "auto", filterSample: "always" });
    const never = await run(flat, { mapRefine: "auto", filterSample: "never" });
    assert.equal(skipped.stats!.mapRefined, 0, "skipped: not refined");
    assert.equal(skipped.stats!.filterSampled, 0, "skipped: no sample taken");
    assert.equal(kept(skipped), kept(never), "skipped: the map's count");
    for (const k of ["loss", "dE", "dC"] as const) {
      assert.deepEqual(skipped[k], never[k], `skipped: ${k} bit for bit`);
    }
  },
});

Deno.test({
  name: "fused tensor-core rows (emulated): the tensor-core dense dE, forced, against float64; " +
    "dC the kept path's bit for bit",
  ...EMULATE,
  async fn() {
    const x = peakedSoftmaxInputs({ n: 140, v: 1000, d: 33, alpha: 18, dtype: "bf16" });
    const o = resolveOptions({ beta: 0.1 });
    const opt = { dtype: "bf16" as const, gradOutput: 1.3 };
    for (const f of [EMULATED_TC, EMULATED_MAP]) {
      const dense = fusedTcMethod(f, { backward: { denseDE: "always" } });
      const r = await runMethod(ctx0, dense, x, o, opt);
      const kept = await runMethod(ctx0, fusedTcMethod(f), x, o, opt);
      assert.equal(r.stats!.denseDE, 1, `${f.name}: the dense dE taken`);
      assert.equal(r.stats!.dERoundings, 1, `${f.name}: bf16 dE rounded once (G in f16)`);
      assert.equal(kept.stats!.denseDE, undefined, `${f.name}: none recorded by default here`);
      const tol = methodTolerance(f.tileMap ? fusedTileMapTc : fusedTc, {
        n: 140,
        v: 1000,
        d: 33,
        dtype: "bf16",
        beta: 0.1,
      });
      assertMatchesReference(r, x, o, 1.3, tol, defaultFilterEps("bf16"));
      assert.deepEqual(r.dC, kept.dC, `${f.name}: dC is the kept tiles' pass's`);
      assert.notDeepEqual(r.dE, kept.dE, `${f.name}: dE from other products`);
      await assertParity(ctx0, dense, { ...ODD_F16, seed: 11 });
    }
  },
});

Deno.test({
  name: "fused tensor-core rows (emulated): the tensor-core dense dC, forced, in chunks, " +
    "against float64; dE the kept path's bit for bit",
  ...EMULATE,
  async fn() {
    const o = resolveOptions({ beta: 0.1 });
    const opt = { dtype: "bf16" as const, gradOutput: 1.3 };
    // d even: dC written in place in bf16; d odd: into its f32 scratch, cast afterwards. A tail
    // of 128 rows: 4 chunks and more (a chunk's f32 G in the rows below it)
    const n = 64, v = 1000;
    for (const d of [64, 65]) {
      const x = peakedSoftmaxInputs({ n, v, d, alpha: 18, dtype: "bf16" });
      for (const f of [EMULATED_TC, EMULATED_MAP]) {
        const forced = { denseDC: "always", denseDCTailRows: 128 } as const;
        const dense = fusedTcMethod(f, { backward: forced });
        const r = await runMethod(ctx0, dense, x, o, opt);
        const kept = await runMethod(ctx0, fusedTcMethod(f), x, o, opt);
        const tag = `${f.name}, d = ${d}`;
        assert.equal(r.stats!.denseDC, 1, `${tag}: the dense dC taken`);
        assert.equal(kept.stats!.denseDC, undefined, `${tag}: none recorded by default here`);
        assert.equal(r.stats!.dCRoundings, 1, `${tag}: bf16 dC rounded once (G in f16)`);
        const tol = methodTolerance(f.tileMap ? fusedTileMapTc : fusedTc, {
          n,
          v,
          d,
          dtype: "bf16",
          beta: 0.1,
        });
        assertMatchesReference(r, x, o, 1.3, tol, defaultFilterEps("bf16"));
        assert.deepEqual(r.dE, kept.dE, `${tag}: dE is the kept tiles' path's`);
        assert.notDeepEqual(r.dC, kept.dC, `${tag}: dC from other products`);
      }
    }
    const both = fusedTcMethod(EMULATED_TC, {
      backward: { denseDE: "always", denseDC: "always", denseDCTailRows: 48 },
    });
    await assertParity(ctx0, both, { ...ODD_F16, seed: 12 });
  },
});

Deno.test({
  name: "fused tensor-core rows (emulated): memory of the FMA rows plus the two scales",
  ...EMULATE,
  async fn() {
    const c = { n: 70, v: 257, d: 32, dtype: "bf16" as const, beta: 0.1, seed: 6 };
    const opts = resolveOptions({ beta: 0.1 });
    // the forwards' vocab splits (their tiles differ): the split workspace is n·S·4 bytes
    const spec = { n: c.n, v: c.v, d: c.d, dtype: c.dtype };
    const tcFwd = await prepareTcForward(ctx0, { spec, opts, mode: "emulated" });
    const fmaFwd = await prepareFusedForward(ctx0, { spec, opts });
    const splits = c.n * 4 * (tcFwd.vocabSplits - fmaFwd.vocabSplits);
    const map = (t: { bm: number; bn: number }) => tileMapBytes(tileMapLayout([c.n], [c.v], t));
    for (const [tc, fma] of [[emulatedTc, fused], [emulatedMap, fusedTileMap]] as const) {
      const a = await methodPeaks(ctx0, tc, c, opts), b = await methodPeaks(ctx0, fma, c, opts);
      console.log(`${tc.name}: fwd ${a.fwd} (${fma.name} ${b.fwd}), bwd ${a.bwd} (${b.bwd})`);
      // plus E's and C's scales and maxima (16 bytes each), the splits' and the maps' differences
      const maps = tc === emulatedMap ? map(tcFwd.tile) - map(fmaFwd.tile) : 0;
      assert.equal(a.fwd, b.fwd + 32 + splits + maps, `${tc.name}: fwd`);
      assert.equal(a.bwd, b.bwd, `${tc.name}: bwd`);
    }
  },
});
