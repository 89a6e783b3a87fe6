/**
 * The exact sparse and rank-one parts of the gradient, which the tiled (filtered) kernels of
 * kernels/fused/backward.ts never see, so a gradient filter can never drop them.
 *
 * With the per-token weight w_n, the target coefficient a_n = −w_n·(1−β)·f'(z_{n,t_n}) (f' the
 * softcap derivative 1 − (z/s)², 1 without softcap) and b_n = −(β/|V|)·w_n:
 *
 * - dE_n = a_n·C_{t_n} + b_n·Σ_v C_v   (written: this initialises dE);
 * - dC_v = −(β/|V|)·Σ_n w_n·E_n         (written: initialises dC), then
 * - dC_{t_n} += a_n·E_n                  (the target scatter; prepared with `foldTargets`, after
 *                                          the dC pass and only for the tokens it did not fold
 *                                          into a kept tile: kernels/fused/kept_tiles.ts; the
 *                                          others never enter the sorted pairs' runs).
 *
 * With softcap, z_{n,t_n} is recomputed per token as softcap(E_n·C_{t_n}) (a tree-reduced dot
 * product). Σ_v C_v comes from kernels/column_sum.ts, Σ_n w_n·E_n from the weighted column sum of
 * kernels/fused/vocab_order.ts.
 *
 * The scatter is deterministic without float atomics: the (target, token) pairs are sorted with
 * the bitonic pair sort of kernels/fused/vocab_order.ts, and one workgroup per run of equal targets adds
 * the run's a_n·E_n in token order into that row of dC (each row is owned by exactly one run).
 * With E or dC split into several bindings, one dispatch per (E shard, dC shard) adds the tokens
 * of that E shard, shards in order. Everything here is bitwise reproducible.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor } from "../../gpu/tensor.ts";
import type { Dtype, LceOptions } from "../../core/options.ts";
import { columnPartialsBytes, prepareColumnSum, prepareWeightedColumnSum } from "../column_sum.ts";
import type { Dtype16 } from "../cast16.ts";
import { paddedSortLength, preparePairSort } from "./vocab_order.ts";
import {
  correctionTerms,
  dCInit16Wgsl,
  dCInitSignature,
  dCInitWgsl,
  dEInitSignature,
  dEInitWgsl,
  scatterColumnsPerGroup,
  TARGET_COEF_PLAIN_SIG,
  targetCoefPlainWgsl,
  targetCoefSoftcapSignature,
  targetCoefSoftcapWgsl,
  targetPairsSignature,
  targetPairsWgsl,
  targetScatter16Signature,
  targetScatter16Wgsl,
  targetScatterSignature,
  targetScatterWgsl,
} from "./corrections_wgsl.ts";
import { compileKernel } from "../../gpu/signature.ts";

/** Arguments of {@link PreparedGradCorrections.record}. */
export interface GradCorrectionArgs {
  e: DeviceTensor;
  c: DeviceTensor;
  /** n×1 i32, one shard. */
  targets: DeviceTensor;
  /** Per-token weights w_n (n×1 f32, one shard; 0 for ignored tokens). */
  w: DeviceTensor;
  /**
   * Outputs (n×d and v×d, any row sharding): overwritten with the exact terms. dE is f32; dC is
   * f32, or the prepared 16-bit dtype (see `dC16` of {@link prepareGradCorrections}).
   */
  dE?: DeviceTensor;
  dC?: DeviceTensor;
  /**
   * Which outputs to write (default both, needing dE and dC): "dE" or "dC" records only the passes
   * of that gradient (the target coefficients, needed by both, are then computed by each call), so
   * that a caller can form dE completely before dC's storage is written. Prepared with
   * `foldTargets`, "dC" writes the smoothing row only and "dC-scatter" adds the target terms of the
   * tokens not flagged in `folded`, after the dC pass.
   */
  part?: "dE" | "dC" | "dC-scatter";
  /**
   * "dC-scatter" only: one word per token, nonzero where the dC pass added the token's target term
   * (kernels/fused/kept_tiles.ts, foldTargets).
   */
  folded?: TrackedBuffer;
  /**
   * The target coefficients returned by the "dE" part's record, handed to the "dC" part so that
   * they are computed and held once (the "dC" part releases them; prepared with `foldTargets`, the
   * "dC-scatter" part does).
   */
  coefficients?: DeviceTensor;
  /**
   * Buffer for the column partials of Σ_n w_n·E_n (≥ columnPartialsBytes of E's shards, see
   * kernels/fused/vocab_order.ts), e.g. shared with the vocab sort; default: allocated by the call.
   */
  ePartials?: TrackedBuffer;
  /**
   * Σ_v C_v (d×1 f32, one shard) computed earlier, e.g. by the fused forward: the "dE" part then
   * reads it instead of summing C's columns again (and leaves it to the caller).
   */
  csum?: DeviceTensor;
  /**
   * "dC-scatter" only: records the scatter pass under this (the dense dC's gate, which overwrites
   * dC where it runs); the pairs and their sort, a few dispatches of microseconds, run either way.
   */
  scatterUnder?: (fn: () => void) => void;
  /**
   * "dC" prepared with `foldTargets`: return the smoothing row −(β/|V|)·Σ_n w_n E_n (where β > 0)
   * instead of releasing it: the caller releases it (the dC split's sum writes it back into the
   * rows it borrowed, kernels/fused/dc_split.ts).
   */
  keepSmoothRow?: boolean;
}

/** What a record returns (see {@link PreparedGradCorrections.record}). */
export interface GradCorrectionsRecord {
  /** The "dE" part's target coefficients (β < 1), for the "dC" part. */
  coefficients?: DeviceTensor;
  /** The "dC" part's smoothing row, with keepSmoothRow. */
  smoothRow?: DeviceTensor;
}

/** Compiled correction kernels. */
export interface PreparedGradCorrections {
  /**
   * Records the passes that write the exact terms into dE and dC (see module doc). The "dE" part
   * returns the target coefficients (β < 1) for the "dC" part.
   */
  record(rec: Recorder, a: GradCorrectionArgs): GradCorrectionsRecord;
  /** {@link gradCorrectionsWorkspaceBytes} for this problem's options. */
  workspaceBytes(
    eShardRows: number[],
    d: number,
    cColumnSum: number | "given",
    ownPartials?: boolean,
  ): number;
  /** Whether the record uses E's column partials (β > 0). */
  readonly usesEPartials: boolean;
}

/**
 * Workspace bytes of one corrections record for E's shard rows and hidden size d, given the bytes
 * of C's column-sum partials (kernels/column_sum.ts), or "given" where Σ_v C_v is handed in
 * ({@link GradCorrectionArgs.csum}: neither it nor its partials are allocated): the target
 * coefficients and pairs (β < 1); Σ_v C_v, Σ_n w_n·E_n, both partials (β > 0; E's only with
 * `ownPartials`, see {@link GradCorrectionArgs.ePartials}).
 */
export function gradCorrectionsWorkspaceBytes(
  opts: LceOptions,
  eShardRows: number[],
  d: number,
  cColumnSum: number | "given",
  ownPartials = true,
): number {
  const { target, smooth } = correctionTerms(opts);
  const n = eShardRows.reduce((s, r) => s + r, 0);
  const vec = (k: number) => Math.ceil((k * 4) / 16) * 16;
  let b = 0;
  if (target) b += vec(n) + paddedSortLength(n) * 8;
  if (smooth) {
    const cSum = cColumnSum === "given" ? 0 : vec(d) + cColumnSum;
    b += vec(d) + cSum + (ownPartials ? columnPartialsBytes(eShardRows, d) : 0);
  }
  return b;
}

const grid = (elems: number, per: number) => Math.min(Math.max(1, Math.ceil(elems / per)), 65535);

/** Options of {@link prepareGradCorrections}. */
export interface GradCorrectionsOptions {
  dtype: Dtype;
  opts: LceOptions;
  v: number;
  /**
   * dC is packed 16-bit of this dtype (d even): the smoothing row and the target scatter are
   * added in f32 and rounded once per element (twice for a target row when E spans several
   * bindings).
   */
  dC16?: Dtype16;
  /**
   * The dC pass adds the target terms of the tiles it keeps and flags their tokens
   * (kernels/fused/kept_tiles.ts): the "dC" part then writes the smoothing row only, and the
   * "dC-scatter" part, recorded after the dC pass, adds the others (to what is stored: with a
   * 16-bit dC one more rounding of a target row).
   */
  foldTargets?: boolean;
}

/** The compiled pieces of the corrections (undefined where the terms do not exist). */
type _Kernels = Awaited<ReturnType<typeof _kernels>>;

async function _kernels(ctx: GpuContext, o: GradCorrectionsOptions) {
  const { opts } = o;
  const { target, smooth } = correctionTerms(opts);
  const softcap = opts.capped;
  const coef = target && !softcap
    ? await compileKernel(ctx, TARGET_COEF_PLAIN_SIG, targetCoefPlainWgsl(opts), "target_coef")
    : undefined;
  const coefCapped = target && softcap
    ? await compileKernel(
      ctx,
      targetCoefSoftcapSignature(o.dtype),
      targetCoefSoftcapWgsl(o),
      "target_coef",
    )
    : undefined;
  const deInit = await compileKernel(ctx, dEInitSignature(o.dtype), dEInitWgsl(o), "dE_init");
  const dc16 = o.dC16;
  const dcInit = await compileKernel(
    ctx,
    dCInitSignature(dc16 ? "u32" : "f32"),
    dc16 ? dCInit16Wgsl(opts, dc16) : dCInitWgsl(opts),
    dc16 ? `dC_init→${dc16}` : "dC_init",
  );
  const fold = target && o.foldTargets === true;
  const fill = target
    ? await compileKernel(
      ctx,
      targetPairsSignature(fold),
      targetPairsWgsl(opts, fold),
      fold ? "target_pairs_unfolded" : "target_pairs",
    )
    : undefined;
  const scatter = target && !dc16
    ? await compileKernel(
      ctx,
      targetScatterSignature(o.dtype),
      targetScatterWgsl(o.dtype),
      "target_scatter",
    )
    : undefined;
  const scatter16 = target && dc16
    ? await compileKernel(
      ctx,
      targetScatter16Signature(o.dtype),
      targetScatter16Wgsl(o.dtype, dc16, smooth),
      `target_scatter→${dc16}`,
    )
    : undefined;
  const sort = target ? await preparePairSort(ctx) : undefined;
  const colsum = smooth ? await prepareColumnSum(ctx, { dtype: o.dtype }) : undefined;
  const wsum = smooth
    ? await prepareWeightedColumnSum(ctx, {
      dtype: o.dtype,
      weights: "vector",
      ignoreIndex: opts.ignoreIndex,
    })
    : undefined;
  const k = { o, target, smooth, softcap, fold, deInit, dcInit };
  return { ...k, coef, coefCapped, fill, scatter, scatter16, sort, colsum, wsum };
}

/** The vectors of one record (f32, one shard each). */
interface _Vectors {
  /** Target coefficients a_n (β < 1). */
  a?: DeviceTensor;
  /** Σ_v C_v (β > 0, dE part). */
  csum?: DeviceTensor;
  /** −(β/|V|)·Σ_n w_n E_n (β > 0, dC part). */
  rvec?: DeviceTensor;
}

/** Records the target coefficients a_n into `a`. */
function _recordCoefficients(k: _Kernels, rec: Recorder, x: GradCorrectionArgs, a: DeviceTensor) {
  const { e, c } = x;
  const n = e.rows, d = e.cols;
  const ab = a.shards[0].buffer;
  const tg = x.targets.shards[0].buffer, wb = x.w.shards[0].buffer;
  rec.pass("target coefficients", (p) => {
    if (k.coef) {
      const bg = k.coef.bind(rec, { n }, { targets: tg, w: wb, a: ab });
      p.dispatch(k.coef.pipeline, bg, Math.ceil(n / 256));
      return;
    }
    const coef = k.coefCapped!;
    for (const es of e.shards) {
      c.shards.forEach((cs, ci) => {
        const params = {
          eRows: es.rows,
          eR0: es.rowStart,
          cRows: cs.rows,
          cR0: cs.rowStart,
          d,
          first: ci === 0 ? 1 : 0,
        };
        p.dispatch(
          coef.pipeline,
          coef.bind(rec, params, { e: es.buffer, c: cs.buffer, targets: tg, w: wb, a: ab }),
          Math.min(es.rows, 65535),
        );
      });
    }
  });
}

/** Records dE's exact terms: a_n·C_{t_n} + b_n·Σ_v C_v, per (dE shard, C shard). */
function _recordDE(k: _Kernels, rec: Recorder, x: GradCorrectionArgs, t: _Vectors) {
  const { c, dE } = x;
  const d = x.e.cols;
  const tg = x.targets.shards[0].buffer, wb = x.w.shards[0].buffer, dummy = wb;
  const deInit = k.deInit;
  rec.pass("dE exact terms", (p) => {
    for (const os of dE!.shards) {
      c.shards.forEach((cs, ci) => {
        if (ci > 0 && !k.target) return;
        const params = {
          rows: os.rows,
          oR0: os.rowStart,
          cRows: cs.rows,
          cR0: cs.rowStart,
          d,
          first: ci === 0 ? 1 : 0,
        };
        // a term that does not exist reads nothing: any read-only buffer fills its binding
        const bg = deInit.bind(rec, params, {
          c: cs.buffer,
          targets: tg,
          a: t.a?.shards[0].buffer ?? dummy,
          w: wb,
          csum: t.csum?.shards[0].buffer ?? dummy,
          de: os.buffer,
        });
        p.dispatch(deInit.pipeline, bg, grid(os.rows * d, 256));
      });
    }
  });
}

/** Records the target scatter dC_{t_n} += a_n·E_n (pairs sorted by target, runs in order). */
function _recordScatter(
  k: _Kernels,
  ctx: GpuContext,
  rec: Recorder,
  x: GradCorrectionArgs,
  t: _Vectors,
) {
  const fill = k.fill!, n = x.e.rows;
  const tg = x.targets.shards[0].buffer;
  const count = paddedSortLength(n);
  const pairs = ctx.createBuffer({ size: count * 8, role: "workspace", label: "target pairs" });
  rec.pass("target pairs", (p) => {
    p.dispatch(
      fill.pipeline,
      fill.bind(rec, { n, count }, { targets: tg, pairs, folded: x.folded }),
      grid(count, 256),
    );
  });
  k.sort!.record(rec, pairs, count, "target sort");
  const under = x.scatterUnder ?? ((fn: () => void) => fn());
  under(() => _recordScatterPass(k, rec, x, t, pairs));
  rec.release(pairs);
}

/** The scatter pass itself: one workgroup per run of equal targets (pairs sorted). */
function _recordScatterPass(
  k: _Kernels,
  rec: Recorder,
  x: GradCorrectionArgs,
  t: _Vectors,
  pairs: TrackedBuffer,
) {
  const { e, dC } = x;
  const n = e.rows, d = e.cols, a = t.a!, dummy = x.w.shards[0].buffer;
  rec.pass("dC target scatter", (p) => {
    e.shards.forEach((es, ei) => {
      for (const ds of dC!.shards) {
        const params = { eRows: es.rows, eR0: es.rowStart, dRows: ds.rows, dR0: ds.rowStart, d, n };
        const common = {
          pairs,
          a: a.shards[0].buffer,
          e: es.buffer,
          dc: ds.buffer,
        };
        const grid = [Math.min(n, 65535), Math.ceil(d / scatterColumnsPerGroup(!!k.scatter16))];
        if (k.scatter16) {
          // after the dC pass (fold) the stored value is added to, else the smoothing row
          const first = ei === 0 && !k.fold ? 1 : 0;
          const bg = k.scatter16.bind(rec, { ...params, first }, {
            ...common,
            rvec: t.rvec?.shards[0].buffer ?? dummy,
          });
          p.dispatch(k.scatter16.pipeline, bg, grid[0], grid[1]);
        } else {
          const bg = k.scatter!.bind(rec, params, common);
          p.dispatch(k.scatter!.pipeline, bg, grid[0], grid[1]);
        }
      }
    });
  });
}

/** Records dC's smoothing row into every row of dC (overwriting it). */
function _recordDCInit(k: _Kernels, rec: Recorder, x: GradCorrectionArgs, t: _Vectors) {
  const d = x.e.cols, dummy = x.w.shards[0].buffer, dcInit = k.dcInit;
  rec.pass("dC smoothing term", (p) => {
    for (const ds of x.dC!.shards) {
      const bg = dcInit.bind(rec, { rows: ds.rows, d }, {
        rvec: t.rvec?.shards[0].buffer ?? dummy,
        dc: ds.buffer,
      });
      p.dispatch(dcInit.pipeline, bg, grid(ds.rows * d, 256));
    }
  });
}

/** Throws when the outputs do not match the prepared dtypes. */
function _checkOutputs(k: _Kernels, x: GradCorrectionArgs): void {
  const { dE, dC } = x;
  const d = x.e.cols, dc16 = k.o.dC16;
  const doE = x.part === undefined || x.part === "dE";
  const doC = x.part !== "dE";
  if (
    (doE && dE?.dtype !== "f32") || (doC && dC?.dtype !== (dc16 ?? "f32")) ||
    (dc16 && d % 2 !== 0)
  ) {
    throw new RangeError(
      `grad corrections: dE ${dE?.dtype}, dC ${dC?.dtype}, d ${d}; prepared for dC ${
        dc16 ?? "f32"
      }`,
    );
  }
}

/** Records the corrections' passes (see {@link PreparedGradCorrections.record}). */
function _record(
  k: _Kernels,
  ctx: GpuContext,
  rec: Recorder,
  x: GradCorrectionArgs,
): GradCorrectionsRecord {
  _checkOutputs(k, x);
  const { e, c, w, dE, dC } = x;
  const { target, smooth, o } = k;
  const n = e.rows, d = e.cols;
  if (x.part === "dC-scatter") return _recordFoldedScatter(k, ctx, rec, x);
  const doE = x.part === undefined || x.part === "dE";
  const doC = x.part === undefined || x.part === "dC";
  const vec = (rows: number, label: string) =>
    createTensor(ctx, { dtype: "f32", rows, cols: 1, role: "workspace", label });
  const t: _Vectors = {
    a: target ? x.coefficients ?? vec(n, "target coefficients") : undefined,
    csum: smooth && doE ? x.csum ?? vec(d, "Σ_v C_v") : undefined,
    rvec: smooth && doC ? vec(d, "−(β/|V|)·Σ_n w_n E_n") : undefined,
  };
  if (t.a && (k.coef || k.coefCapped) && !x.coefficients) _recordCoefficients(k, rec, x, t.a);
  if (t.csum && k.colsum && !x.csum) k.colsum.record(rec, { c, out: t.csum });
  // a column sum handed in belongs to the caller
  const own = (v?: DeviceTensor) => v !== undefined && v !== x.csum;
  if (t.rvec && k.wsum) {
    const scale = -o.opts.beta / o.v;
    k.wsum.record(rec, { x: e, weights: w, out: t.rvec, scale, partials: x.ePartials });
  }
  if (doE && dE) _recordDE(k, rec, x, t);
  if (!doC || !dC) {
    if (own(t.csum)) rec.release(t.csum!.shards[0].buffer);
    return { coefficients: t.a };
  }
  _recordDCInit(k, rec, x, t);
  if (k.fold) {
    // the target terms come after the dC pass ("dC-scatter"), which takes the coefficients
    const keep = x.keepSmoothRow ? t.rvec : undefined;
    for (const v of [t.csum, t.rvec]) {
      if (v && own(v) && v !== keep) rec.release(v.shards[0].buffer);
    }
    return { coefficients: t.a, smoothRow: keep };
  }
  if (t.a && k.fill && k.sort && (k.scatter || k.scatter16)) _recordScatter(k, ctx, rec, x, t);
  for (const v of [t.a, t.csum, t.rvec]) if (v && own(v)) rec.release(v.shards[0].buffer);
  return {};
}

/** The "dC-scatter" part: the target terms of the tokens the dC pass did not fold. */
function _recordFoldedScatter(
  k: _Kernels,
  ctx: GpuContext,
  rec: Recorder,
  x: GradCorrectionArgs,
): { coefficients?: DeviceTensor } {
  if (!k.target) return {};
  if (!k.fold || !x.folded || !x.coefficients || !x.dC) {
    throw new RangeError(
      "grad corrections: the dC-scatter part needs foldTargets, folded, coefficients and dC",
    );
  }
  _recordScatter(k, ctx, rec, x, { a: x.coefficients });
  rec.release(x.coefficients.shards[0].buffer);
  return {};
}

/** Compiles the corrections for a problem. */
export async function prepareGradCorrections(
  ctx: GpuContext,
  o: GradCorrectionsOptions,
): Promise<PreparedGradCorrections> {
  const k = await _kernels(ctx, o);
  const { opts } = o;
  return {
    usesEPartials: k.smooth,
    workspaceBytes: (eRows, d, cs, own) => gradCorrectionsWorkspaceBytes(opts, eRows, d, cs, own),
    record: (rec, x) => _record(k, ctx, rec, x),
  };
}
