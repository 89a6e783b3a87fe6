/**
 * The products of scripts/bench_tc.ts: a variant's name to its kernel, and a product on given
 * tensors ready to record repeatedly (its scales computed once).
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor, upload } from "../../gpu/tensor.ts";
import { type Dtype, resolveOptions } from "../../core/options.ts";
import { prepareTcForward, TC_FORWARD_TILE, TC_FORWARD_TILE_SUMZ } from "./tc_forward.ts";
import { InputError } from "../../core/errors.ts";
import { prepareMatmul } from "../matmul.ts";
import { TILE_HW_WIDE } from "../gemm_tiles.ts";
import { prepareTcMatmul, type TcMatmulKernel } from "./tc_matmul.ts";
import { prepareTcScales } from "./tc_scale.ts";
import { TC_BENCH_TILES, type TcTile } from "./tc_tiles.ts";
import { createTileMap } from "../fused/tile_map.ts";

/** A bench variant: its kernel, and whether its product adds to the output. */
export type TcBenchVariant = TcMatmulKernel & { name: string; accumulate?: boolean };

/**
 * The product kernel of a variant name: a tile of TC_BENCH_TILES, optionally with `:f16` (f16
 * inputs), `:split` (A in f32, staged as hi and lo f16 parts, as the baseline's gradient
 * products take G), `:gc` (the tensor-core dense dE's G·C: A f16 as stored, B transposed, A's
 * binding read_write, added to an f32 output), `:gcp` (the same with the output loaded into the
 * accumulators of full tiles, as the method's: TcMatmulKernel.preload), `:gte` (the dense dC's Gᵀ·E: A f16 and B both
 * transposed, A's binding read_write, a bf16 output) or a diagnostic `:copy-only` / `:mma-only`;
 * else E·Cᵀ (bf16, both as stored). InputError for an unknown name.
 */
export function tcBenchVariant(v: string): TcBenchVariant {
  const [tile, opt, ...rest] = v.split(":");
  const ok = Object.hasOwn(TC_BENCH_TILES, tile) && rest.length === 0 &&
    [undefined, "f16", "split", "gc", "gcp", "gte", "copy-only", "mma-only"].includes(opt);
  if (!ok) {
    throw new InputError(
      `--variants: unknown '${v}' (tiles: ${Object.keys(TC_BENCH_TILES).join(", ")}; ` +
        "suffixes :f16, :split, :gc, :gcp, :gte, :copy-only, :mma-only)",
    );
  }
  const dt = opt === "f16" ? "f16" : "bf16";
  const diag = opt === "copy-only" || opt === "mma-only" ? opt : undefined;
  const t = TC_BENCH_TILES[tile];
  if (opt === "split") {
    return {
      name: v,
      tile: t,
      aDtype: "f32",
      bDtype: "bf16",
      aTrans: false,
      bTrans: false,
      split: true,
    };
  }
  if (opt === "gc" || opt === "gcp" || opt === "gte") {
    const g = {
      name: v,
      tile: t,
      aDtype: "f16",
      bDtype: "bf16",
      bTrans: true,
      aReadWrite: true,
    } as const;
    return opt === "gte"
      ? { ...g, aTrans: true, outDtype: "bf16" }
      : { ...g, aTrans: false, accumulate: true, preload: opt === "gcp" };
  }
  return { name: v, tile: t, aDtype: dt, bDtype: dt, aTrans: false, bTrans: false, diag };
}

/** A and B of one product (each as its kernel holds it: transposed K×rows) and its output. */
export type TcInputs = { e: DeviceTensor; c: DeviceTensor; out: DeviceTensor };

/** How a product holds its operands and output (TcMatmulKernel's fields of the same names). */
export type TcLayout = Pick<TcMatmulKernel, "aTrans" | "bTrans" | "outDtype">;

/**
 * A (m×k, or k×m held transposed) in `aDt`, B (n×k, or k×n) in `bDt` and the output (m×n, f32
 * or the layout's dtype) of each shape and layout, made once per context.
 */
export function tcInputCache(ctx: GpuContext) {
  const made = new Map<string, TcInputs>();
  const mk = (rows: number, cols: number, dtype: Dtype, label: string) =>
    createTensor(ctx, { dtype, rows, cols, role: "workspace", label });
  const fill = (t: DeviceTensor, phase: number) => {
    const h = new Float32Array(t.rows * t.cols);
    for (let i = 0; i < h.length; i++) h[i] = Math.sin(i * 0.37 + phase) * 0.5;
    upload(ctx, t, h);
  };
  return {
    get(
      s: { m: number; n: number; k: number },
      aDt: "bf16" | "f16" | "f32",
      bDt: "bf16" | "f16" = aDt === "f32" ? "bf16" : aDt,
      l: TcLayout = { aTrans: false, bTrans: false },
    ): TcInputs {
      const outDt = l.outDtype ?? "f32";
      const key = `${s.m}x${s.n}x${s.k}${aDt}${bDt}${l.aTrans}${l.bTrans}${outDt}`;
      let x = made.get(key);
      if (!x) {
        const e = l.aTrans ? mk(s.k, s.m, aDt, "A") : mk(s.m, s.k, aDt, "A");
        const c = l.bTrans ? mk(s.k, s.n, bDt, "B") : mk(s.n, s.k, bDt, "B");
        x = { e, c, out: mk(s.m, s.n, outDt, "out") };
        fill(x.e, 0);
        fill(x.c, 1);
        if (outDt === "f32") fill(x.out, 2);
        made.set(key, x);
      }
      return x;
    },
    destroy: () => [...made.values()].forEach((x) => [x.e, x.c, x.out].forEach((t) => t.destroy())),
  };
}

/** A·B (as `k` holds them) → out on tensor cores, ready to record; `done` frees what it made. */
export async function tcProductRecorder(
  ctx: GpuContext,
  k: TcMatmulKernel & { accumulate?: boolean },
  x: { e: DeviceTensor; c: DeviceTensor; out: DeviceTensor },
): Promise<{ record(rec: Recorder): void; done(): void }> {
  const { accumulate, ...kernel } = k;
  const mm = await prepareTcMatmul(ctx, kernel), sc = await prepareTcScales(ctx);
  const bufs = sc.allocate(ctx);
  await ctx.scoped(async () => {
    const rec = new Recorder(ctx);
    sc.record(rec, { tensors: [x.e, x.c], into: bufs });
    await rec.finish();
  });
  const a = { tensor: x.e, trans: k.aTrans }, b = { tensor: x.c, trans: k.bTrans };
  const scales = { buffer: bufs.scales, a: 0, b: 1 };
  return {
    record: (rec) => mm.record(rec, { a, b, out: x.out, scales, accumulate }),
    done() {
      mm.release();
      bufs.scales.destroy();
      bufs.maxBits.destroy();
    },
  };
}

/**
 * Tiles of the fused forward scripts/bench_tc.ts times at the paper's shape: the methods'
 * TC_FORWARD_TILE (128×128 in 24 KiB, `_s1`: one epilogue scratch matrix a subgroup,
 * TcTile.singleScratch) and TC_FORWARD_TILE_SUMZ (128×256, K-step 32), then 128×256 with K-step
 * 16 in one copy and in two, and other 128×128 tiles; `_map`: the same forward keeping the tile
 * map, as Ours + tile map (tensor cores) runs it.
 */
export const TC_FORWARD_BENCH_TILES: Record<string, TcTile & { tileMax?: boolean }> = {
  f128_k32_s1: TC_FORWARD_TILE,
  f128_k32_s1_map: { ...TC_FORWARD_TILE, tileMax: true },
  f128x256_k32: TC_FORWARD_TILE_SUMZ,
  f128x256_k32_map: { ...TC_FORWARD_TILE_SUMZ, tileMax: true },
  f128x256_k16: { ...TC_FORWARD_TILE_SUMZ, bk: 16 },
  f128x256_k16_map: { ...TC_FORWARD_TILE_SUMZ, bk: 16, tileMax: true },
  f128x256_k16_db: { ...TC_FORWARD_TILE_SUMZ, bk: 16, dbuf: true },
  f128_k32: { sgRows: 2, sgCols: 2, mt: 4, nt: 4, bk: 32 },
  f128_k32_map: { sgRows: 2, sgCols: 2, mt: 4, nt: 4, bk: 32, tileMax: true },
  f128_8sg_k32: { sgRows: 2, sgCols: 4, mt: 4, nt: 2, bk: 32 },
  // 8 subgroups in 20 KiB: K-step 16 and one scratch matrix a subgroup
  f128_8sg_k16_s1: { sgRows: 2, sgCols: 4, mt: 4, nt: 2, bk: 16, singleScratch: true },
};

/**
 * The tensor-core fused forward (β = 0.1, mean) on `x`, ready to record, keeping the tile map with
 * `tileMax`; `done` frees it.
 */
export async function tcForwardRecorder(
  ctx: GpuContext,
  bench: TcTile & { tileMax?: boolean },
  x: { e: DeviceTensor; c: DeviceTensor; targets: DeviceTensor },
): Promise<{ record(rec: Recorder): void; done(): void }> {
  const { tileMax: keepMap, ...tile } = bench;
  const spec = { n: x.e.rows, v: x.c.rows, d: x.e.cols, dtype: x.e.dtype as Dtype };
  const fwd = await prepareTcForward(ctx, {
    spec,
    opts: resolveOptions({ beta: 0.1 }),
    tile,
    tileMax: keepMap,
  });
  const col = (rows: number, label: string) =>
    createTensor(ctx, { dtype: "f32", rows, cols: 1, role: "workspace", label });
  const lse = col(spec.n, "lse"), lossRows = col(spec.n, "loss rows");
  const tileMax = keepMap ? createTileMap(ctx, x.e, x.c, fwd.tile) : undefined;
  const scales = fwd.scales.allocate(ctx);
  return {
    record: (rec) => fwd.record(rec, { ...x, lse, lossRows, scales, tileMax }),
    done() {
      for (const t of [lse, lossRows, tileMax]) t?.destroy();
      scales.scales.destroy();
      scales.maxBits.destroy();
    },
  };
}

/** The FMA core's E·Cᵀ on `x` (bf16 → f32, the 128×256 tile of scripts/bench_gemm.ts). */
export async function fmaProductRecorder(
  ctx: GpuContext,
  x: TcInputs,
): Promise<{ record(rec: Recorder): void; done(): void }> {
  const mm = await prepareMatmul(ctx, {
    tile: TILE_HW_WIDE,
    aDtype: x.e.dtype,
    bDtype: x.c.dtype,
    aTrans: false,
    bTrans: false,
  });
  const a = { tensor: x.e, trans: false }, b = { tensor: x.c, trans: false };
  return { record: (rec) => mm.record(rec, { a, b, out: x.out }), done() {} };
}

/**
 * A run's time budget: `race` waits for a step at most until the budget's end (and at most
 * `capMs`), so a GPU that stops answering ends the run with what it measured instead of hanging;
 * after a step timed out `stuck` is set and no further GPU work should be issued.
 */
export class BenchDeadline {
  readonly #end: number;
  stuck = false;
  constructor(budgetMs: number) {
    this.#end = performance.now() + budgetMs;
  }
  /** Milliseconds left. */
  left(): number {
    return Math.max(0, this.#end - performance.now());
  }
  /** Why no more steps should start, or undefined. */
  get stop(): string | undefined {
    if (this.stuck) return "skipped: an earlier step did not answer";
    return this.left() <= 0 ? "skipped: time budget spent" : undefined;
  }
  /** `p`, or an error once the budget (or `capMs`) runs out first. */
  async race<T>(p: Promise<T>, what: string, capMs = 60_000): Promise<T> {
    const ms = Math.min(capMs, this.left());
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        this.stuck = true;
        reject(new Error(`${what}: no answer within ${(ms / 1000).toFixed(0)} s`));
      }, ms);
    });
    try {
      return await Promise.race([p, late]);
    } finally {
      clearTimeout(timer);
    }
  }
}
