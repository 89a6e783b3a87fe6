/**
 * `deno run -A scripts/bench_gemm.ts [--n N --v V --d D --dtype bf16 --reps R --tiles a,b
 * --cases x,y --out FILE.json]`: times the GEMM core (kernels/matmul.ts) on every product the
 * methods run at one shape (default the paper's), for each tile candidate, by GPU timestamps:
 *
 * - `logits`: E·Cᵀ → f32 (baseline, Liger chunks), `logits16`: → the input dtype (compiled,
 *   chunked);
 * - `dE`: G·C with G f32 n×|V| (baseline), `dC`: Gᵀ·E (baseline), `dE16`/`dC16` with G in the
 *   input dtype (compiled, chunked);
 * - `ligerDE`: one Liger chunk's G·C (c×d output, K = |V|: split-K), `ligerDC`: one chunk's
 *   dC += Gᵀ·E[chunk] (K = c);
 * - `dEt`, `dE16t`, `ligerDEt`: the same dE products formed transposed, dEᵀ = Cᵀ·Gᵀ (d×n output:
 *   C read as a transposed A, G as an untransposed B, the layout pair of the logits' B side and
 *   dC's A side);
 * - `chunkDE16`, `chunkDE16t`: the chunked method's dE of one chunk (n/8 rows, G in the input
 *   dtype), as G·C and transposed;
 * - `denseDE`, `denseDC`: the no-filter rows' products of one vocabulary chunk (f32 G of n rows
 *   and denseChunkRows columns, methods/_dense_backward.ts): dE += G·C[chunk] and
 *   dC[chunk] = Gᵀ·E.
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
import { parseDtype } from "../core/options.ts";
import { deviceFlags, GpuContext } from "../gpu/context.ts";
import { deviceSummary } from "../gpu/engine.ts";
import { Recorder } from "../gpu/recorder.ts";
import { createTensor, type DeviceTensor, type TensorDtype, upload } from "../gpu/tensor.ts";
import { type MatmulOperand, prepareMatmul, rowView } from "../kernels/matmul.ts";
import {
  type GemmTile,
  TILE_HW,
  TILE_HW_512,
  TILE_HW_8X16,
  TILE_HW_WIDE,
  TILE_LARGE,
} from "../kernels/gemm_codegen.ts";
import { ligerChunkSize } from "../methods/liger.ts";
import { denseChunkRows } from "../methods/_dense_backward.ts";

/** Wall-clock milliseconds of warm-up per product and tile before the timed repetitions. */
const WARMUP_MS = 500;

/** Tile candidates by name. */
const TILES: Record<string, GemmTile> = {
  hw: TILE_HW,
  hw_k8: { ...TILE_HW, bk: 8 },
  hw_wt: { ...TILE_HW, warpTile: true },
  skinny_wt: { bm: 128, bn: 64, bk: 16, tm: 8, tn: 4, vec: true, stage2d: true, warpTile: true },
  hw_k32: { ...TILE_HW, bk: 32 },
  hw_dbuf: { ...TILE_HW, dbuf: true },
  hw_k8_dbuf: { ...TILE_HW, bk: 8, dbuf: true },
  hw_k32_dbuf: { ...TILE_HW, bk: 32, dbuf: true },
  hw_wt_dbuf: { ...TILE_HW, warpTile: true, dbuf: true },
  w128x256_k16: TILE_HW_WIDE,
  // session 12: the wide tile with [k][row] staging, as before its [k slot][k in slot][row] one
  w128x256_k16_nosplit: { ...TILE_HW_WIDE, kSplit: undefined },
  w128x256_dbuf: { bm: 128, bn: 256, bk: 16, tm: 8, tn: 16, vec: true, stage2d: true, dbuf: true },
  w256x128_k16: { bm: 256, bn: 128, bk: 16, tm: 16, tn: 8, vec: true, stage2d: true },
  w256x128_dbuf: { bm: 256, bn: 128, bk: 16, tm: 16, tn: 8, vec: true, stage2d: true, dbuf: true },
  w128x256: { bm: 128, bn: 256, bk: 8, tm: 8, tn: 16, vec: true, stage2d: true },
  w256x128: { bm: 256, bn: 128, bk: 8, tm: 16, tn: 8, vec: true, stage2d: true },
  w64x128: { bm: 64, bn: 128, bk: 16, tm: 4, tn: 8, vec: true, stage2d: true },
  w128x64: { bm: 128, bn: 64, bk: 16, tm: 8, tn: 4, vec: true, stage2d: true },
  scalar: { ...TILE_LARGE, stage2d: true },
  // 8×16 or 16×8 per thread on 128 threads: the wide tile's reads per FMA with half its threads
  s128_8x16: TILE_HW_8X16,
  s128_16x8: { bm: 128, bn: 128, bk: 16, tm: 16, tn: 8, vec: true, stage2d: true },
  s128_8x16_k32: { ...TILE_HW_8X16, bk: 32 },
  s128_8x16_k8: { ...TILE_HW_8X16, bk: 8 },
  s128_8x16_wt: { ...TILE_HW_8X16, warpTile: true },
  s128_8x16_dbuf: { ...TILE_HW_8X16, dbuf: true },
  s128_16x8_dbuf: { bm: 128, bn: 128, bk: 16, tm: 16, tn: 8, vec: true, stage2d: true, dbuf: true },
  w128x256_wt: { ...TILE_HW_WIDE, warpTile: true },
  w128x256_16x8: { bm: 128, bn: 256, bk: 16, tm: 16, tn: 8, vec: true, stage2d: true },
  w64x256_8x16: { bm: 64, bn: 256, bk: 16, tm: 8, tn: 16, vec: true, stage2d: true },
  w128x256_mf: { ...TILE_HW_WIDE, mFirst: true },
  hw_mf: { ...TILE_HW, mFirst: true },
  s128_8x16_mf: { ...TILE_HW_8X16, mFirst: true },
  w128x256_k24: { ...TILE_HW_WIDE, bk: 24 },
  w192x256_12x16: { bm: 192, bn: 256, bk: 16, tm: 12, tn: 16, vec: true, stage2d: true },
  w256x192_16x12: { bm: 256, bn: 192, bk: 16, tm: 16, tn: 12, vec: true, stage2d: true },
  w128x192_8x12: { bm: 128, bn: 192, bk: 16, tm: 8, tn: 12, vec: true, stage2d: true },
  w192x128_12x8: { bm: 192, bn: 128, bk: 16, tm: 12, tn: 8, vec: true, stage2d: true },
  w256x64_16x8: { bm: 256, bn: 64, bk: 16, tm: 16, tn: 8, vec: true, stage2d: true },
  // session 6: double buffering on the wide tile (K-step 8 fits twice in 48 KiB), and 512-thread
  // tiles of 8×8 a thread (more warps to hide latency, fewer FMAs per staging read)
  w128x256_k8_dbuf: {
    bm: 128,
    bn: 256,
    bk: 8,
    tm: 8,
    tn: 16,
    vec: true,
    stage2d: true,
    dbuf: true,
  },
  w128x256_8x8: { bm: 128, bn: 256, bk: 16, tm: 8, tn: 8, vec: true, stage2d: true },
  w256x128_8x8: { bm: 256, bn: 128, bk: 16, tm: 8, tn: 8, vec: true, stage2d: true },
  w256x256_8x16: { bm: 256, bn: 256, bk: 8, tm: 8, tn: 16, vec: true, stage2d: true },
  // staging as [thread row][k·groups + group]: one dynamic index per operand
  w128x256_tmj: { ...TILE_HW_WIDE, stage2d: false, threadMajor: true },
  w128x256_tmj_wt: { ...TILE_HW_WIDE, stage2d: false, threadMajor: true, warpTile: true },
  w128x128_tmj: { ...TILE_HW, stage2d: false, threadMajor: true },
  w128x128_8x16_tmj: { ...TILE_HW_8X16, stage2d: false, threadMajor: true },
  w128x128_8x16_tmj_k32: { ...TILE_HW_8X16, stage2d: false, threadMajor: true, bk: 32 },
  w128x128_16x8_tmj: { ...TILE_HW_8X16, tm: 16, tn: 8, stage2d: false, threadMajor: true },
  w128x256_8x8_tmj: { ...TILE_HW_512, stage2d: false, threadMajor: true },
};

/** The products measured, by name (see the module doc). */
const CASES = [
  "logits",
  "logits16",
  "dE",
  "dC",
  "dE16",
  "dC16",
  "ligerDE",
  "ligerDC",
  "dEt",
  "dE16t",
  "ligerDEt",
  "chunkDE16",
  "chunkDE16t",
  "denseDE",
  "denseDC",
] as const;
type _CaseName = (typeof CASES)[number];

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
      help: `tile candidates, of ${Object.keys(TILES).join(", ")}`,
      default: "hw",
    },
    cases: {
      type: "string",
      arg: "C1,C2,...",
      help: `products, of ${CASES.join(", ")}`,
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

/** Runs the command with `args` (throws InputError on bad flags; see runCli). */
export async function benchGemmMain(args: string[]): Promise<void> {
  const parsed = BENCH_GEMM_COMMAND.parse(args);
  if (!parsed) return;
  const values = parsed.values;
  const { n, v, d, reps, inner } = values;
  const dtype = parseDtype(values.dtype);
  const tileNames = parseList("--tiles", values.tiles);
  for (const t of tileNames) {
    if (!Object.hasOwn(TILES, t)) {
      throw new InputError(
        `--tiles: unknown tile '${t}' (one of ${Object.keys(TILES).join(", ")})`,
      );
    }
  }
  const caseNames = (values.cases === undefined ? [...CASES] : parseList("--cases", values.cases))
    .map((cn) => {
      if (!(CASES as readonly string[]).includes(cn)) {
        throw new InputError(`--cases: unknown case '${cn}' (one of ${CASES.join(", ")})`);
      }
      return cn as _CaseName;
    });
  const splits = parseList("--splitk", values.splitk).map((x) =>
    x === "auto" ? "auto" as const : parseIntValue("--splitk", x, { min: 1 })
  );
  if (values.out !== undefined) checkOutputs([values.out]);
  const ctx = await GpuContext.create(deviceFlags(values));
  const rep = ctx.report;
  const what = `${rep.description} (${rep.vendor}; ${deviceSummary(rep)})`;
  console.log(`adapter: ${what}; n ${n}, v ${v}, d ${d}, ${dtype}`);
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
  const chunk = ligerChunkSize(n, v, d);
  const cases = _cases(mk, { e, c, n, v, d, dtype });
  const results: Record<string, unknown>[] = [];
  for (const cn of caseNames) {
    const cs = cases[cn]();
    const out = cs.out();
    for (const [tn, splitK] of tileNames.flatMap((t) => splits.map((k) => [t, k] as const))) {
      const tile = TILES[tn];
      try {
        const mm = await prepareMatmul(ctx, {
          tile,
          aDtype: cs.aDtype,
          bDtype: cs.bDtype ?? dtype,
          aTrans: cs.a.trans,
          bTrans: cs.b.trans,
          outDtype: cs.outDtype,
        });
        const once = () =>
          ctx.scoped(async () => {
            const rec = new Recorder(ctx);
            for (let j = 0; j < inner; j++) {
              mm.record(rec, { a: cs.a, b: cs.b, out, accumulate: cs.accumulate, splitK });
            }
            return (await rec.finish()).gpuMs / inner;
          });
        // warm-up: repetitions for WARMUP_MS of wall time (at least one), so that a short product
        // measured first does not run at an idle GPU's clocks (a 4 ms product then took 5× longer)
        const t0 = performance.now();
        do await once(); while (performance.now() - t0 < WARMUP_MS);
        const times: number[] = [];
        for (let i = 0; i < reps; i++) times.push(await once());
        times.sort((x, y) => x - y);
        const ms = times[Math.floor(times.length / 2)];
        const r = {
          case: cn,
          tile: tn,
          splitK,
          timeMs: ms,
          minMs: times[0],
          maxMs: times[times.length - 1],
          tflops: cs.flop / ms / 1e9,
          variant: mm.lastVariant,
        };
        results.push(r);
        console.log(
          `${cn.padEnd(9)} ${tn.padEnd(9)} S=${String(splitK).padEnd(4)} ${
            ms.toFixed(2).padStart(9)
          } ms ${r.tflops.toFixed(2).padStart(6)} TFLOP/s  ${JSON.stringify(mm.lastVariant)}`,
        );
      } catch (err) {
        results.push({ case: cn, tile: tn, error: (err as Error).message.split("\n")[0] });
        console.log(`${cn} ${tn}: ${(err as Error).message.split("\n")[0]}`);
      }
    }
    out.destroy();
  }
  ctx.destroy();
  if (values.out !== undefined) {
    await writeAllOrNothing([{
      path: values.out,
      bytes: JSON.stringify(
        {
          env: {
            adapter: rep.description,
            vendor: rep.vendor,
            engine: rep.engine,
            webgpu: deviceSummary(rep),
            deno: Deno.version.deno,
            date: new Date().toISOString(),
          },
          shape: { n, v, d, dtype, ligerChunk: chunk },
          results,
        },
        null,
        1,
      ),
    }]);
  }
}

if (import.meta.main) await runCli(() => benchGemmMain(Deno.args));

/** One product to time: its operands, output and flops. */
interface _Case {
  a: MatmulOperand;
  b: MatmulOperand;
  aDtype: TensorDtype;
  /** B's dtype when not the input dtype. */
  bDtype?: TensorDtype;
  out: () => DeviceTensor;
  outDtype: TensorDtype;
  accumulate?: boolean;
  flop: number;
}

/** The products of {@link CASES} at one shape (G tensors made on first use). */
function _cases(
  mk: (rows: number, cols: number, dt: TensorDtype, label: string) => DeviceTensor,
  { e, c, n, v, d, dtype }: {
    e: DeviceTensor;
    c: DeviceTensor;
    n: number;
    v: number;
    d: number;
    dtype: TensorDtype;
  },
): Record<_CaseName, () => _Case> {
  const chunk = ligerChunkSize(n, v, d);
  // the chunked method's chunk: 8 chunks of the tokens (methods/chunked.ts)
  const chunkRows = Math.ceil(n / 8);
  const vc = denseChunkRows(n, v);
  let g32: DeviceTensor | undefined, g16: DeviceTensor | undefined, gc: DeviceTensor | undefined;
  const G32 = () => g32 ??= mk(n, v, "f32", "G f32");
  const GC = () => gc ??= mk(n, vc, "f32", "G f32 chunk");
  const G16 = () => g16 ??= mk(n, v, dtype, "G 16");
  return {
    logits: () => ({
      a: { tensor: e, trans: false },
      b: { tensor: c, trans: false },
      aDtype: dtype,
      out: () => mk(n, v, "f32", "logits"),
      outDtype: "f32",
      flop: 2 * n * v * d,
    }),
    logits16: () => ({
      a: { tensor: e, trans: false },
      b: { tensor: c, trans: false },
      aDtype: dtype,
      out: () => mk(n, v, dtype, "logits16"),
      outDtype: dtype,
      flop: 2 * n * v * d,
    }),
    dE: () => ({
      a: { tensor: G32(), trans: false },
      b: { tensor: c, trans: true },
      aDtype: "f32",
      out: () => mk(n, d, "f32", "dE"),
      outDtype: "f32",
      flop: 2 * n * v * d,
    }),
    dC: () => ({
      a: { tensor: G32(), trans: true },
      b: { tensor: e, trans: true },
      aDtype: "f32",
      out: () => mk(v, d, "f32", "dC"),
      outDtype: "f32",
      flop: 2 * n * v * d,
    }),
    dE16: () => ({
      a: { tensor: G16(), trans: false },
      b: { tensor: c, trans: true },
      aDtype: dtype,
      out: () => mk(n, d, "f32", "dE"),
      outDtype: "f32",
      flop: 2 * n * v * d,
    }),
    dC16: () => ({
      a: { tensor: G16(), trans: true },
      b: { tensor: e, trans: true },
      aDtype: dtype,
      out: () => mk(v, d, "f32", "dC"),
      outDtype: "f32",
      flop: 2 * n * v * d,
    }),
    ligerDE: () => ({
      a: { view: rowView(G32(), 0, chunk), trans: false },
      b: { tensor: c, trans: true },
      aDtype: "f32",
      out: () => mk(chunk, d, "f32", "dE chunk"),
      outDtype: "f32",
      flop: 2 * chunk * v * d,
    }),
    ligerDC: () => ({
      a: { view: rowView(G32(), 0, chunk), trans: true },
      b: { view: rowView(e, 0, chunk), trans: true },
      aDtype: "f32",
      out: () => mk(v, d, "f32", "dC"),
      outDtype: "f32",
      accumulate: true,
      flop: 2 * chunk * v * d,
    }),
    dEt: () => ({
      a: { tensor: c, trans: true },
      b: { tensor: G32(), trans: false },
      aDtype: dtype,
      bDtype: "f32",
      out: () => mk(d, n, "f32", "dEᵀ"),
      outDtype: "f32",
      flop: 2 * n * v * d,
    }),
    dE16t: () => ({
      a: { tensor: c, trans: true },
      b: { tensor: G16(), trans: false },
      aDtype: dtype,
      out: () => mk(d, n, "f32", "dEᵀ"),
      outDtype: "f32",
      flop: 2 * n * v * d,
    }),
    ligerDEt: () => ({
      a: { tensor: c, trans: true },
      b: { view: rowView(G32(), 0, chunk), trans: false },
      aDtype: dtype,
      bDtype: "f32",
      out: () => mk(d, chunk, "f32", "dEᵀ chunk"),
      outDtype: "f32",
      flop: 2 * chunk * v * d,
    }),
    chunkDE16: () => ({
      a: { view: rowView(G16(), 0, chunkRows), trans: false },
      b: { tensor: c, trans: true },
      aDtype: dtype,
      out: () => mk(chunkRows, d, "f32", "dE chunk"),
      outDtype: "f32",
      flop: 2 * chunkRows * v * d,
    }),
    denseDE: () => ({
      a: { tensor: GC(), trans: false },
      b: { view: rowView(c, 0, vc), trans: true },
      aDtype: "f32",
      out: () => mk(n, d, "f32", "dE"),
      outDtype: "f32",
      accumulate: true,
      flop: 2 * n * vc * d,
    }),
    denseDC: () => ({
      a: { tensor: GC(), trans: true },
      b: { tensor: e, trans: true },
      aDtype: "f32",
      out: () => mk(vc, d, "f32", "dC chunk"),
      outDtype: "f32",
      flop: 2 * n * vc * d,
    }),
    chunkDE16t: () => ({
      a: { tensor: c, trans: true },
      b: { view: rowView(G16(), 0, chunkRows), trans: false },
      aDtype: dtype,
      out: () => mk(d, chunkRows, "f32", "dEᵀ chunk"),
      outDtype: "f32",
      flop: 2 * chunkRows * v * d,
    }),
  };
}
