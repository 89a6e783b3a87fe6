import assert from "node:assert/strict";
import { resolveOptions } from "../../core/options.ts";
import { fusedMergeWgsl, type SmoothingPlan } from "./forward_merge.ts";

Deno.test("fused merge WGSL: bindings and smoothing term follow the plan", () => {
  for (const smoothing of ["none", "identity", "in-kernel"] as SmoothingPlan[]) {
    for (const stats of [false, true]) {
      const tag = JSON.stringify({ smoothing, stats });
      const opts = resolveOptions({ beta: smoothing === "none" ? 0 : 0.1, reduction: "none" });
      const src = fusedMergeWgsl({ dtype: "f16", opts, v: 1000, smoothing, stats });
      const names = [...src.matchAll(/@binding\((\d+)\) var(?:<[^>]*>)? (\w+)/g)].map((m, i) => {
        assert.equal(Number(m[1]), i, tag);
        return m[2];
      });
      const want = ["P", "ws"];
      if (smoothing === "in-kernel") want.push("wsz");
      if (stats) want.push("wsx");
      want.push("targets");
      if (smoothing === "identity") want.push("e", "colsum");
      want.push("lse", "loss_rows");
      if (stats) want.push("token_stats");
      assert.deepEqual(names, want, tag);
      assert.equal(src.includes("(BETA / VOCAB) * zsum"), smoothing !== "none", tag);
      assert.equal(src.includes("fn stats_merge"), stats, tag);
      // E (and so f16) is read only for the identity term's dot product
      assert.equal(src.includes("enable f16"), smoothing === "identity", tag);
      assert.doesNotMatch(src, /undefined|NaN|\[object/, tag);
    }
  }
});
