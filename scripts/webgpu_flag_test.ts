import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeNpy } from "../io/npy.ts";
import { runScript } from "../testing/run_script.ts";

/** Every command that opens a device: each takes `--webgpu deno|dawn|dawn-unchecked` (env LCE_WEBGPU). */
const DEVICE_SCRIPTS = [
  "scripts/table3.ts",
  "scripts/sweep.ts",
  "scripts/lce.ts",
  "scripts/gate.ts",
  "scripts/tune_forward.ts",
  "scripts/calibrate.ts",
  "scripts/beta_curve.ts",
  "scripts/bench_gemm.ts",
  "scripts/bench_fused_backward.ts",
  "scripts/train_parity.ts",
  "scripts/fuzz.ts",
  "scripts/gpu_smoke.ts",
  "bench/gpu_time.ts",
];

/** Flags a command requires (checked before --webgpu): placeholders, never read. */
const REQUIRED: Record<string, string[]> = {
  "scripts/sweep.ts": ["--over", "v"],
  "scripts/lce.ts": ["--e", "E.npy", "--c", "C.npy", "--targets", "T.npy", "--out", "out"],
};

/** stderr without Deno's own download lines. */
const _lines = (stderr: string) =>
  stderr.trimEnd().split("\n").filter((l) => l !== "" && !/^Download /.test(l));

Deno.test("every device command: --webgpu foo and LCE_WEBGPU=foo exit 2 naming the choices", async () => {
  for (const script of DEVICE_SCRIPTS) {
    const h = await runScript(script, ["--help"]);
    assert.match(
      h.stdout,
      /--webgpu deno\|dawn\|dawn-unchecked\s+which WebGPU implementation to run on/,
      script,
    );
    const bad = await runScript(script, [...(REQUIRED[script] ?? []), "--webgpu", "foo"]);
    assert.equal(bad.code, 2, `${script}: ${bad.stderr}`);
    assert.deepEqual(
      _lines(bad.stderr),
      ["error: --webgpu must be deno, dawn or dawn-unchecked, got 'foo'"],
      script,
    );
  }
  const env = await runScript("scripts/table3.ts", [], { env: { LCE_WEBGPU: "foo" } });
  assert.equal(env.code, 2, env.stderr);
  assert.deepEqual(_lines(env.stderr), [
    "error: LCE_WEBGPU must be deno, dawn or dawn-unchecked, got 'foo'",
  ]);
});

/** Small .npy inputs of lce (E 2×3, C 4×3, targets 2). */
async function _npyInputs(dir: string): Promise<string[]> {
  const e = join(dir, "E.npy"), c = join(dir, "C.npy"), t = join(dir, "T.npy");
  await writeNpy(e, Float32Array.from([1, 2, 3, 4, 5, 6]), [2, 3]);
  await writeNpy(c, Float32Array.from({ length: 12 }, (_, i) => i / 7), [4, 3]);
  await writeNpy(t, Int32Array.from([1, 3]), [2]);
  return [e, c, t];
}

Deno.test("Dawn without an adapter: one line saying so and what to install, exit 1, nothing written", async () => {
  const dir = mkdtempSync(join(tmpdir(), "webgpu-flag-"));
  try {
    const [e, c, t] = await _npyInputs(dir);
    const noDriver = { VK_ICD_FILENAMES: "/nonexistent/icd.json", VK_DRIVER_FILES: "" };
    const runs = [
      await runScript("scripts/table3.ts", ["--webgpu", "dawn", "--out", join(dir, "t3")], {
        env: noDriver,
      }),
      await runScript("scripts/lce.ts", [
        "--webgpu",
        "dawn",
        ...["--e", e, "--c", c, "--targets", t, "--out", join(dir, "lce")],
      ], { env: noDriver }),
    ];
    for (const r of runs) {
      assert.equal(r.code, 1, r.stderr);
      const lines = _lines(r.stderr);
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0], /^error: no WebGPU adapter found on dawn \(.*mesa-vulkan-drivers/);
    }
    assert.deepEqual(readdirSync(dir).sort(), ["C.npy", "E.npy", "T.npy"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("Dawn that cannot load (no --allow-ffi): one line saying what it needs, exit 1, nothing written", async () => {
  const dir = mkdtempSync(join(tmpdir(), "webgpu-flag-"));
  try {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-read",
        "--allow-write",
        "--allow-env",
        "--allow-run",
        "--allow-sys",
        new URL("./table3.ts", import.meta.url).pathname,
        "--webgpu",
        "dawn",
        "--out",
        join(dir, "t3"),
      ],
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 1, stderr);
    const lines = _lines(stderr);
    assert.equal(lines.length, 1, stderr);
    assert.match(lines[0], /^error: Dawn could not be loaded \(npm:webgpu@.*--allow-ffi/);
    assert.deepEqual(readdirSync(dir), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
