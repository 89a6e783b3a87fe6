/**
 * `deno run -A scripts/bench_tc.ts [--shapes 4096,8192] [--variants a,b] [--out FILE.json]`: the
 * tensor-core GEMM (kernels/tc/) on one GPU in one run: every tensor-core kernel compiled for the
 * adapter (kernels/tc/tc_catalog.ts), each product variant checked against a float64 product at
 * small odd shapes (kernels/tc/tc_product_check.ts), then E·Cᵀ (bf16 → f32, K-contiguous
 * operands) timed by GPU timestamps at each shape for every variant, beside the FMA core's
 * product (kernels/matmul.ts, the 128×256 tile of scripts/bench_gemm.ts) on Deno's wgpu, where
 * the FMA rows of the table run. One table on stdout, and with --out the same as JSON; exit 1
 * when a kernel fails to compile or a variant's check fails (every row is still measured).
 *
 * Variants are tile names of TC_BENCH_TILES (kernels/tc/tc_tiles.ts), optionally with `:f16`
 * (f16 inputs: no conversion) or a diagnostic `:copy-only` / `:mma-only` (staging alone,
 * arithmetic alone; wrong results, not checked). Runs on Dawn by default (tensor cores need it);
 * where the adapter offers no f16 subgroup matrices the tensor-core rows say why.
 * @module
 */
import { ADAPTER_FLAG, defineCommand, parseList, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { InputError } from "../core/errors.ts";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { parseEngine } from "../gpu/engine.ts";
import type { Recorder } from "../gpu/recorder.ts";
import { timeRecorder, timeRepetitions } from "../measure/timing.ts";
import { TC_BENCH_VARIANTS, tcSupport, tcTileName } from "../kernels/tc/tc_tiles.ts";
import type { TcMatmulKernel } from "../kernels/tc/tc_matmul.ts";
import {
  fmaProductRecorder,
  TC_FORWARD_BENCH_TILES,
  tcBenchVariant,
  tcForwardRecorder,
  tcInputCache,
  tcProductRecorder,
} from "../kernels/tc/tc_bench.ts";
import { makeDeviceInputs } from "../measure/inputs.ts";
import { checkVariant } from "../kernels/tc/tc_product_check.ts";
import { compileCatalog } from "../kernels/tc/tc_catalog.ts";

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
      help: "tile[:f16|:copy-only|:mma-only]",
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
    webgpu: { ...WEBGPU_FLAG, default: "dawn" },
    adapter: ADAPTER_FLAG,
  },
});

type Shape = { m: number; n: number; k: number };

function _shapes(s: string): Shape[] {
  return parseList("--shapes", s).map((x) => {
    const p = x.split("x").map(Number);
    const ok = (p.length === 1 || p.length === 3) && p.every((v) => Number.isInteger(v) && v > 0);
    if (!ok) throw new InputError(`--shapes: '${x}' is not N or MxNxK with positive integers`);
    return p.length === 1 ? { m: p[0], n: p[0], k: p[0] } : { m: p[0], n: p[1], k: p[2] };
  });
}

/** Row of the results. */
interface Row {
  variant: string;
  tile?: string;
  check?: string;
  times: ({ timeMs: number; minMs: number; maxMs: number; tflops: number } | { error: string })[];
}

const err1 = (e: unknown) => (e as Error).message.split("\n")[0];

/** Times E·Cᵀ at every shape for one product (tensor cores when `k`, else the FMA core). */
async function _timeShapes(
  ctx: GpuContext,
  inputs: ReturnType<typeof tcInputCache>,
  o: { shapes: Shape[]; reps: number },
  k: TcMatmulKernel | null,
) {
  const times: Row["times"] = [];
  for (const s of o.shapes) {
    const x = () => inputs.get(s, k?.aDtype === "f16" ? "f16" : "bf16");
    const flop = 2 * s.m * s.n * s.k;
    times.push(
      await _timed(
        ctx,
        o.reps,
        flop,
        () => k ? tcProductRecorder(ctx, k, x()) : fmaProductRecorder(ctx, x()),
      ),
    );
  }
  return times;
}

/** The median GPU time of a prepared recorder (300 ms of warm-up first), or the error. */
async function _timed(
  ctx: GpuContext,
  reps: number,
  flop: number,
  prepare: () => Promise<{ record(rec: Recorder): void; done(): void }>,
): Promise<Row["times"][number]> {
  try {
    const p = await prepare();
    const r = await timeRepetitions(
      { warmup: 1, warmupMs: 300, reps },
      () => ctx.scoped(() => timeRecorder(ctx, p.record)),
    );
    p.done();
    const sorted = [...r.times].sort((a, b) => a - b);
    const t = { timeMs: r.median, minMs: sorted[0], maxMs: sorted[sorted.length - 1] };
    return { ...t, tflops: flop / t.timeMs / 1e9 };
  } catch (e) {
    return { error: err1(e) };
  }
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

/** Times the tensor-core fused forward of every forward tile (cce inputs, bf16, β = 0.1). */
async function _forwards(ctx: GpuContext, s: Shape, reps: number): Promise<Row[]> {
  const x = await makeDeviceInputs(ctx, { fixture: "cce", n: s.m, v: s.n, d: s.k, dtype: "bf16" });
  const rows: Row[] = [];
  for (const [name, tile] of Object.entries(TC_FORWARD_BENCH_TILES)) {
    const t = await _timed(
      ctx,
      reps,
      2 * s.m * s.n * s.k,
      () => tcForwardRecorder(ctx, tile, x.inputs),
    );
    rows.push({ variant: `forward ${name}`, tile: tcTileName(tile), times: [t] });
    _print(rows[rows.length - 1], [s]);
  }
  x.destroy();
  return rows;
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
  let ctx = await open();
  const sup = tcSupport(ctx);
  const rep = ctx.report;
  const configs = rep.subgroupMatrixConfigs.map((c) =>
    `${c.componentType}→${c.resultComponentType} ${c.M}×${c.N}×${c.K}`
  );
  const head = `${rep.description} (${rep.engineVersion}); subgroup size ${sup.sgSize}`;
  console.log(`adapter: ${head}; configs: ${configs.join(", ") || "none"}`);
  const compiled = sup.reason ? [] : await compileCatalog(ctx);
  const failedCompiles = compiled.filter((c) => c.error);
  console.log(
    sup.reason
      ? `tensor cores: unsupported (${sup.reason})`
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
    if (sup.reason) {
      row.check = `unsupported: ${sup.reason}`;
    } else {
      try {
        row.check = await checkVariant(ctx, k);
        row.times = await _timeShapes(ctx, inputs, { shapes, reps: v.reps }, k);
      } catch (e) {
        row.check = `error: ${err1(e)}`;
      }
    }
    rows.push(row);
    _print(row, shapes);
  }
  inputs.destroy();
  if (ctx.lostReason) ctx = await open();
  if (!sup.reason && fwdShape) rows.push(...await _forwards(ctx, fwdShape, v.reps));
  ctx.destroy();
  // the FMA core where the table's FMA rows run: Deno's WebGPU (wgpu)
  const fma = await GpuContext.create({ engine: "deno", adapter: v.adapter as AdapterChoice });
  const fmaInputs = tcInputCache(fma);
  const times = await _timeShapes(fma, fmaInputs, { shapes, reps: v.reps }, null);
  rows.push({ variant: "fma 128x256 (wgpu)", times });
  _print(rows[rows.length - 1], shapes);
  fmaInputs.destroy();
  fma.destroy();
  if (v.out !== undefined) {
    const env = {
      adapter: rep.description,
      engine: rep.engineVersion,
      sgSize: sup.sgSize,
      configs,
    };
    const date = new Date().toISOString();
    const json = JSON.stringify({ env, date, shapes, compiled, rows }, null, 1);
    await writeAllOrNothing([{ path: v.out, bytes: json }]);
  }
  const bad = sup.reason !== undefined || failedCompiles.length > 0 ||
    rows.some((r) => r.check?.includes("FAIL"));
  return bad ? 1 : 0;
}

function _print(r: Row, shapes: Shape[]): void {
  const cells = r.times.map((t, i) => {
    const s = shapes[i];
    return "error" in t
      ? `${s.m}×${s.n}×${s.k}: ${t.error}`
      : `${s.m}×${s.n}×${s.k} ${t.timeMs.toFixed(3)} ms ${t.tflops.toPrecision(4)} TFLOP/s`;
  });
  console.log(`${r.variant.padEnd(28)} ${(r.check ?? "").padEnd(24)} ${cells.join(" | ")}`);
}

if (import.meta.main) await runCli(() => benchTcMain(Deno.args));
