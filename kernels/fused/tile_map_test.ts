import assert from "node:assert/strict";
import { columnVector, GPU_TEST, readWords, testContext } from "../../testing/gpu.ts";
import { caseInputs } from "../../testing/parity.ts";
import { GpuContext } from "../../gpu/context.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor, download, fromHost } from "../../gpu/tensor.ts";
import {
  type Dtype,
  type HostInputs,
  type LceOptions,
  resolveOptions,
} from "../../core/options.ts";
import { makeFixture } from "../../fixtures/mod.ts";
import { type GemmTile, TILE_HW_WIDE, TILE_LARGE, TILE_SMALL } from "../gemm_codegen.ts";
import { prepareFusedForward } from "./forward.ts";
import type { TileState } from "./forward_tiles.ts";
import { defaultFilterEps } from "./backward_plan.ts";
import { BACKWARD_TILE_SMALL, backwardGemmTiles, type BackwardTile } from "./backward_tiles.ts";
import { filterPassWgsl } from "./filter.ts";
import { prepareFusedBackward } from "./backward.ts";
import {
  createTileMap,
  prepareMapFilter,
  tileMapKey,
  tileMapLayout,
  tileMapValue,
} from "./tile_map.ts";

Deno.test("tile map: keys order like the floats and decode back", () => {
  const xs = [-3.0e38, -1e9, -2.5, -1, -1e-30, -0, 0, 1e-30, 0.75, 1, 7, 48.5, 1e9, 3.0e38];
  const keys = xs.map(tileMapKey);
  for (let i = 1; i < xs.length; i++) {
    assert.ok(keys[i] > keys[i - 1], `key(${xs[i]}) > key(${xs[i - 1]})`);
  }
  assert.ok(keys.every((k) => k > 0), "0 stays below every float (an unwritten entry)");
  for (const x of xs) assert.equal(tileMapValue(tileMapKey(x)), Math.fround(x));
  assert.ok(Number.isNaN(tileMapValue(0)));
});

Deno.test("tile map: layout of sharded E and C", () => {
  const l = tileMapLayout([62, 8], [62, 62, 62, 62, 9], { bm: 64, bn: 64 });
  assert.deepEqual(l.rowBase, [0, 1]);
  assert.deepEqual(l.colBase, [0, 1, 2, 3, 4]);
  assert.equal(l.rows, 2);
  assert.equal(l.cols, 5);
  const p = tileMapLayout([8192], [256000], { bm: 128, bn: 128 });
  assert.equal(p.rows * p.cols * 4, 512000, "500 KiB at the paper's shape");
});

/** Capped logits of the inputs in float64 (row-major n×v). */
function _logits(x: HostInputs, softcap: number | undefined): Float64Array {
  const z = new Float64Array(x.n * x.v);
  for (let i = 0; i < x.n; i++) {
    for (let j = 0; j < x.v; j++) {
      let acc = 0;
      for (let k = 0; k < x.d; k++) acc += x.e[i * x.d + k] * x.c[j * x.d + k];
      z[i * x.v + j] = softcap === undefined ? acc : softcap * Math.tanh(acc / softcap);
    }
  }
  return z;
}

/**
 * Runs the fused forward (with the tile map, and without it for comparison) on host inputs;
 * returns the map's words, its layout, LSE and loss rows of both runs.
 */
async function _forward(
  ctx: GpuContext,
  x: HostInputs,
  o: LceOptions,
  dtype: Dtype,
  f: { tile?: GemmTile; tileState?: TileState; vocabSplits?: number; streamWorkgroups?: number } =
    {},
) {
  const spec = { n: x.n, v: x.v, d: x.d, dtype };
  const e = fromHost(ctx, { dtype, rows: x.n, cols: x.d, role: "input", label: "E" }, x.e);
  const c = fromHost(ctx, { dtype, rows: x.v, cols: x.d, role: "input", label: "C" }, x.c);
  const targets = columnVector(ctx, x.targets, "targets");
  const run = async (tileMax: boolean) => {
    const fwd = await prepareFusedForward(ctx, { spec, opts: o, tileMax, ...f });
    const vec = (label: string) =>
      createTensor(ctx, { dtype: "f32", rows: x.n, cols: 1, role: "output", label });
    const lse = vec("lse"), lossRows = vec("loss rows");
    const map = tileMax ? createTileMap(ctx, e, c, fwd.mapTile) : undefined;
    const rec = new Recorder(ctx);
    fwd.record(rec, { e, c, targets, lse, lossRows, tileMax: map });
    await rec.finish();
    const layout = tileMapLayout(
      e.shards.map((s) => s.rows),
      c.shards.map((s) => s.rows),
      fwd.mapTile,
    );
    // the map's buffer is padded to 16 bytes: the padding (cleared by the record) must stay 0,
    // so an entry stored past the last one (a ragged tile's second 128 columns) shows there
    const entries = layout.rows * layout.cols;
    const all = map
      ? await readWords(ctx, map.shards[0].buffer.buffer, Math.ceil(entries / 4) * 4)
      : null;
    if (all) {
      assert.deepEqual(Array.from(all.subarray(entries)), new Array(all.length - entries).fill(0));
    }
    const words = all ? all.subarray(0, entries) : null;
    const out = { lse: await download(ctx, lse), loss: await download(ctx, lossRows) };
    lse.destroy();
    lossRows.destroy();
    return { ...out, words, layout, map, tile: fwd.mapTile };
  };
  const withMap = await run(true), plain = await run(false);
  return { withMap, plain, e, c, targets };
}

/** The float64 tile maxima of a layout: rows by E shard blocks, columns by C shard tiles. */
function _refMaxima(
  z: Float64Array,
  x: HostInputs,
  eRows: number[],
  cRows: number[],
  t: { bm: number; bn: number },
): number[] {
  const out: number[] = [];
  let r0 = 0;
  for (const er of eRows) {
    for (let b = 0; b < er; b += t.bm) {
      let c0 = 0;
      for (const cr of cRows) {
        for (let j = 0; j < cr; j += t.bn) {
          let m = -Infinity;
          for (let i = r0 + b; i < r0 + Math.min(b + t.bm, er); i++) {
            for (let v = c0 + j; v < c0 + Math.min(j + t.bn, cr); v++) {
              m = Math.max(m, z[i * x.v + v]);
            }
          }
          out.push(m);
        }
        c0 += cr;
      }
    }
    r0 += er;
  }
  return out;
}

Deno.test({
  name: "tile map: the forward's maxima against float64, LSE and loss unchanged (odd shapes)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const sharded = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      const cases: {
        ctx: GpuContext;
        dtype: Dtype;
        softcap?: number;
        beta: number;
        tileState?: TileState;
        tile?: GemmTile;
        vocabSplits?: number;
        streamWorkgroups?: number;
      }[] = [
        // one split walks all 5 vocab tiles: the workgroup's maximum is reset between tiles
        { ctx, dtype: "f32", beta: 0.1, vocabSplits: 1 },
        { ctx, dtype: "bf16", beta: 0, softcap: 3 },
        { ctx, dtype: "bf16", beta: 0.1, tileState: "registers", vocabSplits: 2 },
        {
          ctx,
          dtype: "f32",
          beta: 0.1,
          softcap: 5,
          tile: { ...TILE_SMALL, bm: 32, tn: 8 },
          vocabSplits: 2,
        },
        // E in 2 bindings, C in 5 (62 rows each): map rows and columns per shard
        { ctx: sharded, dtype: "bf16", beta: 0.1, softcap: 4 },
        // the 128×256 tile keeps two 128-column entries a tile; the ragged last tile's second
        // entry lies past the vocabulary (and past each 62-row shard's first) and is not stored
        { ctx, dtype: "bf16", beta: 0.1, tile: TILE_HW_WIDE, vocabSplits: 2 },
        { ctx: sharded, dtype: "f32", beta: 0, softcap: 6, tile: TILE_HW_WIDE },
        // the stream split: 2 token blocks × 5 vocab tiles over 3 workgroups, whose pieces begin
        // and end inside blocks (the map's row is the piece's block)
        { ctx, dtype: "bf16", beta: 0.1, softcap: 3, streamWorkgroups: 3 },
      ];
      for (const [i, cs] of cases.entries()) {
        const x = caseInputs({
          n: 70,
          v: 257,
          d: 33,
          dtype: cs.dtype,
          beta: cs.beta,
          seed: 21 + i,
        });
        const o = resolveOptions({ beta: cs.beta, softcap: cs.softcap });
        const r = await _forward(cs.ctx, x, o, cs.dtype, {
          tileState: cs.tileState,
          tile: cs.tile,
          vocabSplits: cs.vocabSplits,
          streamWorkgroups: cs.streamWorkgroups,
        });
        const tag = JSON.stringify({ ...cs, ctx: cs.ctx === sharded ? "sharded" : "one binding" });
        // the map changes nothing else, bit for bit
        assert.deepEqual(r.withMap.lse, r.plain.lse, `${tag}: lse`);
        assert.deepEqual(r.withMap.loss, r.plain.loss, `${tag}: loss rows`);
        const eRows = r.e.shards.map((s) => s.rows), cRows = r.c.shards.map((s) => s.rows);
        if (cs.ctx === sharded) assert.ok(eRows.length > 1 && cRows.length > 1, tag);
        const want = _refMaxima(_logits(x, cs.softcap), x, eRows, cRows, r.withMap.tile);
        const got = Array.from(r.withMap.words!, tileMapValue);
        assert.equal(got.length, want.length, tag);
        for (let k = 0; k < want.length; k++) {
          const tol = 1e-5 * Math.max(1, Math.abs(want[k]));
          assert.ok(
            Math.abs(got[k] - want[k]) <= tol,
            `${tag}: entry ${k} = ${got[k]}, want ${want[k]}`,
          );
        }
        r.withMap.map!.destroy();
        for (const t of [r.e, r.c, r.targets]) t.destroy();
      }
    } finally {
      sharded.destroy();
    }
  },
});

/** Bits set in a mask (its first `bits` bits). */
function _bits(words: Uint32Array, bits: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < bits; i++) if ((words[i >> 5] >>> (i & 31)) & 1) out.push(i);
  return out;
}

/**
 * The masks of the exact filter pass and of the map filter, for one binding of E and C (one
 * segment each) with the backward tile `bt`, from the forward's LSE and tile map.
 */
async function _masks(
  ctx: GpuContext,
  x: HostInputs,
  o: LceOptions,
  dtype: Dtype,
  bt: BackwardTile,
  w: Float32Array,
  eps = defaultFilterEps(dtype),
  fwdTile: GemmTile = TILE_SMALL,
) {
  const { n, v, d } = x;
  const r = await _forward(ctx, x, o, dtype, { tile: fwdTile });
  assert.equal(r.e.shards.length, 1);
  assert.equal(r.c.shards.length, 1);
  const lse = columnVector(ctx, r.withMap.lse, "lse");
  const wt = columnVector(ctx, w, "w");
  const tT = Math.ceil(n / bt.tokens), vT = Math.ceil(v / bt.vocab);
  const words = Math.ceil((tT * vT) / 32);
  const buf = (label: string, bytes: number) =>
    ctx.createBuffer({ size: Math.ceil(bytes / 16) * 16, role: "workspace", label });
  const maskExact = buf("exact mask", words * 4), maskMap = buf("map mask", words * 4);
  const counters = buf("counters", 16);
  // the exact filter, as the backward dispatches it for one segment
  const ft: GemmTile = backwardGemmTiles(bt).dE;
  const exact = await ctx.pipeline(
    filterPassWgsl({ tile: bt, filterTile: ft, dtype, opts: o, v, eps, sort: false }),
    "exact filter",
  );
  const mapFilter = await prepareMapFilter(ctx, {
    tile: bt,
    mapTile: r.withMap.tile,
    opts: o,
    v,
    eps,
  });
  const rec = new Recorder(ctx);
  rec.clear(maskExact);
  rec.clear(maskMap);
  rec.clear(counters);
  rec.pass("exact filter", (p) => {
    const u = rec.uniform(new Uint32Array([0, n, 0, 0, v, 0, d, 0, 0, vT, 0, 0]), "params");
    const bufs = [u, r.e.shards[0].buffer, r.c.shards[0].buffer, lse.shards[0].buffer];
    bufs.push(wt.shards[0].buffer, maskExact, counters);
    p.dispatch(exact, rec.bindGroup(exact, bufs), Math.ceil(n / ft.bm), Math.ceil(v / ft.bn));
  });
  // the map filter counts into counter[0] of its own buffer (offset: a second clear buffer)
  const counter2 = buf("map counter", 16);
  rec.clear(counter2);
  mapFilter.record(rec, {
    e: r.e,
    c: r.c,
    tileMap: r.withMap.map!,
    lse,
    w: wt,
    tok: [{ start: 0, end: n, tiles: tT, base: 0 }],
    voc: [{ start: 0, end: v, tiles: vT, base: 0 }],
    vTotal: vT,
    mask: maskMap,
    counter: counter2,
  });
  await rec.finish();
  const map = _bits(await readWords(ctx, maskMap.buffer, words), tT * vT);
  const mapCount = (await readWords(ctx, counter2.buffer, 1))[0];
  // the exact filter refining the map's mask in place (kernels/fused/map_refine.ts), two
  // workgroups a token block, each walking half of its row's filter tiles
  const refine = await ctx.pipeline(
    filterPassWgsl({ tile: bt, filterTile: ft, dtype, opts: o, v, eps, sort: false, refine: true }),
    "map refine",
  );
  const rec2 = new Recorder(ctx);
  rec2.pass("map refine", (p) => {
    const u = rec2.uniform(new Uint32Array([0, n, 0, 0, v, 0, d, 0, 0, vT, 0, 0]), "params");
    const bufs = [u, r.e.shards[0].buffer, r.c.shards[0].buffer, lse.shards[0].buffer];
    bufs.push(wt.shards[0].buffer, maskMap, counter2);
    p.dispatch(refine, rec2.bindGroup(refine, bufs), Math.ceil(n / ft.bm), 2);
  });
  await rec2.finish();
  const out = {
    exact: _bits(await readWords(ctx, maskExact.buffer, words), tT * vT),
    map,
    refined: _bits(await readWords(ctx, maskMap.buffer, words), tT * vT),
    exactCount: (await readWords(ctx, counters.buffer, 1))[0],
    mapCount,
    refinedCount: (await readWords(ctx, counter2.buffer, 1))[0],
    total: tT * vT,
  };
  for (const b of [maskExact, maskMap, counters, counter2]) b.destroy();
  for (const t of [lse, wt, r.withMap.map!, r.e, r.c, r.targets] as DeviceTensor[]) t.destroy();
  return out;
}

Deno.test({
  name:
    "map filter: keeps every tile the exact filter keeps, skips most on the cce recipe; its refine keeps exactly the exact filter's",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 200, v = 700;
    // d = 512: the diagonal logit (≈ √d) dwarfs the rest, both filters keep the 4 diagonal tiles
    // of the 4 × 11; smaller d and the softcap bring off-diagonal tiles near ε, where the map
    // filter's bound keeps more than the exact filter (never fewer).
    const cases: {
      dtype: Dtype;
      beta: number;
      softcap?: number;
      reduction: "mean" | "sum";
      d: number;
      eps?: number;
      /** The map filter keeps at most this many of the 44 tiles. */
      most: number;
      /** The forward's tile (default TILE_SMALL, as the backward's 64×64). */
      fwdTile?: GemmTile;
    }[] = [
      { dtype: "bf16", beta: 0.1, reduction: "mean", d: 512, most: 4 },
      // f32's own ε (2⁻²⁸) keeps every tile at these d: the bf16 one
      { dtype: "f32", beta: 0, reduction: "sum", d: 512, eps: defaultFilterEps("bf16"), most: 4 },
      { dtype: "bf16", beta: 0.1, softcap: 30, reduction: "mean", d: 512, most: 4 },
      { dtype: "bf16", beta: 0.1, reduction: "mean", d: 240, most: 22 },
      { dtype: "bf16", beta: 0.1, reduction: "mean", d: 200, most: 33 },
      { dtype: "f32", beta: 0, reduction: "sum", d: 176, eps: defaultFilterEps("bf16"), most: 44 },
      { dtype: "bf16", beta: 0.1, softcap: 12, reduction: "mean", d: 512, most: 44 },
      // 128×128 forward tiles over 64×64 backward tiles: each of the 2 diagonal forward tiles
      // keeps the 4 backward tiles it covers
      { dtype: "bf16", beta: 0.1, reduction: "mean", d: 512, most: 8, fwdTile: TILE_LARGE },
      // 128×256 forward tiles keep 128×128 entries: the same 8 as the 128×128 tile, not 16
      { dtype: "bf16", beta: 0.1, reduction: "mean", d: 512, most: 8, fwdTile: TILE_HW_WIDE },
    ];
    let strict = 0;
    for (const cs of cases) {
      const x = makeFixture("cce", {
        n,
        v,
        d: cs.d,
        dtype: cs.dtype,
        seed: 3,
        ignoreFraction: 0.2,
      });
      const o = resolveOptions({ beta: cs.beta, softcap: cs.softcap, reduction: cs.reduction });
      const w = new Float32Array(n);
      for (let i = 0; i < n; i++) w[i] = x.targets[i] === o.ignoreIndex ? 0 : 0.7;
      const m = await _masks(ctx, x, o, cs.dtype, BACKWARD_TILE_SMALL, w, cs.eps, cs.fwdTile);
      const tag = JSON.stringify(cs);
      console.log(`${tag}: exact keeps ${m.exact.length}, map ${m.map.length} of ${m.total}`);
      const kept = new Set(m.map);
      const missed = m.exact.filter((b) => !kept.has(b));
      assert.deepEqual(missed, [], `${tag}: tiles the exact filter keeps and the map filter skips`);
      assert.equal(m.exactCount, m.exact.length, tag);
      assert.equal(m.mapCount, m.map.length, tag);
      assert.ok(m.exact.length > 0, `${tag}: the exact filter keeps some tiles`);
      assert.ok(m.map.length <= cs.most, `${tag}: the map filter keeps ${m.map.length}`);
      // refined in place by the exact filter over the map's tiles: the exact filter's tiles
      assert.deepEqual(m.refined, m.exact, `${tag}: the refined mask`);
      assert.equal(m.refinedCount, m.exact.length, `${tag}: the refined count`);
      if (m.map.length > m.exact.length) strict++;
    }
    assert.ok(strict >= 2, "some cases have tiles near ε that only the map filter keeps");
    // every row ignored (w = 0): nothing kept
    const x = makeFixture("cce", { n: 70, v: 257, d: 33, dtype: "f32", seed: 4 });
    const m = await _masks(
      ctx,
      x,
      resolveOptions({ beta: 0.1 }),
      "f32",
      BACKWARD_TILE_SMALL,
      new Float32Array(70),
    );
    assert.deepEqual(m.map, []);
    assert.equal(m.mapCount, 0);
  },
});

Deno.test({
  name: "tile map: a missing or mis-shaped map, or the map filter with sorting, is refused",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const x = caseInputs({ n: 70, v: 257, d: 33, dtype: "f32", beta: 0.1, seed: 9 });
    const spec = { n: x.n, v: x.v, d: x.d, dtype: "f32" as const };
    const opts = resolveOptions({ beta: 0.1 });
    const t = (rows: number, cols: number, dtype: "f32" | "i32" | "u32", label: string) =>
      createTensor(ctx, { dtype, rows, cols, role: "input", label });
    const e = t(x.n, x.d, "f32", "E"), c = t(x.v, x.d, "f32", "C");
    const targets = t(x.n, 1, "i32", "targets");
    const lse = t(x.n, 1, "f32", "lse"), lossRows = t(x.n, 1, "f32", "loss rows");
    const withMap = await prepareFusedForward(ctx, { spec, opts, tileMax: true });
    const plain = await prepareFusedForward(ctx, { spec, opts });
    // the map's entries (mapTile: on hardware two 128-column entries a 128×256 forward tile)
    const map = createTileMap(ctx, e, c, withMap.mapTile);
    const wrong = t(map.rows, map.cols + 1, "u32", "wrong map");
    const rec = new Recorder(ctx);
    const live = ctx.memory().liveBytes;
    assert.throws(
      () => withMap.record(rec, { e, c, targets, lse, lossRows }),
      /fused forward: prepared with tileMax/,
    );
    assert.throws(
      () => plain.record(rec, { e, c, targets, lse, lossRows, tileMax: map }),
      /fused forward: prepared without tileMax/,
    );
    assert.throws(
      () => withMap.record(rec, { e, c, targets, lse, lossRows, tileMax: wrong }),
      new RegExp(
        `tile map is ${map.rows}×${map.cols + 1} u32 in 1 shards, expected ` +
          `${map.rows}×${map.cols} u32 in one`,
      ),
    );
    assert.equal(ctx.memory().liveBytes, live, "nothing allocated");
    await rec.finish();
    await assert.rejects(
      () =>
        prepareFusedBackward(ctx, {
          spec,
          opts,
          filterEps: defaultFilterEps("f32"),
          sort: true,
          mapFilter: { tile: withMap.mapTile },
        }),
      /the map filter needs the filter and no sorting/,
    );
    const bwd = await prepareFusedBackward(ctx, {
      spec,
      opts,
      filterEps: defaultFilterEps("f32"),
      sort: false,
      mapFilter: { tile: withMap.mapTile },
    });
    const w = t(x.n, 1, "f32", "w"), count = t(1, 1, "f32", "count");
    const rec2 = new Recorder(ctx);
    assert.throws(
      () => bwd.record(rec2, { e, c, targets, lse, w, count }),
      /the map filter needs the forward's tile map/,
    );
    await rec2.finish();
    bwd.release();
    for (const d of [e, c, targets, lse, lossRows, map, wrong, w, count]) d.destroy();
  },
});
