/**
 * `deno run -A scripts/bench_tc.ts [--shapes 4096,8192] [--variants a,b] [--out FILE.json]`: the
 * tensor-core GEMM (kernels/tc/) on one GPU in one run: the semantics probe first
 * (kernels/tc/tc_probe.ts: what the subgroup-matrix builtins do on this adapter against what the
 * emulation assumes), every tensor-core kernel compiled for the adapter
 * (kernels/tc/tc_catalog.ts; --skip-catalog leaves that out), each product variant checked against a float64 product at
 * small odd shapes (kernels/tc/tc_product_check.ts), then each variant's product (E·Cᵀ, bf16 →
 * f32 with K-contiguous operands, unless its suffix says otherwise) timed by GPU timestamps at
 * each shape, beside the FMA core's E·Cᵀ (kernels/matmul.ts, the 128×256 tile of scripts/bench_gemm.ts) on Deno's wgpu, where
 * the FMA rows of the table run. One table on stdout, and with --out the same as JSON; exit 1
 * when the probe or a variant's check fails or a kernel fails to compile (every row is still
 * measured); the whole run keeps within --budget seconds (later rows then say they were skipped).
 *
 * Variants are tile names of TC_BENCH_TILES (kernels/tc/tc_tiles.ts), optionally with `:f16`
 * (f16 inputs: no conversion), `:split` (A in f32 as hi and lo f16 parts, the baseline's gradient
 * products), `:gc` / `:gte` (the tensor-core dense paths' G·C and Gᵀ·E: G in f16, the other
 * operand transposed; at M×N×K: dE is n×d×chunk, dC chunk×d×n), `:gcp` (`:gc` with its full
 * tiles preloaded from the output, as the dense dE's) or a diagnostic `:copy-only` /
 * `:mma-only` (staging alone, arithmetic alone; wrong results, not checked). Runs on Dawn by default (tensor cores need it);
 * where the adapter offers no f16 subgroup matrices the tensor-core rows say why.
 * @module
 */
import { ADAPTER_FLAG, defineCommand, parseList, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { InputError } from "../core/errors.ts";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { parseEngine } from "../gpu/engine.ts";
import { TC_BENCH_VARIANTS, tcSupport, tcTileName } from "../kernels/tc/tc_tiles.ts";
import { BenchDeadline, tcBenchVariant, tcInputCache } from "../kernels/tc/tc_bench.ts";
import { checkVariant } from "../kernels/tc/tc_product_check.ts";
import { compileCatalog } from "../kernels/tc/tc_catalog.ts";
import { runProbe } from "../kernels/tc/tc_probe.ts";
import {
  err1,
  printRow,
  type Row,
  type Shape,
  timeForwards,
  timeShapes,
} from "../measure/tc_bench.ts";

/** The command line of `bench_tc.ts`. */
export const BENCH_TC_COMMAND = defineCommand({
  name: "deno run -A scripts/bench_tc.ts",
  summary: "Compiles every tensor-core kernel, checks each product variant at odd shapes, and " +
    "times E·Cᵀ for each variant beside the FMA core's (TFLOP/s = 2·M·N·K / GPU time).",
  flags: {
    shapes: {
      type: "string",
      arg: "S1,S2|MxNxK,...",
      help: "cubes or M×N×K",
      default: "4096,8192",
    },
    variants: {
      type: "string",
      arg: "V1,V2,...",
      help: "tile[:f16|:split|:gc|:gcp|:gte|:copy-only|:mma-only]",
      defaultText: "all",
    },
    reps: { type: "int", min: 1, help: "timed repetitions after 300 ms of warm-up", default: 5 },
    forward: {
      type: "string",
      arg: "N,V,D|none",
      help:
        "also time the tensor-core fused forward of each forward tile at this shape (cce, bf16)",
      default: "8192,256000,2304",
    },
    out: { type: "string", arg: "FILE", help: "write the results as JSON here" },
    budget: { type: "int", min: 10, help: "seconds the whole run may take", default: 140 },
    "skip-catalog": {
      type: "boolean",
      help: "leave out compiling every tensor-core kernel first (each variant is still compiled " +
        "and checked): a run of a few variants within a short budget",
    },
    webgpu: { ...WEBGPU_FLAG, default: "dawn" },
    adapter: ADAPTER_FLAG,
  },
});

function _shapes(s: string): Shape[] {
  return parseList("--shapes", s).map((x) => {
    const p = x.split("x").map(Number);
    const ok = (p.length === 1 || p.length === 3) && p.every((v) => Number.isInteger(v) && v > 0);
    if (!ok) throw new InputError(`--shapes: '${x}' is not N or MxNxK with positive integers`);
    return p.length === 1 ? { m: p[0], n: p[0], k: p[0] } : { m: p[0], n: p[1], k: p[2] };
  });
}

/** The --forward shape, or undefined for `none`. */
function _forwardShape(s: string): Shape | undefined {
  if (s === "none") return undefined;
  const p = s.split(",").map(Number);
  if (p.length !== 3 || !p.every((x) => Number.isInteger(x) && x > 0)) {
    throw new InputError(`--forward: '${s}' is not none or N,V,D with positive integers`);
  }
  return { m: p[0], n: p[1], k: p[2] };
}

/** Runs the command with `args` (throws InputError on bad flags; see runCli). */
export async function benchTcMain(args: string[]): Promise<number> {
  const parsed = BENCH_TC_COMMAND.parse(args);
  if (!parsed) return 0;
  const v = parsed.values;
  const shapes = _shapes(v.shapes), fwdShape = _forwardShape(v.forward);
  const names = v.variants === undefined ? TC_BENCH_VARIANTS : parseList("--variants", v.variants);
  const kernels = names.map(tcBenchVariant);
  const engine = parseEngine(v.webgpu);
  if (v.out !== undefined) checkOutputs([v.out]);
  const open = () => GpuContext.create({ engine, adapter: v.adapter as AdapterChoice });
  const dl = new BenchDeadline(v.budget * 1000);
  let ctx = await open();
  const sup = tcSupport(ctx);
  const rep = ctx.report;
  const configs = rep.subgroupMatrixConfigs.map((c) =>
    `${c.componentType}→${c.resultComponentType} ${c.M}×${c.N}×${c.K}`
  );
  const head = `${rep.description} (${rep.engineVersion}); subgroup size ${sup.sgSize}`;
  console.log(`adapter: ${head}; configs: ${configs.join(", ") || "none"}`);
  // what the builtins do here, before anything is built on them
  const probe = sup.reason ? undefined : await dl.race(runProbe(ctx, console.log), "probe", 30_000)
    .catch((e) => ({ ok: false, results: [], error: err1(e) }));
  if (probe) console.log(`probe: ${probe.ok ? "every case as the emulation assumes" : "FAIL"}`);
  const skip = v["skip-catalog"] === true;
  const compiled = sup.reason || dl.stuck || skip
    ? []
    : await dl.race(compileCatalog(ctx), "compile", dl.left());
  const failedCompiles = compiled.filter((c) => c.error);
  console.log(
    sup.reason
      ? `tensor cores: unsupported (${sup.reason})`
      : skip
      ? "catalog: not compiled (--skip-catalog)"
      : `compiled ${compiled.length} tensor-core kernels, ${failedCompiles.length} failed`,
  );
  for (const c of failedCompiles) console.log(`  compile FAIL ${c.name}: ${c.error}`);
  const rows: Row[] = [];
  let inputs = tcInputCache(ctx);
  for (const k of kernels) {
    if (ctx.lostReason) { // a variant lost the device: the next ones get a new one
      console.log(`device lost (${ctx.lostReason}): a new device for the next rows`);
      [ctx, inputs] = await open().then((c) => [c, tcInputCache(c)] as const);
    }
    const row: Row = { variant: k.name, tile: tcTileName(k.tile), times: [] };
    if (sup.reason || dl.stop) {
      row.check = sup.reason ? `unsupported: ${sup.reason}` : dl.stop;
    } else {
      try {
        row.check = await dl.race(checkVariant(ctx, k), `${k.name} check`);
        const o = { shapes, reps: v.reps };
        row.times = await dl.race(timeShapes(ctx, inputs, o, k), `${k.name} timing`);
      } catch (e) {
        row.check = `error: ${err1(e)}`;
      }
    }
    rows.push(row);
    printRow(row, shapes);
  }
  inputs.destroy();
  if (ctx.lostReason) ctx = await open();
  if (!sup.reason && fwdShape && !dl.stop) {
    rows.push(
      ...await timeForwards(ctx, fwdShape, v.reps, dl).catch((e) => {
        console.log(`forward: ${err1(e)}`);
        return [];
      }),
    );
  }
  if (!dl.stuck) ctx.destroy();
  // the FMA core where the table's FMA rows run: Deno's WebGPU (wgpu)
  if (!dl.stop) {
    const fma = await GpuContext.create({ engine: "deno", adapter: v.adapter as AdapterChoice });
    const fmaInputs = tcInputCache(fma);
    const o = { shapes, reps: v.reps };
    const times = await dl.race(timeShapes(fma, fmaInputs, o, null), "fma")
      .catch((e) => [{ error: err1(e) }]);
    rows.push({ variant: "fma 128x256 (wgpu)", times });
    printRow(rows[rows.length - 1], shapes);
    fmaInputs.destroy();
    fma.destroy();
  }
  if (v.out !== undefined) {
    const env = {
      adapter: rep.description,
      engine: rep.engineVersion,
      sgSize: sup.sgSize,
      configs,
    };
    const date = new Date().toISOString();
    const json = JSON.stringify({ env, date, shapes, probe, compiled, rows }, null, 1);
    await writeAllOrNothing([{ path: v.out, bytes: json }]);
  }
  const bad = sup.reason !== undefined || failedCompiles.length > 0 || probe?.ok === false ||
    dl.stuck || rows.some((r) => r.check?.includes("FAIL") || r.check?.startsWith("error"));
  // a step that never answered leaves Dawn's work pending: leave without waiting for it
  if (dl.stuck) Deno.exit(1);
  return bad ? 1 : 0;
}

if (import.meta.main) await runCli(() => benchTcMain(Deno.args));
