/**
 * `deno run -A scripts/bench_tc.ts [--shapes 4096,8192] [--variants a,b] [--out FILE.json]`: the
 * tensor-core GEMM (kernels/tc/) on one GPU in one run: every tensor-core kernel compiled for the
 * adapter (kernels/tc/tc_catalog.ts), each product variant checked against a float64 product at
 * small odd shapes (kernels/tc/tc_product_check.ts), then E·Cᵀ (bf16 → f32, K-contiguous
 * operands) timed by GPU timestamps at each shape for every variant, beside the FMA core's
 * product (kernels/matmul.ts, the 128×256 tile of scripts/bench_gemm.ts) on this engine and on
 * Deno's wgpu. One table on stdout, and with --out the same as JSON.
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
import { createTensor, type DeviceTensor, upload } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { timeRecorder, timeRepetitions } from "../measure/timing.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
import { TILE_HW_WIDE } from "../kernels/gemm_codegen.ts";
import { TC_BENCH_TILES, tcSupport, tcTileName } from "../kernels/tc/tc_tiles.ts";
import { prepareTcMatmul, type TcMatmulKernel } from "../kernels/tc/tc_matmul.ts";
import { prepareTcScales } from "../kernels/tc/tc_scale.ts";
import { checkProduct } from "../kernels/tc/tc_product_check.ts";
import { compileCatalog } from "../kernels/tc/tc_catalog.ts";

const DEFAULT_VARIANTS = [
  ...Object.keys(TC_BENCH_TILES),
  "t128_k32_db:f16",
  "t128x256_k16_db:f16",
  "t128_k32_db:copy-only",
  "t128_k32_db:mma-only",
  "t128x256_k16_db:copy-only",
  "t128x256_k16_db:mma-only",
];

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

function _kernel(v: string): TcMatmulKernel & { name: string } {
  const [tile, opt, ...rest] = v.split(":");
  const ok = Object.hasOwn(TC_BENCH_TILES, tile) && rest.length === 0 &&
    [undefined, "f16", "copy-only", "mma-only"].includes(opt);
  if (!ok) {
    throw new InputError(
      `--variants: unknown '${v}' (tiles: ${Object.keys(TC_BENCH_TILES).join(", ")}; ` +
        "suffixes :f16, :copy-only, :mma-only)",
    );
  }
  const dt = opt === "f16" ? "f16" : "bf16";
  const diag = opt === "copy-only" || opt === "mma-only" ? opt : undefined;
  const t = TC_BENCH_TILES[tile];
  return { name: v, tile: t, aDtype: dt, bDtype: dt, aTrans: false, bTrans: false, diag };
}

/** Row of the results. */
interface Row {
  variant: string;
  tile?: string;
  check?: string;
  times: ({ timeMs: number; minMs: number; maxMs: number; tflops: number } | { error: string })[];
}

const err1 = (e: unknown) => (e as Error).message.split("\n")[0];

/** Inputs of one shape on a context: E (m×k), C (n×k) in `dt`, and the f32 output. */
function _inputs(ctx: GpuContext, s: Shape, dt: "bf16" | "f16") {
  const mk = (rows: number, cols: number, dtype: "bf16" | "f16" | "f32", label: string) =>
    createTensor(ctx, { dtype, rows, cols, role: "workspace", label });
  const e = mk(s.m, s.k, dt, "E"), c = mk(s.n, s.k, dt, "C");
  const fill = (t: DeviceTensor, phase: number) => {
    const h = new Float32Array(t.rows * t.cols);
    for (let i = 0; i < h.length; i++) h[i] = Math.sin(i * 0.37 + phase) * 0.5;
    upload(ctx, t, h);
  };
  fill(e, 0);
  fill(c, 1);
  return { e, c, out: mk(s.m, s.n, "f32", "out") };
}

/** Median GPU ms of `record` (300 ms of warm-up first). */
async function _time(ctx: GpuContext, reps: number, record: Parameters<typeof timeRecorder>[1]) {
  const r = await timeRepetitions(
    { warmup: 1, warmupMs: 300, reps },
    () => ctx.scoped(() => timeRecorder(ctx, record)),
  );
  const s = [...r.times].sort((a, b) => a - b);
  return { timeMs: r.median, minMs: s[0], maxMs: s[s.length - 1] };
}

/** Times E·Cᵀ of every shape for one product (tensor cores when `tc`, else the FMA core). */
async function _timeShapes(
  ctx: GpuContext,
  shapes: Shape[],
  reps: number,
  k: TcMatmulKernel | null,
) {
  const times: Row["times"] = [];
  for (const s of shapes) {
    const x = _inputs(ctx, s, k?.aDtype === "f16" ? "f16" : "bf16");
    try {
      const a = { tensor: x.e, trans: false }, b = { tensor: x.c, trans: false };
      let t;
      if (k) {
        const mm = await prepareTcMatmul(ctx, k);
        const sc = await prepareTcScales(ctx);
        const bufs = sc.allocate(ctx);
        await ctx.scoped(async () => {
          const rec = new Recorder(ctx);
          sc.record(rec, { tensors: [x.e, x.c], into: bufs });
          await rec.finish();
        });
        const scales = { buffer: bufs.scales, a: 0, b: 1 };
        t = await _time(ctx, reps, (rec) => mm.record(rec, { a, b, out: x.out, scales }));
        mm.release();
        bufs.scales.destroy();
        bufs.maxBits.destroy();
      } else {
        const mm = await prepareMatmul(ctx, {
          tile: TILE_HW_WIDE,
          aDtype: "bf16",
          bDtype: "bf16",
          aTrans: false,
          bTrans: false,
        });
        t = await _time(ctx, reps, (rec) => mm.record(rec, { a, b, out: x.out }));
      }
      times.push({ ...t, tflops: (2 * s.m * s.n * s.k) / t.timeMs / 1e9 });
    } catch (e) {
      times.push({ error: err1(e) });
    } finally {
      for (const t of [x.e, x.c, x.out]) t.destroy();
    }
  }
  return times;
}

/** Checks a variant at two odd shapes (scalar loads, then vector loads with partial tiles). */
async function _check(ctx: GpuContext, k: TcMatmulKernel): Promise<string> {
  if (k.diag) return "diagnostic";
  const parts: string[] = [];
  for (const [m, n, kk] of [[197, 133, 77], [264, 200, 136]]) {
    const r = await checkProduct(ctx, { kernel: k, m, n, k: kk, seed: m });
    parts.push(
      r.ok
        ? `ok ${r.worst.toFixed(3)}`
        : `FAIL ${r.worst.toExponential(1)} at ${JSON.stringify(r.at)}`,
    );
  }
  return parts.join("; ");
}

/** Runs the command with `args` (throws InputError on bad flags; see runCli). */
export async function benchTcMain(args: string[]): Promise<number> {
  const parsed = BENCH_TC_COMMAND.parse(args);
  if (!parsed) return 0;
  const v = parsed.values;
  const shapes = _shapes(v.shapes);
  const kernels =
    (v.variants === undefined ? DEFAULT_VARIANTS : parseList("--variants", v.variants)).map(
      _kernel,
    );
  const engine = parseEngine(v.webgpu);
  if (v.out !== undefined) checkOutputs([v.out]);
  const ctx = await GpuContext.create({ engine, adapter: v.adapter as AdapterChoice });
  const sup = tcSupport(ctx);
  const rep = ctx.report;
  console.log(
    `adapter: ${rep.description} (${rep.engineVersion}); subgroup size ${sup.sgSize}; ` +
      `configs: ${
        rep.subgroupMatrixConfigs.map((c) =>
          `${c.componentType}→${c.resultComponentType} ${c.M}×${c.N}×${c.K}`
        ).join(", ") || "none"
      }`,
  );
  const compiled = sup.reason ? [] : await compileCatalog(ctx);
  const failedCompiles = compiled.filter((c) => c.error);
  console.log(
    sup.reason
      ? `tensor cores: unsupported (${sup.reason})`
      : `compiled ${compiled.length} tensor-core kernels, ${failedCompiles.length} failed`,
  );
  for (const c of failedCompiles) console.log(`  compile FAIL ${c.name}: ${c.error}`);
  const rows: Row[] = [];
  for (const k of kernels) {
    const row: Row = { variant: k.name, tile: tcTileName(k.tile), times: [] };
    if (sup.reason) {
      row.check = `unsupported: ${sup.reason}`;
    } else {
      try {
        row.check = await _check(ctx, k);
        row.times = await _timeShapes(ctx, shapes, v.reps, k);
      } catch (e) {
        row.check = `error: ${err1(e)}`;
      }
    }
    rows.push(row);
    _print(row, shapes);
  }
  rows.push({ variant: `fma (${engine})`, times: await _timeShapes(ctx, shapes, v.reps, null) });
  _print(rows[rows.length - 1], shapes);
  ctx.destroy();
  if (engine === "dawn") {
    const wgpu = await GpuContext.create({ engine: "deno", adapter: v.adapter as AdapterChoice });
    rows.push({ variant: "fma (deno)", times: await _timeShapes(wgpu, shapes, v.reps, null) });
    _print(rows[rows.length - 1], shapes);
    wgpu.destroy();
  }
  if (v.out !== undefined) {
    const env = {
      adapter: rep.description,
      engine: rep.engineVersion,
      sgSize: sup.sgSize,
      configs: rep.subgroupMatrixConfigs,
      deno: Deno.version.deno,
      date: new Date().toISOString(),
    };
    const json = JSON.stringify({ env, shapes, compiled, rows }, null, 1);
    await writeAllOrNothing([{ path: v.out, bytes: json }]);
  }
  const bad = failedCompiles.length > 0 || rows.some((r) => r.check?.includes("FAIL"));
  return bad ? 1 : 0;
}

function _print(r: Row, shapes: Shape[]): void {
  const cells = r.times.map((t, i) => {
    const s = shapes[i];
    return "error" in t
      ? `${s.m}×${s.n}×${s.k}: ${t.error}`
      : `${s.m}×${s.n}×${s.k} ${t.timeMs.toFixed(3)} ms ${t.tflops.toFixed(1)} TFLOP/s`;
  });
  console.log(`${r.variant.padEnd(28)} ${(r.check ?? "").padEnd(24)} ${cells.join(" | ")}`);
}

if (import.meta.main) await runCli(() => benchTcMain(Deno.args));
