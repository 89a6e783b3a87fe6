/**
 * The filter's sample: where the fused backward records both dense paths (kernels/fused/dense_de.ts
 * and dense_dc.ts, or another kernel family's), the filter pass first runs over a sample of the
 * token tiles, the first {@link filterSampleRows} rows, and pass `filter sample decision` reads
 * the sample's kept count. Where the sample keeps more than the larger of the two paths'
 * thresholds (`above`), both gradients will be dense products over every tile, which read nothing
 * the filter writes: the rest of the filter pass, recorded under a gate of the flag
 * (gpu/gate.ts), does no work, and the decision tells both dense decisions to take their dense
 * paths (counter[4] = 1, read by kernels/fused/dense_decision.ts). Elsewhere the rest runs and the
 * kept counts are the whole filter's, as without the sample.
 *
 * So where most tiles are kept the backward pays for a sample of the filter's logits product
 * instead of the whole of it, and elsewhere one extra dispatch, a one-invocation pass and a gate.
 * The sample is the first rows of the batch, a deterministic choice: the decision is a function of
 * the inputs. Its kept fraction (in the own order: the sorted order's count comes later, from the
 * order decision) estimates the whole's; where it errs, the gradients are still exact (the dense
 * paths drop nothing), only the path may be the slower one. Where the sample is
 * taken, counter[5] holds the estimated kept count of every tile (the sample's count scaled to
 * every tile), which the stats report as the kept tiles (`filterSampled`: 1).
 *
 * Counter words (the backward's `kept tiles` buffer, {@link KEPT_COUNTER_WORDS} of them): [own
 * order's kept, sorted order's kept, the dC split's segments, the order decision's bound, the
 * sample taken, the estimated kept count].
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import { type DenseMode, prepareDenseDecision } from "./dense_decision.ts";
import type { TileSegment } from "./backward_plan.ts";

/** Words of the backward's kept-tile counter (see the module's doc). */
export const KEPT_COUNTER_WORDS = 8;

/** The share of the token tiles the sample takes, at least one filter tile of rows. */
export const FILTER_SAMPLE_SHARE = 1 / 8;

/**
 * Rows of the sample: a multiple of `step` (the filter tile's and the backward tile's rows, so
 * that both passes start on whole tiles of either), about {@link FILTER_SAMPLE_SHARE} of n; 0
 * where that leaves nothing to skip.
 */
export function filterSampleRows(n: number, step: number): number {
  const rows = Math.max(1, Math.round((n * FILTER_SAMPLE_SHARE) / step)) * step;
  return rows < n ? rows : 0;
}

/**
 * A token segment cut after the sample's `rows` (a multiple of `tileTokens`, the backward tile's
 * rows): the sample's tiles and the rest's.
 */
export function sampleSegments(
  ts: TileSegment,
  rows: number,
  tileTokens: number,
): [TileSegment, TileSegment] {
  const head = rows / tileTokens;
  if (!Number.isInteger(head) || head <= 0 || head >= ts.tiles) {
    throw new RangeError(`filter sample: ${rows} rows of a ${ts.tiles}-tile segment`);
  }
  return [
    { ...ts, end: ts.start + rows, tiles: head },
    { ...ts, start: ts.start + rows, base: ts.base + head, tiles: ts.tiles - head },
  ];
}

/** The sample's decision and its gate. */
export interface PreparedFilterSample {
  /** The kept fraction above which the sample stops the filter (`auto`). */
  readonly above: number;
  /**
   * Records pass `filter sample decision`: the dense decision's kernel over the sample's tiles
   * (kernels/fused/dense_decision.ts, `sampleOf` every tile), which sets counter[4] and counter[5]
   * where it takes the dense paths.
   */
  record(rec: Recorder, a: { counter: TrackedBuffer; sampled: number; total: number }): void;
  /** Records `fn` (the rest of the filter) with every dispatch doing work only where not taken. */
  rest(rec: Recorder, fn: () => void): void;
  release(): void;
}

/** Compiles the decision (`mode`: `always` takes the sample whatever it keeps: tests). */
export async function prepareFilterSample(
  ctx: GpuContext,
  o: { mode: Exclude<DenseMode, "never">; above: number },
): Promise<PreparedFilterSample> {
  const decision = await prepareDenseDecision(ctx, { name: "filter sample", ...o });
  return {
    above: o.above,
    record(rec, a) {
      decision.record({ rec, counter: a.counter, tiles: a.sampled, sortDecided: false }, a.total);
    },
    rest(rec, fn) {
      decision.under(rec, 0, fn);
    },
    release() {
      decision.release();
    },
  };
}
