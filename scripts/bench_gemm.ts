/**
 * `deno run -A scripts/bench_gemm.ts [--n N --v V --d D --dtype bf16 --reps R --tiles a,b
 * --cases x,y --out FILE.json]`: times the GEMM core (kernels/matmul.ts) on every product the
 * methods run at one shape (default the paper's; the products: tuning/gemm_cases.ts), for each
 * tile candidate (tuning/gemm_candidates.ts), by GPU timestamps.
 *
 * Effective TFLOP/s = 2·M·N·K / GPU time. Results go to stdout and, with --out, to JSON with the
 * adapter and the date. The operands are zero-filled except E and C (the time does not depend on
 * the values). `--splitk` lists split-K slice counts (`auto` or positive integers) tried for each
 * tile. The flags are declared with core/cli.ts (`--help`); bad flags (unknown tiles or cases
 * included) and an unwritable --out are one line `error: …` and exit 2 before any GPU work; a
 * product that fails (e.g. out of memory) is reported in its row and the run goes on.
 * @module
 */
import {
  ADAPTER_FLAG,
  defineCommand,
  parseIntValue,
  parseList,
  runCli,
  WEBGPU_FLAG,
} from "../core/cli.ts";
import { InputError } from "../core/errors.ts";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import { type Dtype, parseDtype } from "../core/options.ts";
import { deviceFlags, GpuContext } from "../gpu/context.ts";
import { deviceSummary } from "../gpu/engine.ts";
import { createTensor, type TensorDtype, upload } from "../gpu/tensor.ts";
import { ligerChunkSize } from "../methods/liger.ts";
import { GEMM_CASES, type GemmCaseName, gemmCases } from "../tuning/gemm_cases.ts";
import { GEMM_TILE_CANDIDATES } from "../tuning/gemm_candidates.ts";
import { timeGemmCase } from "../tuning/gemm_bench.ts";

/** The command line of `bench_gemm.ts`. */
export const BENCH_GEMM_COMMAND = defineCommand({
  name: "deno run -A scripts/bench_gemm.ts",
  summary: "Times the GEMM core (kernels/matmul.ts) on every product the methods run at one " +
    "shape, for each tile candidate and split-K count, by GPU timestamps (TFLOP/s = 2·M·N·K / " +
    "GPU time).",
  flags: {
    n: { type: "int", min: 1, help: "tokens", default: 8192 },
    v: { type: "int", min: 1, help: "vocabulary", default: 256000 },
    d: { type: "int", min: 1, help: "hidden size", default: 2304 },
    dtype: { type: "string", arg: "bf16|f16|f32", help: "input dtype", default: "bf16" },
    reps: { type: "int", min: 1, help: "timed repetitions (after 500 ms of warm-up)", default: 3 },
    inner: {
      type: "int",
      min: 1,
      help: "products recorded back to back per repetition (time per product: their total / " +
        "inner), as a method's chunk loop runs them",
      default: 1,
    },
    tiles: {
      type: "string",
      arg: "T1,T2,...",
      help: `tile candidates, of ${Object.keys(GEMM_TILE_CANDIDATES).join(", ")}`,
      default: "hw",
    },
    cases: {
      type: "string",
      arg: "C1,C2,...",
      help: `products, of ${GEMM_CASES.join(", ")}`,
      defaultText: "all",
    },
    out: { type: "string", arg: "FILE", help: "write the results as JSON here" },
    splitk: {
      type: "string",
      arg: "K1,K2,...",
      help: "split-K slice counts: auto or positive integers",
      default: "auto",
    },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
  },
});

/** The parsed command line: shape, dtype, tiles, cases, split-K counts. */
function _parse(args: string[]) {
  const parsed = BENCH_GEMM_COMMAND.parse(args);
  if (!parsed) return undefined;
  const values = parsed.values;
  const tiles = parseList("--tiles", values.tiles);
  for (const t of tiles) {
    if (!Object.hasOwn(GEMM_TILE_CANDIDATES, t)) {
      throw new InputError(
        `--tiles: unknown tile '${t}' (one of ${Object.keys(GEMM_TILE_CANDIDATES).join(", ")})`,
      );
    }
  }
  const given = values.cases === undefined ? [...GEMM_CASES] : parseList("--cases", values.cases);
  const cases = given.map((cn) => {
    if (!(GEMM_CASES as readonly string[]).includes(cn)) {
      throw new InputError(`--cases: unknown case '${cn}' (one of ${GEMM_CASES.join(", ")})`);
    }
    return cn as GemmCaseName;
  });
  const splits = parseList("--splitk", values.splitk).map((x) =>
    x === "auto" ? "auto" as const : parseIntValue("--splitk", x, { min: 1 })
  );
  if (values.out !== undefined) checkOutputs([values.out]);
  return { values, dtype: parseDtype(values.dtype), tiles, cases, splits };
}

/** E and C on the GPU: smooth deterministic values (the time does not depend on them). */
function _inputs(ctx: GpuContext, s: { n: number; v: number; d: number; dtype: Dtype }) {
  const { n, v, d, dtype } = s;
  const mk = (rows: number, cols: number, dt: TensorDtype, label: string) =>
    createTensor(ctx, { dtype: dt, rows, cols, role: "workspace", label });
  const e = mk(n, d, dtype, "E"), c = mk(v, d, dtype, "C");
  const rowE = new Float32Array(d).map((_, i) => Math.sin(i) / Math.sqrt(Math.sqrt(d)));
  const eh = new Float32Array(n * d);
  for (let i = 0; i < n; i++) eh.set(rowE.map((x) => x * Math.cos(i)), i * d);
  upload(ctx, e, eh);
  const ch = new Float32Array(v * d);
  for (let i = 0; i < v; i++) ch.set(rowE.map((x, k) => x * Math.cos(i + k)), i * d);
  upload(ctx, c, ch);
  return { mk, e, c };
}

/** Runs the command with `args` (throws InputError on bad flags; see runCli). */
export async function benchGemmMain(args: string[]): Promise<void> {
  const p = _parse(args);
  if (!p) return;
  const { n, v, d, reps, inner, out: outPath } = p.values;
  const dtype = p.dtype;
  const ctx = await GpuContext.create(deviceFlags(p.values));
  const rep = ctx.report;
  console.log(
    `adapter: ${rep.description} (${rep.vendor}; ${
      deviceSummary(rep)
    }); n ${n}, v ${v}, d ${d}, ${dtype}`,
  );
  const { mk, e, c } = _inputs(ctx, { n, v, d, dtype });
  const cases = gemmCases(mk, { e, c, n, v, d, dtype });
  const results: Record<string, unknown>[] = [];
  for (const cn of p.cases) {
    const cs = cases[cn]();
    const out = cs.out();
    for (const [tn, splitK] of p.tiles.flatMap((t) => p.splits.map((k) => [t, k] as const))) {
      try {
        const tile = GEMM_TILE_CANDIDATES[tn];
        const r = await timeGemmCase(ctx, { cs, out, tile, splitK, reps, inner });
        results.push({ case: cn, tile: tn, splitK, ...r });
        console.log(
          `${cn.padEnd(9)} ${tn.padEnd(9)} S=${String(splitK).padEnd(4)} ${
            r.timeMs.toFixed(2).padStart(9)
          } ms ${r.tflops.toFixed(2).padStart(6)} TFLOP/s  ${JSON.stringify(r.variant)}`,
        );
      } catch (err) {
        results.push({ case: cn, tile: tn, error: (err as Error).message.split("\n")[0] });
        console.log(`${cn} ${tn}: ${(err as Error).message.split("\n")[0]}`);
      }
    }
    out.destroy();
  }
  ctx.destroy();
  if (outPath === undefined) return;
  const env = {
    adapter: rep.description,
    vendor: rep.vendor,
    engine: rep.engine,
    webgpu: deviceSummary(rep),
    deno: Deno.version.deno,
    date: new Date().toISOString(),
  };
  const shape = { n, v, d, dtype, ligerChunk: ligerChunkSize(n, v, d) };
  await writeAllOrNothing([{
    path: outPath,
    bytes: JSON.stringify({ env, shape, results }, null, 1),
  }]);
}

if (import.meta.main) await runCli(() => benchGemmMain(Deno.args));
