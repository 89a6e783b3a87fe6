/**
 * Methods brought by the user: `--method-module PATH` (repeatable) on table3, sweep, gate, lce
 * and the benches loads a TypeScript or JavaScript module whose default export is an
 * {@link LceMethod} or a list of them (the contract: methods/types.ts, docs/harness.md). Their
 * rows join every report like the built-in ones. A module that does not load, exports no method,
 * exports something that is not an LceMethod, or whose method name clashes with a built-in
 * method or another module's is refused with one line (InputError: exit 2), before any GPU work.
 * @module
 */
import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { check, InputError, oneLine } from "../core/errors.ts";
import { METHODS, parseMethods } from "../methods/mod.ts";
import type { LceMethod } from "../methods/types.ts";

/** The flag every command that measures methods takes. */
export const METHOD_MODULE_FLAG = {
  type: "string",
  arg: "PATH",
  multiple: true,
  help: "a module whose default export is an LceMethod or a list of them (repeatable; " +
    "docs/harness.md)",
} as const;

/** Characters a method name may hold: it appears in `--methods` lists, file names and CSV. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._+-]*$/;

/**
 * Why `m` is not an LceMethod (a name matching {@link NAME}, a label and a description that are
 * non-empty strings, a prepare function, unsupported/estimateBytes functions and a non-empty
 * arithmetic string when present),
 * or undefined when it is one.
 */
export function notAMethod(m: unknown): string | undefined {
  if (m === null || typeof m !== "object") {
    return `${m === null ? "null" : typeof m}, not an object`;
  }
  const o = m as Record<string, unknown>;
  if (typeof o.name !== "string" || !NAME.test(o.name)) {
    return `name must be a string of letters, digits and . _ + - (got ${_show(o.name)})`;
  }
  for (const k of ["label", "description"]) {
    if (typeof o[k] !== "string" || o[k] === "") {
      return `${k} must be a non-empty string (got ${_show(o[k])})`;
    }
  }
  if (o.arithmetic !== undefined && (typeof o.arithmetic !== "string" || o.arithmetic === "")) {
    return `arithmetic must be a non-empty string when given (got ${_show(o.arithmetic)})`;
  }
  if (typeof o.prepare !== "function") {
    return `prepare must be a function (got ${_show(o.prepare)})`;
  }
  for (const k of ["unsupported", "estimateBytes"]) {
    if (o[k] !== undefined && typeof o[k] !== "function") {
      return `${k} must be a function when given (got ${_show(o[k])})`;
    }
  }
  return undefined;
}

function _show(x: unknown): string {
  if (typeof x === "string") return JSON.stringify(x.length > 40 ? x.slice(0, 40) + "…" : x);
  if (typeof x === "function") return "a function";
  if (Array.isArray(x)) return "an array";
  return x === null ? "null" : typeof x === "object" ? "an object" : String(x);
}

/**
 * Loads the methods of `paths` (relative to the working directory) in order, checked as the
 * module doc says against `builtins` (default {@link METHODS}) and each other.
 */
export async function loadMethodModules(
  paths: readonly string[],
  builtins: readonly LceMethod[] = METHODS,
): Promise<LceMethod[]> {
  const out: LceMethod[] = [];
  const owner = new Map<string, string>(builtins.map((m) => [m.name, "a built-in method"]));
  for (const path of paths) {
    const what = `--method-module ${path}`;
    const abs = resolve(path);
    check(existsSync(abs) && statSync(abs).isFile(), `${what}: no such file`);
    let mod: Record<string, unknown>;
    try {
      mod = await import(pathToFileURL(abs).href);
    } catch (e) {
      throw new InputError(`${what}: cannot load it: ${oneLine(e)}`);
    }
    const exported = mod.default;
    check(
      exported !== undefined,
      `${what}: exports no method (its default export must be an LceMethod or a list of them)`,
    );
    const list = Array.isArray(exported) ? exported : [exported];
    check(list.length > 0, `${what}: its default export is an empty list`);
    list.forEach((m, i) => {
      const why = notAMethod(m);
      const which = Array.isArray(exported) ? `default export [${i}]` : "default export";
      check(why === undefined, `${what}: its ${which} is not an LceMethod: ${why}`);
      const name = (m as LceMethod).name;
      const other = owner.get(name);
      check(
        other === undefined,
        `${what}: method name '${name}' clashes with ${other} (rename the module's method)`,
      );
      owner.set(name, `the method of --method-module ${path}`);
      out.push(m as LceMethod);
    });
  }
  return out;
}

/** The built-in methods followed by those of `--method-module` (the registry of a command). */
export async function allMethods(paths: readonly string[]): Promise<LceMethod[]> {
  return [...METHODS, ...(await loadMethodModules(paths))];
}

/**
 * The methods of a `--methods a,b` list (all when undefined) among the built-in ones and those of
 * the `--method-module` paths.
 */
export async function parseMethodList(
  list: string | undefined,
  paths: readonly string[],
): Promise<LceMethod[]> {
  return parseMethods(list, await allMethods(paths));
}
