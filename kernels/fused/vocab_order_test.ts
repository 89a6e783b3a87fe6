import assert from "node:assert/strict";
import { columnVector, GPU_TEST, randomArray, readWords, testContext } from "../../testing/gpu.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { createTensor, download, fromHost } from "../../gpu/tensor.ts";
import { roundArray } from "../../core/dtype.ts";
import { IGNORE_INDEX, resolveOptions } from "../../core/options.ts";
import {
  paddedSortLength,
  preparePairSort,
  prepareU32Sort,
  prepareVocabSort,
  SORT_BLOCK,
  sortIndexBits,
  vocabSortWorkspaceBytes,
} from "./vocab_order.ts";
import { sortKeysVecFits } from "./sort_keys.ts";
import type { Dtype } from "../../core/options.ts";
import type { GpuContext } from "../../gpu/context.ts";
import { columnPartialsBytes } from "../column_sum.ts";

Deno.test({
  name: "pair sort: bitonic sort of (key, index) pairs matches a host sort, with duplicate keys",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const sort = await preparePairSort(ctx);
    for (const len of [1, 300, SORT_BLOCK, 1500, 4097]) {
      const n = paddedSortLength(len);
      const host = new Uint32Array(2 * n).fill(0xffffffff);
      const r = randomArray(len, len);
      for (let i = 0; i < len; i++) {
        host[2 * i] = Math.floor((r[i] + 1) * 50); // many duplicates
        host[2 * i + 1] = i;
      }
      const t = fromHost(
        ctx,
        { dtype: "u32", rows: n, cols: 2, role: "workspace", label: "p" },
        host,
      );
      const rec = new Recorder(ctx);
      sort.record(rec, t.shards[0].buffer, n);
      await rec.finish();
      const got = await download(ctx, t);
      const want = Array.from({ length: len }, (_, i) => [host[2 * i], i]).sort((a, b) =>
        a[0] - b[0] || a[1] - b[1]
      );
      for (let i = 0; i < len; i++) {
        assert.deepEqual([got[2 * i], got[2 * i + 1]], want[i], `len ${len}, position ${i}`);
      }
      t.destroy();
    }
  },
});

Deno.test({
  name: "u32 sort: in place, any length, inside a larger buffer, with duplicates",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const sort = await prepareU32Sort(ctx);
    const off = 37, lens = [0, 1, 2, 300, SORT_BLOCK, SORT_BLOCK + 1, 1500, 4097, 70001];
    for (const len of lens) {
      const total = off + len + 11;
      const r = randomArray(total, 100 + len);
      // many duplicates, the extremes included
      const host = Uint32Array.from(
        r,
        (x, i) =>
          i % 97 === 0 ? 0xffffffff : i % 89 === 0 ? 0 : Math.floor((x + 1) * 2 ** 30) & ~0xff,
      );
      const t = fromHost(
        ctx,
        { dtype: "u32", rows: total, cols: 1, role: "workspace", label: "words" },
        host,
      );
      const rec = new Recorder(ctx);
      sort.record(rec, t.shards[0].buffer, off, len);
      await rec.finish();
      const got = await readWords(ctx, t.shards[0].buffer.buffer, total);
      const want = Uint32Array.from(host);
      want.subarray(off, off + len).sort();
      assert.deepEqual(got, want, `len ${len}`);
      t.destroy();
    }
  },
});

Deno.test({
  name: "vocab sort: permutation of each segment, by decreasing mean logit, deterministic " +
    "(both keys kernels, every dtype)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // depths the vector keys kernel reads (d a multiple of 16 bytes) and the scalar one reads
    const cases: { dtype: Dtype; d: number; vec: boolean }[] = [
      { dtype: "f32", d: 19, vec: false },
      { dtype: "f32", d: 12, vec: true },
      { dtype: "bf16", d: 40, vec: true },
      { dtype: "bf16", d: 27, vec: false },
      { dtype: "f16", d: 264, vec: true },
    ];
    for (const k of cases) {
      assert.equal(sortKeysVecFits(k.dtype, k.d), k.vec);
      await _checkVocabSort(ctx, k.dtype, k.d);
    }
  },
});

async function _checkVocabSort(ctx: GpuContext, dtype: Dtype, d: number): Promise<void> {
  {
    const n = 45, v = 1100;
    const opts = resolveOptions({});
    const e = roundArray(randomArray(n * d, 11), dtype);
    const c = roundArray(randomArray(v * d, 12), dtype);
    const targets = Int32Array.from(
      randomArray(n, 13),
      (u, i) => (u < -0.6 ? IGNORE_INDEX : (i * 7) % v),
    );
    let valid = 0;
    for (const t of targets) if (t !== IGNORE_INDEX) valid++;
    const et = fromHost(ctx, { dtype, rows: n, cols: d, role: "input", label: "E" }, e);
    const cs = fromHost(ctx, {
      dtype,
      rows: v,
      cols: d,
      role: "input",
      label: "C",
      maxRowsPerShard: 400,
    }, c);
    const tt = columnVector(ctx, targets, "t");
    const ct = columnVector(ctx, Float32Array.of(valid), "count");
    const segments = [{ start: 0, end: 400 }, { start: 400, end: 800 }, { start: 800, end: v }];
    const sorter = await prepareVocabSort(ctx, { dtype, opts });
    const runOnce = async () => {
      const perm = createTensor(ctx, {
        dtype: "u32",
        rows: v,
        cols: 1,
        role: "workspace",
        label: "p",
      });
      const rec = new Recorder(ctx);
      sorter.record(rec, {
        e: et,
        c: cs,
        targets: tt,
        count: ct,
        perm: perm.shards[0].buffer,
        segments,
      });
      await rec.finish();
      const got = await download(ctx, perm);
      perm.destroy();
      return got;
    };
    const perm = await runOnce();
    const ebar = new Float64Array(d);
    for (let i = 0; i < n; i++) {
      if (targets[i] === IGNORE_INDEX) continue;
      for (let k = 0; k < d; k++) ebar[k] += e[i * d + k] / valid;
    }
    const key = (j: number) => {
      let s = 0;
      for (let k = 0; k < d; k++) s += ebar[k] * c[j * d + k];
      return s;
    };
    // keys are quantised to 32 − 9 bits (segments of ≤ 400 rows) between the extreme keys: order
    // by key down to one level, then by row
    let lo = Infinity, hi = -Infinity;
    for (let j = 0; j < v; j++) [lo, hi] = [Math.min(lo, key(j)), Math.max(hi, key(j))];
    assert.equal(sortIndexBits(400), 9);
    const level = (hi - lo) / (2 ** 23 - 1);
    for (const seg of segments) {
      const slice = Array.from(perm.subarray(seg.start, seg.end));
      assert.deepEqual(
        [...slice].sort((a, b) => a - b),
        Array.from({ length: seg.end - seg.start }, (_, i) => seg.start + i),
      );
      for (let i = 1; i < slice.length; i++) {
        assert(
          key(slice[i - 1]) >= key(slice[i]) - level - 1e-5,
          `${dtype} d ${d}, segment ${seg.start}: order at ${i}`,
        );
      }
    }
    assert.deepEqual(await runOnce(), perm);
  }
}

Deno.test({
  name: "vocab sort: equal keys keep row order, largest first; the workspace is exact",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // 3000 rows in one segment (12 index bits, 20 key bits); every C row is a copy of one of 5
    // rows, so the keys tie exactly in 5 groups of 600.
    const n = 20, v = 3000, d = 8;
    const opts = resolveOptions({});
    const e = randomArray(n * d, 21);
    const proto = randomArray(5 * d, 22);
    const c = new Float32Array(v * d);
    for (let j = 0; j < v; j++) {
      for (let k = 0; k < d; k++) c[j * d + k] = proto[(j % 5) * d + k];
    }
    const targets = new Int32Array(n).fill(1);
    const et = fromHost(ctx, { dtype: "f32", rows: n, cols: d, role: "input", label: "E" }, e);
    const cs = fromHost(ctx, { dtype: "f32", rows: v, cols: d, role: "input", label: "C" }, c);
    const tt = columnVector(ctx, targets, "t");
    const ct = columnVector(ctx, Float32Array.of(n), "count");
    const sorter = await prepareVocabSort(ctx, { dtype: "f32", opts });
    const perm = createTensor(ctx, { dtype: "u32", rows: v, cols: 1, role: "output", label: "p" });
    const before = ctx.memory();
    ctx.resetPeak();
    const rec = new Recorder(ctx);
    sorter.record(rec, { e: et, c: cs, targets: tt, count: ct, perm: perm.shards[0].buffer });
    await rec.finish();
    const m = ctx.memory();
    const peak = m.peakBytes - before.liveBytes - (m.peakByRole.params - before.liveByRole.params);
    assert.equal(peak, vocabSortWorkspaceBytes([n], d));
    assert.equal(vocabSortWorkspaceBytes([n], d), columnPartialsBytes([n], d) + 32 + 16);
    assert.equal(sortIndexBits(3000), 12);
    assert.equal(sortIndexBits(256000), 18);
    assert.equal(sortIndexBits(1), 0);
    const got = await download(ctx, perm);
    // five runs of equal keys, largest first, each run in row order
    const keys = Array.from({ length: 5 }, (_, g) => {
      let s = 0;
      for (let k = 0; k < d; k++) {
        let eb = 0;
        for (let i = 0; i < n; i++) eb += e[i * d + k] / n;
        s += eb * proto[g * d + k];
      }
      return s;
    });
    const groups = [0, 1, 2, 3, 4].sort((a, b) => keys[b] - keys[a]);
    const want = groups.flatMap((g) => Array.from({ length: v / 5 }, (_, i) => 5 * i + g));
    assert.deepEqual(Array.from(got), want);
    // Ē and the keys left out (the order decision's bound skipping them), over a perm poisoned
    // with the sorted rows: every row packs to level 0, and the sort leaves the identity
    const rec2 = new Recorder(ctx);
    sorter.record(rec2, {
      e: et,
      c: cs,
      targets: tt,
      count: ct,
      perm: perm.shards[0].buffer,
      keysUnder: () => {},
    });
    await rec2.finish();
    assert.deepEqual(Array.from(await download(ctx, perm)), Array.from({ length: v }, (_, i) => i));
    for (const t of [et, cs, tt, ct, perm]) t.destroy();
  },
});
