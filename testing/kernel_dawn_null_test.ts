/**
 * Every kernel of every method, as the kernel manifest captures it (testing/kernel_capture.ts: the
 * software adapter's odd, aligned and sharded shapes and the H100's paper and llm shapes, every
 * dtype, β, softcap and reduction), compiled and validated by Dawn's null backend: WGSL parsing,
 * types, builtins, the uniformity analysis, then pipeline creation. Nothing is run, so this holds
 * the kernels that only a GPU runs (the 128×256 tiles, 16-byte loads, the H100's splits) to
 * Dawn's rules on a machine without a GPU, at the cost of Tint alone; the suite's runs under
 * `LCE_WEBGPU=dawn` check what the kernels compute.
 */
import assert from "node:assert/strict";
import { MANIFEST_TARGETS, methodRuns } from "./kernel_capture.ts";
import { nullDevice, validateShader } from "./dawn_null.ts";
import { H100_PROFILE } from "./emulated_device.ts";

const nd = await nullDevice();
if (nd.skip) console.log(`Dawn null-backend tests skipped: ${nd.skip}`);
/** Ignored (with the message above) only where npm:webgpu cannot be loaded at all. */
const NULL_OPTS = { sanitizeResources: false, sanitizeOps: false, ignore: !nd.device } as const;

Deno.test({
  name:
    "kernels: every kernel of every method, software and H100 shapes, validates on Dawn's null backend",
  ...NULL_OPTS,
  async fn() {
    const device = nd.device!;
    const codes = new Map<string, string>();
    const runs = await methodRuns(codes);
    assert.deepEqual(
      runs.filter((r) => r.skipped?.startsWith("error")).map((r) => `${r.key}: ${r.skipped}`),
      [],
    );
    const labels = new Map<string, string>();
    for (const r of runs) {
      for (const line of r.kernels) {
        const i = line.lastIndexOf(" ");
        labels.set(line.slice(i + 1), `${r.key}: ${line.slice(0, i)}`);
      }
    }
    // the H100's kernels are among them (not only the software adapter's)
    const h100 = new Set(
      runs.filter((r) =>
        MANIFEST_TARGETS.find((t) => r.key.startsWith(`${t.name} `))?.profile ===
          H100_PROFILE
      ).flatMap((r) => r.kernels.map((l) => l.slice(l.lastIndexOf(" ") + 1))),
    );
    assert.ok(
      codes.size > 150 && h100.size > 50,
      `${codes.size} kernels, ${h100.size} of the H100`,
    );
    const bad: string[] = [];
    let limitOnly = 0;
    for (const [h, code] of codes) {
      const v = await validateShader(device, code);
      if (v.errors.length > 0) bad.push(`${labels.get(h)}: ${v.errors[0]}`);
      else if (v.pipelineError !== undefined && !v.limitOnly) {
        bad.push(`${labels.get(h)}: pipeline: ${v.pipelineError}`);
      } else if (v.limitOnly) limitOnly++;
    }
    assert.deepEqual(bad, []);
    // only kernels generated for a GPU's limits exceed the null device's defaults
    assert.ok(limitOnly <= h100.size, `${limitOnly} over the null device's limits`);
    // the check is not vacuous: a kernel with one binding's type broken is refused
    const [first] = codes.values();
    const broken = first.replace(
      /\bvar<storage,\s*read>\s*(\w+)\s*:\s*array<(\w+)>/,
      "var<storage, read> $1: array<$2, 0>",
    );
    assert.notEqual(broken, first, "the first kernel has a read-only storage array to break");
    const refused = await validateShader(device, broken);
    assert.ok(refused.errors.length > 0 || refused.pipelineError !== undefined);
  },
});
