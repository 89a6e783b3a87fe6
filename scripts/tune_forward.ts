/**
 * `deno run -A scripts/tune_forward.ts [--n N --v V --d D --dtype bf16|f16|f32] [--beta B]
 * [--softcap S] [--reps R] [--warmup W] [--splits 8,16,32] [--quick] [--no-plain] [--out DIR]`:
 * the tuning harness of the fused forward (kernels/fused/forward.ts).
 *
 * Phase 1 times every candidate GEMM tile (tile sizes, K-step, threads per tile) at the default
 * vocab split S, next to the plain matmul (kernels/matmul.ts, logits into an f32 tensor) with the
 * same tile; phase 2 sweeps S for the best tile; then the best configuration is timed with the
 * token stats and (β > 0, no softcap) with the in-kernel smoothing sum, to show what the options
 * cost. Times are GPU times from timestamp queries (median of R reps after W warm-ups) of the
 * whole forward (column sum, tiles, merge); effective TFLOP/s = 2·n·v·d / time. Last, the best
 * configuration's lse and loss rows are checked against the materialised path (plain logits +
 * row_softmax_stats). Prints a table and writes `reports/tune_forward_<adapter-slug>[_dawn].json|md`.
 *
 * Defaults: the paper's shape (n 8192, |V| 256000, d 2304, bf16, β 0.1) on a hardware adapter, a
 * small one (256 × 4096 × 128) with fewer candidates on a software adapter (< 1 min on lavapipe).
 * @module
 */
import { readFileSync } from "node:fs";
import { writeAtomic } from "../io/outputs.ts";
import { join } from "node:path";
import {
  ADAPTER_FLAG,
  defineCommand,
  parseIntValue,
  parseList,
  runCli,
  WEBGPU_FLAG,
} from "../core/cli.ts";
import { check, InputError, oneLine } from "../core/errors.ts";
import { type Dtype, type LceOptions, parseDtype, resolveOptions } from "../core/options.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine, engineName } from "../gpu/engine.ts";
import { engineTag } from "../report/table3.ts";
import { Recorder } from "../gpu/recorder.ts";
import { median, passMedians, timeRecorder, timeRepetitions } from "../measure/timing.ts";
import { createTensor, type DeviceTensor, download, upload } from "../gpu/tensor.ts";
import { type GemmTile, TILE_HW_WIDE, tileThreads, validateTile } from "../kernels/gemm_codegen.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
import { prepareRowSoftmaxStats } from "../kernels/row_softmax_stats.ts";
import {
  defaultVocabSplits,
  type FusedForwardSpec,
  prepareFusedForward,
  type SmoothingMode,
} from "../kernels/fused/forward.ts";
import {
  defaultRoundRows,
  fusedTilesWorkgroupBytes,
  type TileState,
} from "../kernels/fused/forward_tiles.ts";

/** One timed configuration. */
interface Row {
  config: string;
  tile: GemmTile;
  /** Tile state and rows per reduction round (kernels/fused/forward_tiles.ts). */
  tileState: TileState;
  roundRows?: number;
  threads: number;
  vocabSplits: number;
  variant: string;
  /** Median GPU ms of the whole forward, and of its tiles pass. */
  ms: number;
  tilesMs: number;
  /** Median GPU ms of each pass of the forward. */
  passes?: Record<string, number>;
  tflops: number;
  plainMs?: number;
  plainTflops?: number;
  /** Fused time / plain matmul time (1 = the fused forward runs at the plain GEMM's speed; the issue aims for ≤ 1.05). */
  fusedOverPlain?: number;
  error?: string;
}

const T = (bm: number, bn: number, bk: number, tm: number, tn: number): GemmTile => ({
  bm,
  bn,
  bk,
  tm,
  tn,
});

/** Candidate tiles on hardware adapters (filtered by the device's workgroup limits). */
const HW_TILES: GemmTile[] = [
  TILE_HW_WIDE,
  { ...T(128, 128, 16, 8, 8), vec: true, stage2d: true },
  { ...T(128, 128, 16, 8, 8), vec: true },
  { ...T(128, 128, 32, 8, 8), vec: true },
  { ...T(128, 128, 32, 8, 8), vec: true, stage2d: true },
  { ...T(128, 128, 8, 8, 8), vec: true, stage2d: true },
  { ...T(128, 128, 16, 8, 8), vec: true, dbuf: true, stage2d: true },
  T(128, 128, 8, 8, 8),
  { ...T(128, 128, 8, 8, 8), vec: true },
  { ...T(128, 128, 8, 8, 8), dbuf: true },
  T(128, 128, 16, 8, 8),
  { ...T(128, 64, 16, 8, 4), vec: true, stage2d: true },
  { ...T(64, 64, 16, 4, 4), vec: true, stage2d: true },
];
/** Candidate tiles on software adapters. */
const SW_TILES: GemmTile[] = [
  T(64, 64, 16, 4, 4),
  T(128, 128, 8, 8, 8),
  T(64, 64, 8, 4, 4),
  T(64, 128, 8, 4, 8),
  { ...T(64, 64, 16, 4, 4), vec: true, dbuf: true },
];

const _tileName = (t: GemmTile) =>
  `${t.bm}x${t.bn}x${t.bk} ${t.tm}x${t.tn} (${tileThreads(t)}t)${t.vec ? " vec" : ""}${
    t.dbuf ? " dbuf" : ""
  }${t.stage2d ? " 2d" : ""}`;

/** Lower-case letters and digits joined by '-', for file names. */
function _adapterSlug(description: string): string {
  return description.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "") || "adapter";
}

/** Fills a tensor on the GPU with hashed uniform values in [−scale, scale) (no host copy). */
async function _fillRandom(
  ctx: GpuContext,
  t: DeviceTensor,
  seed: number,
  scale: number,
): Promise<void> {
  const mode = t.dtype === "f32" ? 0 : t.dtype === "bf16" ? 1 : 2;
  const code =
    `struct P { words: u32, base: u32, seed: u32, mode: u32, scale: f32, _a: u32, _b: u32, _c: u32 };
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> outp: array<u32>;
fn hash(x0: u32) -> u32 {
  var x = x0 * 747796405u + 2891336453u;
  x = ((x >> ((x >> 28u) + 4u)) ^ x) * 277803737u;
  return (x >> 22u) ^ x;
}
fn val(i: u32) -> f32 {
  return (f32(hash(i ^ p.seed) >> 8u) / 16777216.0 * 2.0 - 1.0) * p.scale;
}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let w = (wg.y * nwg.x + wg.x) * 256u + lid;
  if (w >= p.words) { return; }
  if (p.mode == 0u) { outp[w] = bitcast<u32>(val(p.base + w)); return; }
  let a = val(p.base + 2u * w);
  let b = val(p.base + 2u * w + 1u);
  if (p.mode == 1u) { outp[w] = (bitcast<u32>(a) >> 16u) | (bitcast<u32>(b) & 0xffff0000u); }
  else { outp[w] = pack2x16float(vec2<f32>(a, b)); }
}
`;
  const pipeline = await ctx.pipeline(code, "fill");
  const rec = new Recorder(ctx);
  rec.pass("fill", (p) => {
    for (const s of t.shards) {
      const words = s.buffer.size / 4;
      const u = new Uint32Array(8);
      u.set([words, s.rowStart * t.cols, seed, mode]);
      new Float32Array(u.buffer)[4] = scale;
      const groups = Math.ceil(words / 256);
      const x = Math.min(groups, 65535);
      p.dispatch(
        pipeline,
        rec.bindGroup(pipeline, [rec.uniform(u, "fill params"), s.buffer]),
        x,
        Math.ceil(groups / x),
      );
    }
  });
  await rec.finish();
}

/** Median GPU ms (whole recorder, and of the passes whose label includes `pass`) of `reps` runs. */
async function _time(
  ctx: GpuContext,
  o: { warmup: number; reps: number; pass: string },
  record: (rec: Recorder) => void,
): Promise<{ ms: number; passMs: number; passes: Record<string, number> }> {
  const r = await timeRepetitions(
    { warmup: o.warmup, reps: o.reps },
    () => ctx.scoped(() => timeRecorder(ctx, record)),
  );
  const n = r.times.length;
  const part = Array.from({ length: n }, (_, i) => {
    let sum = 0;
    for (const [label, xs] of r.passes) if (label.includes(o.pass)) sum += xs[i];
    return sum;
  });
  return { ms: r.median, passMs: median(part), passes: passMedians(r.passes) };
}

/** The command line of `tune-forward`. */
export const TUNE_FORWARD_COMMAND = defineCommand({
  name: "deno task tune-forward",
  summary: "Times the fused forward's tile configurations on this adapter and writes " +
    "reports/tune_forward_<adapter>.json|md. The JSON is rewritten after every timed " +
    'configuration ("complete": false until the end); --resume FILE.json re-uses the ' +
    "configurations it holds and times only the others.",
  flags: {
    n: { type: "int", min: 1, help: "tokens", defaultText: "8192; 256 on a software adapter" },
    v: { type: "int", min: 1, help: "vocabulary", defaultText: "256000; 4096 on software" },
    d: { type: "int", min: 1, help: "hidden size", defaultText: "2304; 128 on software" },
    dtype: { type: "string", help: "input dtype", default: "bf16", arg: "bf16|f16|f32" },
    beta: { type: "number", help: "label smoothing", default: 0.1 },
    softcap: { type: "number", help: "logit softcap (> 0), none when absent" },
    reps: { type: "int", min: 1, help: "measured repetitions", defaultText: "5; 3 on software" },
    warmup: { type: "int", min: 0, help: "warm-up repetitions", defaultText: "2; 1 on software" },
    splits: {
      type: "string",
      arg: "S,S",
      help: "vocab splits of phase 2",
      defaultText: "4,8,16,24,32,48,64; 1,2,4,8 on software",
    },
    quick: { type: "boolean", help: "only the first two tiles" },
    tile: {
      type: "int",
      min: 0,
      help: "only this candidate tile (0-based, in the listed order) and its variants",
    },
    "no-plain": { type: "boolean", help: "skip the plain matmul comparison" },
    out: { type: "string", arg: "DIR", help: "report directory", default: "reports" },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
    resume: {
      type: "string",
      arg: "FILE.json",
      help: "re-use the configurations of an interrupted run's JSON",
    },
  },
});

/** What a resumed run must share with the run it continues. */
interface _TuneKey {
  adapter: string;
  engine: Engine;
  shape: FusedForwardSpec;
  options: { beta: number; softcap: number | null };
  warmup: number;
  reps: number;
}

function _readResume(path: string, want: _TuneKey): Row[] {
  let j: _TuneKey & {
    complete?: boolean;
    results?: Row[];
    adapter: { description: string; engine?: Engine };
  };
  try {
    j = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new InputError(`--resume ${path}: cannot read a tuning JSON: ${oneLine(e)}`);
  }
  check(
    j !== null && typeof j === "object" && Array.isArray(j.results) && j.complete === false,
    `--resume ${path}: not the JSON of an interrupted tune-forward run (complete: false)`,
  );
  const have: _TuneKey = {
    adapter: j.adapter?.description,
    engine: j.adapter?.engine ?? "deno",
    shape: j.shape,
    options: j.options,
    warmup: j.warmup,
    reps: j.reps,
  };
  for (const k of Object.keys(want) as (keyof _TuneKey)[]) {
    const a = JSON.stringify(have[k]), b = JSON.stringify(want[k]);
    check(a === b, `--resume ${path}: ${k} ${a} in the file, ${b} asked (give the same flags)`);
  }
  return j.results!.map((x) => ({ ...x, error: x.error ?? undefined }));
}

if (import.meta.main) {
  await runCli(() => tuneForwardMain(Deno.args));
}

/** Runs the command with `args`. */
export async function tuneForwardMain(args: string[]): Promise<void> {
  const parsed = TUNE_FORWARD_COMMAND.parse(args);
  if (!parsed) return;
  const values = parsed.values;
  const dtype: Dtype = parseDtype(values.dtype);
  const softcap = values.softcap;
  const opts: LceOptions = resolveOptions({ beta: values.beta, softcap, reduction: "none" });
  const splitFlag = values.splits === undefined
    ? undefined
    : parseList("--splits", values.splits).map((x) => parseIntValue("--splits", x, { min: 1 }));
  const ctx = await GpuContext.create({
    adapter: values.adapter as AdapterChoice,
    engine: values.webgpu as Engine,
  });
  const hw = !ctx.report.isFallbackAdapter;
  const n = values.n ?? (hw ? 8192 : 256);
  const v = values.v ?? (hw ? 256000 : 4096);
  const d = values.d ?? (hw ? 2304 : 128);
  const reps = values.reps ?? (hw ? 5 : 3);
  const warmup = values.warmup ?? (hw ? 2 : 1);
  const spec: FusedForwardSpec = { n, v, d, dtype };
  const flop = 2 * n * v * d;
  const tflops = (ms: number) => flop / ms / 1e9;
  const lim = ctx.device.limits;
  const r = ctx.report;
  console.log(
    `adapter: ${r.description} (${r.vendor} ${r.architecture}, fallback ${r.isFallbackAdapter}; ` +
      `${deviceSummary(r)}); ` +
      `shape n=${n} v=${v} d=${d} ${dtype}, β=${opts.beta}${
        softcap ? `, softcap ${softcap}` : ""
      }; ${warmup} warm-up + ${reps} reps`,
  );
  if (!ctx.hasTimestamps) console.log("warning: no timestamp-query: times are NaN");

  // inputs, filled on the GPU
  const e = createTensor(ctx, { dtype, rows: n, cols: d, role: "input", label: "E" });
  const c = createTensor(ctx, { dtype, rows: v, cols: d, role: "input", label: "C" });
  const targets = createTensor(ctx, { dtype: "i32", rows: n, cols: 1, role: "input", label: "t" });
  const scale = 2 / Math.sqrt(Math.sqrt(d));
  await _fillRandom(ctx, e, 11, scale);
  await _fillRandom(ctx, c, 12, scale);
  upload(ctx, targets, new Int32Array(n).map((_, i) => (i * 7919) % v));
  const vec = (cols: number, label: string) =>
    createTensor(ctx, { dtype: "f32", rows: n, cols, role: "output", label });
  const lse = vec(1, "lse"), lossRows = vec(1, "loss rows"), stats = vec(4, "token stats");
  let logits: DeviceTensor | undefined;
  if (!values["no-plain"]) {
    try {
      logits = createTensor(ctx, {
        dtype: "f32",
        rows: n,
        cols: v,
        role: "workspace",
        label: "logits",
      });
    } catch (err) {
      console.log(`plain matmul skipped: ${(err as Error).message}`);
    }
  }

  const wgMemOk = (t: GemmTile) => {
    try {
      validateTile(t);
    } catch {
      return false;
    }
    const mem = fusedTilesWorkgroupBytes(t, { sumZ: true, stats: true, state: "registers" });
    return mem <= lim.maxComputeWorkgroupStorageSize && t.bm <= tileThreads(t) &&
      tileThreads(t) <= lim.maxComputeInvocationsPerWorkgroup;
  };
  let tiles = (hw ? HW_TILES : SW_TILES).filter(wgMemOk);
  if (values.quick) tiles = tiles.slice(0, 2);
  if (values.tile !== undefined) {
    if (values.tile >= tiles.length) {
      throw new InputError(`--tile ${values.tile}: there are ${tiles.length} candidate tiles`);
    }
    tiles = [tiles[values.tile]];
  }
  const rows: Row[] = [];
  const plainCache = new Map<string, number>();
  const slug = _adapterSlug(r.description) + engineTag(r.engine);
  const base = join(values.out, `tune_forward_${slug}`);
  const prior = values.resume === undefined ? [] : _readResume(values.resume, {
    adapter: r.description,
    engine: r.engine,
    shape: spec,
    options: { beta: opts.beta, softcap: opts.softcap ?? null },
    warmup,
    reps,
  });
  const header = () => ({
    adapter: {
      description: r.description,
      vendor: r.vendor,
      architecture: r.architecture,
      isFallbackAdapter: r.isFallbackAdapter,
      engine: r.engine,
      webgpu: deviceSummary(r),
    },
    date: new Date().toISOString(),
    shape: spec,
    options: { beta: opts.beta, softcap: opts.softcap ?? null },
    warmup,
    reps,
  });
  // the JSON after every configuration, marked incomplete until the end
  const savePartial = () => {
    const json = {
      ...header(),
      complete: false,
      best: null,
      check: null,
      results: rows.map((x) => ({ ...x, error: x.error ?? null })),
    };
    writeAtomic(`${base}.json`, JSON.stringify(json, null, 2) + "\n");
  };

  const measure = async (
    tile: GemmTile,
    o: {
      vocabSplits?: number;
      smoothing?: SmoothingMode;
      tokenStats?: boolean;
      plain?: boolean;
      tileState?: TileState;
      roundRows?: number;
      softcap?: number;
    },
  ): Promise<Row> => {
    const vocabSplits = o.vocabSplits ?? defaultVocabSplits(ctx, spec, tile);
    const cap = o.softcap ?? softcap;
    const tileState = o.tileState ?? "tile";
    const roundRows = tileState === "tile"
      ? o.roundRows ??
        defaultRoundRows(tile, {
          sumZ: opts.beta > 0 && (o.smoothing === "in-kernel" || cap !== undefined),
          stats: o.tokenStats ?? false,
        }, lim.maxComputeWorkgroupStorageSize)
      : undefined;
    const variant = [
      opts.beta === 0 ? "" : o.smoothing === "in-kernel" || cap ? "in-kernel Σz" : "identity",
      cap ? `softcap ${cap}` : "",
      o.tokenStats ? "+stats" : "",
    ].filter((s) => s).join(" ") || "-";
    const configName = `${_tileName(tile)} S=${vocabSplits} ${
      tileState === "tile" ? `tile/${roundRows}` : "registers"
    }`;
    const at = prior.findIndex((x) => x.config === configName && x.variant === variant);
    if (at >= 0) {
      // each saved configuration stands for one measurement, in the order they were made
      const [done] = prior.splice(at, 1);
      // measured by the run being resumed
      if (done.plainMs !== undefined) plainCache.set(_tileName(tile), done.plainMs);
      rows.push(done);
      console.log(`${configName.padEnd(34)} ${variant.padEnd(16)} (resumed)`);
      return done;
    }
    const row: Row = {
      config: `${_tileName(tile)} S=${vocabSplits} ${
        tileState === "tile" ? `tile/${roundRows}` : "registers"
      }`,
      tile,
      tileState,
      roundRows,
      threads: tileThreads(tile),
      vocabSplits,
      variant,
      ms: NaN,
      tilesMs: NaN,
      tflops: NaN,
    };
    try {
      const ff = await prepareFusedForward(ctx, {
        spec,
        opts: resolveOptions({ ...opts, softcap: cap }),
        tile,
        vocabSplits,
        smoothing: o.smoothing,
        tokenStats: o.tokenStats,
        tileState,
        roundRows,
      });
      const t = await _time(ctx, { warmup, reps, pass: "tiles" }, (rec) =>
        ff.record(rec, {
          e,
          c,
          targets,
          lse,
          lossRows,
          tokenStats: o.tokenStats ? stats : undefined,
        }));
      row.ms = t.ms;
      row.tilesMs = t.passMs;
      row.passes = t.passes;
      row.tflops = tflops(t.ms);
      const key = _tileName(tile);
      if (o.plain && logits && !plainCache.has(key)) {
        const mm = await prepareMatmul(ctx, {
          tile,
          aDtype: dtype,
          bDtype: dtype,
          aTrans: false,
          bTrans: false,
        });
        const p = await _time(ctx, { warmup, reps, pass: "matmul" }, (rec) =>
          mm.record(rec, {
            a: { tensor: e, trans: false },
            b: { tensor: c, trans: false },
            out: logits!,
            tile,
            label: "matmul",
          }));
        plainCache.set(key, p.ms);
      }
      const pm = plainCache.get(key);
      if (pm !== undefined) {
        row.plainMs = pm;
        row.plainTflops = tflops(pm);
        row.fusedOverPlain = t.ms / pm;
      }
    } catch (err) {
      row.error = (err as Error).message.split("\n")[0].slice(0, 200);
    }
    rows.push(row);
    savePartial();
    const f = (x: number | undefined, dp = 2) =>
      x === undefined ? "-" : Math.abs(x) < 1 && x !== 0 ? x.toPrecision(dp + 1) : x.toFixed(dp);
    console.log(
      `${row.config.padEnd(34)} ${variant.padEnd(16)} ${f(row.ms).padStart(9)} ms ` +
        `(tiles ${f(row.tilesMs)}) ${f(row.tflops).padStart(7)} TFLOP/s | plain ${
          f(row.plainMs)
        } ms ${f(row.plainTflops)} TFLOP/s | fused/plain ${f(row.fusedOverPlain, 3)}${
          row.error ? ` | error: ${row.error}` : ""
        }`,
    );
    return row;
  };

  console.log("\nphase 1: tiles at the default vocab split");
  for (const tile of tiles) await measure(tile, { plain: true });
  const ok = (xs: Row[]) => xs.filter((x) => Number.isFinite(x.ms));
  const bestOf = (xs: Row[]) => ok(xs).reduce((a, b) => (b.ms < a.ms ? b : a));
  if (ok(rows).length === 0) throw new Error("no configuration ran");
  const bestTile = bestOf(rows).tile;

  console.log(`\nphase 2: vocab splits for ${_tileName(bestTile)}`);
  const vTiles = Math.ceil(v / bestTile.bn);
  const splitList = splitFlag ? splitFlag : hw ? [4, 8, 16, 24, 32, 48, 64] : [1, 2, 4, 8];
  const tried = new Set(rows.filter((x) => x.tile === bestTile).map((x) => x.vocabSplits));
  for (const s of splitList) {
    if (s > vTiles || tried.has(s)) continue;
    tried.add(s);
    await measure(bestTile, { vocabSplits: s, plain: true });
  }
  const bestS = bestOf(rows.filter((x) => x.tile === bestTile)).vocabSplits;

  console.log(`\nphase 3: row state for ${_tileName(bestTile)} S=${bestS}`);
  for (let r = 1; r <= bestTile.tm; r *= 2) {
    if (bestTile.tm % r || r === bestOf(rows.filter((x) => x.tile === bestTile)).roundRows) {
      continue;
    }
    await measure(bestTile, { vocabSplits: bestS, roundRows: r, plain: true });
  }
  await measure(bestTile, { vocabSplits: bestS, tileState: "registers", plain: true });
  const best = bestOf(rows.filter((x) => x.variant === rows[0].variant));

  console.log("\noptions at the best configuration");
  const at = {
    vocabSplits: best.vocabSplits,
    tileState: best.tileState,
    roundRows: best.roundRows,
  };
  await measure(best.tile, { ...at, tokenStats: true, plain: true });
  if (opts.beta > 0 && !softcap) {
    await measure(best.tile, { ...at, smoothing: "in-kernel", plain: true });
    await measure(best.tile, { ...at, softcap: 30, plain: true });
  }

  // check: best configuration against the materialised path
  let check: Record<string, number> | undefined;
  if (logits) {
    const ff = await prepareFusedForward(ctx, {
      spec,
      opts,
      tile: best.tile,
      vocabSplits: best.vocabSplits,
      tileState: best.tileState,
      roundRows: best.roundRows,
    });
    const mm = await prepareMatmul(ctx, {
      tile: best.tile,
      aDtype: dtype,
      bDtype: dtype,
      aTrans: false,
      bTrans: false,
    });
    const rs = await prepareRowSoftmaxStats(ctx, { logitsDtype: "f32", opts, v });
    const lse2 = vec(1, "lse ref"), loss2 = vec(1, "loss ref");
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      ff.record(rec, { e, c, targets, lse, lossRows });
      mm.record(rec, {
        a: { tensor: e, trans: false },
        b: { tensor: c, trans: false },
        out: logits!,
        tile: best.tile,
      });
      rs.record(rec, { logits: logits!, targets, lse: lse2, lossRows: loss2 });
      await rec.finish();
    });
    const [a, b, la, lb] = await Promise.all(
      [lse, lse2, lossRows, loss2].map((t) => download(ctx, t)),
    );
    const diff = (x: Float32Array, y: Float32Array) => {
      let m = 0, s = 0;
      for (let i = 0; i < x.length; i++) {
        m = Math.max(m, Math.abs(x[i] - y[i]));
        s = Math.max(s, Math.abs(y[i]));
      }
      return { max: m, scale: s };
    };
    const dl = diff(a, b), dloss = diff(la, lb);
    check = {
      maxAbsDiffLse: dl.max,
      maxAbsLse: dl.scale,
      maxAbsDiffLoss: dloss.max,
      maxAbsLoss: dloss.scale,
    };
    console.log(
      `\ncheck vs materialised logits + row_softmax_stats: max |Δlse| ${dl.max.toExponential(2)} ` +
        `(max |lse| ${dl.scale.toFixed(2)}), max |Δloss| ${dloss.max.toExponential(2)}`,
    );
  }

  // report
  const date = new Date().toISOString();
  const fmtRow = (x: Row) =>
    `| ${x.config} | ${x.variant} | ${x.ms.toFixed(3)} | ${x.tilesMs.toFixed(3)} | ${
      x.tflops.toPrecision(3)
    } | ${x.plainMs?.toFixed(3) ?? "-"} | ${x.plainTflops?.toPrecision(3) ?? "-"} | ${
      x.fusedOverPlain?.toFixed(3) ?? "-"
    } |${x.error ? ` ${x.error}` : ""}`;
  const json = {
    adapter: {
      description: r.description,
      vendor: r.vendor,
      architecture: r.architecture,
      isFallbackAdapter: r.isFallbackAdapter,
      engine: r.engine,
      webgpu: deviceSummary(r),
    },
    date,
    shape: spec,
    options: { beta: opts.beta, softcap: opts.softcap ?? null },
    warmup,
    reps,
    complete: true,
    best: {
      tile: best.tile,
      vocabSplits: best.vocabSplits,
      tileState: best.tileState,
      roundRows: best.roundRows ?? null,
      ms: best.ms,
      tilesMs: best.tilesMs,
      tflops: best.tflops,
      plainMs: best.plainMs ?? null,
      plainTflops: best.plainTflops ?? null,
      fusedOverPlain: best.fusedOverPlain ?? null,
    },
    check: check ?? null,
    results: rows.map((x) => ({ ...x, error: x.error ?? null })),
  };
  const md = [
    `# Fused forward tuning: ${r.description}, ${engineName(r.engine)}`,
    "",
    `${date}; adapter ${r.description} (vendor ${r.vendor}${
      r.architecture ? `, ${r.architecture}` : ""
    }, fallback ${r.isFallbackAdapter}); WebGPU: ${deviceSummary(r)}.`,
    `Shape n=${n}, |V|=${v}, d=${d}, ${dtype}; β=${opts.beta}${
      softcap ? `, softcap ${softcap}` : ""
    }. GPU time from timestamp queries, median of ${reps} after ${warmup} warm-up; TFLOP/s = 2·n·|V|·d / time. ` +
    "The fused time is the whole forward (column sum, tiles, merge); plain = kernels/matmul.ts with the same tile " +
    "(f32 logits materialised); fused/plain = fused time / plain time.",
    "",
    `**Best:** ${best.config} — ${best.ms.toFixed(3)} ms, ${best.tflops.toPrecision(3)} TFLOP/s` +
    (best.fusedOverPlain !== undefined
      ? `; plain ${best.plainMs!.toFixed(3)} ms (${
        best.plainTflops!.toFixed(2)
      } TFLOP/s); fused/plain ${best.fusedOverPlain.toFixed(3)}`
      : "") +
    ".",
    "",
    `Passes of the best (median ms): ${
      Object.entries(best.passes ?? {}).map(([k, x]) => `${k} ${x.toFixed(3)}`).join(", ")
    }.`,
    "",
    "| config | variant | fused ms | tiles ms | TFLOP/s | plain ms | plain TFLOP/s | fused/plain |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ...rows.map(fmtRow),
    "",
    check
      ? `Check against materialised logits + row_softmax_stats: max |Δlse| ${
        check.maxAbsDiffLse.toExponential(2)
      } (max |lse| ${check.maxAbsLse.toFixed(2)}), max |Δloss| ${
        check.maxAbsDiffLoss.toExponential(2)
      }.`
      : "No check (plain matmul skipped).",
    "",
  ].join("\n");
  writeAtomic(`${base}.md`, md);
  writeAtomic(`${base}.json`, JSON.stringify(json, null, 2) + "\n");
  console.log(
    `\nbest: ${best.config}, ${best.ms.toFixed(3)} ms, ${best.tflops.toPrecision(3)} TFLOP/s; ` +
      Object.entries(best.passes ?? {}).map(([k, x]) => `${k} ${x.toFixed(3)} ms`).join(", "),
  );
  console.log(`wrote ${base}.json and ${base}.md`);
  ctx.destroy();
}
