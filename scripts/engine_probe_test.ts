import assert from "node:assert/strict";
import { join } from "node:path";
import { runScript } from "../testing/run_script.ts";
import { tempDir } from "../testing/temp_dir.ts";

Deno.test("engine-probe: both engines in one run, a row per engine and method, unquantised timestamps, JSON written", async () => {
  const dir = await tempDir("engine_probe_");
  try {
    const r = await runScript("scripts/engine_probe.ts", [
      ...["--n", "19", "--v", "131", "--d", "24", "--reps", "2"],
      ...["--methods", "fused,fused-nofilter", "--out", dir],
    ]);
    assert.equal(r.code, 0, r.stderr);
    for (const engine of ["wgpu", "Dawn"]) {
      for (const m of ["fused", "fused-nofilter"]) {
        const row = new RegExp(
          `^${engine} \\| ${m} \\| [\\d.]+ \\([\\d.]+–[\\d.]+\\) \\| [\\d.]+ \\| [\\d.]+ \\|`,
          "m",
        );
        assert.match(r.stdout, row, r.stdout);
      }
      assert.match(r.stdout, new RegExp(`^${engine}: [\\d.]+ s; timestamps not quantised`, "m"));
    }
    const j = JSON.parse(await Deno.readTextFile(join(dir, "engine_probe.json")));
    assert.deepEqual(j.runs.map((x: { engine: string }) => x.engine), ["deno", "dawn"]);
    for (const run of j.runs) {
      assert.equal(run.cells.length, 2);
      for (const c of run.cells) {
        assert.equal(c.samples.length, 2, JSON.stringify(c));
        assert.ok(c.backToBackMs > 0 && c.timeMs > 0, JSON.stringify(c));
      }
      assert.ok(run.offGrid > 0 && run.offGrid <= run.passDurations);
    }
    const bad = await runScript("scripts/engine_probe.ts", ["--engines", "deno,chrome"]);
    assert.equal(bad.code, 2);
    assert.match(
      bad.stderr,
      /^error: --engines entries must be deno, dawn or dawn-unchecked, got 'chrome'$/m,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
