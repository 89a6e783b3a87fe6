import assert from "node:assert/strict";
import { GpuContext } from "../../gpu/context.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor, download, fromHost } from "../../gpu/tensor.ts";
import type { Dtype, HostInputs } from "../../core/options.ts";
import { resolveOptions } from "../../core/options.ts";
import { lceReference } from "../../reference/lce_reference.ts";
import { assertClose } from "../../reference/compare.ts";
import { caseInputs } from "../../testing/parity.ts";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import { type GemmTile, TILE_HW_WIDE, TILE_LARGE, TILE_SMALL } from "../gemm_codegen.ts";
import {
  defaultStreamWorkgroups,
  FUSED_TILE_HW,
  prepareFusedForward,
  type SmoothingMode,
  splitPlan,
  streamSaves,
} from "./forward.ts";
import type { TileState } from "./forward_tiles.ts";
import { streamOwner, streamPlan } from "./forward_stream.ts";

interface Case {
  n: number;
  v: number;
  d: number;
  dtype: Dtype;
  beta: number;
  softcap?: number;
  ignoreFraction?: number;
  tile?: GemmTile;
  smoothing?: SmoothingMode;
  vocabSplits?: number;
  streamWorkgroups?: number;
  tokenStats?: boolean;
  tileState?: TileState;
  /** Rows per shard of E and C (default: as many as fit a binding). */
  shardRows?: number;
  seed?: number;
}

interface Got {
  lse: Float32Array;
  loss: Float32Array;
  stats?: Float32Array;
  workspace: { peak: number; expected: number; leftover: number };
}

/** Uploads the case, runs the fused forward once per `runs`, and downloads the outputs. */
async function runFused(ctx: GpuContext, c: Case, x: HostInputs, runs = 1): Promise<Got[]> {
  const opts = resolveOptions({ beta: c.beta, softcap: c.softcap, reduction: "none" });
  const spec = { n: c.n, v: c.v, d: c.d, dtype: c.dtype };
  const ff = await prepareFusedForward(ctx, {
    spec,
    opts,
    tile: c.tile ?? TILE_SMALL,
    smoothing: c.smoothing,
    vocabSplits: c.vocabSplits,
    streamWorkgroups: c.streamWorkgroups,
    tokenStats: c.tokenStats,
    tileState: c.tileState,
  });
  if (c.streamWorkgroups !== undefined && c.shardRows === undefined) {
    assert.equal(ff.streamWorkgroups, Math.min(c.streamWorkgroups, _tiles(c)), "stream split");
  }
  const mk = (rows: number, cols: number, dtype: Dtype | "i32", label: string) =>
    ({ dtype, rows, cols, role: "input", label, maxRowsPerShard: c.shardRows }) as const;
  const e = fromHost(ctx, mk(c.n, c.d, c.dtype, "E"), x.e);
  const cm = fromHost(ctx, mk(c.v, c.d, c.dtype, "C"), x.c);
  const targets = fromHost(
    ctx,
    { ...mk(c.n, 1, "i32", "t"), maxRowsPerShard: undefined },
    x.targets,
  );
  const out: Got[] = [];
  for (let i = 0; i < runs; i++) {
    const vec = (cols: number, label: string) =>
      createTensor(ctx, { dtype: "f32", rows: c.n, cols, role: "output", label });
    const lse = vec(1, "lse"), lossRows = vec(1, "loss rows");
    const stats = c.tokenStats ? vec(4, "stats") : undefined;
    const before = ctx.memory().liveByRole.workspace;
    ctx.resetPeak();
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      ff.record(rec, { e, c: cm, targets, lse, lossRows, tokenStats: stats });
      await rec.finish();
    });
    const workspace = {
      peak: ctx.memory().peakByRole.workspace - before,
      expected: ff.workspaceBytes(spec, { cShardRows: cm.shards.map((s) => s.rows) }),
      leftover: ctx.memory().liveByRole.workspace - before,
    };
    out.push({
      lse: await download(ctx, lse),
      loss: await download(ctx, lossRows),
      stats: stats ? await download(ctx, stats) : undefined,
      workspace,
    });
    for (const t of [lse, lossRows, stats]) t?.destroy();
  }
  for (const t of [e, cm, targets] as DeviceTensor[]) t.destroy();
  return out;
}

/** Forward tiles of a case (token blocks × vocab tiles). */
function _tiles(c: Case): number {
  const t = c.tile ?? TILE_SMALL;
  return Math.ceil(c.n / t.bm) * Math.ceil(c.v / t.bn);
}

const maxAbs = (a: ArrayLike<number>) => {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]));
  return m;
};

/** Runs a case and checks lse, loss rows (and stats) against the float64 reference. */
async function checkCase(ctx: GpuContext, c: Case): Promise<Got> {
  const x = caseInputs({ ...c, ignoreFraction: c.ignoreFraction ?? 0.2, seed: c.seed ?? 5 });
  const want = lceReference(x, { beta: c.beta, softcap: c.softcap, reduction: "none" });
  const [got] = await runFused(ctx, c, x);
  const tag = JSON.stringify({ ...c, tile: c.tile && `${c.tile.bm}x${c.tile.bn}` });
  // atol relative to the scale of the compared values (for the loss: of the LSE it is made of)
  const close = (name: string, g: ArrayLike<number>, w: ArrayLike<number>, scale = maxAbs(w)) => {
    try {
      assertClose(g, w, { atol: 2e-5 * (scale || 1), rtol: 2e-4, name });
    } catch (err) {
      throw new Error(`${tag}: ${(err as Error).message}`);
    }
  };
  close("lse", got.lse, want.perToken.lse);
  close("loss rows", got.loss, want.loss, Math.max(maxAbs(want.loss), maxAbs(want.perToken.lse)));
  if (got.stats) {
    const col = (j: number) => Float32Array.from({ length: c.n }, (_, i) => got.stats![4 * i + j]);
    close("max logit", col(0), want.perToken.maxLogit);
    assert.deepEqual(Array.from(col(1)), Array.from(want.perToken.argmax), `${tag}: argmax`);
    const pz = Float64Array.from(want.perToken.lse, (l, i) => l - want.perToken.entropy[i]);
    close("Σ p·z", col(2), pz);
    close("entropy", col(3), want.perToken.entropy, maxAbs(want.perToken.lse));
  }
  assert.equal(got.workspace.peak, got.workspace.expected, `${tag}: workspace bytes`);
  assert.equal(got.workspace.leftover, 0, `${tag}: workspace released`);
  return got;
}

const SHAPES = [
  { n: 37, v: 131, d: 29 },
  { n: 70, v: 257, d: 33 },
  { n: 1, v: 1, d: 1 },
];

Deno.test({
  name: "fused forward: odd shapes × β × softcap × smoothing variant, against float64",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const shape of SHAPES) {
      for (const beta of [0, 0.1, 0.5, 1]) {
        // with softcap both variants sum in the tiles; at β = 0 there is no smoothing term
        const variants: { softcap?: number; smoothing: SmoothingMode }[] = [
          { softcap: undefined, smoothing: "identity" },
          { softcap: 1.5, smoothing: "identity" },
          ...(beta > 0 ? [{ softcap: undefined, smoothing: "in-kernel" as const }] : []),
        ];
        for (const v of variants) {
          await checkCase(ctx, { ...shape, dtype: "f32", beta, ...v, vocabSplits: 3 });
        }
      }
    }
  },
});

Deno.test({
  name: "fused forward: every dtype × tiles (small, large, K-step 8), split counts, row states",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const dtypes: Dtype[] = ctx.hasF16 ? ["bf16", "f16", "f32"] : ["bf16", "f32"];
    // every dtype on every tile, and each of them with softcap on and off: pairs, not the whole
    // product (each tile's variant is a shader of its own, and lavapipe takes minutes to compile
    // the 128×256 ones; dtype and softcap are independent pieces of it)
    for (const [k, dtype] of dtypes.entries()) {
      // TILE_HW_WIDE: the 128×256 tile (8×16 per thread) with its 4 rows per round
      for (const [t, tile] of [TILE_SMALL, TILE_LARGE, FUSED_TILE_HW, TILE_HW_WIDE].entries()) {
        const [beta, softcap] = ([[0.1, undefined], [0.3, 2]] as const)[(t + k) % 2];
        await checkCase(ctx, { n: 70, v: 257, d: 33, dtype, beta, softcap, tile, vocabSplits: 2 });
      }
    }
    // vector loads (d a multiple of 8: the vector path; 33: scalar), K-step 8
    for (const dtype of dtypes) {
      for (const d of [40, 33]) {
        await checkCase(ctx, {
          n: 70,
          v: 257,
          d,
          dtype,
          beta: 0.1,
          tile: { ...TILE_LARGE, bk: 8, vec: true, stage2d: d === 40 },
          vocabSplits: 2,
        });
      }
    }
    await checkCase(ctx, {
      n: 131,
      v: 300,
      d: 24,
      dtype: "bf16",
      beta: 0.3,
      softcap: 2,
      tokenStats: true,
      tile: { ...TILE_SMALL, vec: true, stage2d: true },
      vocabSplits: 3,
    });
    // d odd with 16-bit storage (rows straddle u32 words), several splits per token block
    for (const vocabSplits of [1, 2, 5, 1000]) {
      await checkCase(ctx, { n: 131, v: 611, d: 7, dtype: "bf16", beta: 0.2, vocabSplits });
    }
    // running row state in registers (the default keeps it in one owner thread per row)
    for (
      const [beta, softcap, tokenStats, tile] of [
        [0.1, undefined, false, TILE_SMALL],
        [0.3, 2, true, TILE_SMALL],
        [0.5, undefined, true, TILE_LARGE],
      ] as const
    ) {
      await checkCase(ctx, {
        n: 70,
        v: 257,
        d: 33,
        dtype: "bf16",
        beta,
        softcap,
        tokenStats,
        tile,
        tileState: "registers",
        vocabSplits: 2,
      });
    }
    // most rows ignored
    await checkCase(ctx, { n: 40, v: 100, d: 16, dtype: "f32", beta: 0.1, ignoreFraction: 0.9 });
  },
});

Deno.test({
  name: "fused forward: token stats (max, argmax, Σp·z, entropy)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const shape of SHAPES) {
      await checkCase(ctx, { ...shape, dtype: "f32", beta: 0.1, tokenStats: true, vocabSplits: 3 });
    }
    await checkCase(ctx, {
      n: 70,
      v: 257,
      d: 33,
      dtype: "bf16",
      beta: 0.1,
      softcap: 2,
      tile: TILE_LARGE,
      tokenStats: true,
      vocabSplits: 2,
    });
  },
});

Deno.test({
  name: "fused forward: E and C sharded by rows (one dispatch per shard pair)",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      // f32, d = 33: 31 rows per binding, so C (257 rows) has 9 shards and E (70) 3
      for (const smoothing of ["identity", "in-kernel"] as const) {
        await checkCase(ctx, { n: 70, v: 257, d: 33, dtype: "f32", beta: 0.1, smoothing });
        await checkCase(ctx, {
          n: 70,
          v: 257,
          d: 33,
          dtype: "bf16",
          beta: 0.5,
          smoothing,
          vocabSplits: 20,
          tokenStats: true,
          shardRows: 40,
        });
      }
      await checkCase(ctx, { n: 37, v: 131, d: 29, dtype: "f32", beta: 1, softcap: 1.5 });
      await checkCase(ctx, { n: 70, v: 257, d: 33, dtype: "f32", beta: 0, tile: TILE_LARGE });
    } finally {
      ctx.destroy();
    }
  },
});

Deno.test({
  name: "fused forward: the stream split at odd shapes, every term, against float64",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // 3 token blocks (the last ragged) × 10 vocab tiles (the last ragged) of 64×64: one workgroup
    // walks all 30, pieces begin and end inside blocks, a block is shared by up to 4 workgroups,
    // 30 workgroups hold one tile each, and more than 30 are cut to 30
    for (const streamWorkgroups of [1, 2, 4, 7, 13, 30, 100]) {
      await checkCase(ctx, { n: 131, v: 611, d: 7, dtype: "bf16", beta: 0.2, streamWorkgroups });
    }
    // every term with the neutral partials of the unused slots: Σz (softcap, in-kernel), the
    // stats (pairs), both; β = 0 and 1. 2 blocks × 5 tiles over 7 workgroups: the first block
    // has 4 pieces, the second 3 and a neutral slot
    const base = { n: 70, v: 257, d: 33, dtype: "f32", streamWorkgroups: 7 } as const;
    const pieces = (b: number) => streamOwner(5 * b + 4, 10, 7) - streamOwner(5 * b, 10, 7) + 1;
    assert.deepEqual([pieces(0), pieces(1), streamPlan(2, 5, 7)!.slots], [4, 3, 4]);
    await checkCase(ctx, { ...base, beta: 0 });
    await checkCase(ctx, { ...base, beta: 1, softcap: 1.5 });
    await checkCase(ctx, { ...base, beta: 0.1, smoothing: "in-kernel", tokenStats: true });
    await checkCase(ctx, { ...base, beta: 0.3, softcap: 2, tokenStats: true });
    await checkCase(ctx, { n: 1, v: 1, d: 1, dtype: "f32", beta: 0.1, streamWorkgroups: 5 });
    // a stream split asked for where E and C span several bindings: the split grid runs
    const sharded = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      await checkCase(sharded, { ...base, beta: 0.1, dtype: "bf16", shardRows: 40 });
    } finally {
      sharded.destroy();
    }
    // two runs bit for bit
    const cs: Case = { ...base, v: 611, dtype: "bf16", beta: 0.1, tokenStats: true };
    const [a, b] = await runFused(ctx, cs, caseInputs({ ...cs, ignoreFraction: 0.2 }), 2);
    const bits = (f: Float32Array) => Array.from(new Uint32Array(f.buffer));
    assert.deepEqual(bits(a.lse), bits(b.lse));
    assert.deepEqual(bits(a.loss), bits(b.loss));
    assert.deepEqual(bits(a.stats!), bits(b.stats!));
  },
});

Deno.test({
  name: "fused forward: two runs are bitwise identical",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (
      const c of [
        { smoothing: "identity", tokenStats: true },
        { smoothing: "in-kernel", softcap: 2 },
      ] as const
    ) {
      const cs: Case = { n: 70, v: 611, d: 33, dtype: "bf16", beta: 0.1, vocabSplits: 4, ...c };
      const [a, b] = await runFused(ctx, cs, caseInputs({ ...cs, ignoreFraction: 0.2 }), 2);
      const bits = (f: Float32Array) => Array.from(new Uint32Array(f.buffer));
      assert.deepEqual(bits(a.lse), bits(b.lse));
      assert.deepEqual(bits(a.loss), bits(b.loss));
      if (a.stats) assert.deepEqual(bits(a.stats), bits(b.stats!));
    }
  },
});

Deno.test("fused forward: split plan and workspace at the paper's shape", async () => {
  const p = splitPlan([100, 100, 57], 64, 4);
  const got = p.shards.map((s) => [s.tiles, s.splits, s.base]);
  assert.deepEqual(got, [[2, 2, 0], [2, 2, 2], [1, 1, 4]]);
  assert.equal(splitPlan([256000], 128, 16).total, 16);
  const ctx = await testContext();
  const spec = { n: 8192, v: 256000, d: 2304, dtype: "bf16" } as const;
  // the split grid (on a hardware adapter the default may be the stream split)
  const ff = await prepareFusedForward(ctx, {
    spec,
    opts: resolveOptions({ beta: 0.1 }),
    tile: TILE_LARGE,
    vocabSplits: 16,
    streamWorkgroups: 0,
  });
  // n·S·4 (partial log-sum-exps) + colsum (d f32) + column-sum partials (32 chunks·d·4)
  const ws = ff.workspaceBytes(spec, { cShardRows: [256000] });
  assert.equal(ws, 8192 * 16 * 4 + 2304 * 4 + 32 * 2304 * 4);
  assert.ok(ws <= 1.1 * 2 ** 20, `forward workspace ${ws} bytes > 1.1 MiB`);
  // with the calibration stats the (max, Σexp) pairs are kept: n·S·8 + n·S·8 stats
  assert.equal(
    ff.workspaceBytes(spec, { cShardRows: [256000], tokenStats: true }),
    8192 * 16 * 16 + 2304 * 4 + 32 * 2304 * 4,
  );
  const sc = await prepareFusedForward(ctx, {
    spec,
    opts: resolveOptions({ beta: 0.1, softcap: 30 }),
    tile: TILE_LARGE,
    vocabSplits: 16,
    streamWorkgroups: 0,
  });
  assert.equal(sc.smoothing, "in-kernel");
  assert.equal(sc.workspaceBytes(spec, { cShardRows: [256000] }), 8192 * 16 * 8);
  // the stream split on 132 workgroups (C of 16,000 rows in one binding): a partial a row for
  // each workgroup sharing its block, 63 vocab tiles over 2.06 workgroups a block
  const small = { ...spec, v: 16000 };
  const st = await prepareFusedForward(ctx, {
    spec: small,
    opts: resolveOptions({ beta: 0.1 }),
    tile: TILE_HW_WIDE,
    streamWorkgroups: 132,
  });
  assert.equal(st.streamWorkgroups, 132);
  const slots = streamPlan(64, 63, 132)!.slots;
  assert.equal(slots, 3);
  const colsum = 2304 * 4 + 32 * 2304 * 4;
  assert.equal(st.workspaceBytes(small, { cShardRows: [16000] }), 8192 * slots * 4 + colsum);
  // C in two bindings: the split grid's workspace
  const two = st.workspaceBytes(small, { cShardRows: [8000, 8000] });
  const grid = 8192 * splitPlan([8000, 8000], 256, st.vocabSplits).total * 4;
  assert.equal(two, grid + 2304 * 4 + 64 * 2304 * 4);
});

Deno.test("fused forward: the stream split is the default where it saves waves", async () => {
  // the paper's shape on 132 slots: the grid (S = 4) runs 2 waves of 250 tiles, the stream 485
  assert.equal(streamSaves({ blocks: 64, tiles: 1000, splits: 4, slots: 132 }), true);
  // llm: 256 workgroups of 12 tiles in 2 waves against 24 tiles a workgroup: nothing saved
  assert.equal(streamSaves({ blocks: 32, tiles: 96, splits: 8, slots: 132 }), false);
  // a software adapter keeps the split grid (the test's own adapter: by the rule below if not)
  const ctx = await testContext();
  const spec = { n: 8192, v: 256000, d: 2304 };
  const here = ctx.report.isFallbackAdapter || ctx.report.engine !== "deno" ? 0 : 132;
  assert.equal(defaultStreamWorkgroups(ctx, spec, TILE_HW_WIDE), here);
  // a hardware adapter: the stream on wgpu where it saves waves, the grid on Dawn
  const hw = (engine: string) =>
    ({ report: { isFallbackAdapter: false, engine } }) as unknown as GpuContext;
  assert.equal(defaultStreamWorkgroups(hw("deno"), spec, TILE_HW_WIDE), 132);
  assert.equal(defaultStreamWorkgroups(hw("dawn"), spec, TILE_HW_WIDE), 0);
  assert.equal(defaultStreamWorkgroups(hw("dawn-unchecked"), spec, TILE_HW_WIDE), 0);
  assert.equal(
    defaultStreamWorkgroups(hw("deno"), { ...spec, n: 4096, v: 24576 }, TILE_HW_WIDE),
    0,
  );
});
