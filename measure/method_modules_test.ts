import assert from "node:assert/strict";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { InputError } from "../core/errors.ts";
import { allMethods, loadMethodModules, notAMethod } from "./method_modules.ts";
import { tempDir } from "../testing/temp_dir.ts";

const TYPES = pathToFileURL(resolve("methods/types.ts")).href;
const BASELINE = pathToFileURL(resolve("methods/baseline.ts")).href;

/** Writes `files` into a temporary directory; returns its path. */
async function _modules(files: Record<string, string>): Promise<string> {
  const dir = await tempDir("lce_modules_");
  for (const [name, text] of Object.entries(files)) await Deno.writeTextFile(join(dir, name), text);
  return dir;
}

const method = (name: string) =>
  `{ name: ${JSON.stringify(name)}, label: "L", description: "D", prepare: () => { throw 0; } }`;

Deno.test("method modules: a method, a list of them, TypeScript and JavaScript", async () => {
  const dir = await _modules({
    "one.ts": `import type { LceMethod } from "${TYPES}";
const m: LceMethod = ${method("mine")};
export default m;`,
    "two.js": `import { baseline } from "${BASELINE}";
export default [{ ...baseline, name: "b2", label: "B2" }, ${method("b3")}];`,
  });
  const ms = await loadMethodModules([join(dir, "one.ts"), join(dir, "two.js")]);
  assert.deepEqual(ms.map((m) => m.name), ["mine", "b2", "b3"]);
  const all = await allMethods([join(dir, "one.ts")]);
  assert.equal(all[all.length - 1].name, "mine");
  assert.ok(all.some((m) => m.name === "fused"));
});

Deno.test("method modules: every bad module is refused with one line naming it", async () => {
  const dir = await _modules({
    "syntax.ts": "export default {",
    "throws.ts": "throw new Error('boom at load');",
    "none.ts": "export const x = 1;",
    "empty.ts": "export default [];",
    "number.ts": "export default 42;",
    "noprepare.ts": `export default { name: "x", label: "L", description: "D" };`,
    "comma.ts": `export default ${method("a,b")};`,
    "nolabel.ts": `export default { name: "x", label: "", description: "D", prepare() {} };`,
    "badopt.ts": `export default { ...${method("x")}, unsupported: "no" };`,
    "listbad.ts": `export default [${method("ok")}, null];`,
    "builtin.ts": `export default ${method("fused")};`,
    "mine.ts": `export default ${method("mine")};`,
    "mine2.ts": `export default ${method("mine")};`,
    "twice.ts": `export default [${method("t")}, ${method("t")}];`,
  });
  const cases: [string[], RegExp][] = [
    [["missing.ts"], /missing\.ts: no such file$/],
    [[dir], /: no such file$/],
    [["syntax.ts"], /syntax\.ts: cannot load it: /],
    [["throws.ts"], /throws\.ts: cannot load it: Error: boom at load$/],
    [["none.ts"], /none\.ts: exports no method \(its default export must be an LceMethod/],
    [["empty.ts"], /empty\.ts: its default export is an empty list$/],
    [["number.ts"], /number\.ts: its default export is not an LceMethod: number, not an object$/],
    [["noprepare.ts"], /is not an LceMethod: prepare must be a function \(got undefined\)$/],
    [["comma.ts"], /is not an LceMethod: name must be a string of letters.*\(got "a,b"\)$/],
    [["nolabel.ts"], /is not an LceMethod: label must be a non-empty string \(got ""\)$/],
    [["badopt.ts"], /unsupported must be a function when given \(got "no"\)$/],
    [["listbad.ts"], /listbad\.ts: its default export \[1\] is not an LceMethod: null/],
    [["builtin.ts"], /builtin\.ts: method name 'fused' clashes with a built-in method/],
    [
      ["mine.ts", "mine2.ts"],
      /mine2\.ts: method name 'mine' clashes with the method of --method-module .*mine\.ts/,
    ],
    [
      ["twice.ts"],
      /twice\.ts: method name 't' clashes with the method of --method-module .*twice\.ts/,
    ],
  ];
  for (const [files, re] of cases) {
    const paths = files.map((f) => (f === dir || f === "missing.ts" ? f : join(dir, f)));
    await assert.rejects(loadMethodModules(paths), (e: unknown) => {
      assert.ok(e instanceof InputError, `${files}: ${e}`);
      assert.match(e.message, re, files.join(" "));
      assert.match(e.message, /^--method-module /);
      assert.ok(!e.message.includes("\n"), `one line: ${e.message}`);
      return true;
    });
  }
  assert.equal(notAMethod({ name: "m", label: "l", description: "d", prepare() {} }), undefined);
  const withArith = { name: "m", label: "l", description: "d", arithmetic: "x", prepare() {} };
  assert.equal(notAMethod(withArith), undefined);
  assert.match(notAMethod({ ...withArith, arithmetic: 3 })!, /^arithmetic must be/);
});
