import assert from "node:assert/strict";
import { METHODS } from "../methods/mod.ts";
import { MANIFEST_TARGETS, methodRuns } from "./kernel_capture.ts";
import { SOFTWARE_PROFILE } from "./emulated_device.ts";
import { compareManifests, type Manifest } from "./kernel_manifest.ts";
import { GPU_TEST, testContext } from "./gpu.ts";

Deno.test({
  name: "kernels: every kernel of every method, built from its signature, compiles here",
  ...GPU_TEST,
  async fn() {
    // every method in every mode, dtype, β, softcap and reduction at the software adapter's odd,
    // aligned and sharded shapes; each source was checked against its signature when compiled
    // by compileKernel on the emulated adapter
    const codes = new Map<string, string>();
    const targets = MANIFEST_TARGETS.filter((t) => t.profile === SOFTWARE_PROFILE);
    const runs = await methodRuns(codes, { targets });
    const failed = runs.filter((r) => r.skipped?.startsWith("error"));
    assert.deepEqual(failed.map((r) => `${r.key}: ${r.skipped}`), []);
    const ran = runs.filter((r) => r.skipped === undefined);
    // the tensor-core rows need Dawn's subgroup matrices, which the emulated adapter lacks (their
    // kernels are compiled from the catalog by the tensor-core tests); every other row ran
    const plain = METHODS.filter((m) => !m.name.endsWith("-tc"));
    assert.deepEqual(
      [...new Set(ran.map((r) => r.key.split(" ")[1]))].sort(),
      plain.map((m) => m.name).sort(),
    );
    // the unsupported ones: the Fused Version with a per-token upstream gradient, and the
    // tensor-core rows without subgroup matrices (or on f32 inputs)
    for (const r of runs.filter((x) => x.skipped !== undefined)) {
      if (/ [a-z-]+-tc /.test(r.key)) {
        assert.match(r.skipped!, /subgroup-matrix|f32 inputs would be rounded/, r.key);
      } else {
        assert.match(r.key, / fused-fb(-nofilter)? .* none$/);
      }
    }
    const ctx = await testContext();
    const labels = new Map<string, string>();
    for (const r of ran) {
      for (const line of r.kernels) labels.set(line.slice(line.lastIndexOf(" ") + 1), line);
    }
    assert.ok(codes.size > 100, `${codes.size} kernels`);
    for (const [h, code] of codes) await ctx.pipeline(code, labels.get(h) ?? h);
  },
});

Deno.test("kernel manifest: a comparison finds changed, new and missing kernels", () => {
  const m = (runs: [string, string[]][]): Manifest => {
    const kernels: Manifest["kernels"] = {};
    for (const [, ls] of runs) {
      for (const l of ls) kernels[l.split(" ")[1]] = { label: l.split(" ")[0], bytes: 1 };
    }
    return { runs: runs.map(([key, k]) => ({ key, kernels: k })), kernels };
  };
  const before = m([["a", ["x 1", "y 2"]], ["b", ["x 1"]]]);
  assert.deepEqual(compareManifests(before, before).runsDiffer, []);
  const d = compareManifests(before, m([["a", ["x 1", "y 3"]], ["c", ["x 1"]]]));
  assert.equal(d.identical, 1);
  assert.deepEqual(d.changed, { y: { gone: ["2"], added: ["3"] } });
  assert.deepEqual(d.runsDiffer, ["a", "b", "c"]);
});
