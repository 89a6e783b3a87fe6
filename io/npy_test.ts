import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import {
  encodeNpy,
  type NpyArray,
  parseNpy,
  readNpy,
  toFloat32,
  toInt32Targets,
  writeNpy,
} from "./npy.ts";
import { tempDir } from "../testing/temp_dir.ts";

const HAS_NUMPY = (() => {
  try {
    const cmd = new Deno.Command("python3", {
      args: ["-c", "import numpy"],
      stdout: "null",
      stderr: "null",
    });
    return cmd.outputSync().success;
  } catch {
    return false;
  }
})();

/** An NPY file by hand: magic, version, header length (2 or 4 bytes), header, data. */
function handMade(opts: {
  header: string;
  data?: Uint8Array;
  major?: number;
  utf8?: boolean;
}): Uint8Array {
  const major = opts.major ?? 1;
  const header = opts.utf8 || major === 3
    ? new TextEncoder().encode(opts.header)
    : Uint8Array.from(opts.header, (ch) => ch.charCodeAt(0));
  const lenBytes = major === 1 ? 2 : 4;
  const data = opts.data ?? new Uint8Array();
  const out = new Uint8Array(8 + lenBytes + header.length + data.length);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, major, 0]);
  const view = new DataView(out.buffer);
  if (major === 1) view.setUint16(8, header.length, true);
  else view.setUint32(8, header.length, true);
  out.set(header, 8 + lenBytes);
  out.set(data, 8 + lenBytes + header.length);
  return out;
}

const bytesOf = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
const f32 = (...xs: number[]) => bytesOf(Float32Array.from(xs));

async function withTempDir(fn: (dir: string) => Promise<void>) {
  const dir = await tempDir("npy_test_");
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Asserts that `fn` throws an InputError of one line matching `re`. */
function throwsLine(fn: () => unknown, re: RegExp) {
  assert.throws(fn, (err) => {
    assert.ok(err instanceof InputError, String(err));
    assert.ok(!err.message.includes("\n"), err.message);
    assert.match(err.message, re);
    return true;
  });
}

Deno.test("npy: round trips of every dtype and odd shapes, through a file", async () => {
  await withTempDir(async (dir) => {
    const cases: [NpyArray["data"], number[]][] = [
      [Float32Array.from({ length: 6 }, (_, i) => i / 3 - 1), [2, 3]],
      [Float64Array.from([Math.PI, -0, 1e-300, Infinity, NaN]), [5]],
      [Int32Array.from([-2147483648, 2147483647, 0, -100]), [2, 1, 2]],
      [BigInt64Array.from([-(2n ** 63n), 2n ** 63n - 1n]), [2]],
      [Float32Array.of(7.5), []],
      [new Float32Array(0), [0]],
      [new Int32Array(0), [3, 0, 2]],
    ];
    for (const [data, shape] of cases) {
      const path = `${dir}/a.npy`;
      await writeNpy(path, data, shape);
      const back = await readNpy(path);
      assert.deepEqual(back.shape, shape);
      assert.equal(back.data.constructor, data.constructor);
      assert.deepEqual(bytesOf(back.data), bytesOf(data));
      const raw = await Deno.readFile(path);
      assert.equal(raw[6], 1); // version 1.0
      assert.equal((10 + new DataView(raw.buffer).getUint16(8, true)) % 64, 0); // aligned data
      assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["a.npy"]);
    }
  });
});

Deno.test("npy: the header is NumPy's own layout", () => {
  const header = (bytes: Uint8Array) =>
    new TextDecoder("latin1").decode(
      bytes.subarray(10, 10 + new DataView(bytes.buffer).getUint16(8, true)),
    );
  const bytes = encodeNpy(new Float32Array(12), [3, 4]);
  const h = header(bytes);
  assert.equal(h.trimEnd(), "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }");
  assert.ok(h.endsWith("\n"));
  assert.equal(bytes.length, 10 + h.length + 48);
  assert.equal((10 + h.length) % 64, 0);
  assert.match(header(encodeNpy(new Int32Array(5), [5])), /'descr': '<i4'.*'shape': \(5,\), \}/);
  assert.match(header(encodeNpy(new Float64Array(1), [])), /'descr': '<f8'.*'shape': \(\), \}/);
});

Deno.test("npy: hand-built v1, v2 and v3 headers, any key order and quoting", () => {
  const data = bytesOf(Int32Array.from([1, 2, 3, 4, 5, 6]));
  const v1 = parseNpy(
    handMade({ header: "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }\n", data }),
    "v1.npy",
  );
  assert.deepEqual(v1, { dtype: "i4", shape: [2, 3], data: Int32Array.from([1, 2, 3, 4, 5, 6]) });
  const v2 = parseNpy(
    handMade({
      header: '{"shape":(6,),"fortran_order":False,"descr":"<i4"}' + " ".repeat(70000) + "\n",
      data,
      major: 2,
    }),
    "v2.npy",
  );
  assert.deepEqual(v2.shape, [6]);
  assert.deepEqual(v2.data, Int32Array.from([1, 2, 3, 4, 5, 6]));
  const f8 = bytesOf(Float64Array.of(0.5, -2));
  const v3 = parseNpy(
    handMade({
      header: "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), 'note': 'π'}",
      data: f8,
      major: 3,
    }),
    "v3.npy",
  );
  assert.deepEqual(v3, { dtype: "f8", shape: [1, 2], data: Float64Array.of(0.5, -2) });
  // Odd offset of the data (no padding): still read correctly.
  const odd = parseNpy(
    handMade({ header: "{'descr':'<f4','fortran_order':False,'shape':(1,)}", data: f32(3.25) }),
    "odd.npy",
  );
  assert.deepEqual(odd.data, Float32Array.of(3.25));
});

Deno.test("npy: each malformed file is one InputError line naming the file", () => {
  const h = (descr: string, shape = "(3,)", fortran = "False") =>
    `{'descr': '${descr}', 'fortran_order': ${fortran}, 'shape': ${shape}, }`;
  const good = handMade({ header: h("<f4"), data: f32(1, 2, 3) });
  const bad: [Uint8Array, RegExp][] = [
    [new TextEncoder().encode("hello, world"), /^x\.npy: not an NPY file \(bad magic string\)$/],
    [good.slice(0, 5), /^x\.npy: not an NPY file/],
    [Uint8Array.from([...good.slice(0, 6), 4, 0, ...good.slice(8)]), /version 4\.0/],
    [good.slice(0, 30), /^x\.npy: truncated header: \d+ bytes announced, 20 left$/],
    [handMade({ header: "[1, 2]" }), /bad header: not a dict/],
    [handMade({ header: "{'descr': '<f4', 'shape': (3,)}" }), /bad header: no 'fortran_order'/],
    [handMade({ header: "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)" }), /bad header/],
    [handMade({ header: h("<f4", "(3, -1)") }), /shape is not a tuple of sizes/],
    [handMade({ header: h("<f4", "(3,)", "True"), data: f32(1, 2, 3) }), /Fortran-order/],
    [handMade({ header: h(">f4"), data: f32(1, 2, 3) }), /big-endian dtype '>f4'/],
    [handMade({ header: h("<f2") }), /unsupported dtype '<f2' \(expected <f4, <f8, <i4 or <i8\)/],
    [handMade({ header: h("|u1") }), /unsupported dtype '\|u1'/],
    [
      handMade({ header: "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}" }),
      /structured/,
    ],
    [
      handMade({ header: h("<f4", "(3, 4)"), data: new Uint8Array(40) }),
      /^x\.npy: truncated data: header says 12 values \(48 bytes\), file has 40$/,
    ],
    [
      handMade({ header: h("<f4"), data: f32(1, 2, 3, 4) }),
      /^x\.npy: 4 bytes of trailing data after 3 values$/,
    ],
  ];
  for (const [bytes, re] of bad) throwsLine(() => parseNpy(bytes, "x.npy"), re);
  assert.deepEqual(parseNpy(good, "x.npy").data, Float32Array.of(1, 2, 3));
});

Deno.test("npy: a missing file is one InputError line naming it", async () => {
  await assert.rejects(readNpy("/nonexistent/E.npy"), (err) => {
    assert.ok(err instanceof InputError);
    assert.match(err.message, /^\/nonexistent\/E\.npy: cannot read: /);
    assert.ok(!err.message.includes("\n"));
    return true;
  });
});

Deno.test("npy: a failed write leaves no file behind", async () => {
  await withTempDir(async (dir) => {
    // Missing parent directory.
    await assert.rejects(writeNpy(`${dir}/no/such/E.npy`, Float32Array.of(1), [1]), InputError);
    // The target is a directory: the write succeeds, the rename fails, the temporary goes away.
    await Deno.mkdir(`${dir}/E.npy`);
    await Deno.writeTextFile(`${dir}/E.npy/keep`, "x");
    await assert.rejects(
      writeNpy(`${dir}/E.npy`, Float32Array.of(1), [1]),
      (err) => err instanceof InputError && err.message.startsWith(`${dir}/E.npy: cannot write: `),
    );
    // Shape mismatch: nothing written.
    await assert.rejects(
      writeNpy(`${dir}/C.npy`, Float32Array.of(1, 2, 3), [2, 2]),
      /C\.npy: shape \[2, 2\] holds 4 values, the data has 3/,
    );
    await assert.rejects(writeNpy(`${dir}/C.npy`, Float32Array.of(1), [1.5]), InputError);
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["E.npy"]);
    assert.deepEqual([...Deno.readDirSync(`${dir}/E.npy`)].map((e) => e.name), ["keep"]);
  });
});

Deno.test("npy: toFloat32 and toInt32Targets convert or refuse", () => {
  const f4: NpyArray = { dtype: "f4", shape: [2], data: Float32Array.of(1, 2) };
  assert.equal(toFloat32(f4, "E.npy"), f4.data);
  const f8: NpyArray = { dtype: "f8", shape: [3], data: Float64Array.of(0.1, -1e30, NaN) };
  assert.deepEqual(toFloat32(f8, "E.npy"), Float32Array.of(0.1, -1e30, NaN));
  throwsLine(
    () => toFloat32({ dtype: "f8", shape: [2], data: Float64Array.of(1, 1e39) }, "E.npy"),
    /^E\.npy: value 1e\+39 at index 1 overflows f32 \(finite range ±3\.4028234663852886e\+38\)$/,
  );
  const i4: NpyArray = { dtype: "i4", shape: [2], data: Int32Array.of(3, -100) };
  throwsLine(() => toFloat32(i4, "E.npy"), /^E\.npy: expected a float array \(f4 or f8\), got i4$/);
  assert.equal(toInt32Targets(i4, "t.npy"), i4.data);
  const i8: NpyArray = {
    dtype: "i8",
    shape: [3],
    data: BigInt64Array.of(5n, -100n, 2n ** 31n - 1n),
  };
  assert.deepEqual(toInt32Targets(i8, "t.npy"), Int32Array.of(5, -100, 2 ** 31 - 1));
  throwsLine(
    () =>
      toInt32Targets({ dtype: "i8", shape: [2], data: BigInt64Array.of(0n, 2n ** 31n) }, "t.npy"),
    /^t\.npy: value 2147483648 at index 1 is outside int32$/,
  );
  throwsLine(() => toInt32Targets(f4, "t.npy"), /expected an integer array \(i4 or i8\), got f4/);
});

Deno.test({
  name: "npy: files written by NumPy read back, ours load in NumPy",
  ignore: !HAS_NUMPY,
  fn: () =>
    withTempDir(async (dir) => {
      await writeNpy(`${dir}/ours_f4.npy`, Float32Array.of(1.5, -2, 3, 4, 5, 6), [2, 3]);
      await writeNpy(`${dir}/ours_i4.npy`, Int32Array.of(-100, 7), [2]);
      const script = `
import numpy as np, sys
d = sys.argv[1]
np.save(d + "/f4.npy", np.arange(12, dtype="<f4").reshape(3, 4) / 8)
np.save(d + "/f8.npy", np.array([np.pi, -0.5]))
np.save(d + "/i4.npy", np.array([[1, -100], [3, 4]], dtype="<i4"))
np.save(d + "/i8.npy", np.array([2**40, -3], dtype="<i8"))
np.save(d + "/scalar.npy", np.float32(2.5))
np.save(d + "/fortran.npy", np.asfortranarray(np.ones((2, 3), dtype="<f4")))
np.save(d + "/big.npy", np.ones(3, dtype=">f4"))
with open(d + "/v2.npy", "wb") as f:
    np.lib.format.write_array(f, np.ones((2, 2), dtype="<f8"), version=(2, 0))
with open(d + "/v3.npy", "wb") as f:
    np.lib.format.write_array(f, np.ones(3, dtype="<i4"), version=(3, 0))
a = np.load(d + "/ours_f4.npy"); assert a.dtype == np.float32 and a.shape == (2, 3), a
assert (a == np.array([[1.5, -2, 3], [4, 5, 6]], dtype=np.float32)).all()
b = np.load(d + "/ours_i4.npy"); assert b.dtype == np.int32 and list(b) == [-100, 7], b
`;
      const py = await new Deno.Command("python3", { args: ["-c", script, dir], stderr: "piped" })
        .output();
      assert.ok(py.success, new TextDecoder().decode(py.stderr));
      const f4 = await readNpy(`${dir}/f4.npy`);
      assert.deepEqual(f4.shape, [3, 4]);
      assert.deepEqual(f4.data, Float32Array.from({ length: 12 }, (_, i) => i / 8));
      assert.deepEqual((await readNpy(`${dir}/f8.npy`)).data, Float64Array.of(Math.PI, -0.5));
      assert.deepEqual(
        toInt32Targets(await readNpy(`${dir}/i4.npy`), "i4.npy"),
        Int32Array.of(1, -100, 3, 4),
      );
      const i8 = await readNpy(`${dir}/i8.npy`);
      assert.deepEqual(i8.data, BigInt64Array.of(2n ** 40n, -3n));
      assert.throws(() => toInt32Targets(i8, "i8.npy"), /outside int32/);
      assert.deepEqual(await readNpy(`${dir}/scalar.npy`), {
        dtype: "f4",
        shape: [],
        data: Float32Array.of(2.5),
      });
      await assert.rejects(readNpy(`${dir}/fortran.npy`), /fortran\.npy: Fortran-order/);
      await assert.rejects(readNpy(`${dir}/big.npy`), /big\.npy: big-endian dtype '>f4'/);
      assert.deepEqual((await readNpy(`${dir}/v2.npy`)).data, new Float64Array(4).fill(1));
      assert.deepEqual((await readNpy(`${dir}/v3.npy`)).data, new Int32Array(3).fill(1));
    }),
});
