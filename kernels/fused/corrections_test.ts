import assert from "node:assert/strict";
import { columnVector, GPU_TEST, randomArray, testContext } from "../../testing/gpu.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { createTensor, download, fromHost } from "../../gpu/tensor.ts";
import { roundArray } from "../../core/dtype.ts";
import { type Dtype, IGNORE_INDEX, type LceOptions, resolveOptions } from "../../core/options.ts";
import { prepareGradCorrections } from "./corrections.ts";

/** The exact terms in float64 (see the module doc of corrections.ts). */
function _reference(
  e: Float32Array,
  c: Float32Array,
  t: Int32Array,
  w: Float32Array,
  n: number,
  v: number,
  d: number,
  o: LceOptions,
  folded?: (i: number) => boolean,
) {
  const dE = new Float64Array(n * d), dC = new Float64Array(v * d);
  const csum = new Float64Array(d), r = new Float64Array(d);
  for (let j = 0; j < v; j++) for (let k = 0; k < d; k++) csum[k] += c[j * d + k];
  for (let i = 0; i < n; i++) for (let k = 0; k < d; k++) r[k] += w[i] * e[i * d + k];
  for (let j = 0; j < v; j++) for (let k = 0; k < d; k++) dC[j * d + k] = (-o.beta / v) * r[k];
  for (let i = 0; i < n; i++) {
    if (t[i] === o.ignoreIndex) continue;
    let z = 0;
    for (let k = 0; k < d; k++) z += e[i * d + k] * c[t[i] * d + k];
    const s = o.softcap;
    const fp = s === undefined ? 1 : 1 - Math.tanh(z / s) ** 2;
    const a = -w[i] * (1 - o.beta) * fp, b = (-o.beta / v) * w[i];
    for (let k = 0; k < d; k++) {
      dE[i * d + k] = a * c[t[i] * d + k] + b * csum[k];
      if (!folded?.(i)) dC[t[i] * d + k] += a * e[i * d + k];
    }
  }
  return { dE, dC };
}

Deno.test({
  name: "grad corrections: exact target and smoothing terms, sharded, repeated targets, bitwise",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 70, v = 61;
    // d = 530: more columns than one pass of the scatter's lanes (4 × 128), odd
    const cases: { dtype: Dtype; beta: number; softcap?: number; shard: boolean; d?: number }[] = [
      { dtype: "f32", beta: 0.1, shard: false },
      { dtype: "bf16", beta: 0.1, softcap: 2, shard: true },
      { dtype: "f32", beta: 0, softcap: 3, shard: true },
      { dtype: "bf16", beta: 1, shard: false },
      { dtype: "f32", beta: 0.1, shard: true, d: 530 },
    ];
    for (const [ci, cs] of cases.entries()) {
      const d = cs.d ?? 33;
      const o = resolveOptions({ beta: cs.beta, softcap: cs.softcap });
      const e = roundArray(randomArray(n * d, 3 + ci), cs.dtype);
      const c = roundArray(randomArray(v * d, 4 + ci, 0.8), cs.dtype);
      // few distinct targets (long runs), some ignored rows, zero and negative weights
      const t = Int32Array.from(
        randomArray(n, 5 + ci),
        (u) => u < -0.7 ? IGNORE_INDEX : Math.floor((u + 1) * 4) * 7,
      );
      const w = Float32Array.from(
        randomArray(n, 6 + ci),
        (x, i) => t[i] === IGNORE_INDEX ? 0 : i % 9 === 0 ? 0 : x,
      );
      const rows = cs.shard ? { maxRowsPerShard: 17 } : {};
      const et = fromHost(
        ctx,
        { dtype: cs.dtype, rows: n, cols: d, role: "input", label: "E", ...rows },
        e,
      );
      const ct = fromHost(
        ctx,
        { dtype: cs.dtype, rows: v, cols: d, role: "input", label: "C", ...rows },
        c,
      );
      const tt = columnVector(ctx, t, "t");
      const wt = columnVector(ctx, w, "w");
      const corr = await prepareGradCorrections(ctx, { dtype: cs.dtype, opts: o, v });
      const runOnce = async () => {
        const dE = createTensor(ctx, {
          dtype: "f32",
          rows: n,
          cols: d,
          role: "output",
          label: "dE",
          maxRowsPerShard: cs.shard ? 23 : undefined,
        });
        const dC = createTensor(ctx, {
          dtype: "f32",
          rows: v,
          cols: d,
          role: "output",
          label: "dC",
          maxRowsPerShard: cs.shard ? 13 : undefined,
        });
        const rec = new Recorder(ctx);
        corr.record(rec, { e: et, c: ct, targets: tt, w: wt, dE, dC });
        await rec.finish();
        const out = { dE: await download(ctx, dE), dC: await download(ctx, dC) };
        dE.destroy();
        dC.destroy();
        return out;
      };
      const got = await runOnce();
      const want = _reference(e, c, t, w, n, v, d, o);
      for (const k of ["dE", "dC"] as const) {
        let scale = 0;
        for (const x of want[k]) scale = Math.max(scale, Math.abs(x));
        for (let i = 0; i < want[k].length; i++) {
          assert.ok(
            Math.abs(got[k][i] - want[k][i]) <= 1e-5 * scale + 1e-5 * Math.abs(want[k][i]),
            `${JSON.stringify(cs)} ${k}[${i}]: ${got[k][i]} vs ${want[k][i]}`,
          );
        }
      }
      const again = await runOnce();
      assert.deepEqual(again.dE, got.dE, "dE bitwise reproducible");
      assert.deepEqual(again.dC, got.dC, "dC bitwise reproducible");
      for (const x of [et, ct, tt, wt]) x.destroy();
    }
  },
});

Deno.test({
  name:
    "grad corrections: with foldTargets, dC's smoothing row first and the unflagged targets after",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 70, v = 61, d = 34;
    for (const [ci, cs] of [{ dtype: "f32", beta: 0.1 }, { dtype: "bf16", beta: 0.2 }].entries()) {
      const dtype = cs.dtype as Dtype;
      const o = resolveOptions({ beta: cs.beta });
      const e = roundArray(randomArray(n * d, 30 + ci), dtype);
      const c = roundArray(randomArray(v * d, 31 + ci, 0.8), dtype);
      const t = Int32Array.from(
        randomArray(n, 32 + ci),
        (u) => u < -0.8 ? IGNORE_INDEX : Math.floor((u + 1) * 4) * 7,
      );
      const w = Float32Array.from(randomArray(n, 33 + ci), (x, i) => t[i] === IGNORE_INDEX ? 0 : x);
      // as a dC pass would flag them: every third token, runs of one target partly flagged
      const flag = (i: number) => i % 3 === 0;
      const et = fromHost(ctx, { dtype, rows: n, cols: d, role: "input", label: "E" }, e);
      const ct = fromHost(ctx, { dtype, rows: v, cols: d, role: "input", label: "C" }, c);
      const tt = columnVector(ctx, t, "t"), wt = columnVector(ctx, w, "w");
      const folded = columnVector(
        ctx,
        Int32Array.from({ length: n }, (_, i) => flag(i) ? 1 : 0),
        "f",
      );
      const dc16 = dtype === "bf16" ? "bf16" as const : undefined;
      const corr = await prepareGradCorrections(ctx, {
        dtype,
        opts: o,
        v,
        dC16: dc16,
        foldTargets: true,
      });
      const dE = createTensor(ctx, { dtype: "f32", rows: n, cols: d, role: "output", label: "dE" });
      const dC = createTensor(ctx, {
        dtype: dc16 ?? "f32",
        rows: v,
        cols: d,
        role: "output",
        label: "dC",
      });
      const x = { e: et, c: ct, targets: tt, w: wt, dE, dC };
      const rec = new Recorder(ctx);
      const { coefficients } = corr.record(rec, { ...x, part: "dE" });
      const mid = corr.record(rec, { ...x, part: "dC", coefficients });
      assert.equal(mid.coefficients, coefficients, "the dC part hands the coefficients on");
      corr.record(rec, { ...x, part: "dC-scatter", coefficients, folded: folded.shards[0].buffer });
      await rec.finish();
      const got = await download(ctx, dC);
      const want = _reference(e, c, t, w, n, v, d, o, flag).dC;
      const all = _reference(e, c, t, w, n, v, d, o).dC;
      let scale = 0, diff = 0, diffAll = 0;
      for (let i = 0; i < want.length; i++) {
        scale = Math.max(scale, Math.abs(want[i]));
        diff = Math.max(diff, Math.abs(got[i] - want[i]));
        diffAll = Math.max(diffAll, Math.abs(got[i] - all[i]));
      }
      // f32: one accumulation; bf16: the smoothing row's rounding and the scatter's
      const tol = dc16 ? 2 * 2 ** -8 : 1e-5;
      assert.ok(diff <= tol * scale, `${dtype}: dC error ${diff / scale} > ${tol}`);
      assert.ok(diffAll > 10 * tol * scale, `${dtype}: the flagged tokens' terms were added`);
      for (const b of [et, ct, tt, wt, folded, dE, dC]) b.destroy();
    }
  },
});
