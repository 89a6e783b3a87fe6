import assert from "node:assert/strict";
import { join } from "node:path";
import { encodeNpy, writeNpy } from "../io/npy.ts";
import { lceReference } from "../reference/lce_reference.ts";
import { parseNpy } from "../io/npy.ts";
import { runScript } from "../testing/run_script.ts";
import { engineFromEnv, engineName } from "../gpu/engine.ts";
import { tempDir } from "../testing/temp_dir.ts";

const dir = await tempDir("lce_test_");
const n = 6, v = 11, d = 5;
const e = Float32Array.from({ length: n * d }, (_, i) => Math.sin(i) * 0.7);
const c = Float32Array.from({ length: v * d }, (_, i) => Math.cos(i * 1.3) * 0.6);
const t = Int32Array.from([0, 3, -100, 10, 5, 7]);
await writeNpy(join(dir, "E.npy"), e, [n, d]);
await writeNpy(join(dir, "C.npy"), c, [v, d]);
await writeNpy(join(dir, "T.npy"), t, [n]);

/** The engine's name in the output line: the scripts run on the engine LCE_WEBGPU names. */
const ENGINE = engineName(engineFromEnv());

const lce = (args: string[]) => runScript("scripts/lce.ts", args, { trimStderr: true });

const base = (
  out: string,
) => [
  "--e",
  join(dir, "E.npy"),
  "--c",
  join(dir, "C.npy"),
  "--targets",
  join(dir, "T.npy"),
  "--out",
  out,
  "--method",
  "baseline",
];

Deno.test("lce: writes loss, dE, dC that match the float64 reference", async () => {
  const out = join(dir, "ok");
  const r = await lce([
    ...base(out),
    "--method",
    "baseline",
    "--beta",
    "0.1",
    "--softcap",
    "4",
    "--grad-output",
    "2",
  ]);
  assert.equal(r.code, 0, r.stderr);
  assert.ok(
    r.stdout.startsWith(
      `baseline on ${ENGINE} (β = 0.1, reduction mean, dtype f32, softcap 4): loss `,
    ),
    r.stdout,
  );
  const ref = lceReference({ n, v, d, e, c, targets: t }, { beta: 0.1, softcap: 4 }, 2);
  const read = async (f: string) => parseNpy(await Deno.readFile(join(out, f)), f);
  const loss = await read("loss.npy"), dE = await read("dE.npy"), dC = await read("dC.npy");
  assert.deepEqual(dE.shape, [n, d]);
  assert.deepEqual(dC.shape, [v, d]);
  assert.ok(Math.abs(loss.data[0] as number - ref.loss[0]) < 1e-5);
  for (let i = 0; i < n * d; i++) assert.ok(Math.abs((dE.data[i] as number) - ref.dE[i]) < 1e-5);
  for (let i = 0; i < v * d; i++) assert.ok(Math.abs((dC.data[i] as number) - ref.dC[i]) < 1e-5);
});

Deno.test("lce: prints the β, reduction and dtype it used; --help says how its β default differs", async () => {
  const r = await lce([...base(join(dir, "defaults"))]);
  assert.equal(r.code, 0, r.stderr);
  assert.ok(
    r.stdout.startsWith(`baseline on ${ENGINE} (β = 0, reduction mean, dtype f32): loss `),
    r.stdout,
  );
  const h = await lce(["--help"]);
  assert.equal(h.code, 0);
  assert.match(
    h.stdout,
    /--beta X +label smoothing β in \[0, 1\]; 0 is plain cross-entropy \(table3 and sweep default to β = 0\.1\) \(default: 0\)/,
  );
});

async function writeBad(name: string, data: Float32Array | Int32Array, shape: number[]) {
  const p = join(dir, name);
  await writeNpy(p, data, shape);
  return p;
}

Deno.test("lce: every bad input gets one line naming it, exit 2, and no output", async () => {
  const nanE = e.slice();
  nanE[7] = NaN;
  const infC = c.slice();
  infC[3] = Infinity;
  const truncated = join(dir, "trunc.npy");
  const full = encodeNpy(e, [n, d]);
  await Deno.writeFile(truncated, full.subarray(0, full.length - 8));
  const cases: [string[], RegExp][] = [
    [["--method", "nope"], /unknown method 'nope'/],
    [["--dtype", "f8"], /unknown dtype 'f8'/],
    [["--beta", "1.5"], /beta must be in \[0, 1\], got 1.5/],
    [["--beta", "abc"], /--beta must be a plain decimal number, got 'abc'/],
    [["--beta", "0x1"], /--beta must be a plain decimal number, got '0x1'/],
    [["--beta", "0.1abc"], /--beta must be a plain decimal number, got '0\.1abc'/],
    [["--beta", "NaN"], /--beta must be a plain decimal number, got 'NaN'/],
    [["--grad-output", "Infinity"], /--grad-output must be a plain decimal number/],
    [["--ignore-index", "2.5"], /--ignore-index must be an integer, got '2\.5'/],
    [["--adapter", "gpu"], /--adapter must be auto, software or hardware, got 'gpu'/],
    [["--softcap", "0"], /softcap must be > 0, got 0/],
    [["--softcap=-2"], /softcap must be > 0, got -2/],
    [["--softcap", "-2"], /softcap must be > 0, got -2/],
    [["--reduction", "avg"], /unknown reduction 'avg'/],
    [["--bogus", "1"], /Unknown option '--bogus'/],
    [
      ["--targets", await writeBad("T_out.npy", Int32Array.from([0, 3, -100, 11, 5, 7]), [n])],
      /target 11 at row 3 is outside \[0, 11\)/,
    ],
    [
      ["--targets", await writeBad("T_neg.npy", Int32Array.from([0, -1, 2, 3, 4, 5]), [n])],
      /target -1 at row 1/,
    ],
    [[
      "--targets",
      await writeBad("T_all.npy", Int32Array.from([-100, -100, -100, -100, -100, -100]), [n]),
    ], /all 6 targets are ignore_index/],
    [
      ["--targets", await writeBad("T_len.npy", Int32Array.from([0, 1, 2]), [3])],
      /targets has 3 entries, E has 6 rows/,
    ],
    [
      ["--targets", await writeBad("T_2d.npy", Int32Array.from([0, 1, 2, 3, 4, 5]), [2, 3])],
      /targets must be 1-D/,
    ],
    [
      ["--targets", await writeBad("T_f.npy", Float32Array.from([0, 1, 2, 3, 4, 5]), [n])],
      /T_f.npy/,
    ],
    [
      ["--e", await writeBad("E_nan.npy", nanE, [n, d])],
      /E has a non-finite value NaN at row 1, column 2/,
    ],
    [
      ["--c", await writeBad("C_inf.npy", infC, [v, d])],
      /C has a non-finite value Infinity at row 0, column 3/,
    ],
    [
      [
        "--dtype",
        "f16",
        "--e",
        await writeBad("E_big.npy", e.map((z, i) => i === 8 ? 1e5 : z), [n, d]),
      ],
      /E value 100000 at row 1, column 3 \(index 8\) overflows f16 \(finite range ±65504\)/,
    ],
    [["--e", "/dev/zero"], /\/dev\/zero: a character device, not a regular file/],
    [
      ["--c", await writeBad("C_d.npy", new Float32Array(v * 4), [v, 4])],
      /hidden sizes differ: E is 6×5, C is 11×4/,
    ],
    [["--e", await writeBad("E_1d.npy", e, [n * d])], /E must be 2-D/],
    [["--e", truncated], /trunc.npy: truncated data/],
    [["--e", join(dir, "missing.npy")], /missing.npy/],
  ];
  for (const [extra, msg] of cases) {
    const out = join(dir, `bad_${Math.random().toString(36).slice(2)}`);
    // later flags override the base ones
    const r = await lce([...base(out), ...extra]);
    assert.equal(r.code, 2, `${extra.join(" ")}: exit ${r.code}, stderr ${r.stderr}`);
    const lines = r.stderr.split("\n");
    assert.equal(lines.length, 1, `${extra.join(" ")}: more than one line: ${r.stderr}`);
    assert.match(lines[0], /^error: /);
    assert.match(lines[0], msg, `${extra.join(" ")}: ${lines[0]}`);
    let exists = true;
    try {
      await Deno.stat(out);
    } catch {
      exists = false;
    }
    assert.ok(
      !exists || [...Deno.readDirSync(out)].length === 0,
      `${extra.join(" ")}: output written`,
    );
  }
});

Deno.test("lce: an output that cannot be written leaves the others byte-identical", async () => {
  const out = join(dir, "keep");
  await Deno.mkdir(out);
  const oldLoss = new Uint8Array([1, 2, 3]), oldDE = new Uint8Array([4, 5, 6, 7]);
  await Deno.writeFile(join(out, "loss.npy"), oldLoss);
  await Deno.writeFile(join(out, "dE.npy"), oldDE);
  await Deno.mkdir(join(out, "dC.npy")); // the third output path is a directory
  const r = await lce(base(out));
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /^error: .*dC\.npy: output path is a directory$/);
  assert.deepEqual(await Deno.readFile(join(out, "loss.npy")), oldLoss);
  assert.deepEqual(await Deno.readFile(join(out, "dE.npy")), oldDE);
  assert.deepEqual([...Deno.readDirSync(out)].map((x) => x.name).sort(), [
    "dC.npy",
    "dE.npy",
    "loss.npy",
  ]);
  // an output named like an input, and an output directory under a file
  const same = await lce([...base(dir), "--e", join(dir, "dE.npy")]);
  assert.equal(same.code, 2, same.stderr);
  assert.match(same.stderr, /dE\.npy: output is the same file as an input$/);
  const under = await lce(base(join(dir, "E.npy", "sub")));
  assert.equal(under.code, 2, under.stderr);
  assert.match(under.stderr, /E\.npy is not a directory$/);
});

Deno.test("lce: --help lists every flag with its default", async () => {
  const r = await lce(["--help"]);
  assert.equal(r.code, 0);
  assert.match(
    r.stdout,
    /^usage: \.\/dev task lce --e E\.npy --c C\.npy --targets T\.npy --out DIR/,
  );
  assert.match(r.stdout, /--method VALUE +method \(methods\/mod\.ts\) \(default: 'fused'\)/);
  assert.match(r.stdout, /--ignore-index N +target value ignored by the loss \(default: -100\)/);
  assert.match(r.stdout, /--e E\.npy +hidden states, n×d, float32 or float64 \(required\)/);
});

Deno.test("lce: inputs whose copies cannot fit the free memory fail before they are read (exit 1, the sizes)", async () => {
  // a sparse E of 1 TiB: no disk taken, but far more than a host's memory
  const big = join(dir, "Ehuge.npy");
  const f = await Deno.open(big, { write: true, create: true, truncate: true });
  await f.truncate(2 ** 40);
  f.close();
  try {
    const out = join(dir, "huge");
    const r = await lce(["--e", big, ...base(out).slice(2)]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^error: lce needs [\d.]+ GiB of host memory, [\d.]+ GiB free$/);
    assert.throws(() => Deno.statSync(out), "nothing written");
  } finally {
    await Deno.remove(big);
  }
});
