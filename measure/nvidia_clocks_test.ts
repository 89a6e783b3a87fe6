import assert from "node:assert/strict";
import { sampleSmClocks } from "./nvidia_clocks.ts";
import { tempDir } from "../testing/temp_dir.ts";

Deno.test({
  name: "sampleSmClocks: reads nvidia-smi's clock lines until stopped; none without nvidia-smi",
  ignore: Deno.build.os === "windows",
  async fn() {
    const dir = await tempDir("nvidia_clocks_");
    const path = Deno.env.get("PATH") ?? "";
    try {
      // a stand-in nvidia-smi that prints two clocks, then waits to be killed
      await Deno.writeTextFile(
        `${dir}/nvidia-smi`,
        "#!/bin/sh\nprintf '1980\\n 1410\\n'\nexec sleep 30\n",
        { mode: 0o755 },
      );
      Deno.env.set("PATH", `${dir}:${path}`);
      const s = sampleSmClocks();
      await new Promise((r) => setTimeout(r, 500));
      const got = await s.stop();
      assert.deepEqual(got.map(([, mhz]) => mhz), [1980, 1410]);
      assert.ok(got.every(([t]) => t > 0 && t <= performance.now()));
      Deno.env.set("PATH", dir); // nothing called nvidia-smi that runs: no samples
      await Deno.remove(`${dir}/nvidia-smi`);
      assert.deepEqual(await sampleSmClocks().stop(), []);
    } finally {
      Deno.env.set("PATH", path);
      await Deno.remove(dir, { recursive: true });
    }
  },
});
