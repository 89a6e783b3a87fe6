import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { tempDir } from "./temp_dir.ts";

Deno.test("tempDir: the directory exists during the test and is gone after the process", async () => {
  const dir = await tempDir("temp_dir_test_");
  assert.ok((await Deno.stat(dir)).isDirectory);
  // a child test process that creates one, fills it and exits
  const mod = `${dir}/child_test.ts`;
  const helper = fileURLToPath(new URL("./temp_dir.ts", import.meta.url));
  await Deno.writeTextFile(
    mod,
    `import { tempDir } from ${JSON.stringify(helper)};
const d = await tempDir("temp_dir_child_");
await Deno.writeTextFile(d + "/f.txt", "x");
await Deno.writeTextFile(${JSON.stringify(`${dir}/child_dir.txt`)}, d);
Deno.test("child", () => {});`,
  );
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["test", "-A", "--no-check", "--quiet", mod],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text);
  const child = await Deno.readTextFile(`${dir}/child_dir.txt`);
  assert.ok(child.includes("temp_dir_child_"), `the child's directory: ${child}`);
  await assert.rejects(Deno.stat(child), Deno.errors.NotFound, `${child} removed at exit`);
});
