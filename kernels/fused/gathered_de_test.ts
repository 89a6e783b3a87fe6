import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import { caseInputs } from "../../testing/parity.ts";
import {
  assertGrads,
  type BackwardCase,
  maxAbs,
  relErr,
  runBackward,
  UNIT_ROUNDOFF,
} from "../../testing/fused_backward.ts";
import { type Dtype, type HostInputs, IGNORE_INDEX, resolveOptions } from "../../core/options.ts";
import { assertClose } from "../../reference/compare.ts";
import { defaultFilterEps } from "./backward_plan.ts";
import {
  BACKWARD_TILE_SMALL,
  BACKWARD_TILE_WIDE,
  backwardSharedBytes,
  type BackwardTile,
} from "./backward_tiles.ts";
import { gatheredDETile } from "./gathered_de.ts";
import { type Engine, ENGINES } from "../../gpu/engine.ts";

/** One engine of each hardware tile (`dawn-unchecked` takes `dawn`'s). */
const TILE_ENGINES: readonly Engine[] = ["deno", "dawn"];

/**
 * Inputs whose softmax is peaked on 4 "hot" classifier rows in vocab tiles 0, 2, 6 and 10 (of 64
 * entries): every token's embedding points at one of them with a logit of 30, so the filter skips
 * most tiles and a token tile's kept tiles are not consecutive.
 */
function peaked(n: number, v: number, d: number, dtype: Dtype): HostInputs {
  const hot = [3, 150, 420, 690];
  const base = caseInputs({ n, v, d, dtype, beta: 0, seed: 5 });
  const e = new Float32Array(n * d);
  const targets = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const j = hot[i % hot.length];
    let nrm = 0;
    for (let k = 0; k < d; k++) nrm += base.c[j * d + k] ** 2;
    for (let k = 0; k < d; k++) e[i * d + k] = Math.fround((30 / nrm) * base.c[j * d + k]);
    targets[i] = i % 9 === 0 ? IGNORE_INDEX : (i % 5 === 0 ? 17 : j);
  }
  return { ...base, e, targets };
}

/** A case of the gathered dE's test. */
interface GatherCase {
  tag: string;
  x: HostInputs;
  dtype: Dtype;
  beta: number;
  softcap?: number;
  grad16: boolean;
  sort: boolean;
  tile: BackwardTile;
  maxRoundSlots?: number;
  /**
   * The product on hardware's tile of this engine (vector loads, [k][row] staging) with the
   * backward tile's rows, not software's: each engine's tile runs on whichever engine tests.
   */
  hardwareTile?: Engine;
  /** Rounds recorded (the worst case) and rounds the plan filled. */
  rounds: number;
  used: number;
  skips: boolean;
}

/** The cases; the 128×64 backward tile's only where its workgroup memory fits (`wide`). */
function gatherCases(wide: boolean): GatherCase[] {
  const cases: GatherCase[] = [
    {
      // slots in dC's storage behind dE's accumulator (15 of them), 16-byte loads of C: every
      // tile kept, one token tile a round
      tag: "bf16 gradients, sorted, softcap",
      x: caseInputs({ n: 100, v: 700, d: 264, dtype: "bf16", beta: 0.1, ignoreFraction: 0.2 }),
      dtype: "bf16",
      beta: 0.1,
      softcap: 4,
      grad16: true,
      sort: true,
      tile: BACKWARD_TILE_SMALL,
      rounds: 2,
      used: 2,
      skips: false,
    },
    {
      // f32 gradients, d odd (scalar loads of C), 18 of 33 tiles kept (6 a token tile), not
      // consecutive: rounds of 14 slots hold two token tiles (the worst case one)
      tag: "f32 gradients, peaked, own order",
      x: peaked(150, 700, 91, "f32"),
      dtype: "f32",
      beta: 0.1,
      grad16: false,
      sort: false,
      tile: BACKWARD_TILE_SMALL,
      maxRoundSlots: 14,
      rounds: 3,
      used: 2,
      skips: true,
    },
    {
      // sorted and peaked with bf16 gradients: the hot rows come first, one kept tile a token
      // tile, all five token tiles in one round (48 slots; the worst case two a round)
      tag: "bf16 gradients, peaked, sorted",
      x: peaked(260, 1500, 408, "bf16"),
      dtype: "bf16",
      beta: 0,
      grad16: true,
      sort: true,
      tile: BACKWARD_TILE_SMALL,
      rounds: 3,
      used: 1,
      skips: true,
    },
    ...TILE_ENGINES.map((engine, i): GatherCase => ({
      tag: `the product on ${engine}'s hardware tile, its rows the backward tile's`,
      x: caseInputs({ n: 300, v: 1100, d: 328, dtype: "bf16", beta: 0.1, seed: 11 + i }),
      dtype: "bf16",
      beta: 0.1,
      grad16: true,
      sort: true,
      tile: BACKWARD_TILE_SMALL,
      hardwareTile: engine,
      rounds: 5,
      used: 5,
      skips: false,
    })),
  ];
  if (wide) {
    const wideCase: GatherCase = {
      tag: "the 128×64 backward tile",
      x: caseInputs({ n: 200, v: 1000, d: 600, dtype: "bf16", beta: 0.1, ignoreFraction: 0.1 }),
      dtype: "bf16",
      beta: 0.1,
      grad16: true,
      sort: true,
      tile: BACKWARD_TILE_WIDE,
      rounds: 2,
      used: 2,
      skips: false,
    };
    cases.push(
      wideCase,
      ...TILE_ENGINES.map((engine): GatherCase => ({
        ...wideCase,
        tag: `the 128×64 backward tile, the product on ${engine}'s hardware tile`,
        hardwareTile: engine,
      })),
    );
  }
  return cases;
}

Deno.test({
  name:
    "gathered dE: rounds, kept lists and both accumulators against float64 and the per-tile pass",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const wide = backwardSharedBytes(BACKWARD_TILE_WIDE) <=
      ctx.device.limits.maxComputeWorkgroupStorageSize;
    const cases = gatherCases(wide);
    const report: string[] = [];
    for (const cs of cases) {
      const o = resolveOptions({ beta: cs.beta, softcap: cs.softcap, reduction: "mean" });
      const b: BackwardCase = {
        filterEps: defaultFilterEps(cs.dtype),
        sort: cs.sort,
        tile: cs.tile,
        gradDtype: cs.grad16 ? "input" : "f32",
      };
      const gathered = await runBackward(ctx, cs.x, o, cs.dtype, {
        ...b,
        dEGather: {
          maxRoundSlots: cs.maxRoundSlots,
          productTile: cs.hardwareTile
            ? {
              ...gatheredDETile(BACKWARD_TILE_WIDE, { hardware: true, engine: cs.hardwareTile }),
              bm: cs.tile.tokens,
            }
            : undefined,
        },
      });
      const perTile = await runBackward(ctx, cs.x, o, cs.dtype, { ...b, dEGather: false });
      const { got, again, ref, bwd } = gathered;
      assert.equal(bwd.lastDERounds, cs.rounds, `${cs.tag}: rounds`);
      assert.equal(await bwd.usedDERounds(), cs.used, `${cs.tag}: rounds used`);
      assert.equal(perTile.bwd.lastDERounds, 0);
      assert.deepEqual(got.stats, perTile.got.stats, `${cs.tag}: the same kept tiles`);
      assert.equal(got.stats.tilesSkipped > 0, cs.skips, `${cs.tag}: ${JSON.stringify(got.stats)}`);
      assert.deepEqual(again.dE, got.dE, `${cs.tag}: dE bitwise reproducible`);
      assert.deepEqual(again.dC, got.dC, `${cs.tag}: dC bitwise reproducible`);
      // dC never takes the gathered path: the same bits as the per-tile run
      assert.deepEqual(got.dC, perTile.got.dC, `${cs.tag}: dC unchanged`);
      if (cs.grad16) {
        // the per-tile pass's f32 sums in another order, rounded once: at most one ulp apart
        const s = maxAbs(ref.dE);
        const u = UNIT_ROUNDOFF[cs.dtype as "bf16"];
        assertClose(got.dE, perTile.got.dE, {
          atol: 1e-6 * s,
          rtol: 2 * u,
          name: `${cs.tag} against the per-tile pass`,
          cols: cs.x.d,
        });
      } else {
        assertGrads(cs.tag, got, ref, cs.x.d);
      }
      const e = relErr(got.dE, ref.dE), ePer = relErr(perTile.got.dE, ref.dE);
      // the same arithmetic as the per-tile pass in another order
      assert.ok(e <= ePer * 1.5 + 1e-6, `${cs.tag}: dE error ${e} against per-tile ${ePer}`);
      report.push(`${cs.tag}: dE ${e.toExponential(2)} (per-tile ${ePer.toExponential(2)})`);
    }
    console.log(report.join("\n"));
  },
});

Deno.test({
  name: "gathered dE: falls back to the per-tile pass where storage or bindings do not allow it",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const o = resolveOptions({ beta: 0.1, reduction: "sum" });
    const cases: { tag: string; x: HostInputs; dtype: Dtype; b: BackwardCase }[] = [
      {
        // d small: dC's storage cannot hold one token tile's slots
        tag: "small d",
        x: caseInputs({ n: 70, v: 257, d: 33, dtype: "bf16", beta: 0.1 }),
        dtype: "bf16",
        b: { filterEps: 2 ** -12, sort: true, tile: BACKWARD_TILE_SMALL, gradDtype: "input" },
      },
      {
        // E and C in several bindings
        tag: "sharded",
        x: caseInputs({ n: 100, v: 700, d: 136, dtype: "f32", beta: 0.1 }),
        dtype: "f32",
        b: { filterEps: 2 ** -28, sort: false, tile: BACKWARD_TILE_SMALL, shardRows: 60 },
      },
    ];
    for (const cs of cases) {
      const r = await runBackward(ctx, cs.x, o, cs.dtype, cs.b);
      assert.equal(r.bwd.lastDERounds, 0, cs.tag);
      if (!cs.b.gradDtype) assertGrads(cs.tag, r.got, r.ref, cs.x.d);
    }
  },
});

Deno.test("gathered dE: the product tile has the backward tile's rows and ≤ 256 threads", () => {
  for (const bt of [BACKWARD_TILE_SMALL, BACKWARD_TILE_WIDE]) {
    for (const hardware of [false, true]) {
      for (const engine of ENGINES) {
        const t = gatheredDETile(bt, { hardware, engine });
        assert.equal(t.bm, bt.tokens);
        assert.ok((t.bm / t.tm) * (t.bn / t.tn) <= 256);
      }
    }
  }
});
