import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { assertWellFormedXml } from "../report/svg_xml.ts";
import { defaultValues } from "./sweep.ts";
import { readUntil, runScript, spawnScript } from "../testing/run_script.ts";

const SWEEP = new URL("./sweep.ts", import.meta.url).pathname;
const TABLE3 = new URL("./table3.ts", import.meta.url).pathname;

/** Runs a script with piped (non-terminal) output; `env` adds to (or, as "", unsets in) ours. */
const _run = (script: string, args: string[], env: Record<string, string> = {}) =>
  runScript(script, args, { env });

const TINY = [
  "--n",
  "16",
  "--d",
  "8",
  "--reps",
  "2",
  "--warmup",
  "0",
  "--methods",
  "fused,baseline",
];

Deno.test("sweep: a tiny sweep writes CSV, JSON and two SVG charts; no escape codes in a pipe", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sweep-script-"));
  try {
    // NO_COLOR unset and FORCE_COLOR set: the pipe alone must keep colour codes out
    const r = await _run(
      SWEEP,
      ["--over", "v", "--values", "24,40", ...TINY, "--modes", "fwd,bwd", "--out", dir],
      { NO_COLOR: "", FORCE_COLOR: "1" },
    );
    assert.equal(r.code, 0, r.stderr);
    assert.ok(!r.stderr.includes("\x1b") && !r.stdout.includes("\x1b"), JSON.stringify(r.stderr));
    assert.ok(!r.stderr.includes("\r"), "no carriage returns in a log");
    assert.match(r.stderr, /\[8\/8\] v=40 baseline β=0\.1 bwd: /);
    const files = readdirSync(dir).sort();
    const slug = files[0].replace(/^sweep_(.*)_v\.csv$/, "$1");
    assert.deepEqual(files, [
      `sweep_${slug}_v.csv`,
      `sweep_${slug}_v.json`,
      `sweep_${slug}_v_memory.svg`,
      `sweep_${slug}_v_time.svg`,
    ]);
    const csv = readFileSync(join(dir, files[0]), "utf8").trimEnd().split("\r\n");
    assert.equal(csv.length, 1 + 2 * 1 * 2 * 2 * 2, "methods × β × modes × metrics × values");
    const json = JSON.parse(readFileSync(join(dir, files[1]), "utf8"));
    assert.equal(json.complete, true);
    assert.deepEqual(json.values, [24, 40]);
    assert.deepEqual(json.betas, [0.1]);
    assert.equal(json.cells.length, 8);
    assert.deepEqual(json.failures, []);
    assert.match(json.env.git.commit ?? "none", /^([0-9a-f]{40}|none)$/);
    assert.equal(typeof json.env.deno.deno, "string");
    for (const f of files.slice(2)) assertWellFormedXml(readFileSync(join(dir, f), "utf8"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("table3 and sweep: NO_COLOR and piped output carry no escape codes, even on errors", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sweep-script-"));
  try {
    const args = "--n 16 --v 40 --d 8 --reps 1 --warmup 0 --methods baseline --modes fwd";
    const envs: Record<string, string>[] = [{ NO_COLOR: "1" }, { NO_COLOR: "", FORCE_COLOR: "1" }];
    for (const env of envs) {
      const t = await _run(TABLE3, [...args.split(" "), "--out", dir], env);
      assert.equal(t.code, 0, t.stderr);
      assert.ok(!(t.stdout + t.stderr).includes("\x1b"), `${JSON.stringify(env)}: ${t.stderr}`);
    }
    const bad = await _run(SWEEP, ["--over", "q", "--out", join(dir, "no")], { NO_COLOR: "1" });
    assert.equal(bad.code, 2);
    assert.ok(!(bad.stdout + bad.stderr).includes("\x1b"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("sweep: bad flags exit 2 with one line and write nothing", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sweep-script-"));
  try {
    const ext = join(dir, "ext.json");
    writeFileSync(ext, "{not json");
    const cases: [string[], RegExp][] = [
      [[], /^error: missing --over/],
      [["--over", "x"], /^error: --over must be v, n or d/],
      [["--over", "v", "--v", "100"], /^error: --v is the swept size/],
      [["--over", "v", "--values", "10,0"], /^error: --values entries must be a positive integer/],
      [["--over", "v", "--values", "10,10"], /^error: --values lists an entry twice/],
      [["--over", "n", "--methods", "nope"], /^error: unknown method 'nope'/],
      [["--over", "n", "--beta", "0.1", "--betas", "0"], /^error: give --beta or --betas/],
      [["--over", "d", "--external", ext], /^error: .*ext\.json: cannot read external rows/],
    ];
    for (const [args, want] of cases) {
      const r = await _run(SWEEP, [...args, "--out", join(dir, "out")], { NO_COLOR: "1" });
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
      const lines = r.stderr.trimEnd().split("\n");
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0], want);
    }
    assert.deepEqual(readdirSync(dir), ["ext.json"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("sweep --resume: keeps an earlier run's cells, measures the rest, refuses another sweep", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sweep-resume-"));
  try {
    const args = [...TINY, "--modes", "fwd", "--out", dir];
    const first = await _run(SWEEP, ["--over", "v", "--values", "24", ...args], { NO_COLOR: "1" });
    assert.equal(first.code, 0, first.stderr);
    const jsonPath = join(dir, readdirSync(dir).find((f) => f.endsWith("_v.json"))!);
    const before = JSON.parse(readFileSync(jsonPath, "utf8"));
    const second = await _run(
      SWEEP,
      ["--over", "v", "--values", "24,40", "--resume", ...args],
      { NO_COLOR: "1" },
    );
    assert.equal(second.code, 0, second.stderr);
    assert.match(second.stderr, /resuming: 2 cells measured before are kept/);
    assert.equal((second.stderr.match(/from the earlier run/g) ?? []).length, 2);
    const after = JSON.parse(readFileSync(jsonPath, "utf8"));
    assert.equal(after.cells.length, 4);
    for (const c of before.cells) {
      const again = after.cells.find((d: typeof c) =>
        d.x === c.x && d.row.method === c.row.method && d.row.mode === c.row.mode
      );
      assert.deepEqual(again, c, "the earlier cell is kept as it was");
    }
    const other = await _run(
      SWEEP,
      ["--over", "v", "--values", "24", "--resume", ...args, "--d", "16"],
      { NO_COLOR: "1" },
    );
    assert.equal(other.code, 2, other.stderr);
    assert.match(other.stderr, /^error: --resume: .* was measured with another d \(8, now 16\)/m);
    assert.deepEqual(JSON.parse(readFileSync(jsonPath, "utf8")), after, "left as it was");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("sweep: default values are four doublings ending at the size", () => {
  assert.deepEqual(defaultValues(256000), [32000, 64000, 128000, 256000]);
  assert.deepEqual(defaultValues(4096), [512, 1024, 2048, 4096]);
});

/** Permissions of a run that may write only under `dir` (as if everywhere else were read-only). */
const _writeOnly = (dir: string) => [
  "--allow-read",
  "--allow-env",
  "--allow-run",
  "--allow-sys",
  "--allow-ffi",
  `--allow-write=${dir}`,
];

Deno.test("sweep: a size that cannot fit fails before allocating, with the sizes; the run goes on and exits 1", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sweep-huge-"));
  try {
    const r = await _run(SWEEP, [
      ..."--over n --values 16,2147483648 --v 16 --d 8 --methods baseline --modes fwd".split(" "),
      ..."--reps 1 --warmup 0 --out".split(" "),
      dir,
    ], { NO_COLOR: "1" });
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /\[1\/2\] n=16 baseline β=0\.1 fwd: [\d.]+ MB/);
    assert.match(
      r.stderr,
      /\[2\/2\] n=2147483648 baseline β=0\.1 fwd: failed: OOM: baseline fwd at n = 2147483648 needs [\d.]+ GiB of host memory \([\d.]+ GiB of it GPU buffers, which a software adapter keeps in host memory\), [\d.]+ GiB free/,
    );
    assert.doesNotMatch(r.stderr, /n = 2147483648: inputs/, "no inputs made for a size none fits");
    assert.match(r.stderr, /1 of 2 cells failed/);
    const json = JSON.parse(
      readFileSync(join(dir, readdirSync(dir).find((f) => f.endsWith(".json"))!), "utf8"),
    );
    assert.equal(json.complete, true);
    assert.equal(json.cells.length, 2);
    assert.match(json.failures[0].error, /^OOM: /);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("sweep --resume: the file never holds fewer cells than before, wherever the run is killed", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sweep-kill-"));
  try {
    const args = [...TINY, "--modes", "fwd", "--out", dir];
    const first = await _run(SWEEP, ["--over", "v", "--values", "24", ...args], { NO_COLOR: "1" });
    assert.equal(first.code, 0, first.stderr);
    const jsonPath = join(dir, readdirSync(dir).find((f) => f.endsWith("_v.json"))!);
    const cells = () => JSON.parse(readFileSync(jsonPath, "utf8")).cells.length as number;
    const before = cells();
    assert.equal(before, 2);
    // resumed with a new value, killed as soon as it says what it keeps (it then makes inputs);
    // the file is read all along the way
    const child = spawnScript(
      SWEEP,
      ["--over", "v", "--values", "24,1000", "--resume", ...args],
      "stderr",
      { env: { NO_COLOR: "1" } },
    );
    let least = Infinity;
    let watching = true;
    const watch = (async () => {
      while (watching) {
        least = Math.min(least, cells());
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const { text, status } = await readUntil(
      child,
      "stderr",
      (t) => /resuming: 2 cells measured before are kept/.test(t),
    );
    watching = false;
    await watch;
    assert.equal(status.signal, "SIGKILL", text);
    least = Math.min(least, cells());
    assert.ok(least >= before, `the file held ${least} cells, ${before} before the resume`);
    // resumed again to the end: the earlier cells kept, the new ones measured
    const done = await _run(SWEEP, ["--over", "v", "--values", "24,40", "--resume", ...args], {
      NO_COLOR: "1",
    });
    assert.equal(done.code, 0, done.stderr);
    assert.equal((done.stderr.match(/from the earlier run/g) ?? []).length, 2);
    assert.ok(cells() >= 4);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("sweep: where it writes is checked before anything is measured (one line, exit 2)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sweep-out-"));
  try {
    const file = join(dir, "file");
    writeFileSync(file, "x");
    const locked = join(dir, "locked");
    const args = "--over n --values 16 --v 16 --d 8 --methods baseline --modes fwd --reps 1";
    const cases: [string[], string[] | undefined, RegExp][] = [
      [["--out", file], undefined, /^error: --out .*file: .*file is not a directory$/],
      [["--out", join(file, "sub")], undefined, /^error: --out .*sub: .*file is not a directory$/],
      [
        ["--out", locked],
        _writeOnly(join(dir, "elsewhere")),
        /^error: --out .*locked: cannot write in /,
      ],
    ];
    for (const [out, permissions, want] of cases) {
      const r = await runScript(SWEEP, [...args.split(" "), ...out], {
        env: { NO_COLOR: "1" },
        permissions,
        trimStderr: true,
      });
      assert.equal(r.code, 2, `${out.join(" ")}: ${r.stderr}`);
      assert.equal(r.stderr.split("\n").length, 1, r.stderr);
      assert.match(r.stderr, want);
      assert.doesNotMatch(r.stderr, /\[\d+\/\d+\]/, "nothing measured");
    }
    assert.deepEqual(readdirSync(dir), ["file"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
