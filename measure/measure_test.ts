import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { createTensor, type DeviceTensor } from "../gpu/tensor.ts";
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import { GpuError } from "../core/errors.ts";
import { resolveOptions } from "../core/options.ts";
import { uploadGradOut } from "../methods/run.ts";
import type { LceMethod, PreparedMethod, ProblemSpec } from "../methods/types.ts";
import { measureMethod, type MeasureOptions } from "./measure.ts";
import { percentile, quantiles } from "./timing.ts";

const SPEC: ProblemSpec = { n: 8, v: 16, d: 8, dtype: "f32" };
const OPTS = resolveOptions({ beta: 0.1 });

/** An f32 tensor of `bytes` bytes (a multiple of 16, so no padding). */
function _t(ctx: GpuContext, bytes: number, role: "workspace" | "output", label: string) {
  return createTensor(ctx, { dtype: "f32", rows: bytes / 16, cols: 4, role, label });
}

const FWD_TEMP = 4096, SAVED = 1024, LOSS = 16, PARAMS = 16;
const BWD_TEMP = 2048, DE = 256, DC = 512;

interface FakeOptions {
  name?: string;
  /** Bytes the forward allocates and never frees. */
  leak?: number;
  /** The backward returns tensors of the saved state as gradients (fused forward+backward). */
  handOver?: boolean;
  /** Thrown by the forward after its allocations. */
  throwInForward?: Error;
  estimate?: number;
  unsupported?: string;
  calls?: { prepare: number; forward: number; backward: number };
}

/** A method with known allocations and no kernels. */
function fakeMethod(f: FakeOptions = {}): LceMethod {
  const calls = f.calls ?? { prepare: 0, forward: 0, backward: 0 };
  return {
    name: f.name ?? "fake",
    label: "Fake",
    description: "allocates known buffers",
    unsupported: () => f.unsupported,
    estimateBytes: f.estimate === undefined ? undefined : () => f.estimate,
    prepare(ctx: GpuContext): Promise<PreparedMethod> {
      calls.prepare++;
      return Promise.resolve({
        forward(rec: Recorder) {
          calls.forward++;
          const temp = _t(ctx, FWD_TEMP, "workspace", "temp");
          rec.release(...temp.shards.map((s) => s.buffer));
          rec.uniform(new Uint32Array(4), "params");
          const saved = _t(ctx, SAVED, "workspace", "saved");
          const tensors: DeviceTensor[] = [saved];
          if (f.handOver) tensors.push(_t(ctx, DE, "output", "dE"), _t(ctx, DC, "output", "dC"));
          if (f.leak) _t(ctx, f.leak, "workspace", "leaked");
          const loss = _t(ctx, LOSS, "output", "loss");
          if (f.throwInForward) throw f.throwInForward;
          return Promise.resolve({ loss, saved: { tensors } });
        },
        backward(rec: Recorder, _x, saved) {
          calls.backward++;
          if (f.handOver) return Promise.resolve({ dE: saved.tensors[1], dC: saved.tensors[2] });
          const temp = _t(ctx, BWD_TEMP, "workspace", "temp");
          rec.release(...temp.shards.map((s) => s.buffer));
          return Promise.resolve({
            dE: _t(ctx, DE, "output", "dE"),
            dC: _t(ctx, DC, "output", "dC"),
          });
        },
        dispose(saved) {
          for (const t of saved.tensors) t.destroy();
        },
        stats: () => Promise.resolve({ tilesSkipped: 3, tilesTotal: 4 }),
      });
    },
  };
}

async function _options(ctx: GpuContext, o: Partial<MeasureOptions> = {}): Promise<MeasureOptions> {
  const e = createTensor(ctx, { dtype: "f32", rows: 8, cols: 8, role: "input", label: "E" });
  const c = createTensor(ctx, { dtype: "f32", rows: 16, cols: 8, role: "input", label: "C" });
  const targets = createTensor(ctx, { dtype: "i32", rows: 8, cols: 1, role: "input", label: "T" });
  await ctx.device.queue.onSubmittedWorkDone();
  return {
    spec: SPEC,
    opts: OPTS,
    inputs: { e, c, targets },
    gradOut: uploadGradOut(ctx, 8, OPTS),
    modes: ["fwd", "bwd", "fwd+bwd"],
    warmup: 1,
    reps: 3,
    ...o,
  };
}

Deno.test({
  name: "measureMethod: peak bytes of known allocations are exact in every mode",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const o = await _options(ctx);
    const live = ctx.memory().liveBytes;
    const rows = await measureMethod(ctx, fakeMethod(), o);
    assert.deepEqual(rows.map((r) => r.mode), ["fwd", "bwd", "fwd+bwd"]);
    for (const r of rows) assert.deepEqual(r.error, undefined, r.error);
    const fwd = FWD_TEMP + PARAMS + SAVED + LOSS;
    assert.deepEqual(rows[0].peakBytes, fwd);
    assert.deepEqual(rows[0].peakByRole, {
      input: 0,
      workspace: FWD_TEMP + SAVED,
      output: LOSS,
      params: PARAMS,
    });
    assert.deepEqual(rows[1].peakBytes, BWD_TEMP + DE + DC);
    // one recorder: the forward's temporaries are released only at its submission
    assert.deepEqual(rows[2].peakBytes, fwd + BWD_TEMP + DE + DC);
    assert.deepEqual(rows[0].stats, null);
    assert.deepEqual(rows[1].stats, { tilesSkipped: 3, tilesTotal: 4 });
    for (const r of rows) {
      assert.deepEqual([r.reps, r.warmup, r.beta, r.method, r.label], [3, 1, 0.1, "fake", "Fake"]);
      assert.deepEqual(r.timeSource, ctx.hasTimestamps ? "gpu" : "wall");
      assert(r.timeMs !== null && r.timeMs >= 0 && r.wallMsMedian !== null);
      assert(r.timeMsMin! <= r.timeMs! && r.timeMs! <= r.timeMsMax!);
      // raw samples: one per measured repetition, consistent with the summary figures
      assert.equal(r.timeMsSamples?.length, 3);
      assert.equal(Math.min(...r.timeMsSamples!), r.timeMsMin);
      assert.equal(Math.max(...r.timeMsSamples!), r.timeMsMax);
      assert.deepEqual(r.peakBytesSamples, [r.peakBytes, r.peakBytes, r.peakBytes]);
    }
    assert.deepEqual(ctx.memory().liveBytes, live, "live bytes back to the inputs");
  },
});

Deno.test({
  name: "measureMethod: bwd counts gradients handed over from the forward, one forward per rep",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const o = await _options(ctx, { modes: ["bwd"], warmup: 1, reps: 2 });
    const calls = { prepare: 0, forward: 0, backward: 0 };
    const live = ctx.memory().liveBytes;
    const [row] = await measureMethod(ctx, fakeMethod({ handOver: true, calls }), o);
    assert.deepEqual(row.error, undefined, row.error);
    assert.deepEqual(row.peakBytes, DE + DC);
    assert.deepEqual(row.peakByRole?.output, DE + DC);
    assert.deepEqual(calls, { prepare: 1, forward: 3, backward: 3 });
    assert.deepEqual(ctx.memory().liveBytes, live);

    const plain = { prepare: 0, forward: 0, backward: 0 };
    await measureMethod(ctx, fakeMethod({ calls: plain }), o);
    assert.deepEqual(plain, { prepare: 1, forward: 1, backward: 3 }, "saved state reused");
  },
});

Deno.test({
  name: "measureMethod: a failing method gives error rows and the next method still runs",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const o = await _options(ctx, { modes: ["fwd", "fwd+bwd"], warmup: 0, reps: 1 });
    const seen: string[] = [];
    const onRow = (r: { method: string; mode: string }) => seen.push(`${r.method} ${r.mode}`);
    const oom = new GpuError("out-of-memory", "GPU out of memory: Not enough memory left");
    const failing = fakeMethod({ name: "oom", throwInForward: oom });
    const rows = [
      ...await measureMethod(ctx, failing, { ...o, onRow }),
      ...await measureMethod(ctx, fakeMethod({ name: "ok" }), { ...o, onRow }),
    ];
    assert.deepEqual(seen, ["oom fwd", "oom fwd+bwd", "ok fwd", "ok fwd+bwd"]);
    const needs = (FWD_TEMP + PARAMS + SAVED + LOSS) / 2 ** 20;
    assert.deepEqual(rows[0].error, `OOM: needs ${needs.toFixed(3)} MiB`);
    assert.deepEqual([rows[0].peakBytes, rows[0].timeMs, rows[0].peakByRole], [null, null, null]);
    assert.deepEqual(rows[2].error, undefined);
    assert.deepEqual(rows[2].peakBytes, FWD_TEMP + PARAMS + SAVED + LOSS);

    const unsupported = await measureMethod(ctx, fakeMethod({ unsupported: "needs f16" }), o);
    assert.deepEqual(unsupported.map((r) => r.error), [
      "unsupported: needs f16",
      "unsupported: needs f16",
    ]);

    const calls = { prepare: 0, forward: 0, backward: 0 };
    const big = await measureMethod(ctx, fakeMethod({ estimate: 100 * 2 ** 30, calls }), {
      ...o,
      budgetBytes: 8 * 2 ** 30,
    });
    assert.deepEqual(big[0].error, "OOM: needs 102,400 MiB (estimated), 8,192 MiB free");
    assert.deepEqual(calls.forward, 0, "skipped before running");
    assert.equal(big[0].estimateBytes, undefined, "a refused cell has no measured estimate");

    // without an estimate, a cell is still capped at its budget: the allocation past it is
    // refused before it is made, the cell fails as out of memory, nothing is left live
    const live = ctx.memory().liveBytes;
    const capped = await measureMethod(ctx, fakeMethod({ name: "greedy" }), {
      ...o,
      modes: ["fwd"],
      budgetBytes: FWD_TEMP - 16,
    });
    assert.match(
      capped[0].error ?? "",
      /^OOM: temp: 4096 more bytes would make \d+ live, over the allocation limit of \d+$/,
    );
    assert.equal(ctx.memory().liveBytes, live);
    assert.equal(ctx.allocationLimitBytes, Infinity, "the cap is lifted after the method");

    const thrown = await measureMethod(
      ctx,
      fakeMethod({ throwInForward: new Error("boom") }),
      { ...o, modes: ["fwd"] },
    );
    assert.deepEqual(thrown[0].error, "Error: boom");
  },
});

Deno.test({
  name: "measureMethod: a method that keeps buffers is reported as leaking",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const o = await _options(ctx, { modes: ["fwd", "bwd"], warmup: 0, reps: 2 });
    const rows = await measureMethod(ctx, fakeMethod({ leak: 2 ** 20 }), o);
    assert.match(
      rows[0].error ?? "",
      /^leak: 1 MiB still live after repetition 1 \(workspace 1 MiB;/,
    );
    assert.match(rows[1].error ?? "", /^leak: 1 MiB still live after the forward's saved state/);
    for (const r of rows) assert.deepEqual(r.peakBytes, null);
  },
});

Deno.test({
  name: "measureMethod: warmFwdBwd skips the fwd+bwd warm-up only after its fwd and bwd cells",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const o = await _options(ctx, { warmFwdBwd: true });
    const calls = { prepare: 0, forward: 0, backward: 0 };
    const rows = await measureMethod(ctx, fakeMethod({ calls }), o);
    assert.deepEqual(rows.map((r) => [r.mode, r.warmup, r.reps]), [
      ["fwd", 1, 3],
      ["bwd", 1, 3],
      ["fwd+bwd", 0, 3],
    ]);
    // fwd 1 + 3, bwd: one forward for its 1 + 3 backwards, fwd+bwd 3 (no warm-up)
    assert.deepEqual(calls, { prepare: 1, forward: 4 + 1 + 3, backward: 4 + 3 });
    // without the fwd cell first, fwd+bwd keeps its warm-up
    const alone = await measureMethod(ctx, fakeMethod(), { ...o, modes: ["bwd", "fwd+bwd"] });
    assert.deepEqual(alone.map((r) => r.warmup), [1, 1]);
  },
});

Deno.test("quantiles: median and quartiles by linear interpolation", () => {
  const q = quantiles([5, 1, 3, 2, 4]);
  assert.deepEqual(q, { min: 1, q1: 2, median: 3, q3: 4, max: 5 });
  assert.equal(quantiles([1, 2]).median, 1.5);
  assert.deepEqual(quantiles([7]).q3, 7);
});

Deno.test("percentile: linear between order statistics, p20/p50/p80 of five samples", () => {
  const xs = [5, 1, 4, 2, 3];
  assert.equal(percentile(xs, 0), 1);
  assert.equal(percentile(xs, 0.5), 3);
  assert.equal(percentile(xs, 1), 5);
  assert.ok(Math.abs(percentile(xs, 0.2) - 1.8) < 1e-12);
  assert.ok(Math.abs(percentile(xs, 0.8) - 4.2) < 1e-12);
  assert.equal(percentile([7], 0.2), 7);
  assert.throws(() => percentile([], 0.5), RangeError);
  assert.throws(() => percentile([1], 1.5), RangeError);
});
