import assert from "node:assert/strict";
import { resolveOptions } from "../../core/options.ts";
import { accSlots, TILE_SMALL } from "../gemm_codegen.ts";
import { gradValue, tileLanes } from "./backward_wgsl.ts";

Deno.test("fused backward WGSL pieces: gradient value, lanes", () => {
  const plain = "exp(z - l) * softcap_grad(z)";
  // the smoothing term of the tiled part exists only with softcap and β > 0
  assert.equal(gradValue(resolveOptions({ beta: 0.1 }), "z", "l"), plain);
  assert.equal(gradValue(resolveOptions({ beta: 0, softcap: 30 }), "z", "l"), plain);
  assert.equal(
    gradValue(resolveOptions({ beta: 0.1, softcap: 30 }), "z", "l"),
    `${plain} + (BETA / VOCAB) * (z / SOFTCAP) * (z / SOFTCAP)`,
  );
  // 4×4 per thread: 4 distinct rows and 4 distinct columns
  const lanes = tileLanes(accSlots(TILE_SMALL));
  assert.deepEqual(lanes.rows.map((l) => l.key), ["0_0", "0_1", "0_2", "0_3"]);
  assert.deepEqual(lanes.cols.map((l) => l.key), ["0_0", "0_1", "0_2", "0_3"]);
});
