import assert from "node:assert/strict";

Deno.test("deno bench: a plain `deno bench` (no permission flags) runs, on the defaults", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["bench", "--no-prompt", "--filter", "baseline", "bench/lce_bench.ts"],
    cwd: new URL("..", import.meta.url).pathname,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  const dec = new TextDecoder();
  const stdout = dec.decode(out.stdout), stderr = dec.decode(out.stderr);
  assert.equal(out.code, 0, stderr);
  assert.doesNotMatch(stderr, /NotCapable|backtrace/);
  assert.match(stderr, /no env access, .* \.\/dev task bench runs with them/);
  assert.match(stdout, /128x2048x64 bf16 β=0\.1 fwd\b/);
  assert.match(stdout, /^\| baseline /m);
});
