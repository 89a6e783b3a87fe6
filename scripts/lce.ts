/**
 * `deno task lce --e E.npy --c C.npy --targets T.npy --out DIR [--method NAME] [--beta B]
 * [--softcap S] [--reduction mean|sum|none] [--ignore-index I] [--dtype bf16|f16|f32]
 * [--grad-output G]`: the loss and both gradients of the user's own tensors with one method,
 * written as float32 `loss.npy`, `dE.npy`, `dC.npy` into DIR. Bad input gets one line and a
 * non-zero exit, and nothing is written (outputs go to temporary names, renamed at the end).
 * @module
 */
import { parseArgs } from "node:util";
import { mkdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { intFlag, numberFlag, runCli } from "../core/cli.ts";
import { check, InputError } from "../core/errors.ts";
import { checkInputs, type HostInputs, parseDtype, resolveOptions } from "../core/options.ts";
import { roundArray } from "../core/dtype.ts";
import { readNpy, toFloat32, toInt32Targets, writeNpy } from "../io/npy.ts";
import { GpuContext } from "../gpu/context.ts";
import { methodByName } from "../methods/mod.ts";
import { runMethod } from "../methods/run.ts";

const USAGE =
  "usage: deno task lce --e E.npy --c C.npy --targets T.npy --out DIR [--method NAME] " +
  "[--beta B] [--softcap S] [--reduction mean|sum|none] [--ignore-index I] [--dtype bf16|f16|f32] " +
  "[--grad-output G] [--adapter auto|software|hardware]\n" +
  "  defaults: --method fused, --beta 0 (plain cross-entropy; note: table3 and sweep default to " +
  "β = 0.1), --reduction mean, --dtype f32 (table3 and sweep default to bf16), --ignore-index " +
  "-100, --grad-output 1. The values used are printed with the result.";

/** Runs the command with `args`. */
export async function lceMain(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      e: { type: "string" },
      c: { type: "string" },
      targets: { type: "string" },
      out: { type: "string" },
      method: { type: "string", default: "fused" },
      beta: { type: "string" },
      softcap: { type: "string" },
      reduction: { type: "string", default: "mean" },
      "ignore-index": { type: "string" },
      dtype: { type: "string", default: "f32" },
      "grad-output": { type: "string" },
      adapter: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  for (const k of ["e", "c", "targets", "out"] as const) {
    if (!values[k]) throw new InputError(`missing --${k} (${USAGE})`);
  }
  const method = methodByName(values.method!);
  const dtype = parseDtype(values.dtype!);
  const opts = resolveOptions({
    beta: numberFlag("beta", values.beta, 0),
    softcap: values.softcap === undefined ? undefined : numberFlag("softcap", values.softcap, 0),
    reduction: values.reduction as "mean",
    ignoreIndex: values["ignore-index"] === undefined
      ? -100
      : Math.trunc(numberFlag("ignore-index", values["ignore-index"], -100)),
  });
  const adapter = values.adapter;
  check(
    adapter === undefined || ["auto", "software", "hardware"].includes(adapter),
    `--adapter must be auto, software or hardware, got '${adapter}'`,
  );
  const eNpy = await readNpy(values.e!), cNpy = await readNpy(values.c!);
  const tNpy = await readNpy(values.targets!);
  check(eNpy.shape.length === 2, `${values.e}: E must be 2-D (n×d), got shape (${eNpy.shape})`);
  check(cNpy.shape.length === 2, `${values.c}: C must be 2-D (v×d), got shape (${cNpy.shape})`);
  check(
    tNpy.shape.length === 1,
    `${values.targets}: targets must be 1-D (n), got shape (${tNpy.shape})`,
  );
  const [n, d] = eNpy.shape, [v, dc] = cNpy.shape;
  check(dc === d, `hidden sizes differ: E is ${n}×${d}, C is ${v}×${dc}`);
  check(tNpy.shape[0] === n, `targets has ${tNpy.shape[0]} entries, E has ${n} rows`);
  const x: HostInputs = {
    n,
    v,
    d,
    e: roundArray(toFloat32(eNpy, values.e!), dtype),
    c: roundArray(toFloat32(cNpy, values.c!), dtype),
    targets: toInt32Targets(tNpy, values.targets!),
  };
  checkInputs(x, opts);
  const g = values["grad-output"] === undefined
    ? 1
    : numberFlag("grad-output", values["grad-output"], 1);
  void intFlag;
  const ctx = await GpuContext.create({ adapter: adapter as "auto" | undefined });
  const r = await runMethod(ctx, method, x, opts, { dtype, gradOutput: g });
  for (const [name, a] of [["loss", r.loss], ["dE", r.dE], ["dC", r.dC]] as const) {
    const bad = a.findIndex((z) => !Number.isFinite(z));
    if (bad >= 0) throw new Error(`${method.name} produced a non-finite ${name} at index ${bad}`);
  }
  // Write everything under temporary names first; rename only when all three are written.
  mkdirSync(values.out!, { recursive: true });
  const tag = `.tmp-${Deno.pid}`;
  const files: [string, Float32Array, number[]][] = [
    ["loss.npy", r.loss, opts.reduction === "none" ? [n] : []],
    ["dE.npy", r.dE, [n, d]],
    ["dC.npy", r.dC, [v, d]],
  ];
  try {
    for (const [f, a, shape] of files) await writeNpy(join(values.out!, f + tag), a, shape);
    for (const [f] of files) renameSync(join(values.out!, f + tag), join(values.out!, f));
  } finally {
    for (const [f] of files) rmSync(join(values.out!, f + tag), { force: true });
  }
  const lossText = opts.reduction === "none" ? `${n} per-token losses` : `loss ${r.loss[0]}`;
  console.log(
    `${method.name} (β = ${opts.beta}, reduction ${opts.reduction}, dtype ${dtype}${
      opts.softcap !== undefined ? `, softcap ${opts.softcap}` : ""
    }): ${lossText}; wrote loss.npy, dE.npy (${n}×${d}), dC.npy (${v}×${d}) to ${values.out}`,
  );
  ctx.destroy();
}

if (import.meta.main) await runCli(() => lceMain(Deno.args));
