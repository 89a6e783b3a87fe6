import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { readUntil, runScript, spawnScript } from "../testing/run_script.ts";

const SCRIPT = new URL("./tune_forward.ts", import.meta.url).pathname;
const TINY = ["--n", "24", "--v", "130", "--d", "16", "--quick", "--reps", "1", "--warmup", "0"];

const _run = (args: string[]) => runScript(SCRIPT, args);

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

      // killed outright after three timed configurations
      const args = [...TINY, "--splits", "1", "--no-plain", "--out", dir];
      const child = spawnScript(SCRIPT, args, "stdout");
      await readUntil(child, "stdout", (text) => (text.match(/ ms \(tiles /g) ?? []).length >= 3);
      const file = join(dir, readdirSync(dir).find((f) => f.endsWith(".json"))!);
      const partial = JSON.parse(readFileSync(file, "utf8"));
      assert.equal(partial.complete, false);
      assert.equal(partial.best, null);
      const kept = partial.results;
      assert.ok(kept.length >= 3, `${kept.length}`);
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
      assert.equal(
        (again.stdout.match(/\(resumed\)$/gm) ?? []).length,
        kept.length,
        again.stdout,
      );
      const done = JSON.parse(readFileSync(file, "utf8"));
      assert.equal(done.complete, true);
      assert.deepEqual(done.results.slice(0, kept.length), kept);
      assert.ok(done.results.length > kept.length);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
});
