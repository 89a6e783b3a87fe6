import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import { caseInputs } from "../../testing/parity.ts";
import {
  assertGrads,
  assertRounded16,
  type BackwardCase,
  peakedInputs,
  relErr,
  runBackward,
  UNIT_ROUNDOFF,
} from "../../testing/fused_backward.ts";
import { type Dtype, type HostInputs, resolveOptions } from "../../core/options.ts";
import { type GemmTile, TILE_HW } from "../gemm_codegen.ts";
import { defaultFilterEps, fusedBackwardWorkspaceBytes } from "./backward_plan.ts";
import {
  BACKWARD_TILE_SMALL,
  BACKWARD_TILE_WIDE,
  backwardSharedBytes,
  type BackwardTile,
} from "./backward_tiles.ts";
import { prepareFusedBackward } from "./backward.ts";

/** The filter's counts of a backward's stats (without the dC split's, where it is recorded). */
const _counts = (s: { tilesSkipped: number; tilesTotal: number }) => ({
  tilesSkipped: s.tilesSkipped,
  tilesTotal: s.tilesTotal,
});

Deno.test({
  name: "fused backward: tiles, splits, sorting and sharded segments against float64",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const narrow: BackwardTile = {
      tokens: 32,
      vocab: 64,
      bk: 16,
      tokensPerThread: 4,
      vocabPerThread: 4,
      gradWiden: 2,
    };
    // filter tile covering 1 × 2 backward tiles of `tall`
    const wideFilter: GemmTile = { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4 };
    const tall: BackwardTile = {
      tokens: 64,
      vocab: 32,
      bk: 8,
      tokensPerThread: 4,
      vocabPerThread: 4,
    };
    // WIDE's tile at 64 tokens: the dC pass on its own thread shape (8 entries × 4 tokens)
    const square: BackwardTile = { ...BACKWARD_TILE_WIDE, tokens: 64 };
    const cases: { dtype: Dtype; beta: number; softcap?: number; d?: number; b: BackwardCase }[] = [
      { dtype: "f32", beta: 0.1, b: { filterEps: null, sort: false, dESplits: 1, dERowSlices: 1 } },
      {
        // 3 splits × 4 row slices of 8 tokens
        dtype: "bf16",
        beta: 0.1,
        softcap: 4,
        b: { filterEps: null, sort: true, tile: narrow, dESplits: 3 },
      },
      {
        // row slices (default 4: 16 tokens) inside E shards of 40 rows
        dtype: "f32",
        beta: 1,
        b: { filterEps: 2 ** -28, sort: true, tile: tall, shardRows: 40, filterTile: wideFilter },
      },
      {
        dtype: "bf16",
        beta: 0,
        softcap: 3,
        b: { filterEps: 2 ** -12, sort: false, shardRows: 30 },
      },
      {
        // the filter with partials: 2 splits × 2 row slices
        dtype: "f32",
        beta: 0.1,
        b: { filterEps: 2 ** -28, sort: true, tile: tall, dESplits: 2, dERowSlices: 2 },
      },
      {
        // one workgroup per token tile
        dtype: "bf16",
        beta: 0.1,
        softcap: 5,
        b: { filterEps: 2 ** -12, sort: true, dERowSlices: 1, shardRows: 50 },
      },
      {
        // the hardware filter tile: 16-byte loads of bf16 (d = 40), [k][row] staging
        dtype: "bf16",
        beta: 0.1,
        d: 40,
        b: { filterEps: 2 ** -12, sort: true, filterTile: TILE_HW, shardRows: 60 },
      },
      {
        dtype: "bf16",
        beta: 0.1,
        d: 40,
        b: { filterEps: 2 ** -12, sort: true, tile: square, filterTile: wideFilter },
      },
      { dtype: "f32", beta: 0.1, b: { filterEps: null, sort: false, tile: square } },
      {
        // the same tile where d does not allow vector loads (scalar loads, [k][row] staging)
        dtype: "f32",
        beta: 0,
        b: { filterEps: 2 ** -28, sort: false, filterTile: TILE_HW },
      },
    ];
    for (const [i, cs] of cases.entries()) {
      const o = resolveOptions({ beta: cs.beta, softcap: cs.softcap, reduction: "sum" });
      const x = caseInputs({
        n: 70,
        v: 257,
        d: cs.d ?? 33,
        dtype: cs.dtype,
        beta: cs.beta,
        ignoreFraction: 0.2,
        seed: 20 + i,
      });
      const { got, again, ref } = await runBackward(ctx, x, o, cs.dtype, cs.b);
      const tag = JSON.stringify(cs);
      assertGrads(tag, got, ref, x.d);
      assert.deepEqual(again.dE, got.dE, `${tag}: dE bitwise reproducible`);
      assert.deepEqual(again.dC, got.dC, `${tag}: dC bitwise reproducible`);
      if (cs.b.filterEps === null) assert.equal(got.stats.tilesSkipped, 0);
    }
  },
});

Deno.test({
  name:
    "fused backward: the filter skips cold tiles, sorting gathers the hot rows, both stay exact",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // Peaked softmax: the 5 "hot" classifier rows, scattered over the vocabulary, are 3× longer
    // than the others, and every token's embedding is a copy of one of them scaled to a logit of
    // 40: every other logit is ≥ 20 below the peak (p < 3e-9), far below ε.
    const n = 70, v = 257, d = 16, hot = [3, 77, 150, 201, 250];
    const base = caseInputs({ n, v, d, dtype: "f32", beta: 0, seed: 3 });
    for (const j of hot) for (let k = 0; k < d; k++) base.c[j * d + k] *= 3;
    const x = peakedInputs(base, { hot, logit: 40, ignoreEvery: 7 });
    const o = resolveOptions({ beta: 0.1, reduction: "mean" });
    const eps = defaultFilterEps("bf16");
    const runs: Record<string, Awaited<ReturnType<typeof runBackward>>> = {};
    for (const sort of [false, true]) {
      const r = await runBackward(ctx, x, o, "f32", {
        filterEps: eps,
        sort,
        dESplits: 2,
        tile: BACKWARD_TILE_SMALL,
        // sorted: a 128×128 filter tile covering 2 × 2 backward tiles (16-byte loads of f32)
        filterTile: sort ? TILE_HW : undefined,
      });
      assertGrads(`sort ${sort}`, r.got, r.ref, d);
      assert.deepEqual(r.again.dC, r.got.dC);
      runs[String(sort)] = r;
    }
    // 2 token tiles × 5 vocab tiles of 64; the hot rows lie in vocab tiles 0, 1, 2, 3, 3.
    assert.deepEqual(_counts(runs.false.got.stats), { tilesSkipped: 2, tilesTotal: 10 });
    // sorted, the 5 hot rows come first: only vocab tile 0 is kept for each token tile.
    assert.deepEqual(_counts(runs.true.got.stats), { tilesSkipped: 8, tilesTotal: 10 });
    // the order decision took the sorted order: the same gradients as always sorting
    const always = await runBackward(ctx, x, o, "f32", {
      filterEps: eps,
      sort: true,
      decideOrder: false,
      dESplits: 2,
      tile: BACKWARD_TILE_SMALL,
      filterTile: TILE_HW,
    });
    assert.deepEqual(_counts(always.got.stats), _counts(runs.true.got.stats));
    assert.deepEqual(always.got.dE, runs.true.got.dE);
    assert.deepEqual(always.got.dC, runs.true.got.dC);
    // with the bound forced on and off: the hot rows fit one tile a token tile, so the bound (2)
    // leaves sorting its chance against the own order's 8; the sort runs, the same bits
    for (const sortBound of [true, false]) {
      const r = await runBackward(ctx, x, o, "f32", {
        filterEps: eps,
        sort: true,
        sortBound,
        dESplits: 2,
        tile: BACKWARD_TILE_SMALL,
        filterTile: TILE_HW,
      });
      assert.equal(r.got.stats.sortSkipped, sortBound ? 0 : undefined, `bound ${sortBound}`);
      assert.deepEqual(_counts(r.got.stats), _counts(runs.true.got.stats));
      assert.deepEqual(r.got.dE, runs.true.got.dE);
      assert.deepEqual(r.got.dC, runs.true.got.dC);
    }
  },
});

Deno.test({
  name: "fused backward: the order decision keeps the own order where sorting scatters hot rows",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // The cce recipe in small: token i's embedding is a scaled copy of classifier row i, so the
    // hot entries lie on the diagonal (token tile k ↔ vocab tile k in the own order); sorting by
    // mean logit puts the 130 hot rows first in an order unrelated to their tokens.
    const n = 130, v = 257, d = 64;
    const base = caseInputs({ n, v, d, dtype: "f32", beta: 0, seed: 8 });
    const e = new Float32Array(n * d);
    for (let i = 0; i < n; i++) {
      let nrm = 0;
      for (let k = 0; k < d; k++) nrm += base.c[i * d + k] ** 2;
      for (let k = 0; k < d; k++) e[i * d + k] = Math.fround((40 / nrm) * base.c[i * d + k]);
    }
    const x: HostInputs = { ...base, e };
    const o = resolveOptions({ beta: 0.1, reduction: "mean" });
    const eps = defaultFilterEps("bf16");
    const run = (sort: boolean, decideOrder?: boolean, sortBound?: boolean) =>
      runBackward(ctx, x, o, "f32", {
        filterEps: eps,
        sort,
        decideOrder,
        sortBound,
        tile: BACKWARD_TILE_SMALL,
      });
    const own = await run(false), always = await run(true, false);
    // the order decision with its bound forced on and off
    const decided = await run(true, true, false), bounded = await run(true, true, true);
    for (
      const [tag, r] of [
        ["own", own],
        ["always", always],
        ["decided", decided],
        ["bounded", bounded],
      ] as const
    ) {
      assertGrads(tag, r.got, r.ref, d);
    }
    // 3 token tiles × 5 vocab tiles: the own order keeps the 3 diagonal tiles
    assert.deepEqual(_counts(own.got.stats), { tilesSkipped: 12, tilesTotal: 15 });
    const keptAlways = 15 - always.got.stats.tilesSkipped;
    assert.ok(keptAlways > 3, `sorting keeps ${keptAlways} tiles`);
    // the decision takes the own order (identity order): bitwise the no-sorting result; with the
    // bound without sorting at all, since each token tile's hot rows (64, 64 and 2) fill as few
    // tiles as any order could (3, the own order's count)
    assert.deepEqual(decided.got.stats, own.got.stats);
    assert.deepEqual(bounded.got.stats, { ...own.got.stats, sortSkipped: 1 });
    assert.deepEqual(bounded.again.stats, bounded.got.stats);
    for (const r of [decided, bounded]) {
      assert.deepEqual(r.got.dE, own.got.dE);
      assert.deepEqual(r.got.dC, own.got.dC);
      assert.deepEqual(r.again.dC, r.got.dC);
    }
  },
});

Deno.test({
  name: "fused backward: workspaceBytes of a prepared backward, default and given layouts",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    assert.ok(backwardSharedBytes(BACKWARD_TILE_SMALL) <= 32768);
    const paper = { n: 8192, v: 256000, d: 2304, dtype: "bf16" } as const;
    const opts = resolveOptions({ beta: 0.1 });
    const bwd = await prepareFusedBackward(ctx, {
      spec: paper,
      opts,
      filterEps: defaultFilterEps("bf16"),
      sort: true,
      tile: BACKWARD_TILE_SMALL,
      dESplits: 2,
    });
    assert.equal(bwd.dERowSlices, 1); // 128 token tiles × 2 splits
    const layout = { maxBindingBytes: 2 ** 31 - 4 };
    const base = { spec: paper, opts, filter: true, sort: true, tile: BACKWARD_TILE_SMALL };
    assert.equal(
      bwd.workspaceBytes(layout),
      fusedBackwardWorkspaceBytes({ ...base, dESplits: 2, layout }),
    );
    // the dE partials (2 × 75.5 MB) live in dC's storage: one split's workspace and the bounds
    // (128 token tiles × 3 u32)
    const bounds = 128 * 3 * 4;
    assert.equal(
      bwd.workspaceBytes(layout) - fusedBackwardWorkspaceBytes({ ...base, dESplits: 1, layout }),
      bounds,
    );
    // where dC cannot hold the partials (|V| < S·n for f32 gradients) they get their own buffers
    const narrow = { n: 8192, v: 8000, d: 2304, dtype: "bf16" } as const;
    const nb = { ...base, spec: narrow };
    assert.equal(
      fusedBackwardWorkspaceBytes({ ...nb, dESplits: 2, layout }) -
        fusedBackwardWorkspaceBytes({ ...nb, dESplits: 1, layout }),
      2 * 8192 * 2304 * 4 + bounds,
    );
    assert.equal(
      fusedBackwardWorkspaceBytes({ ...nb, dESplits: 2, gradDtype: "input", layout }) -
        fusedBackwardWorkspaceBytes({ ...nb, dESplits: 1, layout }),
      2 * 8192 * 2304 * 4 + bounds,
    );
    const here = { maxBindingBytes: ctx.maxBindingBytes };
    assert.equal(
      bwd.workspaceBytes(),
      fusedBackwardWorkspaceBytes({ ...base, dESplits: 2, layout: here }),
    );
  },
});

Deno.test({
  name: "fused backward: 16-bit gradients (gradDtype input) against float64 and the f32 mode",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const f16: Dtype = ctx.hasF16 ? "f16" : "bf16";
    const cases: {
      dtype: "bf16" | "f16";
      beta: number;
      softcap?: number;
      d: number;
      n?: number;
      filter: boolean;
      sort?: boolean;
      /** dE splits (2 here: |V| < 4n, so dE's accumulator and partial get buffers of their own). */
      splits?: number;
    }[] = [
      { dtype: "bf16", beta: 0.1, d: 34, filter: true },
      { dtype: "bf16", beta: 0, softcap: 4, d: 33, filter: true },
      { dtype: f16 as "bf16" | "f16", beta: 1, d: 34, filter: true, sort: false },
      { dtype: f16 as "bf16" | "f16", beta: 0.1, softcap: 5, d: 33, filter: true },
      { dtype: "bf16", beta: 1, softcap: 3, d: 34, filter: false },
      { dtype: "bf16", beta: 0.1, d: 34, n: 640, filter: false },
      { dtype: f16 as "bf16" | "f16", beta: 0.1, d: 34, n: 640, filter: false },
      { dtype: "bf16", beta: 0.1, d: 33, n: 640, filter: false },
      { dtype: "bf16", beta: 0.1, softcap: 4, d: 33, filter: true, splits: 2 },
      { dtype: "bf16", beta: 0.1, d: 34, filter: true, splits: 3 },
      // d a multiple of 8: the tile passes' logits products load 16 bytes of bf16 at a time
      { dtype: "bf16", beta: 0.1, softcap: 4, d: 40, filter: true },
      { dtype: "bf16", beta: 0.1, d: 48, filter: false },
    ];
    const report: string[] = [];
    for (const [i, cs] of cases.entries()) {
      const o = resolveOptions({ beta: cs.beta, softcap: cs.softcap, reduction: "sum" });
      const x = caseInputs({
        n: cs.n ?? 70,
        v: 257,
        d: cs.d,
        dtype: cs.dtype,
        beta: cs.beta,
        ignoreFraction: 0.2,
        seed: 40 + i,
      });
      const b: BackwardCase = {
        filterEps: cs.filter ? defaultFilterEps(cs.dtype) : null,
        sort: cs.sort ?? true,
        dESplits: cs.splits,
      };
      const r16 = await runBackward(ctx, x, o, cs.dtype, { ...b, gradDtype: "input" });
      const r32 = await runBackward(ctx, x, o, cs.dtype, b);
      const tag = JSON.stringify(cs);
      assert.equal(r16.bwd.gradDtype, cs.dtype);
      assert.equal(r32.bwd.gradDtype, "f32");
      // the f32 mode keeps its accuracy
      assertGrads(`${tag} f32`, r32.got, r32.ref, x.d);
      assert.deepEqual(r16.again.dE, r16.got.dE, `${tag}: dE bitwise reproducible`);
      assert.deepEqual(r16.again.dC, r16.got.dC, `${tag}: dC bitwise reproducible`);
      const u = UNIT_ROUNDOFF[cs.dtype];
      const tokTiles = Math.ceil(x.n / r16.bwd.tile.tokens);
      // the smoothing row, each kept token tile, the target terms not folded into a kept tile
      // (and the split's sum, where the dC split is recorded: hardware adapters)
      const split = r16.got.stats.dCSplits === undefined ? 0 : 1;
      const dC = cs.d % 2 === 0 ? (cs.beta < 1 ? 2 : 1) + tokTiles + split : 1;
      assert.deepEqual(r16.bwd.roundings, { dE: 1, dC });
      const errs: string[] = [];
      for (const k of ["dE", "dC"] as const) {
        const R = r16.bwd.roundings[k];
        assertRounded16(`${tag} 16-bit ${k}`, r16.got[k], r16.ref[k], {
          roundings: R,
          cols: x.d,
          u,
        });
        const e16 = relErr(r16.got[k], r16.ref[k]), e32 = relErr(r32.got[k], r32.ref[k]);
        // one rounding at least shows: the 16-bit output is not the f32 one
        assert.ok(e16 > e32, `${tag} ${k}: 16-bit ${e16} vs f32 ${e32}`);
        errs.push(`${k} ${e16.toExponential(2)} (f32 ${e32.toExponential(2)}, R ${R})`);
      }
      report.push(`${tag}: ${errs.join(", ")}`);
    }
    console.log(report.join("\n"));
  },
});
