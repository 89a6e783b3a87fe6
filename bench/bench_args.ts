/**
 * The arguments of `deno bench -A bench/ -- [--method-module PATH]...`: Deno passes what follows
 * `--` to every bench file. Bad arguments stop the bench with one line (exit 2).
 * @module
 */
import { defineCommand, exitCodeOf } from "../core/cli.ts";
import { oneLine } from "../core/errors.ts";
import { allMethods, METHOD_MODULE_FLAG } from "../measure/method_modules.ts";
import type { LceMethod } from "../methods/types.ts";

/** The command line after `deno bench -A bench/ --`. */
export const BENCH_COMMAND = defineCommand({
  name: "deno bench -A bench/ --",
  summary: "Wall-time benchmarks of every method (bench/lce_bench.ts); your own methods join " +
    "with --method-module.",
  flags: { "method-module": METHOD_MODULE_FLAG },
});

/**
 * The built-in methods and those of `--method-module` (bad arguments or modules: one line, exit
 * 2; `--help`: the usage, exit 0).
 */
export async function benchMethods(): Promise<LceMethod[]> {
  try {
    const p = BENCH_COMMAND.parse(Deno.args);
    if (!p) Deno.exit(0);
    return await allMethods(p.values["method-module"]);
  } catch (e) {
    console.error(`error: ${oneLine(e)}`);
    Deno.exit(exitCodeOf(e));
  }
}
