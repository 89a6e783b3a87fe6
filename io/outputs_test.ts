import assert from "node:assert/strict";
import { join } from "node:path";
import { InputError } from "../core/errors.ts";
import { checkOutputs, writeAllOrNothing } from "./outputs.ts";
import { tempDir } from "../testing/temp_dir.ts";

async function withTempDir(fn: (dir: string) => Promise<void>) {
  const dir = await tempDir("outputs_test_");
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("outputs: a third file that cannot be renamed restores the first two", async () => {
  await withTempDir(async (dir) => {
    const a = join(dir, "a.npy"), b = join(dir, "b.npy"), c = join(dir, "c.npy");
    await Deno.writeFile(a, Uint8Array.of(1, 1));
    await Deno.mkdir(c);
    await Deno.writeTextFile(join(c, "x"), "a non-empty directory: a file cannot replace it");
    await assert.rejects(
      () =>
        writeAllOrNothing([
          { path: a, bytes: Uint8Array.of(9, 9, 9) },
          { path: b, bytes: "new" },
          { path: c, bytes: "new" },
        ]),
      (e: unknown) => e instanceof InputError && /c\.npy: cannot write: /.test(e.message),
    );
    assert.deepEqual(await Deno.readFile(a), Uint8Array.of(1, 1), "old contents back");
    assert.deepEqual([...Deno.readDirSync(dir)].map((x) => x.name).sort(), ["a.npy", "c.npy"]);
    await writeAllOrNothing([{ path: a, bytes: "ok" }, { path: b, bytes: "ok" }]);
    assert.equal(await Deno.readTextFile(a), "ok");
    assert.deepEqual([...Deno.readDirSync(dir)].map((x) => x.name).sort(), [
      "a.npy",
      "b.npy",
      "c.npy",
    ]);
  });
});

Deno.test("outputs: checkOutputs refuses before writing, and leaves nothing", async () => {
  await withTempDir(async (dir) => {
    const f = join(dir, "in.npy");
    await Deno.writeFile(f, Uint8Array.of(0));
    const refused = (outs: string[], want: RegExp, ins: string[] = []) =>
      assert.throws(
        () => checkOutputs(outs, ins),
        (e: unknown) => e instanceof InputError && want.test(e.message),
      );
    refused([dir], /is a directory$/);
    refused([f], /same file as an input$/, [f]);
    refused([join(dir, "x"), join(dir, ".", "x")], /named twice as an output$/);
    refused([join(f, "out.npy")], /in\.npy is not a directory$/);
    refused(["/dev/null"], /not a regular file$/);
    checkOutputs([join(dir, "new", "deeper", "x.npy")]); // created later
    assert.deepEqual([...Deno.readDirSync(dir)].map((x) => x.name), ["in.npy"]);
  });
});
