import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";

const SCRIPT = new URL("./table3.ts", import.meta.url).pathname;

async function _run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", SCRIPT, ...args],
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

Deno.test("table3: a tiny shape writes the four reports and prints the table", async () => {
  const dir = mkdtempSync(join(tmpdir(), "table3-script-"));
  try {
    const r = await _run([
      "--n",
      "16",
      "--v",
      "40",
      "--d",
      "8",
      "--reps",
      "1",
      "--warmup",
      "0",
      "--methods",
      "baseline",
      "--out",
      dir,
    ]);
    assert.equal(r.code, 0, r.stderr);
    const files = readdirSync(dir).sort();
    assert.equal(files.length, 4, files.join(", "));
    for (const [f, ext] of files.map((f, i) => [f, ["csv", "json", "md", "svg"][i]])) {
      assert.match(f, new RegExp(`^table3_.+_16x40x8_bf16\\.${ext}$`));
    }
    const json = JSON.parse(readFileSync(join(dir, files[1]), "utf8"));
    assert.deepEqual(json.shape, { n: 16, v: 40, d: 8, dtype: "bf16" });
    assert.deepEqual(json.betas, [0.1, 0]);
    assert.equal(json.rows.length, 6);
    assert.equal(json.rows.filter((x: { error?: string }) => x.error).length, 0);
    assert.doesNotMatch(json.reducedShape ?? "", /./, "explicit shape is not reduced");
    assert.match(r.stdout, /^# Table 3: N = 16, \|V\| = 40, D = 8, bf16/);
    assert.match(r.stdout, /\| Lower bound \| .* \|\n\| \*\*β > 0 \(β = 0\.1\)\*\* /);
    assert.match(r.stderr, /\[6\/6\] baseline β=0 fwd\+bwd: /);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("table3: bad flags exit 2 with one line and write nothing", async () => {
  const dir = mkdtempSync(join(tmpdir(), "table3-script-"));
  try {
    const cases: [string[], RegExp][] = [
      [["--methods", "nope"], /^error: unknown method 'nope'/],
      [["--dtype", "f8"], /^error: unknown dtype 'f8'/],
      [["--fixture", "zipf"], /^error: unknown fixture 'zipf'/],
      [["--beta", "1.5"], /^error: --beta must be in \[0, 1\]/],
      [["--n", "2.5"], /^error: --n must be a positive integer/],
      [["--modes", "fwd,back"], /^error: unknown mode 'back'/],
      [["--bogus"], /^error: Unknown option '--bogus'/],
    ];
    for (const [args, want] of cases) {
      const r = await _run([...args, "--out", join(dir, "out")]);
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
      const lines = r.stderr.trimEnd().split("\n");
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0], want);
      assert.equal(r.stdout, "");
    }
    assert.deepEqual(readdirSync(dir), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
