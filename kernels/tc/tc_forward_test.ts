/**
 * The tensor-core forward's tile map in its emulated mode (kernels/tc/tc_codegen.ts) against
 * float64 maxima at odd shapes: an entry of a full token block is the block's largest capped
 * logit; one of a ragged last block is max(M, 0), its missing rows' logits being softcap(0) = 0
 * (kernels/fused/tile_map.ts), an upper bound all the same. LSE and loss rows are the same bits
 * with the map as without. The native kernels' WGSL is validated by tc_null_test.ts.
 */
import assert from "node:assert/strict";
import { columnVector, GPU_TEST, readWords, testContext } from "../../testing/gpu.ts";
import { caseInputs } from "../../testing/parity.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { createTensor, download, fromHost } from "../../gpu/tensor.ts";
import { type HostInputs, resolveOptions } from "../../core/options.ts";
import { roundArray } from "../../core/dtype.ts";
import { createTileMap, tileMapLayout, tileMapValue } from "../fused/tile_map.ts";
import { prepareTcForward, TC_FORWARD_TILE_EMULATED } from "./tc_forward.ts";
import type { TcTile } from "./tc_tiles.ts";

const ctx = await testContext();
const EMULATE = { ...GPU_TEST, ignore: ctx.engine !== "deno" };

/**
 * Per map entry (token block × vocab tile): the float64 max of the capped logits, and whether the
 * block is full.
 */
function _maxima(x: HostInputs, t: { bm: number; bn: number }, softcap?: number) {
  const out: { m: number; full: boolean }[] = [];
  for (let b = 0; b < x.n; b += t.bm) {
    for (let j = 0; j < x.v; j += t.bn) {
      let m = -Infinity;
      for (let i = b; i < Math.min(b + t.bm, x.n); i++) {
        for (let v = j; v < Math.min(j + t.bn, x.v); v++) {
          let z = 0;
          for (let k = 0; k < x.d; k++) z += x.e[i * x.d + k] * x.c[v * x.d + k];
          m = Math.max(m, softcap === undefined ? z : softcap * Math.tanh(z / softcap));
        }
      }
      out.push({ m, full: b + t.bm <= x.n });
    }
  }
  return out;
}

/** Runs the emulated forward with and without the map; the map's values, LSE and loss rows. */
async function _run(x: HostInputs, softcap?: number, tile?: TcTile) {
  const spec = { n: x.n, v: x.v, d: x.d, dtype: "bf16" as const };
  const opts = resolveOptions({ beta: 0.1, softcap });
  const e = fromHost(ctx, { dtype: "bf16", rows: x.n, cols: x.d, role: "input", label: "E" }, x.e);
  const c = fromHost(ctx, { dtype: "bf16", rows: x.v, cols: x.d, role: "input", label: "C" }, x.c);
  const targets = columnVector(ctx, x.targets, "targets");
  const once = async (tileMax: boolean) => {
    const fwd = await prepareTcForward(ctx, { spec, opts, tileMax, mode: "emulated", tile });
    const vec = (label: string) =>
      createTensor(ctx, { dtype: "f32", rows: x.n, cols: 1, role: "output", label });
    const lse = vec("lse"), lossRows = vec("loss rows");
    const scales = fwd.scales.allocate(ctx);
    const map = tileMax ? createTileMap(ctx, e, c, fwd.tile) : undefined;
    const rec = new Recorder(ctx);
    fwd.record(rec, { e, c, targets, lse, lossRows, scales, tileMax: map });
    await rec.finish();
    const layout = tileMapLayout([x.n], [x.v], fwd.tile);
    const words = map
      ? await readWords(ctx, map.shards[0].buffer.buffer, layout.rows * layout.cols)
      : undefined;
    const out = {
      lse: await download(ctx, lse),
      loss: await download(ctx, lossRows),
      values: words ? Array.from(words, tileMapValue) : [],
      tile: fwd.tile,
    };
    for (const t of [lse, lossRows, map]) t?.destroy();
    scales.scales.destroy();
    scales.maxBits.destroy();
    return out;
  };
  const withMap = await once(true), plain = await once(false);
  for (const t of [e, c, targets]) t.destroy();
  return { withMap, plain };
}

function _check(
  x: HostInputs,
  softcap: number | undefined,
  tag: string,
  r: Awaited<ReturnType<typeof _run>>,
) {
  assert.deepEqual(r.withMap.lse, r.plain.lse, `${tag}: lse`);
  assert.deepEqual(r.withMap.loss, r.plain.loss, `${tag}: loss rows`);
  const want = _maxima(x, r.withMap.tile, softcap);
  assert.equal(r.withMap.values.length, want.length, `${tag}: entries`);
  let full = 0, ragged = 0;
  for (const [i, w] of want.entries()) {
    const expect = w.full ? w.m : Math.max(w.m, 0);
    const got = r.withMap.values[i];
    assert.ok(
      Math.abs(got - expect) <= 1e-4 * (1 + Math.abs(expect)),
      `${tag}: entry ${i} ${got} against ${expect} (full ${w.full})`,
    );
    if (w.full) full++;
    else ragged++;
  }
  assert.ok(full > 0 && ragged > 0, `${tag}: full and ragged blocks`);
}

Deno.test({
  name: "tc forward (emulated): the tile map against float64 maxima, ragged blocks bounded by 0",
  ...EMULATE,
  async fn() {
    // 100 tokens: a full 64-row block and a ragged one; 177 vocabulary rows: a ragged last tile
    const base = caseInputs({ n: 100, v: 177, d: 40, dtype: "bf16", beta: 0.1, seed: 31 });
    const r1 = await _run(base, 6);
    _check(base, 6, "random, softcap 6", r1);
    // every logit negative (E > 0, C < 0): a full block's entry is its negative maximum, a ragged
    // block's the missing rows' 0
    const neg: HostInputs = {
      ...base,
      e: roundArray(base.e.map((v) => 0.05 + Math.abs(v)), "bf16"),
      c: roundArray(base.c.map((v) => -0.05 - Math.abs(v)), "bf16"),
    };
    const r2 = await _run(neg);
    _check(neg, undefined, "negative logits", r2);
    const ragged = _maxima(neg, r2.withMap.tile).filter((w) => !w.full);
    assert.ok(ragged.every((w) => w.m < 0), "the ragged block's logits are all negative");
  },
});

/** Float64 log-sum-exp of each row's capped logits. */
function _lse(x: HostInputs, softcap?: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < x.n; i++) {
    const z: number[] = [];
    for (let v = 0; v < x.v; v++) {
      let s = 0;
      for (let k = 0; k < x.d; k++) s += x.e[i * x.d + k] * x.c[v * x.d + k];
      z.push(softcap === undefined ? s : softcap * Math.tanh(s / softcap));
    }
    const m = Math.max(...z);
    out.push(m + Math.log(z.reduce((a, b) => a + Math.exp(b - m), 0)));
  }
  return out;
}

Deno.test({
  name: "tc forward (emulated): one epilogue scratch matrix a subgroup, the same bits as two",
  ...EMULATE,
  async fn() {
    const x = caseInputs({ n: 100, v: 177, d: 40, dtype: "bf16", beta: 0.1, seed: 37 });
    for (const softcap of [undefined, 6]) {
      const two = await _run(x, softcap, TC_FORWARD_TILE_EMULATED);
      const one = await _run(x, softcap, { ...TC_FORWARD_TILE_EMULATED, singleScratch: true });
      const tag = `softcap ${softcap}`;
      for (const k of ["plain", "withMap"] as const) {
        assert.deepEqual(one[k].lse, two[k].lse, `${tag} ${k}: lse`);
        assert.deepEqual(one[k].loss, two[k].loss, `${tag} ${k}: loss rows`);
      }
      assert.deepEqual(one.withMap.values, two.withMap.values, `${tag}: the map`);
      const want = _lse(x, softcap);
      for (const [i, w] of want.entries()) {
        const got = one.plain.lse[i];
        assert.ok(Math.abs(got - w) <= 1e-4 * (1 + Math.abs(w)), `${tag}: lse ${i} ${got} ≠ ${w}`);
      }
    }
  },
});
