/**
 * `./dev run -A scripts/fuzz.ts [--cases N] [--seed S] [--method NAME] [--max-dim D]
 * [--max-work W] [--verbose] [--adapter auto|software|hardware] [--webgpu deno|dawn|dawn-unchecked]`: the shape
 * fuzzer of testing/fuzz.ts run for longer than CI does.
 * Case i has seed S + i; every failure prints its seed, the whole case, what differed and the
 * command that replays it (`--seed S --cases 1`). Ends with `N passed, F failed` (and the skipped
 * count, when a method cannot run a case here); exits 1 when any case failed.
 * @module
 */
import { ADAPTER_FLAG, defineCommand, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine } from "../gpu/engine.ts";
import { methodByName, METHODS } from "../methods/mod.ts";
import { DEFAULT_BOUNDS, describeCase, FuzzRunner } from "../testing/fuzz.ts";

/** The command line of the shape fuzzer. */
export const FUZZ_COMMAND = defineCommand({
  name: "./dev run -A scripts/fuzz.ts",
  summary: "The shape fuzzer of testing/fuzz.ts, for longer than CI runs it; exit 1 when a " +
    "case failed.",
  flags: {
    cases: { type: "int", min: 1, help: "cases", default: 100 },
    seed: { type: "int", help: "seed of the first case (case i has seed S + i)", default: 1 },
    method: { type: "string", arg: "NAME", help: "one method", defaultText: "all" },
    "max-dim": { type: "int", min: 1, help: "largest n, v, d", default: DEFAULT_BOUNDS.maxDim },
    "max-work": { type: "int", min: 1, help: "largest n·v·d", default: DEFAULT_BOUNDS.maxWork },
    verbose: { type: "boolean", short: "v", help: "a line per case" },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
  },
});

/** Runs the fuzzer with `args`; returns the number of failed cases. */
export async function fuzzMain(args: string[]): Promise<number> {
  const parsed = FUZZ_COMMAND.parse(args);
  if (!parsed) return 0;
  const values = parsed.values;
  const cases = values.cases;
  const seed = values.seed;
  const bounds = { maxDim: values["max-dim"], maxWork: values["max-work"] };
  const methods = values.method === undefined ? METHODS : [methodByName(values.method)];
  const ctx = await GpuContext.create({
    poison: true,
    adapter: values.adapter as AdapterChoice,
    engine: values.webgpu as Engine,
  });
  console.log(
    `fuzz: ${cases} cases from seed ${seed} on ${ctx.report.description} ` +
      `(${deviceSummary(ctx.report)})` +
      ` (methods ${methods.map((m) => m.name).join(", ")}; n, v, d ≤ ${bounds.maxDim}, ` +
      `n·v·d ≤ ${bounds.maxWork})`,
  );
  const runner = new FuzzRunner(ctx, methods, bounds);
  const t0 = performance.now();
  const s = await runner.runMany(seed, cases, (o, i) => {
    if (o.status === "failed") console.log(`FAIL ${o.message}`);
    else if (o.status === "skipped" && o.message?.startsWith("limits: ")) {
      console.log(`skipped seed ${o.case.seed} (${o.case.method}): ${o.message}`);
    } else if (values.verbose || cases === 1) {
      console.log(`${o.status} ${describeCase(o.case)} ${o.message ?? ""}`.trimEnd());
    } else if ((i + 1) % 25 === 0) {
      console.log(`  ${i + 1}/${cases} (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
    }
  });
  await runner.close();
  ctx.destroy();
  const perMethod = Object.entries(s.msByMethod).map(([m, ms]) => `${m} ${(ms / 1000).toFixed(1)}`)
    .join(", ");
  console.log(`time by method (s): ${perMethod}`);
  if (s.skipped > 0) console.log(`${s.skipped} skipped (the method cannot run the case here)`);
  console.log(`${s.passed} passed, ${s.failed} failed`);
  return s.failed;
}

if (import.meta.main) {
  await runCli(async () => {
    const failed = await fuzzMain(Deno.args);
    if (failed > 0) Deno.exit(1);
  });
}
