import assert from "node:assert/strict";
import { join } from "node:path";
import { writeNpy } from "../io/npy.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { logitRow, widen } from "../reference/logit_row.ts";
import type { HostInputs } from "../core/options.ts";
import { calibrationMetrics, tokenStatsFromLogitRows } from "../calibration/metrics.ts";
import { assertWellFormedXml } from "../report/svg_xml.ts";

const dir = await Deno.makeTempDir({ prefix: "calibrate_test_" });

async function calibrate(args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "scripts/calibrate.ts", ...args],
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  return {
    code: out.code,
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr).trim(),
  };
}

/** ECE etc. of the float64 full logits. */
function reference(x: HostInputs, bins: number, softcap?: number) {
  const w = widen(x);
  const logits = new Float64Array(x.n * x.v);
  const row = new Float64Array(x.v);
  for (let i = 0; i < x.n; i++) logits.set(logitRow(w, i, row, softcap), i * x.v);
  return calibrationMetrics(tokenStatsFromLogitRows(logits, x.v, x.targets), { bins });
}

const close = (a: number, b: number, tol: number, what: string) =>
  assert.ok(Math.abs(a - b) <= tol, `${what}: ${a} vs ${b}`);

Deno.test("calibrate --fixture: prints the metrics, writes SVG and JSON that match float64", async () => {
  const out = join(dir, "fixture");
  const r = await calibrate([
    "--fixture",
    "llm",
    "--n",
    "150",
    "--v",
    "203",
    "--d",
    "40",
    "--seed",
    "2",
    "--ignore-fraction",
    "0.1",
    "--beta",
    "0.1",
    "--out",
    out,
  ]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /ECE \d+\.\d\d% \(15 bins\), RMSCE/);
  const json = JSON.parse(await Deno.readTextFile(join(out, "calibration_reliability.json")));
  const want = reference(
    makeFixture("llm", { n: 150, v: 203, d: 40, seed: 2, ignoreFraction: 0.1 }),
    15,
  );
  assert.equal(json.count, want.count);
  assert.equal(json.count, 135);
  close(json.ece, want.ece, 1e-6, "ECE");
  close(json.rmsce, want.rmsce, 1e-5, "RMSCE");
  close(json.meanEntropy, want.meanEntropy, 1e-5, "entropy");
  assert.equal(json.perBin.length, 15);
  assert.equal(json.beta, 0.1);
  const svg = await Deno.readTextFile(join(out, "calibration_reliability.svg"));
  assertWellFormedXml(svg);
  assert.deepEqual([...Deno.readDirSync(out)].map((e) => e.name).sort(), [
    "calibration_reliability.json",
    "calibration_reliability.svg",
  ]);
});

const x = makeFixture("llm", { n: 61, v: 97, d: 24, seed: 9 });
x.targets[3] = -100;
x.targets[40] = -100;
await writeNpy(join(dir, "E.npy"), x.e, [x.n, x.d]);
await writeNpy(join(dir, "C.npy"), x.c, [x.v, x.d]);
await writeNpy(join(dir, "T.npy"), x.targets, [x.n]);
const files = [
  "--e",
  join(dir, "E.npy"),
  "--c",
  join(dir, "C.npy"),
  "--targets",
  join(dir, "T.npy"),
];

Deno.test("calibrate on .npy files: bins, softcap and name; ignored rows left out", async () => {
  const out = join(dir, "files");
  const r = await calibrate([
    ...files,
    "--bins",
    "10",
    "--softcap",
    "5",
    "--out",
    out,
    "--name",
    "x",
  ]);
  assert.equal(r.code, 0, r.stderr);
  const json = JSON.parse(await Deno.readTextFile(join(out, "calibration_x.json")));
  const want = reference(x, 10, 5);
  assert.equal(json.count, 59);
  assert.equal(json.bins, 10);
  assert.equal(json.softcap, 5);
  close(json.ece, want.ece, 1e-6, "ECE");
  close(json.accuracy, want.accuracy, 0, "accuracy");
  // without --out nothing is written, the metrics are printed
  const r2 = await calibrate(files);
  assert.equal(r2.code, 0, r2.stderr);
  assert.match(r2.stdout, /N = 59 tokens/);
});

Deno.test("calibrate: every bad flag gets one line, exit 2, and nothing written", async () => {
  const out = join(dir, "bad");
  const fx = ["--fixture", "llm", "--n", "8", "--v", "9", "--d", "4"];
  const cases: [string[], RegExp][] = [
    [[...fx, "--frobnicate"], /Unknown option/],
    [[...fx, "--bins", "0"], /--bins must be a positive integer/],
    [[...fx, "--bins", "x"], /--bins must be a positive integer, got 'x'/],
    [[...fx, "--seed", "3e3"], /--seed must be an integer, got '3e3'/],
    [[...fx, "--beta", "2"], /beta must be in \[0, 1\]/],
    [[...fx, "--softcap=-1"], /softcap must be > 0/],
    [[...fx, "--dtype", "f64"], /unknown dtype 'f64'/],
    [[...fx, "--adapter", "gpu"], /--adapter must be/],
    [[...fx, "--name", "a"], /--name needs --out/],
    [[...fx, "--out", out, "--name", "../a"], /--name must be/],
    [["--fixture", "nope"], /unknown fixture 'nope'/],
    [[...fx, ...files], /either --fixture or --e/],
    [[files[0], files[1]], /give --e, --c and --targets/],
    [[...files, "--n", "5"], /--n applies only with --fixture/],
    [["--e", join(dir, "missing.npy"), files[2], files[3], files[4], files[5]], /missing\.npy/],
    [[files[0], files[3], files[2], files[3], files[4], files[5]], /hidden sizes differ|targets/],
  ];
  for (const [args, re] of cases) {
    const noOut = args.includes("--out") || re.source.includes("needs --out");
    const r = await calibrate([...args, ...(noOut ? [] : ["--out", out])]);
    assert.equal(r.code, 2, `${args.join(" ")}: exit ${r.code}, ${r.stderr}`);
    assert.equal(r.stderr.split("\n").length, 1, r.stderr);
    assert.match(r.stderr, /^error: /);
    assert.match(r.stderr, re, args.join(" "));
  }
  assert.ok(!(await Deno.stat(out).catch(() => undefined)), "nothing written");
});

const t = x.targets.slice();
t[5] = 97;
await writeNpy(join(dir, "Tbad.npy"), t, [x.n]);

Deno.test("calibrate: a target outside the vocabulary is bad input", async () => {
  const r = await calibrate([...files.slice(0, 4), "--targets", join(dir, "Tbad.npy")]);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /^error: target 97 at row 5 is outside \[0, 97\)/);
});
