import assert from "node:assert/strict";
import { prepareBusyLoad } from "./busy_load.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";

Deno.test({
  name: "busy load: runs at least the wall time asked, leaves no buffer behind",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const load = await prepareBusyLoad(ctx);
    const live = ctx.memory().liveBytes;
    const ms = await load.dispatch(1);
    assert.ok(ms > 0, `one workgroup's time ${ms}`);
    const t0 = performance.now();
    await load.run(300);
    assert.ok(performance.now() - t0 >= 300);
    assert.equal(ctx.memory().liveBytes, live);
  },
});
