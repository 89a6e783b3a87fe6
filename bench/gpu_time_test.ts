import assert from "node:assert/strict";
import { runScript } from "../testing/run_script.ts";

const SCRIPT = new URL("./gpu_time.ts", import.meta.url).pathname;

const _run = (args: string[], env: Record<string, string> = {}) => runScript(SCRIPT, args, { env });

Deno.test("bench-gpu: --help and bad flags never start the benchmark", async () => {
  const help = await _run(["--help"]);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /^usage: \.\/dev task bench-gpu /);
  assert.match(
    help.stdout,
    /--iterations N +samples per task \(default: 10; env LCE_BENCH_ITERATIONS\)/,
  );
  assert.doesNotMatch(help.stdout, /adapter:/);
  for (
    const [args, env, want] of [
      [["--bogus"], {}, /^error: Unknown option '--bogus'/],
      [["--iterations", "3e3"], {}, /^error: --iterations must be a positive integer, got '3e3'$/],
      [["--beta", "0x1"], {}, /^error: --beta must be a plain decimal number, got '0x1'$/],
      [["--shape", "1,2"], {}, /^error: --shape \(or LCE_BENCH_SHAPE\) must be ci, paper or n,v,d/],
      [[], { LCE_BENCH_WARMUP: "1.5" }, /^error: LCE_BENCH_WARMUP must be a non-negative integer/],
      [["--methods", "nope"], {}, /^error: unknown method 'nope'/],
    ] as const
  ) {
    const r = await _run([...args], env);
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    const lines = r.stderr.trimEnd().split("\n").filter((l) => !/Download/.test(l));
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0], want);
    assert.equal(r.stdout, "");
  }
});

Deno.test("bench-gpu: the ratio column is × faster than the baseline, with its legend", async () => {
  const r = await _run([
    "--shape",
    "16,40,8",
    "--methods",
    "baseline,fused",
    "--modes",
    "fwd",
    "--iterations",
    "2",
    "--warmup",
    "0",
  ]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /× faster than baseline/);
  assert.match(r.stdout, /^baseline .* 1\.00×$/m, "the baseline is 1× as fast as itself");
  assert.match(r.stdout, /^fused .* \d+\.\d\d×$/m);
  assert.match(
    r.stdout,
    /× faster than the baseline = the baseline's time \/ this time: > 1 is faster/,
  );
});
