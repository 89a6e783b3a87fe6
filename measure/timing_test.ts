import assert from "node:assert/strict";
import { type CallTiming, median, quantiles, timeRepetitions } from "./timing.ts";

const _timing = (gpuMs: number): CallTiming => ({
  gpuMs,
  wallMs: gpuMs,
  cpuMs: gpuMs,
  passes: [{ label: "p", gpuMs }],
});

Deno.test("timeRepetitions: warm-ups unmeasured, samples in run order, median", async () => {
  const r = await timeRepetitions({ warmup: 2, reps: 3 }, (rep) => Promise.resolve(_timing(rep)));
  assert.deepEqual(r.times, [2, 3, 4]);
  assert.equal(r.median, 3);
  assert.deepEqual(r.passes.get("p"), [2, 3, 4]);
});

Deno.test("timeRepetitions: adapt sees the first measured call, not the warm-up", async () => {
  const seen: number[] = [];
  const lastFlags: boolean[] = [];
  const r = await timeRepetitions({
    warmup: 1,
    reps: 3,
    adapt: (ms) => {
      seen.push(ms);
      return 6;
    },
  }, async (rep, measured, last) => {
    lastFlags.push(last);
    // the warm-up is slow (first-use costs), the measured calls fast
    await new Promise((ok) => setTimeout(ok, rep === 0 ? 120 : 1));
    return _timing(measured ? 1 : 100);
  });
  assert.equal(seen.length, 1);
  assert.ok(seen[0] < 100, `adapt saw ${seen[0]} ms, the warm-up's time`);
  assert.equal(r.times.length, 6);
  assert.equal(lastFlags.at(-1), true);
});

Deno.test("timeRepetitions: warmupMs warms short calls up past `warmup` until its wall time", async () => {
  const flags: boolean[] = [];
  const r = await timeRepetitions({ warmup: 1, warmupMs: 1000, reps: 2 }, async (rep, measured) => {
    flags.push(measured);
    await new Promise((ok) => setTimeout(ok, 5));
    return _timing(rep);
  });
  assert.ok(r.warmups >= 10, `${r.warmups} warm-ups in 1000 ms of 5 ms calls`);
  assert.equal(r.times.length, 2);
  assert.deepEqual(r.times, [r.warmups, r.warmups + 1]);
  assert.deepEqual(flags, [...Array(r.warmups).fill(false), true, true]);
  // a call as long as a tenth of the floor ends it
  const long = await timeRepetitions({ warmup: 1, warmupMs: 60, reps: 1 }, async (rep) => {
    await new Promise((ok) => setTimeout(ok, 8));
    return _timing(rep);
  });
  assert.equal(long.warmups, 1);
  // without it, exactly `warmup`
  const plain = await timeRepetitions(
    { warmup: 3, reps: 1 },
    (rep) => Promise.resolve(_timing(rep)),
  );
  assert.equal(plain.warmups, 3);
});

Deno.test("quantiles and median of unsorted samples", () => {
  assert.deepEqual(quantiles([4, 1, 3, 2]), { min: 1, q1: 1.75, median: 2.5, q3: 3.25, max: 4 });
  assert.equal(median([5]), 5);
  assert.throws(() => quantiles([]), /empty/);
});
