import assert from "node:assert/strict";
import * as api from "./mod.ts";
import {
  type HostInputs,
  IGNORE_INDEX,
  InputError,
  type LossOptions,
  methodByName,
  METHODS,
  resolveOptions,
  runMethod,
} from "./mod.ts";
import { checkInputs, parseDtype } from "./core/options.ts";
import { makeFixture } from "./fixtures/mod.ts";
import { GPU_TEST, testContext } from "./testing/gpu.ts";

const n = 6, v = 11, d = 5;
const good = (): HostInputs => ({
  n,
  v,
  d,
  e: Float32Array.from({ length: n * d }, (_, i) => Math.sin(i) * 0.7),
  c: Float32Array.from({ length: v * d }, (_, i) => Math.cos(i * 1.3) * 0.6),
  targets: Int32Array.from([0, 3, IGNORE_INDEX, 10, 5, 7]),
});

Deno.test("public API: mod.ts exports the user's API and nothing internal", () => {
  assert.deepEqual(Object.keys(api).sort(), [
    "DeviceTensor",
    "GpuContext",
    "GpuError",
    "HARNESS_VERSION",
    "IGNORE_INDEX",
    "InputError",
    "LceOnBuffers",
    "METHODS",
    "Recorder",
    "createTensor",
    "download",
    "dtypeHelpers",
    "enableDirectives",
    "f32Lit",
    "formatCsv",
    "formatMarkdown",
    "fromHost",
    "lceOnBuffers",
    "lceReference",
    "loadF32",
    "lossConstants",
    "methodByName",
    "readNpy",
    "readRows",
    "resolveOptions",
    "runMethod",
    "tensorOnBuffer",
    "upload",
    "wgslStorageType",
    "writeNpy",
    "writeReport",
  ]);
});

/** Asserts `fn` throws an InputError whose one-line message matches `re`. */
function assertInputError(fn: () => unknown, re: RegExp, what = ""): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof InputError, `${what}: expected InputError, got ${e}`);
    assert.match(e.message, re, what);
    assert.ok(!e.message.includes("\n"), `one line: ${JSON.stringify(e.message)}`);
    return true;
  });
}

/** Bad host inputs and the message naming each (shared by checkInputs and runMethod). */
function badInputs(): [string, HostInputs, Partial<LossOptions>, RegExp][] {
  const nanE = good(), infC = good(), negInfE = good();
  nanE.e[7] = NaN;
  infC.c[13] = Infinity;
  negInfE.e[29] = -Infinity;
  return [
    [
      "E too long",
      { ...good(), e: new Float32Array(n * d + 1) },
      {},
      /^E has 31 values, expected n·d = 6·5$/,
    ],
    [
      "E too short",
      { ...good(), e: new Float32Array(n * d - 5) },
      {},
      /^E has 25 values, expected n·d = 6·5$/,
    ],
    [
      "C length",
      { ...good(), c: new Float32Array(v * d - 1) },
      {},
      /^C has 54 values, expected v·d = 11·5$/,
    ],
    [
      "targets length",
      { ...good(), targets: new Int32Array(n - 1) },
      {},
      /^targets has 5 entries, expected n = 6$/,
    ],
    [
      "target = v",
      { ...good(), targets: Int32Array.from([0, 3, IGNORE_INDEX, 11, 5, 7]) },
      {},
      /^target 11 at row 3 is outside \[0, 11\) and not ignore_index -100$/,
    ],
    [
      "negative target",
      { ...good(), targets: Int32Array.from([0, -1, 2, 3, 4, 5]) },
      {},
      /^target -1 at row 1 is outside \[0, 11\) and not ignore_index -100$/,
    ],
    [
      "-100 with another ignore_index",
      good(),
      { ignoreIndex: -1 },
      /^target -100 at row 2 is outside \[0, 11\) and not ignore_index -1$/,
    ],
    [
      "all ignored, mean",
      { ...good(), targets: new Int32Array(n).fill(IGNORE_INDEX) },
      { reduction: "mean" },
      /^all 6 targets are ignore_index -100: the mean loss is undefined$/,
    ],
    ["NaN in E", nanE, {}, /^E has a non-finite value NaN at row 1, column 2$/],
    ["Inf in C", infC, {}, /^C has a non-finite value Infinity at row 2, column 3$/],
    ["-Inf in E", negInfE, {}, /^E has a non-finite value -Infinity at row 5, column 4$/],
    [
      "n = 0",
      { ...good(), n: 0, e: new Float32Array(0), targets: new Int32Array(0) },
      {},
      /^n must be a positive integer, got 0$/,
    ],
    ["d fractional", { ...good(), d: 2.5 }, {}, /^d must be a positive integer, got 2.5$/],
  ];
}

Deno.test("public API: checkInputs names each bad shape or value", () => {
  for (const [what, x, o, re] of badInputs()) {
    assertInputError(() => checkInputs(x, resolveOptions(o)), re, what);
  }
  // Sum and none of all-ignored rows are defined (0), as is a target equal to ignore_index.
  const allIgnored = { ...good(), targets: new Int32Array(n).fill(IGNORE_INDEX) };
  checkInputs(allIgnored, resolveOptions({ reduction: "sum" }));
  checkInputs(allIgnored, resolveOptions({ reduction: "none" }));
  checkInputs(
    { ...good(), targets: Int32Array.from([0, 3, 7, 10, 5, 7]) },
    resolveOptions({ ignoreIndex: 7 }),
  );
});

Deno.test("public API: resolveOptions names a bad β, softcap, reduction or ignore_index", () => {
  const cases: [Partial<LossOptions>, RegExp][] = [
    [{ beta: 1.5 }, /^beta must be in \[0, 1\], got 1.5$/],
    [{ beta: -0.1 }, /^beta must be in \[0, 1\], got -0.1$/],
    [{ beta: NaN }, /^beta must be in \[0, 1\], got NaN$/],
    [{ beta: Infinity }, /^beta must be in \[0, 1\], got Infinity$/],
    [{ beta: "0.1" as unknown as number }, /^beta must be in \[0, 1\], got 0.1$/],
    [{ softcap: 0 }, /^softcap must be > 0, got 0$/],
    [{ softcap: -2 }, /^softcap must be > 0, got -2$/],
    [{ softcap: NaN }, /^softcap must be > 0, got NaN$/],
    [{ softcap: Infinity }, /^softcap must be > 0, got Infinity$/],
    [{ reduction: "avg" as "mean" }, /^unknown reduction 'avg' \(expected mean, sum or none\)$/],
    [{ ignoreIndex: 1.5 }, /^ignore-index must be an integer, got 1.5$/],
  ];
  for (const [o, re] of cases) assertInputError(() => resolveOptions(o), re);
  // The edges are valid.
  assert.equal(resolveOptions({ beta: 0 }).beta, 0);
  assert.equal(resolveOptions({ beta: 1 }).beta, 1);
  assert.equal(resolveOptions({ softcap: 1e-6 }).softcap, 1e-6);
});

Deno.test("public API: unknown method, dtype and fixture names list the known ones", () => {
  const names = METHODS.map((m) => m.name).join(", ");
  assertInputError(
    () => methodByName("nope"),
    new RegExp(`^unknown method 'nope' \\(expected one of: ${names}\\)$`),
  );
  assertInputError(() => methodByName(""), /^unknown method '' /);
  for (const m of METHODS) assert.equal(methodByName(m.name), m);
  assertInputError(() => parseDtype("f8"), /^unknown dtype 'f8' \(expected bf16, f16 or f32\)$/);
  assertInputError(() => parseDtype("F32"), /^unknown dtype 'F32'/);
  assertInputError(
    () => makeFixture("nope", { n: 2, v: 3, d: 4 }),
    /^unknown fixture 'nope' \(expected cce, llm, uniform or nonzero-mean\)$/,
  );
  assertInputError(
    () => makeFixture("cce", { n: 2, v: 3, d: 4, dtype: "f8" as "f32" }),
    /^unknown dtype 'f8'/,
  );
  assertInputError(
    () => makeFixture("cce", { n: 0, v: 3, d: 4 }),
    /^n must be a positive integer, got 0$/,
  );
  assertInputError(
    () => makeFixture("cce", { n: 2, v: 3, d: 4, ignoreFraction: 1.5 }),
    /^ignore fraction must be in \[0, 1\], got 1.5$/,
  );
  assertInputError(
    () => makeFixture("cce", { n: 2, v: 3, d: 4, seed: 0.5 }),
    /^seed must be an integer, got 0.5$/,
  );
});

Deno.test({
  name: "public API: runMethod rejects bad input with an InputError before touching the GPU",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const none = resolveOptions({ reduction: "none" });
    const before = ctx.memory().liveBytes;
    for (const m of METHODS) {
      for (const [what, x, o, re] of badInputs()) {
        await assert.rejects(
          () => runMethod(ctx, m, x, resolveOptions(o), { dtype: "f32" }),
          (e: unknown) => {
            assert.ok(e instanceof InputError, `${m.name}, ${what}: got ${e}`);
            assert.match(e.message, re, `${m.name}, ${what}`);
            return true;
          },
        );
      }
    }
    assert.equal(ctx.memory().liveBytes, before, "nothing was allocated");
    // A per-token upstream gradient of the wrong length.
    const m = METHODS.find((m) => !m.unsupported?.(ctx, { n, v, d, dtype: "f32" }, none));
    assert.ok(m, "some method runs reduction none");
    await assert.rejects(
      () => runMethod(ctx, m, good(), none, { dtype: "f32", gradOutput: [1, 2, 3] }),
      (e: unknown) =>
        e instanceof InputError && /^upstream gradient has 3 values, expected 6$/.test(e.message),
    );
  },
});

Deno.test({
  name: "public API: runMethod names a method that cannot run the problem",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    let seen = 0;
    for (const m of METHODS) {
      for (const reduction of ["mean", "sum", "none"] as const) {
        const o = resolveOptions({ reduction, beta: 0.1 });
        const why = m.unsupported?.(ctx, { n, v, d, dtype: "f32" }, o);
        if (why === undefined) continue;
        seen++;
        const re = new RegExp(`^method ${m.name} cannot run here: `);
        await assert.rejects(() => runMethod(ctx, m, good(), o, { dtype: "f32" }), (e: unknown) => {
          assert.ok(e instanceof InputError, `${m.name}: got ${e}`);
          assert.match(e.message, re);
          assert.ok(e.message.endsWith(why), e.message);
          return true;
        });
      }
    }
    console.log(`${seen} method/reduction pairs refused with a reason`);
  },
});

Deno.test({
  name:
    "runMethod: a failing call frees everything it allocated; non-finite upstream gradients are refused",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const { GpuContext } = await import("./gpu/context.ts");
    const ctx = await GpuContext.create();
    const x = {
      n: 6,
      v: 11,
      d: 5,
      e: new Float32Array(30).fill(0.1),
      c: new Float32Array(55).fill(0.2),
      targets: Int32Array.from([0, 1, 2, 3, 4, 5]),
    };
    const live = ctx.memory().liveBytes;
    for (const m of METHODS) {
      // rows that cannot run f32 inputs here (the tensor-core rows) are refused before anything
      if (m.unsupported?.(ctx, { n: 6, v: 11, d: 5, dtype: "f32" }, resolveOptions({}))) continue;
      const o = resolveOptions({ reduction: "none" });
      const fb = m.name === "fused-fb" || m.name === "fused-fb-nofilter"; // none is unsupported
      if (!fb) {
        await assert.rejects(
          () => runMethod(ctx, m, x, o, { dtype: "f32", gradOutput: [1, 2, 3] }),
          /upstream gradient has 3 values, expected 6/,
        );
      }
      await assert.rejects(
        () => runMethod(ctx, m, x, resolveOptions({}), { dtype: "f32", gradOutput: NaN }),
        /upstream gradient has a non-finite value NaN at index 0/,
      );
      if (!fb) await runMethod(ctx, m, x, o, { dtype: "f32", gradOutput: [1, 2, 3, 4, 5, 6] });
      else await runMethod(ctx, m, x, resolveOptions({}), { dtype: "f32", gradOutput: 2 });
      assert.equal(ctx.memory().liveBytes, live, `${m.name} left tracked bytes live`);
    }
    ctx.destroy();
  },
});
