import assert from "node:assert/strict";
import { join } from "node:path";
import { runScript } from "../testing/run_script.ts";
import { tempDir } from "../testing/temp_dir.ts";

const dir = await tempDir("bench_gemm_test_");

const benchGemm = (args: string[]) =>
  runScript("scripts/bench_gemm.ts", args, { trimStderr: true });

Deno.test("bench_gemm: one row per case, tile and split-K count, JSON written", async () => {
  const path = join(dir, "ok", "gemm.json");
  const r = await benchGemm([
    ...["--n", "37", "--v", "53", "--d", "19", "--dtype", "f32", "--reps", "1"],
    ...["--cases", "logits,ligerDE", "--tiles", "hw,scalar", "--splitk", "auto,2", "--out", path],
  ]);
  assert.equal(r.code, 0, r.stderr);
  const doc = JSON.parse(await Deno.readTextFile(path));
  assert.deepEqual(doc.shape, {
    n: 37,
    v: 53,
    d: 19,
    dtype: "f32",
    ligerChunk: doc.shape.ligerChunk,
  });
  const rows = doc.results as { case: string; tile: string; splitK: string | number }[];
  assert.deepEqual(
    rows.map((x) => `${x.case} ${x.tile} ${x.splitK}`),
    [
      "logits hw auto",
      "logits hw 2",
      "logits scalar auto",
      "logits scalar 2",
      "ligerDE hw auto",
      "ligerDE hw 2",
      "ligerDE scalar auto",
      "ligerDE scalar 2",
    ],
  );
  for (const x of doc.results) assert.ok(x.timeMs > 0, JSON.stringify(x));
});

Deno.test("bench_gemm: bad flags get one line, exit 2, nothing written", async () => {
  const path = join(dir, "bad", "gemm.json");
  const cases: [string[], RegExp][] = [
    [["--tiles", "hw,nope"], /--tiles: unknown tile 'nope'/],
    [["--cases", "dE,x"], /--cases: unknown case 'x'/],
    [["--cases", "dE,dE"], /--cases lists an entry twice/],
    [["--splitk", "0"], /--splitk must be a positive integer, got '0'/],
    [["--splitk", "auto,,2"], /--splitk has an empty entry/],
    [["--n", "3e3"], /--n must be a positive integer, got '3e3'/],
    [["--reps", "0"], /--reps must be a positive integer/],
    [["--dtype", "f64"], /unknown dtype 'f64'/],
    [["--adapter", "gpu"], /--adapter must be auto, software or hardware/],
  ];
  for (const [args, re] of cases) {
    const r = await benchGemm([...args, "--out", path]);
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.equal(r.stderr.split("\n").length, 1, r.stderr);
    assert.match(r.stderr, re);
  }
  const r = await benchGemm(["--out", dir]);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /output path is a directory/);
  assert.ok(!(await Deno.stat(join(dir, "bad")).catch(() => undefined)), "nothing written");
});
