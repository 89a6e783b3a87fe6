/**
 * `./dev task lce --e E.npy --c C.npy --targets T.npy --out DIR [--method NAME] [--beta B]
 * [--softcap S] [--reduction mean|sum|none] [--ignore-index I] [--dtype bf16|f16|f32]
 * [--grad-output G] [--adapter auto|software|hardware] [--webgpu deno|dawn|dawn-unchecked]`: the loss and both
 * gradients of the user's own tensors with one method, written as float32 `loss.npy`, `dE.npy`,
 * `dC.npy` into DIR.
 *
 * All or nothing: the flags and the three output paths are checked before anything is read or
 * run (directory writable, no output a directory or one of the inputs); the inputs are read
 * bounded (io/npy.ts: regular files only, rows no longer than one storage binding of the
 * adapter); the outputs are written to temporary files in DIR and renamed only when all three
 * are written, so a failure leaves every pre-existing output byte-identical. The host memory of
 * the files and their copies, then the GPU memory of the inputs and the method's calls, are
 * checked against the free memory before they are taken (measure/memory.ts). Bad input: one
 * line, exit 2; not enough memory, a failure of the GPU or the method: one line, exit 1.
 * @module
 */
import { join } from "node:path";
import { ADAPTER_FLAG, defineCommand, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { parseDtype, resolveOptions } from "../core/options.ts";
import { encodeNpy } from "../io/npy.ts";
import { readInputFiles } from "../io/npy_inputs.ts";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import { deviceFlags, GpuContext } from "../gpu/context.ts";
import { engineName } from "../gpu/engine.ts";
import { methodByName } from "../methods/mod.ts";
import { allMethods, METHOD_MODULE_FLAG } from "../measure/method_modules.ts";
import { cellNeed } from "../measure/measure.ts";
import { inputNeed } from "../measure/inputs.ts";
import { capAllocations, gpuBudget, npyInputsHostNeed, requireFits } from "../measure/memory.ts";
import { runMethod } from "../methods/run.ts";

/** The command line of `lce`. */
export const LCE_COMMAND = defineCommand({
  name: "./dev task lce",
  summary: "The loss and both gradients of your own .npy tensors with one method, written as " +
    "float32 loss.npy, dE.npy and dC.npy into --out (all three or none). It prints the β, " +
    "reduction and dtype it used: its defaults (β = 0, f32) differ from table3's (β = 0.1, bf16).",
  flags: {
    e: {
      type: "string",
      arg: "E.npy",
      help: "hidden states, n×d, float32 or float64",
      required: true,
    },
    c: {
      type: "string",
      arg: "C.npy",
      help: "classifier, v×d, float32 or float64",
      required: true,
    },
    targets: { type: "string", arg: "T.npy", help: "targets, n, int32 or int64", required: true },
    out: { type: "string", arg: "DIR", help: "output directory", required: true },
    method: { type: "string", help: "method (methods/mod.ts)", default: "fused" },
    beta: {
      type: "number",
      help: "label smoothing β in [0, 1]; 0 is plain cross-entropy (table3 and sweep default " +
        "to β = 0.1)",
      default: 0,
    },
    softcap: { type: "number", help: "logit softcap (> 0), none when absent" },
    reduction: { type: "string", help: "loss reduction", default: "mean", arg: "mean|sum|none" },
    "ignore-index": { type: "int", help: "target value ignored by the loss", default: -100 },
    dtype: {
      type: "string",
      help: "compute dtype of E and C (table3 and sweep default to bf16)",
      default: "f32",
      arg: "bf16|f16|f32",
    },
    "grad-output": { type: "number", help: "upstream gradient of the loss", default: 1 },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
    "method-module": METHOD_MODULE_FLAG,
  },
});

/** Runs the command with `args`. */
export async function lceMain(args: string[]): Promise<void> {
  const parsed = LCE_COMMAND.parse(args);
  if (!parsed) return;
  const f = parsed.values;
  const method = methodByName(f.method, await allMethods(f["method-module"]));
  const dtype = parseDtype(f.dtype);
  const opts = resolveOptions({
    beta: f.beta,
    softcap: f.softcap,
    reduction: f.reduction as "mean",
    ignoreIndex: f["ignore-index"],
  });
  const outputs = ["loss.npy", "dE.npy", "dC.npy"].map((name) => join(f.out, name));
  checkOutputs(outputs, [f.e, f.c, f.targets]);
  const files = { e: f.e, c: f.c, targets: f.targets };
  // the host memory the files and their copies take, before anything is read
  await requireFits(undefined, { hostBytes: npyInputsHostNeed(files), gpuBytes: 0 }, "lce");
  const ctx = await GpuContext.create(deviceFlags(f));
  try {
    // rows are bound whole (f32 on the host, at most 4 bytes a value on the GPU); a tensor is
    // sharded by rows, so its whole size is bounded by the machine's memory, not one binding
    const x = await readInputFiles(files, dtype, { maxRowBytes: ctx.maxBindingBytes });
    const { n, v, d } = x;
    // the GPU memory of the inputs and the method's calls, before anything is allocated
    const spec = { n, v, d, dtype };
    const inputs = { hostBytes: 0, gpuBytes: inputNeed({ ...spec, fixture: "files" }).gpuBytes };
    const need = cellNeed(method, spec, opts, "fwd+bwd", inputs);
    const free = await requireFits(ctx, need, `${method.name} at ${n} × ${v} × ${d} ${dtype}`);
    const limit = ctx.memory().liveBytes + gpuBudget(free);
    // runMethod validates x (sizes, targets, finite values) once, before anything is allocated
    const r = await capAllocations(
      ctx,
      limit,
      () => runMethod(ctx, method, x, opts, { dtype, gradOutput: f["grad-output"] }),
    );
    for (const [name, a] of [["loss", r.loss], ["dE", r.dE], ["dC", r.dC]] as const) {
      const bad = a.findIndex((z) => !Number.isFinite(z));
      if (bad >= 0) throw new Error(`${method.name} produced a non-finite ${name} at index ${bad}`);
    }
    await writeAllOrNothing([
      { path: outputs[0], bytes: encodeNpy(r.loss, opts.reduction === "none" ? [n] : []) },
      { path: outputs[1], bytes: encodeNpy(r.dE, [n, d]) },
      { path: outputs[2], bytes: encodeNpy(r.dC, [v, d]) },
    ]);
    const lossText = opts.reduction === "none" ? `${n} per-token losses` : `loss ${r.loss[0]}`;
    console.log(
      `${method.name} on ${
        engineName(ctx.engine)
      } (β = ${opts.beta}, reduction ${opts.reduction}, dtype ${dtype}${
        opts.softcap !== undefined ? `, softcap ${opts.softcap}` : ""
      }): ${lossText}; wrote loss.npy, dE.npy (${n}×${d}), dC.npy (${v}×${d}) to ${f.out}`,
    );
  } finally {
    ctx.destroy();
  }
}

if (import.meta.main) await runCli(() => lceMain(Deno.args));
