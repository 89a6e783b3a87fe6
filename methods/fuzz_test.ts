import assert from "node:assert/strict";
import { METHODS } from "./mod.ts";
import { runMethod } from "./run.ts";
import type { LceMethod } from "./types.ts";
import { resolveOptions } from "../core/options.ts";
import {
  assertMatchesReference,
  DEFAULT_BOUNDS,
  describeCase,
  FUZZ_SHARD_BYTES,
  fuzzCase,
  FuzzRunner,
  methodTolerance,
  replayCommand,
  SPECIAL_SIZES,
} from "../testing/fuzz.ts";
import { caseInputs, PARITY_TOL } from "../testing/parity.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";

/** Cases per method in CI (LCE_FUZZ_CASES overrides the total, LCE_FUZZ_SEED the first seed). */
const PER_METHOD = 10;

function _envInt(name: string): number | undefined {
  let v: string | undefined;
  try {
    v = Deno.env.get(name);
  } catch {
    return undefined;
  }
  return v === undefined || v === "" ? undefined : Number.parseInt(v, 10);
}

Deno.test("fuzz: a seed fixes the whole case; draws cover the edges and stay in bounds", () => {
  const methods = METHODS;
  const env = { hasF16: true };
  assert.deepEqual(fuzzCase(123, env, methods), fuzzCase(123, env, methods));
  assert.notDeepEqual(fuzzCase(123, env, methods), fuzzCase(124, env, methods));
  const cases = Array.from({ length: 2000 }, (_, i) => fuzzCase(i, env, methods));
  const sizes = new Set(cases.flatMap((c) => [c.n, c.v, c.d]));
  for (const s of [1, 63, 64, 65, 127, 128, 129]) assert.ok(sizes.has(s), `size ${s} drawn`);
  assert.ok(SPECIAL_SIZES.includes(257));
  for (const c of cases) {
    for (const k of ["n", "v", "d"] as const) {
      assert.ok(Number.isInteger(c[k]) && c[k] >= 1 && c[k] <= DEFAULT_BOUNDS.maxDim, `${k}`);
    }
    assert.ok(c.n * c.v * c.d <= DEFAULT_BOUNDS.maxWork);
    assert.ok(c.beta >= 0 && c.beta <= 1);
    assert.ok(c.softcap === undefined || c.softcap > 0);
    resolveOptions({ beta: c.beta, softcap: c.softcap, reduction: c.reduction }); // valid
    assert.ok(c.gradOutput !== "vector" || c.reduction === "none");
    assert.ok(!c.allIgnored || c.reduction !== "mean", "an all-ignored mean is undefined");
    assert.equal(c.method, methods[c.seed % methods.length].name, "methods in turn");
  }
  const has = (f: (c: typeof cases[number]) => boolean, what: string) =>
    assert.ok(cases.some(f), what);
  has((c) => c.beta === 0, "β = 0");
  has((c) => c.beta === 1, "β = 1");
  has((c) => c.softcap !== undefined, "softcap");
  has((c) => c.allIgnored === true, "all ignored");
  has((c) => (c.ignoreFraction ?? 0) > 0, "some ignored");
  has((c) => c.gradOutput === "vector", "per-token upstream gradient");
  has((c) => typeof c.gradOutput === "number" && c.gradOutput < 0, "negative upstream gradient");
  has((c) => c.maxBindingBytes === FUZZ_SHARD_BYTES, "sharded context");
  for (const r of ["mean", "sum", "none"]) has((c) => c.reduction === r, r);
  for (const d of ["f32", "bf16", "f16"]) has((c) => c.dtype === d, d);
  // No f16 without shader-f16.
  assert.ok(
    Array.from({ length: 300 }, (_, i) => fuzzCase(i, { hasF16: false }, methods))
      .every((c) => c.dtype !== "f16"),
  );
  // A reduction the method refuses is replaced; when nothing works the case is marked skipped.
  const noNone = (_m: LceMethod, c: { reduction?: string }) =>
    c.reduction === "none" ? "no none" : undefined;
  for (let i = 0; i < 100; i++) {
    assert.notEqual(fuzzCase(i, env, methods, undefined, noNone).reduction, "none");
  }
  assert.equal(fuzzCase(5, env, methods, undefined, () => "never").skip, "never");
  assert.equal(replayCommand(42), "deno run -A scripts/fuzz.ts --seed 42 --cases 1");
  assert.ok(!describeCase(cases[0]).includes("\n"));
});

Deno.test({
  name: "fuzz: the comparison catches a wrong element and tolerates v = 1's roundoff",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const m = METHODS[0];
    const c = { n: 13, v: 1, d: 41, dtype: "f32" as const, beta: 0.2, softcap: 1.1, seed: 3 };
    const x = caseInputs(c);
    for (const reduction of ["sum", "none"] as const) {
      const o = resolveOptions({ beta: c.beta, softcap: c.softcap, reduction });
      const got = await runMethod(ctx, m, x, o, { dtype: "f32", gradOutput: 1.3 });
      // The loss and gradients cancel to 0: the f32 roundoff of p = 1 passes...
      assertMatchesReference(got, x, o, 1.3, PARITY_TOL.f32);
      // ... but not an error of 1e-3 of the terms.
      got.dE[5] += 1e-3;
      assert.throws(() => assertMatchesReference(got, x, o, 1.3, PARITY_TOL.f32), /dE\[5\]/);
    }
    const y = caseInputs({ n: 9, v: 31, d: 8, dtype: "f32", beta: 0.1, seed: 4 });
    const o = resolveOptions({ beta: 0.1 });
    const got = await runMethod(ctx, m, y, o, { dtype: "f32", gradOutput: 1 });
    assertMatchesReference(got, y, o, 1, PARITY_TOL.f32);
    got.dC[40] *= 1.01;
    assert.throws(() => assertMatchesReference(got, y, o, 1, PARITY_TOL.f32), /dC\[40\]/);
    got.dC[40] /= 1.01;
    got.loss[0] += 1e-3;
    assert.throws(() => assertMatchesReference(got, y, o, 1, PARITY_TOL.f32), /loss\[0\]/);
    // Tolerances follow the methods' own tests.
    for (const mm of METHODS) {
      const t = methodTolerance(mm, { n: 9, v: 31, d: 8, dtype: "f32", beta: 0.1 });
      assert.deepEqual(t, PARITY_TOL.f32, `${mm.name}: f32 keeps the parity tolerance`);
    }
  },
});

Deno.test({
  name: "fuzz: random shapes, options and dtypes, every method against float64",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const seed = _envInt("LCE_FUZZ_SEED") ?? 1;
    const cases = _envInt("LCE_FUZZ_CASES") ?? PER_METHOD * METHODS.length;
    const runner = new FuzzRunner(ctx, METHODS);
    try {
      const s = await runner.runMany(seed, cases);
      const perMethod = Object.entries(s.msByMethod)
        .map(([m, ms]) => `${m} ${(ms / 1000).toFixed(1)}`).join(", ");
      console.log(
        `seeds ${seed}..${seed + cases - 1}: ${s.passed} passed, ${s.failed} failed, ` +
          `${s.skipped} skipped; time by method (s): ${perMethod}`,
      );
      assert.equal(
        s.failed,
        0,
        `${s.failed} of ${cases} cases failed:\n${s.failures.map((f) => f.message).join("\n")}`,
      );
      // rows this adapter cannot run at all (the tensor-core rows without Dawn's subgroup
      // matrices) skip every case of theirs
      const spec = { n: 9, v: 31, d: 8, dtype: "bf16" as const };
      const runnable = METHODS.filter((m) => !m.unsupported?.(ctx, spec, resolveOptions({})));
      const share = runnable.length / METHODS.length;
      assert.ok(s.passed >= cases * share * 0.8, `most cases run (${s.skipped} skipped)`);
    } finally {
      await runner.close();
    }
  },
});
