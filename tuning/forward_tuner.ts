/**
 * The fused forward's tuner (scripts/tune_forward.ts): candidate tiles, the timing of one
 * configuration (the whole forward by GPU timestamps, beside the plain matmul with the same tile),
 * and the phases: every candidate tile at the default vocab split, the splits for the best tile,
 * its row state, then the options (token stats, in-kernel smoothing, softcap) at the best
 * configuration. Rows already timed by an interrupted run (its JSON) are re-used, not timed again.
 * @module
 */
import { readFileSync } from "node:fs";
import { check, InputError, oneLine } from "../core/errors.ts";
import { type LceOptions, resolveOptions } from "../core/options.ts";
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import { median, passMedians, timeRecorder, timeRepetitions } from "../measure/timing.ts";
import { IDLE_GPU_BUSY_MS } from "../measure/measure.ts";
import { type BusyLoad, prepareBusyLoad } from "../gpu/busy_load.ts";
import { type GemmTile, TILE_HW_WIDE, tileThreads, validateTile } from "../kernels/gemm_codegen.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
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
import { describeTile, tileFromDescription, tileLayout, withLayout } from "./gemm_layouts.ts";

/** One timed configuration. */
export interface TuneRow {
  config: string;
  tile: GemmTile;
  /** Tile state and rows per reduction round (kernels/fused/forward_tiles.ts). */
  tileState: TileState;
  roundRows?: number;
  threads: number;
  vocabSplits: number;
  /** The stream split's workgroups (kernels/fused/forward_stream.ts); 0: the split grid. */
  streamWorkgroups: number;
  variant: string;
  /** Median GPU ms of the whole forward, and of its tiles pass. */
  ms: number;
  tilesMs: number;
  /** Median GPU ms of each pass of the forward. */
  passes?: Record<string, number>;
  tflops: number;
  plainMs?: number;
  plainTflops?: number;
  /** Fused time / plain matmul time (1: the fused forward runs at the plain GEMM's speed). */
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
const dbuf = (t: GemmTile) => withLayout(t, { dbuf: true });

/** Candidate tiles on hardware adapters (filtered by the device's workgroup limits). */
export const FORWARD_TILES_HW: GemmTile[] = [
  TILE_HW_WIDE,
  { ...T(128, 128, 16, 8, 8), vec: true, stage2d: true },
  { ...T(128, 128, 16, 8, 8), vec: true, stage2d: true, kSplit: 8 },
  { ...T(128, 128, 16, 8, 8), vec: true },
  { ...T(128, 128, 32, 8, 8), vec: true },
  { ...T(128, 128, 32, 8, 8), vec: true, stage2d: true },
  { ...T(128, 128, 8, 8, 8), vec: true, stage2d: true },
  dbuf({ ...T(128, 128, 16, 8, 8), vec: true, stage2d: true }),
  T(128, 128, 8, 8, 8),
  { ...T(128, 128, 8, 8, 8), vec: true },
  dbuf(T(128, 128, 8, 8, 8)),
  T(128, 128, 16, 8, 8),
  { ...T(128, 64, 16, 8, 4), vec: true, stage2d: true },
  { ...T(64, 64, 16, 4, 4), vec: true, stage2d: true },
];
/** Candidate tiles on software adapters. */
export const FORWARD_TILES_SW: GemmTile[] = [
  T(64, 64, 16, 4, 4),
  T(128, 128, 8, 8, 8),
  T(64, 64, 8, 4, 4),
  T(64, 128, 8, 4, 8),
  dbuf({ ...T(64, 64, 16, 4, 4), vec: true }),
];

/** A tile's name in rows and reports, e.g. "128x128x16 8x8 (256t) vec 2d". */
export function forwardTileName(t: GemmTile): string {
  return `${t.bm}x${t.bn}x${t.bk} ${t.tm}x${t.tn} (${tileThreads(t)}t)${t.vec ? " vec" : ""}${
    tileLayout(t).dbuf ? " dbuf" : ""
  }${t.stage2d ? " 2d" : ""}${t.kSplit ? ` ks${t.kSplit}` : ""}`;
}

/** The candidates a device can run: valid, within its workgroup memory and threads. */
export function runnableTiles(tiles: GemmTile[], lim: GPUSupportedLimits): GemmTile[] {
  return tiles.filter((t) => {
    try {
      validateTile(t);
    } catch {
      return false;
    }
    const mem = fusedTilesWorkgroupBytes(t, { sumZ: true, stats: true, state: "registers" });
    return mem <= lim.maxComputeWorkgroupStorageSize && t.bm <= tileThreads(t) &&
      tileThreads(t) <= lim.maxComputeInvocationsPerWorkgroup;
  });
}

/**
 * Median GPU ms (whole recorder, and of the passes whose label includes `pass`) of `reps` runs,
 * after the full load on a hardware adapter (`busy`: measure/measure.ts's IDLE_GPU_BUSY_MS, as
 * before each table cell): without it the compile between two configurations idles the GPU and
 * short forwards ran at lower clocks, 1.7–2.6× their time (10-ms forwards on an H200).
 */
async function _time(
  ctx: GpuContext,
  o: { warmup: number; reps: number; pass: string; busy?: BusyLoad },
  record: (rec: Recorder) => void,
): Promise<{ ms: number; passMs: number; passes: Record<string, number> }> {
  if (o.busy) await o.busy.run(IDLE_GPU_BUSY_MS);
  const r = await timeRepetitions(
    { warmup: o.warmup, reps: o.reps },
    () => ctx.scoped(() => timeRecorder(ctx, record)),
  );
  const part = Array.from({ length: r.times.length }, (_, i) => {
    let sum = 0;
    for (const [label, xs] of r.passes) if (label.includes(o.pass)) sum += xs[i];
    return sum;
  });
  return { ms: r.median, passMs: median(part), passes: passMedians(r.passes) };
}

/** What a resumed run must share with the run it continues. */
export interface TuneKey {
  adapter: string;
  shape: FusedForwardSpec;
  options: { beta: number; softcap: number | null };
  warmup: number;
  reps: number;
}

/** The rows of an interrupted run's JSON at `path`, which must share `want` (InputError else). */
export function readResume(path: string, want: TuneKey): TuneRow[] {
  let j: TuneKey & { complete?: boolean; results?: TuneRow[]; adapter: { description: string } };
  try {
    j = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new InputError(`--resume ${path}: cannot read a tuning JSON: ${oneLine(e)}`);
  }
  check(
    j !== null && typeof j === "object" && Array.isArray(j.results) && j.complete === false,
    `--resume ${path}: not the JSON of an interrupted tune-forward run (complete: false)`,
  );
  const have: TuneKey = {
    adapter: j.adapter?.description,
    shape: j.shape,
    options: j.options,
    warmup: j.warmup,
    reps: j.reps,
  };
  for (const k of Object.keys(want) as (keyof TuneKey)[]) {
    const a = JSON.stringify(have[k]), b = JSON.stringify(want[k]);
    check(a === b, `--resume ${path}: ${k} ${a} in the file, ${b} asked (give the same flags)`);
  }
  return j.results!.map((x) => ({
    ...x,
    tile: tileFromDescription(x.tile),
    error: x.error ?? undefined,
  }));
}

/** The rows as the JSON holds them (tiles with their layout switches as fields). */
export function jsonRows(rows: TuneRow[]): Record<string, unknown>[] {
  return rows.map((x) => ({ ...x, tile: describeTile(x.tile), error: x.error ?? null }));
}

/** The inputs and outputs every configuration is timed on. */
export interface TuneTensors {
  e: DeviceTensor;
  c: DeviceTensor;
  targets: DeviceTensor;
  lse: DeviceTensor;
  lossRows: DeviceTensor;
  /** n×4 token stats. */
  stats: DeviceTensor;
  /** The plain matmul's f32 logits (none: no plain comparison). */
  logits?: DeviceTensor;
}

/** A configuration's switches besides the tile. */
export interface TuneOptions {
  vocabSplits?: number;
  /** The stream split's workgroups (default 0: the split grid of `vocabSplits`). */
  streamWorkgroups?: number;
  smoothing?: SmoothingMode;
  tokenStats?: boolean;
  plain?: boolean;
  tileState?: TileState;
  roundRows?: number;
  softcap?: number;
}

/** Times configurations of the fused forward on one adapter and problem, keeping the rows. */
export class ForwardTuner {
  /** Every configuration timed (or resumed), in order. */
  readonly rows: TuneRow[] = [];
  readonly #plain = new Map<string, number>();
  #busy: BusyLoad | undefined;
  readonly #prior: TuneRow[];

  constructor(
    readonly ctx: GpuContext,
    readonly o: {
      spec: FusedForwardSpec;
      opts: LceOptions;
      softcap?: number;
      warmup: number;
      reps: number;
      tensors: TuneTensors;
      /** Rows of the run being resumed. */
      prior: TuneRow[];
      /** Called after every configuration timed (the partial JSON). */
      save: () => void;
    },
  ) {
    this.#prior = [...o.prior];
  }

  /** Effective TFLOP/s of a forward taking `ms`. */
  tflops(ms: number): number {
    const { n, v, d } = this.o.spec;
    return 2 * n * v * d / ms / 1e9;
  }

  /** The configuration's name and variant, and its resolved splits and rows per round. */
  #describe(tile: GemmTile, x: TuneOptions) {
    const { opts, spec } = this.o;
    const vocabSplits = x.vocabSplits ?? defaultVocabSplits(this.ctx, spec, tile);
    const cap = x.softcap ?? this.o.softcap;
    const tileState = x.tileState ?? "tile";
    const roundRows = tileState === "tile"
      ? x.roundRows ??
        defaultRoundRows(tile, {
          sumZ: opts.beta > 0 && (x.smoothing === "in-kernel" || cap !== undefined),
          stats: x.tokenStats ?? false,
        }, this.ctx.device.limits.maxComputeWorkgroupStorageSize)
      : undefined;
    const variant = [
      opts.beta === 0 ? "" : x.smoothing === "in-kernel" || cap ? "in-kernel Σz" : "identity",
      cap ? `softcap ${cap}` : "",
      x.tokenStats ? "+stats" : "",
    ].filter((s) => s).join(" ") || "-";
    const streamWorkgroups = x.streamWorkgroups ?? 0;
    const split = streamWorkgroups > 0 ? `W=${streamWorkgroups}` : `S=${vocabSplits}`;
    const config = `${forwardTileName(tile)} ${split} ${
      tileState === "tile" ? `tile/${roundRows}` : "registers"
    }`;
    return { config, variant, vocabSplits, streamWorkgroups, cap, tileState, roundRows };
  }

  /** Times one configuration (or takes it from the run being resumed) and prints its row. */
  async measure(tile: GemmTile, x: TuneOptions): Promise<TuneRow> {
    const c = this.#describe(tile, x);
    const at = this.#prior.findIndex((r) => r.config === c.config && r.variant === c.variant);
    if (at >= 0) {
      // each saved configuration stands for one measurement, in the order they were made
      const [done] = this.#prior.splice(at, 1);
      if (done.plainMs !== undefined) this.#plain.set(forwardTileName(tile), done.plainMs);
      this.rows.push(done);
      console.log(`${c.config.padEnd(34)} ${c.variant.padEnd(16)} (resumed)`);
      return done;
    }
    const row: TuneRow = {
      config: c.config,
      tile,
      tileState: c.tileState,
      roundRows: c.roundRows,
      threads: tileThreads(tile),
      vocabSplits: c.vocabSplits,
      streamWorkgroups: c.streamWorkgroups,
      variant: c.variant,
      ms: NaN,
      tilesMs: NaN,
      tflops: NaN,
    };
    try {
      await this.#run(row, x, c.cap);
    } catch (err) {
      row.error = (err as Error).message.split("\n")[0].slice(0, 200);
    }
    this.rows.push(row);
    this.o.save();
    _print(row);
    return row;
  }

  /** Times the forward of a row's configuration, and the plain matmul of its tile once. */
  async #run(row: TuneRow, x: TuneOptions, cap: number | undefined): Promise<void> {
    const { ctx } = this;
    const { spec, opts, warmup, reps, tensors: t } = this.o;
    const tile = row.tile;
    const ff = await prepareFusedForward(ctx, {
      spec,
      opts: resolveOptions({ ...opts, softcap: cap }),
      tile,
      vocabSplits: row.vocabSplits,
      streamWorkgroups: row.streamWorkgroups,
      smoothing: x.smoothing,
      tokenStats: x.tokenStats,
      tileState: row.tileState,
      roundRows: row.roundRows,
    });
    const tokenStats = x.tokenStats ? t.stats : undefined;
    const { e, c, targets, lse, lossRows } = t;
    const busy = ctx.report.isFallbackAdapter
      ? undefined
      : (this.#busy ??= await prepareBusyLoad(ctx));
    const r = await _time(
      ctx,
      { warmup, reps, pass: "tiles", busy },
      (rec) => ff.record(rec, { e, c, targets, lse, lossRows, tokenStats }),
    );
    Object.assign(row, {
      ms: r.ms,
      tilesMs: r.passMs,
      passes: r.passes,
      tflops: this.tflops(r.ms),
    });
    const key = forwardTileName(tile);
    if (x.plain && t.logits && !this.#plain.has(key)) {
      const mm = await prepareMatmul(ctx, {
        tile,
        aDtype: spec.dtype,
        bDtype: spec.dtype,
        aTrans: false,
        bTrans: false,
      });
      const p = await _time(ctx, { warmup, reps, pass: "matmul", busy }, (rec) =>
        mm.record(rec, {
          a: { tensor: e, trans: false },
          b: { tensor: c, trans: false },
          out: t.logits!,
          tile,
          label: "matmul",
        }));
      this.#plain.set(key, p.ms);
    }
    const pm = this.#plain.get(key);
    if (pm !== undefined) {
      Object.assign(row, { plainMs: pm, plainTflops: this.tflops(pm), fusedOverPlain: r.ms / pm });
    }
  }
}

/** Prints a row: its times, the plain matmul's, the ratio, or its error. */
function _print(row: TuneRow): void {
  const f = (x: number | undefined, dp = 2) =>
    x === undefined ? "-" : Math.abs(x) < 1 && x !== 0 ? x.toPrecision(dp + 1) : x.toFixed(dp);
  console.log(
    `${row.config.padEnd(34)} ${row.variant.padEnd(16)} ${f(row.ms).padStart(9)} ms ` +
      `(tiles ${f(row.tilesMs)}) ${f(row.tflops).padStart(7)} TFLOP/s | plain ${
        f(row.plainMs)
      } ms ${f(row.plainTflops)} TFLOP/s | fused/plain ${f(row.fusedOverPlain, 3)}${
        row.error ? ` | error: ${row.error}` : ""
      }`,
  );
}

/** The fastest of the rows that ran. */
export function bestRow(rows: TuneRow[]): TuneRow {
  const ok = rows.filter((x) => Number.isFinite(x.ms));
  if (ok.length === 0) throw new Error("no configuration ran");
  return ok.reduce((a, b) => (b.ms < a.ms ? b : a));
}

/**
 * The tuner's phases: every tile at the default split grid, the splits for the best tile
 * (`splits`, at most one per vocab tile) and the stream split's workgroups (`streams`), its rows
 * per round and the registers state (on the split grid), then the options at the best
 * configuration. Returns the best configuration of the first variant.
 */
export async function tunePhases(
  tuner: ForwardTuner,
  tiles: GemmTile[],
  splits: number[],
  streams: number[] = [],
): Promise<TuneRow> {
  const rows = tuner.rows, { opts, softcap, spec } = tuner.o;
  console.log("\nphase 1: tiles at the default vocab split");
  for (const tile of tiles) await tuner.measure(tile, { plain: true });
  const bestTile = bestRow(rows).tile;
  console.log(`\nphase 2: vocab splits and stream workgroups for ${forwardTileName(bestTile)}`);
  const vTiles = Math.ceil(spec.v / bestTile.bn);
  const tried = new Set(rows.filter((x) => x.tile === bestTile).map((x) => x.vocabSplits));
  for (const s of splits) {
    if (s > vTiles || tried.has(s)) continue;
    tried.add(s);
    await tuner.measure(bestTile, { vocabSplits: s, plain: true });
  }
  for (const w of streams) await tuner.measure(bestTile, { streamWorkgroups: w, plain: true });
  const ofBest = () => rows.filter((x) => x.tile === bestTile);
  const b2 = bestRow(ofBest());
  const split = { vocabSplits: b2.vocabSplits, streamWorkgroups: b2.streamWorkgroups };
  console.log(`\nphase 3: row state for ${b2.config}`);
  for (let r = 1; r <= bestTile.tm; r *= 2) {
    if (bestTile.tm % r || r === bestRow(ofBest()).roundRows) continue;
    await tuner.measure(bestTile, { ...split, roundRows: r, plain: true });
  }
  await tuner.measure(bestTile, {
    vocabSplits: b2.vocabSplits,
    tileState: "registers",
    plain: true,
  });
  const best = bestRow(rows.filter((x) => x.variant === rows[0].variant));
  console.log("\noptions at the best configuration");
  const at = {
    vocabSplits: best.vocabSplits,
    streamWorkgroups: best.streamWorkgroups,
    tileState: best.tileState,
    roundRows: best.roundRows,
  };
  await tuner.measure(best.tile, { ...at, tokenStats: true, plain: true });
  if (opts.beta > 0 && !softcap) {
    await tuner.measure(best.tile, { ...at, smoothing: "in-kernel", plain: true });
    await tuner.measure(best.tile, { ...at, softcap: 30, plain: true });
  }
  return best;
}
