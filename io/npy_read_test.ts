import assert from "node:assert/strict";
import { join } from "node:path";
import { InputError } from "../core/errors.ts";
import { encodeNpy, MAX_HEADER_BYTES, type NpyArray, readNpy } from "./npy.ts";
import { Rng } from "../fixtures/rng.ts";
import { tempDir } from "../testing/temp_dir.ts";

async function withTempDir(fn: (dir: string) => Promise<void>) {
  const dir = await tempDir("npy_read_test_");
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** An NPY file by hand: magic, version, header length field, header, data. */
function npyBytes(o: { header: string; data: Uint8Array; major?: number; lenField?: number }) {
  const major = o.major ?? 1;
  const header = new TextEncoder().encode(o.header);
  const lenBytes = major === 1 ? 2 : 4;
  const out = new Uint8Array(8 + lenBytes + header.length + o.data.length);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, major, 0]);
  const view = new DataView(out.buffer);
  const len = o.lenField ?? header.length;
  if (major === 1) view.setUint16(8, len & 0xffff, true);
  else view.setUint32(8, len >>> 0, true);
  out.set(header, 8 + lenBytes);
  out.set(o.data, 8 + lenBytes + header.length);
  return out;
}

async function refused(
  path: string,
  o: Parameters<typeof readNpy>[1],
  want: RegExp,
): Promise<void> {
  await assert.rejects(() => readNpy(path, o), (e: unknown) => {
    assert.ok(e instanceof InputError, String(e));
    assert.doesNotMatch(e.message, /\n/);
    assert.ok(e.message.startsWith(`${path}: `), e.message);
    assert.match(e.message, want);
    return true;
  });
}

Deno.test("npy read: a header claiming more data than the file holds is refused unread", async () => {
  await withTempDir(async (dir) => {
    const p = join(dir, "short.npy");
    const header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000,), }";
    const bytes = npyBytes({ header, data: new Uint8Array(64) });
    await Deno.writeFile(p, bytes);
    const stats = { bytesRead: 0 };
    await refused(
      p,
      { stats },
      /truncated data: header says 1000000 values \(4000000 bytes\), file has 64/,
    );
    assert.ok(stats.bytesRead <= bytes.length - 64, `read ${stats.bytesRead} bytes`);
    // a header length past the end of the file: only the first 12 bytes are read
    const q = join(dir, "long-header.npy");
    await Deno.writeFile(q, npyBytes({ header, data: new Uint8Array(), lenField: 60000 }));
    const s2 = { bytesRead: 0 };
    await refused(q, { stats: s2 }, /truncated header: 60000 bytes announced/);
    assert.equal(s2.bytesRead, 12);
    const r = join(dir, "huge-header.npy");
    await Deno.writeFile(
      r,
      npyBytes({ header, data: new Uint8Array(), major: 2, lenField: 2 ** 31 }),
    );
    const s3 = { bytesRead: 0 };
    await refused(
      r,
      { stats: s3 },
      new RegExp(`header of 2147483648 bytes is too long \\(at most ${MAX_HEADER_BYTES}\\)`),
    );
    assert.equal(s3.bytesRead, 12);
  });
});

Deno.test("npy read: a file larger than the binding limit is refused before its data is read", async () => {
  await withTempDir(async (dir) => {
    const p = join(dir, "big.npy");
    const bytes = encodeNpy(new Float32Array(64 * 1024), [256, 256]);
    await Deno.writeFile(p, bytes);
    const headerBytes = bytes.length - 4 * 64 * 1024;
    const stats = { bytesRead: 0 };
    await refused(
      p,
      { maxBytes: 65536, stats },
      /declares 262144 bytes, more than the 65536 the adapter can bind/,
    );
    assert.ok(stats.bytesRead <= headerBytes, `read ${stats.bytesRead} of ${bytes.length}`);
    const s2 = { bytesRead: 0 };
    await refused(
      p,
      { maxRowBytes: 512, stats: s2 },
      /rows of 1024 bytes are longer than one storage binding/,
    );
    assert.ok(s2.bytesRead <= headerBytes);
    // f8 data held as f32: the limit counts the bytes that will be bound
    const s3 = { bytesRead: 0 };
    const a = await readNpy(p, { maxBytes: 262144, maxRowBytes: 1024, stats: s3 });
    assert.equal(a.data.length, 65536);
    assert.equal(s3.bytesRead, bytes.length, "exactly the file, never more");
  });
});

Deno.test("npy read: FIFOs, character devices and directories are refused without reading", async () => {
  await withTempDir(async (dir) => {
    const fifo = join(dir, "pipe.npy");
    const mk = await new Deno.Command("mkfifo", { args: [fifo] }).output().catch(() => null);
    if (mk?.success) {
      const stats = { bytesRead: 0 };
      // nobody writes to the pipe: opening it would block forever, so it must not be opened
      await refused(fifo, { stats }, /a FIFO \(named pipe\), not a regular file$/);
      assert.equal(stats.bytesRead, 0);
    }
    for (const dev of ["/dev/zero", "/dev/null"]) {
      const stats = { bytesRead: 0 };
      await refused(dev, { stats }, /a character device, not a regular file$/);
      assert.equal(stats.bytesRead, 0);
    }
    await refused(dir, {}, /a directory, not a regular file$/);
    await refused(join(dir, "missing.npy"), {}, /cannot read: /);
  });
});

/** A seeded source of the fuzz cases (fixtures/rng.ts). */
function rng(seed: number) {
  const r = new Rng(seed);
  const next = () => r.uniform();
  const int = (n: number) => r.int(n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)];
  return { next, int, pick };
}

const ITEM: Record<string, number> = { "<f4": 4, "<f8": 8, "<i4": 4, "<i8": 8 };

Deno.test("npy read: seeded fuzz of headers, 1,200 cases: loads right or one-line refusal", async () => {
  const cases = Number(Deno.env.get("LCE_NPY_FUZZ_CASES") ?? 1200);
  const r = rng(Number(Deno.env.get("LCE_NPY_FUZZ_SEED") ?? 13));
  let loaded = 0, refusedCount = 0;
  await withTempDir(async (dir) => {
    for (let k = 0; k < cases; k++) {
      const path = join(dir, `case${k % 8}.npy`);
      // dtype, order, shape: valid most of the time, anything else otherwise
      const descr = r.next() < 0.75
        ? r.pick(["<f4", "<f8", "<i4", "<i8"])
        : r.pick([">f4", "|b1", "<f2", "<c8", "<U3", "f4", "<f4 ", "", "<i16", "<q"]);
      const fortran = r.next() < 0.85 ? "False" : r.pick(["True", "0", "'no'", "None"]);
      const ndim = r.int(4);
      const dims = Array.from({ length: ndim }, () => r.int(6));
      let shapeText = ndim === 1 ? `(${dims[0]},)` : `(${dims.join(", ")})`;
      let shapeOk = true;
      if (r.next() < 0.1) {
        shapeText = r.pick([
          "(-1, 3)",
          "(2.5,)",
          "[3]",
          "(3",
          "('a',)",
          "(2**40,)",
          "(99999999999, 99999999999)",
          "(1e3,)",
        ]);
        shapeOk = false;
      }
      const entries = [
        `'descr': '${descr}'`,
        `'fortran_order': ${fortran}`,
        `'shape': ${shapeText}`,
      ];
      let keysOk = true;
      if (r.next() < 0.05) {
        entries.splice(r.int(3), 1);
        keysOk = false;
      }
      for (let i = entries.length - 1; i > 0; i--) {
        const j = r.int(i + 1);
        [entries[i], entries[j]] = [entries[j], entries[i]];
      }
      let header = `{${entries.join(", ")}${r.next() < 0.5 ? ", " : ""}}`;
      if (r.next() < 0.5) header = header.replaceAll("'", '"');
      header += " ".repeat(r.int(40)) + "\n";
      let textOk = true;
      if (r.next() < 0.08) {
        // garbage: replace a few characters of the header with random bytes
        const chars = [...header];
        for (let g = 1 + r.int(4); g > 0; g--) {
          chars[r.int(chars.length)] = String.fromCharCode(r.int(256));
        }
        header = chars.join("");
        textOk = false;
      }
      const valid = descr in ITEM && fortran === "False" && shapeOk && keysOk;
      const count = dims.reduce((a, b) => a * b, 1);
      const declared = valid ? count * ITEM[descr] : 0;
      const delta = r.next() < 0.7 ? 0 : r.pick([-8, -4, -1, 1, 4, 16, 4096]);
      const dataLen = Math.max(0, declared + delta);
      const data = new Uint8Array(dataLen).map(() => r.int(256));
      const major = r.next() < 0.8 ? 1 : r.pick([2, 3, 0, 4, 255]);
      const lenDelta = r.next() < 0.9 ? 0 : r.pick([-3, -1, 1, 7, 5000, 70000]);
      const headerBytes = new TextEncoder().encode(header).length;
      const bytes = npyBytes({
        header,
        data,
        major,
        lenField: Math.max(0, headerBytes + lenDelta),
      });
      if (r.next() < 0.02) bytes[r.int(6)] ^= 0xff; // bad magic
      const cut = r.next() < 0.03 ? r.int(bytes.length) : bytes.length;
      const file = bytes.subarray(0, cut);
      await Deno.writeFile(path, file);
      const stats = { bytesRead: 0 };
      let got: NpyArray | undefined;
      try {
        got = await readNpy(path, { stats });
      } catch (e) {
        assert.ok(e instanceof InputError, `case ${k}: ${e}`);
        assert.doesNotMatch(e.message, /\n/, `case ${k}`);
        assert.ok(e.message.startsWith(`${path}: `), `case ${k}: ${e.message}`);
      }
      assert.ok(stats.bytesRead <= file.length, `case ${k}: read past the end`);
      const prefix = major === 1 ? 10 : 12;
      const lenField = Math.max(0, headerBytes + lenDelta);
      if (got) {
        loaded++;
        // what loaded is what the header declared, read exactly once
        const n = got.shape.reduce((a, b) => a * b, 1);
        assert.equal(got.data.length, n, `case ${k}`);
        assert.equal(stats.bytesRead, prefix + lenField + got.data.byteLength, `case ${k}`);
        assert.equal(file.length, stats.bytesRead, `case ${k}`);
        if (
          valid && textOk && delta === 0 && lenDelta === 0 && cut === bytes.length && major <= 3 &&
          major >= 1
        ) {
          assert.equal(got.dtype, descr.slice(1), `case ${k}`);
          assert.deepEqual(got.shape, dims, `case ${k}`);
          assert.deepEqual(new Uint8Array(got.data.buffer), data, `case ${k}`);
        }
      } else {
        refusedCount++;
        // a refused file: at most its header was read, never its declared data
        assert.ok(
          stats.bytesRead <= Math.min(file.length, 12 + lenField),
          `case ${k}: read ${stats.bytesRead}`,
        );
        const clean = valid && textOk && delta === 0 && lenDelta === 0 && cut === bytes.length &&
          major >= 1 && major <= 3 && bytes[0] === 0x93 &&
          new TextDecoder().decode(bytes.subarray(1, 6)) === "NUMPY";
        assert.ok(!clean, `case ${k}: a valid file was refused`);
      }
    }
  });
  assert.ok(
    loaded > cases / 4 && refusedCount > cases / 4,
    `loaded ${loaded}, refused ${refusedCount}`,
  );
});
