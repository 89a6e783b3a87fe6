import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { assertParity, standardCases } from "../testing/parity.ts";
import { loadMethodModules } from "../measure/method_modules.ts";
import { resolveOptions } from "../mod.ts";
import plainFused from "./plain_fused_forward.ts";

Deno.test({
  name: "example method: parity with float64 at odd shapes, every dtype, β and reduction",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // three of the standard cases: each dtype once, with β 0, 0.1 and 1 and the three
    // reductions between them (each case compiles the example's five shaders anew)
    const cases = standardCases(ctx).filter((_, i) => i % 4 === 0);
    assert.ok(cases.length >= 2);
    for (const c of cases) await assertParity(ctx, plainFused, c);
  },
});

Deno.test({
  name: "example method: loads as a method module and says what it cannot run",
  ...GPU_TEST,
  async fn() {
    const [m] = await loadMethodModules(["examples/plain_fused_forward.ts"]);
    assert.equal(m, plainFused);
    const ctx = await testContext();
    const spec = { n: 4, v: 8, d: 2, dtype: "bf16" as const };
    assert.equal(m.unsupported?.(ctx, spec, resolveOptions({})), undefined);
    assert.match(m.unsupported?.(ctx, spec, resolveOptions({ softcap: 5 })) ?? "", /softcap/);
    const huge = { ...spec, n: 1e6, v: 1e6 };
    assert.match(m.unsupported?.(ctx, huge, resolveOptions({})) ?? "", /one binding/);
  },
});
