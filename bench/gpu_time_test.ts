import assert from "node:assert/strict";
import { runScript } from "../testing/run_script.ts";

const SCRIPT = new URL("./gpu_time.ts", import.meta.url).pathname;

const _run = (args: string[], env: Record<string, string> = {}) => runScript(SCRIPT, args, { env });

Deno.test("bench-gpu: --help and bad flags never start the benchmark", async () => {
  const help = await _run(["--help"]);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /^usage: deno task bench-gpu /);
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
