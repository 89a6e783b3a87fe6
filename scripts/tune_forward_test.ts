import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";

const SCRIPT = new URL("./tune_forward.ts", import.meta.url).pathname;
const TINY = ["--n", "24", "--v", "130", "--d", "16", "--quick", "--reps", "1", "--warmup", "0"];

async function _run(args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", SCRIPT, ...args],
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

Deno.test({
  name: "tune-forward: bad flags exit 2; --resume re-uses the configurations of a partial JSON",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = mkdtempSync(join(tmpdir(), "tune-forward-"));
    try {
      for (
        const [args, want] of [
          [["--n", "3e3"], /^error: --n must be a positive integer, got '3e3'$/],
          [["--beta", "0x1"], /^error: --beta must be a plain decimal number, got '0x1'$/],
          [["--splits", "2,2.5"], /^error: --splits must be a positive integer, got '2\.5'$/],
          [["--bogus"], /^error: Unknown option '--bogus'/],
        ] as const
      ) {
        const r = await _run([...args, "--out", dir]);
        assert.equal(r.code, 2, r.stderr);
        assert.match(r.stderr.trimEnd(), want);
      }
      const help = await _run(["--help"]);
      assert.equal(help.code, 0);
      assert.match(help.stdout, /--reps N +measured repetitions \(default: 5; 3 on software\)/);

      const first = await _run([...TINY, "--splits", "1", "--no-plain", "--out", dir]);
      assert.equal(first.code, 0, first.stderr);
      const file = join(dir, readdirSync(dir).find((f) => f.endsWith(".json"))!);
      const full = JSON.parse(readFileSync(file, "utf8"));
      assert.equal(full.complete, true);
      // as if the run had been killed after three configurations
      const kept = full.results.slice(0, 3);
      writeFileSync(file, JSON.stringify({ ...full, complete: false, best: null, results: kept }));
      const other = await _run([...TINY, "--n", "32", "--resume", file, "--out", dir]);
      assert.equal(other.code, 2, other.stderr);
      assert.match(other.stderr, /^error: --resume .*: shape .* in the file, .* asked/);
      const again = await _run([
        ...TINY,
        "--splits",
        "1",
        "--no-plain",
        "--resume",
        file,
        "--out",
        dir,
      ]);
      assert.equal(again.code, 0, again.stderr);
      assert.equal((again.stdout.match(/\(resumed\)$/gm) ?? []).length, 3, again.stdout);
      const done = JSON.parse(readFileSync(file, "utf8"));
      assert.equal(done.complete, true);
      assert.deepEqual(done.results.slice(0, 3), kept);
      assert.ok(done.results.length > 3);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
});
