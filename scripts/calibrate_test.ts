import assert from "node:assert/strict";
import { join } from "node:path";
import { writeNpy } from "../io/npy.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { logitRow, widen } from "../reference/logit_row.ts";
import type { HostInputs } from "../core/options.ts";
import {
  calibrationMetrics,
  tokenStatsFromLogitRows,
  tokenStatsFromLogits,
} from "../calibration/metrics.ts";
import { assertWellFormedXml } from "../report/svg_xml.ts";
import { runScript } from "../testing/run_script.ts";
import { tempDir } from "../testing/temp_dir.ts";

const dir = await tempDir("calibrate_test_");

const calibrate = (args: string[]) => runScript("scripts/calibrate.ts", args, { trimStderr: true });

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
const big = x.e.slice();
big[3] = 1e5; // finite in f32 and bf16, overflows f16
await writeNpy(join(dir, "Ebig.npy"), big, [x.n, x.d]);
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
    [[...fx, "--temperature", "0"], /--temperature must be positive and finite, got 0/],
    [[...fx, "--temperature=-1.5"], /--temperature must be positive and finite/],
    [[...fx, "--temperature", "inf"], /--temperature must be a plain decimal number, got 'inf'/],
    [[...fx, "--temperature", "nan"], /--temperature must be a plain decimal number/],
    [[...fx, "--temperature", "0x1"], /--temperature must be a plain decimal number/],
    // the cause named: the temperature, not the statistics it spoils
    [
      [...fx, "--temperature", "1e-300"],
      /^error: --temperature 1e-300 is too small for these inputs: the logits divided by it reach up to [\d.e+]+ \(‖E_n‖·‖C_v‖ up to [\d.]+\), past f32's range; give T ≥ /,
    ],
    [[...fx, "--ignore-index", "2.5"], /--ignore-index must be an integer, got '2.5'/],
    [[...fx, "--json", ""], /--json must not be empty/],
    [[...fx, "--json", " "], /--json needs a file name/],
    [[...fx, "--json", dir], /output path is a directory/],
    [
      ["--e", join(dir, "Ebig.npy"), ...files.slice(2), "--dtype", "f16"],
      /E value 100000 at row 0, column 3 \(index 3\) overflows f16/,
    ],
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

/** Float64 mean NLL, ECE, RMSCE, entropy and accuracy of the kept tokens at temperature T. */
function referenceAt(x: HostInputs, t: number, softcap?: number) {
  const w = widen(x);
  const row = new Float64Array(x.v);
  const conf: number[] = [], correct: number[] = [], ent: number[] = [];
  let nll = 0;
  for (let i = 0; i < x.n; i++) {
    if (x.targets[i] === -100) continue;
    logitRow(w, i, row, softcap);
    for (let j = 0; j < x.v; j++) row[j] /= t;
    const s = tokenStatsFromLogits(row, x.targets[i]);
    const max = Math.max(...row);
    let sum = 0;
    for (const z of row) sum += Math.exp(z - max);
    nll += max + Math.log(sum) - row[x.targets[i]];
    conf.push(s.confidence);
    correct.push(s.correct ? 1 : 0);
    ent.push(s.entropy);
  }
  const r = calibrationMetrics({ confidence: conf, correct, entropy: ent });
  return {
    nll: nll / r.count,
    ece: r.ece,
    rmsce: r.rmsce,
    entropy: r.meanEntropy,
    accuracy: r.accuracy,
  };
}

Deno.test("calibrate --fit-temperature --json: T*, before and after match float64", async () => {
  const jsonPath = join(dir, "fit", "t.json");
  const r = await calibrate([...files, "--softcap", "9", "--fit-temperature", "--json", jsonPath]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /ECE \d+\.\d\d% \(15 bins\), RMSCE/); // the current lines stay
  assert.match(r.stdout, /^entropy calibration at T = 1: mean entropy/m);
  assert.match(r.stdout, /^temperature fit: T\* = [\d.]+ minimises the mean NLL/m);
  const doc = JSON.parse(await Deno.readTextFile(jsonPath));
  assert.deepEqual(Object.keys(doc), ["temperature", "before", "after", "tokens", "bins", "env"]);
  const keys = ["nll", "ece", "rmsce", "entropy", "accuracy"] as const;
  assert.deepEqual(Object.keys(doc.before), keys);
  assert.deepEqual(Object.keys(doc.after), keys);
  assert.equal(doc.tokens, 59);
  assert.equal(doc.bins.length, 15);
  assert.equal(
    doc.bins.reduce((s: number, b: { before: { count: number } }) => s + b.before.count, 0),
    59,
  );
  const t = doc.temperature;
  for (const [got, at] of [[doc.before, 1], [doc.after, t]] as [Record<string, number>, number][]) {
    const want = referenceAt(x, at, 9);
    for (const k of keys) {
      const tol = k === "rmsce" ? 1e-5 : 1e-6;
      const ok = Math.abs(got[k] - want[k]) <= tol * Math.abs(want[k]);
      assert.ok(ok, `T = ${at}, ${k}: ${got[k]} vs ${want[k]}`);
    }
  }
  // T* is a minimum of the float64 NLL: a relative step of 1e-3 either way does not go lower
  const f = (u: number) => referenceAt(x, u, 9).nll;
  assert.ok(f(t) <= f(t * 1.001) && f(t) <= f(t / 1.001), `T* = ${t}`);
  assert.ok(doc.after.nll < doc.before.nll);
  assert.equal(doc.env.softcap, 9);
  assert.ok(doc.env.fit.forwards >= 2);
  // without the fit: no "after", the temperature is the one given
  const r2 = await calibrate([...files, "--temperature", "1.5", "--json", jsonPath]);
  assert.equal(r2.code, 0, r2.stderr);
  const doc2 = JSON.parse(await Deno.readTextFile(jsonPath));
  assert.deepEqual(Object.keys(doc2), ["temperature", "before", "tokens", "bins", "env"]);
  assert.equal(doc2.temperature, 1.5);
  const want = referenceAt(x, 1.5);
  assert.ok(Math.abs(doc2.before.nll - want.nll) <= 1e-6 * want.nll, "NLL at T = 1.5");
});

Deno.test("calibrate --fit-temperature: no minimum to bracket is one line, exit 2, no file", async () => {
  // every target is its row's argmax: the NLL keeps falling as T → 0
  const n = 9, v = 13, d = 16;
  const y = makeFixture("llm", { n, v, d, seed: 1 });
  for (let i = 0; i < n; i++) {
    y.targets[i] = i;
    for (let k = 0; k < d; k++) y.e[i * d + k] = 3 * y.c[i * d + k];
  }
  const sub = join(dir, "sep");
  await Deno.mkdir(sub);
  await writeNpy(join(sub, "E.npy"), y.e, [n, d]);
  await writeNpy(join(sub, "C.npy"), y.c, [v, d]);
  await writeNpy(join(sub, "T.npy"), y.targets, [n]);
  const jsonPath = join(sub, "out", "t.json");
  const r = await calibrate([
    ...["--e", join(sub, "E.npy"), "--c", join(sub, "C.npy"), "--targets", join(sub, "T.npy")],
    "--fit-temperature",
    "--json",
    jsonPath,
  ]);
  assert.equal(r.code, 2, r.stderr);
  assert.equal(r.stderr.split("\n").length, 1, r.stderr);
  assert.match(r.stderr, /^error: temperature fit: cannot bracket a minimum of the mean NLL/);
  assert.ok(!(await Deno.stat(join(sub, "out")).catch(() => undefined)), "nothing written");
});

Deno.test("calibrate: a fixture that cannot fit the free memory fails before it is made (exit 1, the sizes)", async () => {
  const r = await calibrate(["--fixture", "llm", "--n", "200000000", "--v", "4096", "--d", "128"]);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /^error: the fixture needs [\d.]+ GiB of host memory, [\d.]+ GiB free$/);
});
