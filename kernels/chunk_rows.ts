/**
 * Token chunks for the row kernels: launchers of row_softmax_stats and logit_grad (the same WGSL,
 * so the same pipelines) over a logits tensor that holds rows [rowOffset, rowOffset + rows) of the
 * problem, reading and writing the per-token vectors (targets, LSE, loss rows, weights) at those
 * rows. Also {@link rowPrefix}: the first rows of a tensor as a tensor, so one chunk buffer can
 * serve a shorter last chunk.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import { DeviceTensor, type TensorDtype } from "../gpu/tensor.ts";
import type { LceOptions } from "../core/options.ts";
import { rowSoftmaxStatsSignature, rowSoftmaxStatsWgsl } from "./row_softmax_stats.ts";
import { logitGradSignature, logitGradWgsl } from "./logit_grad.ts";
import { compileKernel } from "../gpu/signature.ts";

/**
 * The first `rows` rows of `t` as a tensor sharing its buffers (its shards cut at `rows`).
 * Destroying the view destroys the buffers: destroy the original instead.
 */
export function rowPrefix(t: DeviceTensor, rows: number): DeviceTensor {
  if (!(Number.isInteger(rows) && rows >= 0 && rows <= t.rows)) {
    throw new RangeError(`${t.label}: prefix of ${rows} rows of ${t.rows}`);
  }
  if (rows === t.rows) return t;
  const shards = t.shards.filter((s) => s.rowStart < rows).map((s) => ({
    ...s,
    rows: Math.min(s.rows, rows - s.rowStart),
  }));
  return new DeviceTensor(t.dtype, rows, t.cols, shards, `${t.label}[:${rows}]`);
}

/** Kernel options shared by both launchers. */
export interface ChunkKernelOptions {
  logitsDtype: TensorDtype;
  opts: LceOptions;
  /** Vocabulary size (columns of the logits). */
  v: number;
}

/** Arguments of {@link PreparedChunkStats.record}. */
export interface ChunkStatsArgs {
  /** Logits of rows [rowOffset, rowOffset + logits.rows). */
  logits: DeviceTensor;
  rowOffset: number;
  /** Full n×1 vectors. */
  targets: DeviceTensor;
  lse: DeviceTensor;
  lossRows: DeviceTensor;
}

/** row_softmax_stats over one chunk. */
export interface PreparedChunkStats {
  record(rec: Recorder, a: ChunkStatsArgs): void;
}

/** Compiles row_softmax_stats for chunks. */
export async function prepareChunkStats(
  ctx: GpuContext,
  o: ChunkKernelOptions,
): Promise<PreparedChunkStats> {
  const k = await compileKernel(
    ctx,
    rowSoftmaxStatsSignature(o.logitsDtype),
    rowSoftmaxStatsWgsl(o),
    "row_softmax_stats",
  );
  return {
    record(rec, a) {
      _checkChunk(a.logits, a.rowOffset, a.targets.rows, o.v);
      rec.pass("row_softmax_stats", (p) => {
        for (const s of a.logits.shards) {
          const params = {
            rows: s.rows,
            v: o.v,
            rowStart: a.rowOffset + s.rowStart,
            ldz: a.logits.cols,
          };
          const bg = k.bind(rec, params, {
            z: s.buffer,
            targets: a.targets.shards[0].buffer,
            lse: a.lse.shards[0].buffer,
            loss_rows: a.lossRows.shards[0].buffer,
          });
          p.dispatch(k.pipeline, bg, Math.min(s.rows, 65535));
        }
      });
    },
  };
}

/** Arguments of {@link PreparedChunkGrad.record}. */
export interface ChunkGradArgs {
  /** Logits of rows [rowOffset, rowOffset + logits.rows). */
  logits: DeviceTensor;
  rowOffset: number;
  /** Full n×1 vectors. */
  targets: DeviceTensor;
  lse: DeviceTensor;
  w: DeviceTensor;
  /** f32, the logits' shape and sharding; the logits themselves when in place. */
  grad: DeviceTensor;
}

/** logit_grad over one chunk. */
export interface PreparedChunkGrad {
  record(rec: Recorder, a: ChunkGradArgs): void;
}

/** Compiles logit_grad (f32 gradient, in place for f32 logits when `inPlace`) for chunks. */
export async function prepareChunkGrad(
  ctx: GpuContext,
  o: ChunkKernelOptions & { inPlace: boolean },
): Promise<PreparedChunkGrad> {
  const kernel = await compileKernel(ctx, logitGradSignature(o), logitGradWgsl(o), "logit_grad");
  return {
    record(rec, a) {
      _checkChunk(a.logits, a.rowOffset, a.targets.rows, o.v);
      if (o.inPlace && a.grad.shards.some((s, k) => s.buffer !== a.logits.shards[k]?.buffer)) {
        throw new RangeError("logit_grad: in place needs grad to share the logits' buffers");
      }
      rec.pass("logit_grad", (p) => {
        a.logits.shards.forEach((s, k) => {
          const gs = a.grad.shards[k];
          if (!gs || gs.rowStart !== s.rowStart || gs.rows !== s.rows) {
            throw new RangeError("logit_grad: shard mismatch");
          }
          const params = { rows: s.rows, v: o.v, rowStart: a.rowOffset + s.rowStart, colStart: 0 };
          const bg = kernel.bind(rec, params, {
            z: o.inPlace ? undefined : s.buffer,
            g: gs.buffer,
            targets: a.targets.shards[0].buffer,
            lse: a.lse.shards[0].buffer,
            w: a.w.shards[0].buffer,
          });
          p.dispatch(kernel.pipeline, bg, Math.ceil(o.v / 256), Math.min(s.rows, 65535));
        });
      });
    },
  };
}

function _checkChunk(logits: DeviceTensor, rowOffset: number, n: number, v: number): void {
  if (logits.cols !== v || rowOffset < 0 || rowOffset + logits.rows > n) {
    throw new RangeError(
      `chunk of ${logits.rows}×${logits.cols} logits at row ${rowOffset} of ${n}×${v}`,
    );
  }
}
