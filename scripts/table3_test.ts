import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { measureCells } from "../measure/table3.ts";
import { resolveOptions } from "../core/options.ts";
import { baseline } from "../methods/baseline.ts";
import type { LceMethod } from "../methods/types.ts";
import type { MeasureRow } from "../measure/measure.ts";
import { makeDeviceInputs } from "../measure/inputs.ts";
import { GpuContext } from "../gpu/context.ts";
import { readUntil, runScript, spawnScript } from "../testing/run_script.ts";

const SCRIPT = new URL("./table3.ts", import.meta.url).pathname;

const _run = (args: string[]) => runScript(SCRIPT, args);

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
      [["--beta", "1.5"], /^error: beta must be in \[0, 1\], got 1\.5$/],
      [["--betas", "0.1,-1"], /^error: beta must be in \[0, 1\], got -1$/],
      [["--n", "2.5"], /^error: --n must be a positive integer, got '2\.5'$/],
      [["--n", "3e3"], /^error: --n must be a positive integer, got '3e3'$/],
      [["--beta", "0x1"], /^error: --beta must be a plain decimal number, got '0x1'$/],
      [["--beta", "0.1abc"], /^error: --beta must be a plain decimal number, got '0\.1abc'$/],
      [["--reps", "Infinity"], /^error: --reps must be a positive integer/],
      [["--warmup", "-1"], /^error: --warmup must be a non-negative integer, got '-1'$/],
      [["--resume", "/nonexistent.json"], /^error: --resume \/nonexistent\.json: cannot read/],
      [["--modes", "fwd,back"], /^error: unknown mode 'back'/],
      [["--bogus"], /^error: Unknown option '--bogus'/],
      [["--n", "16", "extra"], /^error: Unexpected argument 'extra'/],
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

const TINY = ["--n", "16", "--v", "40", "--d", "8", "--reps", "1", "--warmup", "0"];
const METHODS = ["--methods", "baseline,fused"];

interface _Row {
  method: string;
  label: string;
  beta: number;
  mode: string;
  peakBytes: number | null;
  peakByRole: unknown;
  stats: unknown;
  error?: string;
}

function _readJson(dir: string) {
  const f = readdirSync(dir).find((x) => x.endsWith(".json"));
  assert.ok(f, `no JSON in ${dir}: ${readdirSync(dir).join(", ")}`);
  return { path: join(dir, f), json: JSON.parse(readFileSync(join(dir, f), "utf8")) };
}

/** Starts table3 and kills it with `signal` once `cells` progress lines were printed. */
async function _runKilled(args: string[], cells: number, signal: Deno.Signal) {
  const child = spawnScript(SCRIPT, args, "stderr");
  const enough = (text: string) => (text.match(/^table3: \[\d+\/\d+\]/gm) ?? []).length >= cells;
  const { text, status } = await readUntil(child, "stderr", enough, { signal, drain: true });
  return { status, stderr: text };
}

const _cells = (rows: _Row[]) =>
  rows.map((r) => ({
    method: r.method,
    label: r.label,
    beta: r.beta,
    mode: r.mode,
    peakBytes: r.peakBytes,
    peakByRole: r.peakByRole,
    stats: r.stats,
    error: r.error,
  }));

Deno.test("table3: a killed run leaves a valid partial JSON; --resume completes it to the same rows", async () => {
  const whole = mkdtempSync(join(tmpdir(), "table3-whole-"));
  const part = mkdtempSync(join(tmpdir(), "table3-part-"));
  try {
    const a = await _run([...TINY, ...METHODS, "--out", whole]);
    assert.equal(a.code, 0, a.stderr);
    const want = _readJson(whole).json;
    assert.equal(want.complete, true);
    assert.equal(want.rows.length, 12);

    // killed outright after two cells: the JSON written after each cell is valid and partial
    const k = await _runKilled([...TINY, ...METHODS, "--out", part], 2, "SIGKILL");
    assert.equal(k.status.signal, "SIGKILL", k.stderr);
    const p1 = _readJson(part);
    assert.equal(p1.json.complete, false);
    assert.ok(p1.json.rows.length >= 2 && p1.json.rows.length < 12, `${p1.json.rows.length}`);
    assert.deepEqual(readdirSync(part).filter((f) => !f.endsWith(".json")), []);

    // a resume that asks for another shape (or fixture) is refused before measuring
    for (
      const [extra, msg] of [
        [["--n", "17"], /shape 16,40,8 in the report, 17,40,8 asked/],
        [["--fixture", "llm"], /fixture cce in the report, llm asked/],
        [["--methods", "fused"], /methods baseline,fused in the report, fused asked/],
      ] as const
    ) {
      const bad = await _run(["--resume", p1.path, ...extra, "--out", part]);
      assert.equal(bad.code, 2, bad.stderr);
      assert.equal(bad.stderr.trimEnd().split("\n").length, 1, bad.stderr);
      assert.match(bad.stderr, msg);
    }
    assert.equal(JSON.parse(readFileSync(p1.path, "utf8")).rows.length, p1.json.rows.length);

    // resumed, then stopped by SIGTERM: all four reports, marked partial
    const before = p1.json.rows.length;
    const t = await _runKilled(["--resume", p1.path, "--out", part], 1, "SIGTERM");
    assert.equal(t.status.code, 143, t.stderr);
    const p2 = _readJson(part);
    assert.equal(p2.json.complete, false);
    assert.ok(p2.json.rows.length > before, t.stderr);
    const md = readFileSync(p2.path.replace(/json$/, "md"), "utf8");
    assert.match(md, /\*\*Partial report\.\*\* The run was interrupted: \d+ of 12 cells/);
    assert.equal(readdirSync(part).length, 4);

    // resumed to the end: the same rows as the uninterrupted run, only missing cells measured
    const r = await _run(["--resume", p2.path]); // --out: the report's directory
    assert.equal(r.code, 0, r.stderr);
    const done = _readJson(part).json;
    assert.equal(done.complete, true);
    assert.deepEqual(_cells(done.rows), _cells(want.rows));
    const measured = r.stderr.match(/^table3: \[\d+\/12\]/gm) ?? [];
    assert.equal(measured.length, 12 - p2.json.rows.length, r.stderr);
    assert.doesNotMatch(readFileSync(p2.path.replace(/json$/, "md"), "utf8"), /Partial report/);
    const again = await _run(["--resume", p2.path, "--out", part]);
    assert.equal(again.code, 2);
    assert.match(again.stderr, /the report is complete; nothing to resume/);
  } finally {
    rmSync(whole, { recursive: true, force: true });
    rmSync(part, { recursive: true, force: true });
  }
});

Deno.test({
  name: "table3: a device lost in the middle marks its cells and the run goes on with a fresh one",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    // a method whose forward loses the device (as a driver reset would)
    const lossy: LceMethod = {
      name: "lossy",
      label: "Lossy",
      description: "loses the device in its forward",
      async prepare(ctx, spec, opts) {
        const p = await baseline.prepare(ctx, spec, opts);
        return {
          async forward(rec, x) {
            ctx.destroy();
            await ctx.device.lost;
            return await p.forward(rec, x);
          },
          backward: (rec, x, saved, g) => p.backward(rec, x, saved, g),
          dispose: (saved) => p.dispose(saved),
        };
      },
    };
    const spec = { n: 16, v: 40, d: 8, dtype: "f32" as const };
    const rows: MeasureRow[] = [];
    let opened = 0;
    const first = await GpuContext.create({ poison: true });
    const { ctx } = await measureCells(first, {
      openContext: () => (opened++, GpuContext.create({ poison: true })),
      openInputs: (c) => makeDeviceInputs(c, { fixture: "cce", ...spec, seed: 0 }),
      inputNeed: { hostBytes: 0, gpuBytes: 0 },
      free: () => Promise.resolve({ hostBytes: Infinity, gpuBytes: Infinity, shared: false }),
      spec,
      sections: [resolveOptions({ beta: 0.1, reduction: "mean" })],
      methods: [baseline, lossy, baseline],
      modes: ["fwd", "bwd"],
      warmup: 0,
      reps: 1,
      measured: () => false,
      onRow: (row) => rows.push(row),
    });
    try {
      assert.equal(opened, 1, "one fresh device after the loss");
      assert.notEqual(ctx, first);
      assert.deepEqual(rows.map((r) => `${r.method} ${r.mode} ${r.error?.split(":")[0] ?? "ok"}`), [
        "baseline fwd ok",
        "baseline bwd ok",
        "lossy fwd device lost",
        "lossy bwd device lost",
        "baseline fwd ok",
        "baseline bwd ok",
      ]);
      assert.equal(rows[4].peakBytes, rows[0].peakBytes);
    } finally {
      ctx.destroy();
    }
  },
});

Deno.test("table3: a cell whose estimate exceeds the free memory fails before allocating; reports written, exit 1", async () => {
  const dir = mkdtempSync(join(tmpdir(), "table3-huge-"));
  try {
    const r = await _run([
      ..."--n 2147483648 --v 16 --d 8 --methods baseline --modes fwd --betas 0.1".split(" "),
      ..."--reps 1 --warmup 0 --out".split(" "),
      dir,
    ]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(
      r.stderr,
      /\[1\/1\] baseline β=0\.1 fwd: failed: OOM: baseline fwd needs [\d.]+ GiB/,
    );
    assert.doesNotMatch(r.stderr, /inputs \(cce-fast\) ready/, "nothing allocated");
    assert.match(r.stderr, /1 of 1 cells failed/);
    const { json } = _readJson(dir);
    assert.equal(json.complete, true);
    assert.match(json.rows[0].error, /^OOM: /);
    assert.equal(readdirSync(dir).length, 4);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("table3 --resume: a report directory that cannot be written is refused before measuring", async () => {
  const part = mkdtempSync(join(tmpdir(), "table3-ro-"));
  try {
    const k = await _runKilled([...TINY, ...METHODS, "--out", part], 1, "SIGKILL");
    assert.equal(k.status.signal, "SIGKILL", k.stderr);
    const p = _readJson(part);
    const before = readFileSync(p.path, "utf8");
    // as if the directory were read-only: this run may write elsewhere only
    const r = await runScript(SCRIPT, ["--resume", p.path], {
      trimStderr: true,
      permissions: [
        "--allow-read",
        "--allow-env",
        "--allow-run",
        "--allow-sys",
        "--allow-ffi",
        `--allow-write=${join(part, "elsewhere")}`,
      ],
    });
    assert.equal(r.code, 2, r.stderr);
    assert.equal(r.stderr.split("\n").length, 1, r.stderr);
    assert.match(r.stderr, /^error: --out .*: cannot write in /);
    assert.equal(readFileSync(p.path, "utf8"), before, "the report as it was");
  } finally {
    rmSync(part, { recursive: true, force: true });
  }
});
