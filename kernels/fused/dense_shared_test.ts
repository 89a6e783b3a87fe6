import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import { caseInputs } from "../../testing/parity.ts";
import {
  assertGrads,
  assertRounded16,
  densePathInputs,
  type GradCase,
  gradCaseOptions,
  peakedInputs,
  runBackward,
} from "../../testing/fused_backward.ts";
import { denseSharedPlan } from "./dense_shared.ts";

Deno.test("dense shared plan: dE's rows first, the shared chunks above them, dC's rows last", () => {
  const big = 2 ** 31 - 4;
  for (
    const s of [
      { n: 4096, v: 24576, d: 2304, outBytes: 2, restBytes: 360_000 },
      { n: 70, v: 1031, d: 40, outBytes: 2, restBytes: 5_000, maxTailRows: 80 },
      { n: 1000, v: 50257, d: 768, outBytes: 2, restBytes: 0 },
    ]
  ) {
    const tag = JSON.stringify(s);
    const rowBytes = s.d * s.outBytes;
    const p = denseSharedPlan({ ...s, maxBindingBytes: big, accBytes: s.n * s.d * 4 });
    assert.ok(p && p.dC, `${tag}: a plan`);
    // the floor holds dE's f32 accumulator
    assert.ok(p.floor * rowBytes >= s.n * s.d * 4, `${tag}: floor ${p.floor}`);
    // A covers [0, floor) in order, each G above the floor within dC's storage
    let at = 0;
    for (const [v0, v1] of p.dEChunks) {
      assert.equal(v0, at, `${tag}: A contiguous`);
      assert.ok(s.n * (v1 - v0) * s.outBytes <= (s.v - p.floor) * rowBytes, `${tag}: A's G fits`);
      at = v1;
    }
    assert.equal(at, p.floor, `${tag}: A ends at the floor`);
    // B from the top down to the floor, each G between the floor and its rows but the last's
    let top = s.v;
    for (const [i, [v0, v1]] of p.shared.chunks.entries()) {
      assert.equal(v1, top, `${tag}: B contiguous`);
      const last = i === p.shared.chunks.length - 1;
      if (last) assert.equal(v0, p.floor, `${tag}: B ends at the floor`);
      else assert.ok(s.n * (v1 - v0) * s.outBytes <= (v0 - p.floor) * rowBytes, `${tag}: B's G`);
      top = v0;
    }
    // D: dC's rows [0, floor)
    assert.equal(p.dC.chunks[0][1], p.floor, `${tag}: D from the floor`);
    assert.equal(p.dC.chunks.at(-1)![0], 0, `${tag}: D to row 0`);
  }
  // dE's accumulator elsewhere: the floor is 0, the shared chunks are the dense dC's
  const f32 = { n: 70, v: 1031, d: 33, outBytes: 4, restBytes: 5_000, maxTailRows: 200 };
  const p = denseSharedPlan({ ...f32, maxBindingBytes: big, accBytes: 0 });
  assert.ok(p);
  assert.equal(p.floor, 0);
  assert.deepEqual(p.dEChunks, []);
  assert.equal(p.dC, undefined);
});

Deno.test({
  name: "dense shared: both gradients from one G, forced, against float64 at odd shapes; " +
    "dC bit for bit the dense dC's",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const cases: (GradCase & { tail?: number; v?: number; smallBelow?: number })[] = [
      // 16-bit in place: dE's accumulator under the floor (phases A, B and D)
      { dtype: "bf16", beta: 0.1, d: 40, gradDtype: "input", sort: true, tail: 80 },
      // chunks under 100 rows on the small tiles, their dC products split along K in the tail
      {
        dtype: "bf16",
        beta: 0.1,
        d: 40,
        gradDtype: "input",
        sort: false,
        tail: 80,
        smallBelow: 100,
      },
      { dtype: "bf16", beta: 1, softcap: 4, d: 34, gradDtype: "input", sort: false, tail: 320 },
      // f32 gradients, and 16-bit ones of odd d (dC in its f32 scratch): the floor is 0
      { dtype: "f32", beta: 0.1, softcap: 5, d: 33, gradDtype: "f32", sort: true, tail: 200 },
      { dtype: "bf16", beta: 0, d: 33, gradDtype: "input", sort: false, tail: 256 },
    ];
    for (const [i, cs] of cases.entries()) {
      const { o, b } = gradCaseOptions(cs);
      const x = densePathInputs(cs, 140 + i);
      const forced = {
        ...b,
        denseDE: "always",
        denseDC: "always",
        denseDCTailRows: cs.tail,
        denseDCTuning: cs.smallBelow === undefined ? undefined : { smallBelow: cs.smallBelow },
      } as const;
      // the shared path by default; `never`: each dense path on its own G
      const shared = await runBackward(ctx, x, o, cs.dtype, forced);
      const apart = await runBackward(ctx, x, o, cs.dtype, { ...forced, denseShared: "never" });
      const tag = JSON.stringify(cs), s = shared.got.stats;
      assert.equal(s.denseShared, 1, `${tag}: the shared path taken`);
      assert.equal(s.denseDE, 1, `${tag}: dE dense`);
      assert.equal(s.denseDC, 1, `${tag}: dC dense`);
      assert.equal(apart.got.stats.denseShared, undefined, `${tag}: none recorded`);
      for (const k of ["dE", "dC"] as const) {
        assert.deepEqual(shared.again[k], shared.got[k], `${tag}: ${k} bitwise reproducible`);
      }
      // the same G and product for every dC row, whatever the chunks (where every chunk takes
      // the same tile, unsplit)
      if (cs.smallBelow === undefined) {
        assert.deepEqual(shared.got.dC, apart.got.dC, `${tag}: dC the dense dC's`);
      }
      if (cs.gradDtype === "f32") assertGrads(tag, shared.got, shared.ref, x.d);
      else {
        // dE: G rounded to dC's element type where dC is in place, then the output
        const inPlace = cs.d % 2 === 0;
        assert.equal(shared.bwd.roundings.dE, inPlace ? 2 : 1, `${tag}: dE roundings`);
        for (const k of ["dE", "dC"] as const) {
          assertRounded16(`${tag} ${k}`, shared.got[k], shared.ref[k], {
            roundings: shared.bwd.roundings[k],
            cols: x.d,
          });
        }
      }
    }
  },
});

Deno.test({
  name: "dense shared: taken where both dense paths are, else not; bit for bit as forced",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const cs: GradCase = { dtype: "bf16", beta: 0.1, d: 40, gradDtype: "input", sort: true };
    const { o, b } = gradCaseOptions(cs);
    const flat = caseInputs({ n: 70, v: 1031, d: 40, dtype: "bf16", beta: 0.1, seed: 150 });
    const base = caseInputs({ n: 70, v: 1031, d: 40, dtype: "f32", beta: 0.1, seed: 151 });
    const peaked = peakedInputs(base, { hot: [5, 6, 7], logit: 60, ignoreEvery: 9 });
    const auto = {
      ...b,
      denseDE: "auto",
      denseDC: "auto",
      denseShared: "auto",
      denseDCTailRows: 80,
    } as const;
    for (
      const [name, x, dtype, taken] of [["flat", flat, "bf16", 1], [
        "peaked",
        peaked,
        "f32",
        0,
      ]] as const
    ) {
      const r = await runBackward(ctx, x, o, dtype, auto);
      const s = r.got.stats;
      assert.equal(s.denseShared, taken, `${name}: the shared path`);
      assert.equal(s.denseDE, taken, `${name}: dE's path`);
      assert.equal(s.denseDC, taken, `${name}: dC's path`);
      const want = taken
        ? await runBackward(ctx, x, o, dtype, { ...auto, denseDE: "always", denseDC: "always" })
        : await runBackward(ctx, x, o, dtype, { ...auto, denseShared: "never" });
      for (const k of ["dE", "dC"] as const) {
        assert.deepEqual(r.got[k], want.got[k], `${name}: ${k} bit for bit`);
      }
    }
  },
});
