import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";

const SCRIPT = new URL("./ensure_vulkan.sh", import.meta.url).pathname;

/** Runs the script with `fakes` (command name → shell body) first on PATH. */
async function _run(fakes: Record<string, string>, env: Record<string, string> = {}) {
  const bin = mkdtempSync(join(tmpdir(), "ensure-vulkan-"));
  try {
    for (const [name, body] of Object.entries(fakes)) {
      writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`);
      chmodSync(join(bin, name), 0o755);
    }
    const out = await new Deno.Command("bash", {
      args: [SCRIPT, "dev"],
      env: { PATH: `${bin}:${Deno.env.get("PATH")}`, VK_DRIVER_FILES: "", ...env },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const dec = new TextDecoder();
    return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
  } finally {
    rmSync(bin, { recursive: true, force: true });
  }
}

// apt-get must never run in these tests: a fake that fails loudly stands in for it
const NO_APT = { "apt-get": "echo apt-get ran >&2; exit 9" };

Deno.test("ensure_vulkan: Mesa 25 installed: nothing to do, nothing said", async () => {
  const r = await _run({ ...NO_APT, "dpkg-query": "printf '25.0.7-2~bpo12+1'" });
  assert.deepEqual([r.code, r.stdout, r.stderr], [0, "", ""]);
});

Deno.test("ensure_vulkan: a GPU host (VK_DRIVER_FILES set) is left alone", async () => {
  const r = await _run({ ...NO_APT, "dpkg-query": "exit 1" }, { VK_DRIVER_FILES: "/x.json" });
  assert.deepEqual([r.code, r.stderr], [0, ""]);
});

Deno.test("ensure_vulkan: no lavapipe and not root: one line saying what to install", async () => {
  const r = await _run({ ...NO_APT, "dpkg-query": "exit 1", id: "echo 1000", "nvidia-smi": "" });
  assert.equal(r.code, 0);
  assert.equal(r.stderr, "", "nvidia-smi present: a GPU host, nothing said");
  // (a machine with a /dev/dri render node counts as one with a GPU: nothing to check there)
  if ([...Deno.readDirSync("/dev")].some((e) => e.name === "dri")) return;
  const r2 = await _run({ ...NO_APT, "dpkg-query": "printf '22.3.6-1'", id: "echo 1000" });
  assert.equal(r2.code, 0);
  assert.match(
    r2.stderr,
    /^dev: no Mesa 25 lavapipe here: install mesa-vulkan-drivers 25 or later/,
  );
  assert.equal(r2.stderr.trim().split("\n").length, 1);
});
