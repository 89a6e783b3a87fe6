/**
 * The decision of the fused backward's dense paths (kernels/fused/dense_de.ts for dE,
 * kernels/fused/dense_dc.ts for dC): one pass reads the kept count of the order the backward uses
 * and writes a flag, 1 for the dense path; each path's work and the kept tiles' it replaces are
 * recorded under gates of that flag (gpu/gate.ts), so only one of them does any work and the host
 * never reads the count back. Each path has a decision of its own, with its own threshold; where
 * the filter's sample already took both dense paths (kernels/fused/filter_sample.ts), each takes
 * its dense path. The counter is the backward's (filter_sample.ts `KEPT_COUNTER_WORDS` words).
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import { createTensor, type DeviceTensor, download } from "../../gpu/tensor.ts";
import { compileKernel, signature } from "../../gpu/signature.ts";
import { type PreparedGate, prepareGate } from "../../gpu/gate.ts";
import { SORT_MARGIN } from "./order_decision.ts";
import type { TileSegment } from "./backward_plan.ts";

/**
 * Which path a gradient takes: decided on the GPU from the kept count (`auto`), or forced (tests,
 * benchmarks); `never` records no dense path at all.
 */
export type DenseMode = "auto" | "always" | "never";

const _MODES: Record<Exclude<DenseMode, "never">, number> = { auto: 0, always: 1 };

/**
 * The decision's signature: the kept counts (own order, sorted order), the flag it writes; the
 * flag is 1 above the fraction `above` of the tiles, and also below `fewer` kept tiles. As the
 * filter's sample's decision, `sampleOf` is every tile (else 0) and the counter is written.
 */
export const DENSE_DECISION_SIG = signature({
  params: {
    total: "u32",
    sortDecided: "u32",
    mode: "u32",
    above: "f32",
    fewer: "u32",
    sampleOf: "u32",
    shareMode: "u32",
    shareAbove: "f32",
  },
  bindings: {
    counter: { elem: "u32", access: "read_write" },
    flag: { elem: "u32", access: "read_write" },
  },
});

/**
 * WGSL of a decision pass (one invocation): the kept count of the order the backward uses (the
 * sorted one where the order decision takes it: counter[1], else counter[0]), flag[0] = 1 for
 * the dense path (or, for the tile map's refine, for no refine) and flag[1] = that count. Where
 * the filter stopped after its sample (counter[4] = 1, kernels/fused/filter_sample.ts), the dense
 * path, and flag[1] the sample's estimate (counter[5]). As the sample's own decision (`sampleOf`
 * every tile, `total` the sample's), where it takes the dense paths it sets counter[4] = 1 and
 * counter[5] = the sample's count scaled to every tile. Where a dense backward sharing its G is
 * recorded (`shareMode` 1: the other path by its threshold `shareAbove`, 2: the other path always
 * dense; kernels/fused/dense_shared.ts), flag[0] = 2 where both paths are dense.
 */
export function denseDecisionWgsl(): string {
  return `${DENSE_DECISION_SIG.wgsl}
@compute @workgroup_size(1)
fn main() {
  var kept = counter[0];
  if (P.sortDecided == 1u && ${SORT_MARGIN[1]}u * counter[1] < ${SORT_MARGIN[0]}u * counter[0]) {
    kept = counter[1];
  }
  var dense = f32(kept) > P.above * f32(P.total) || kept < P.fewer;
  if (P.mode == 1u) { dense = true; }
  if (counter[4] == 1u) {
    dense = true;
    kept = counter[5];
  }
  if (P.sampleOf > 0u && dense) {
    kept = min(P.sampleOf, u32(round(f32(kept) * (f32(P.sampleOf) / f32(P.total)))));
    counter[4] = 1u;
    counter[5] = kept;
  }
  // both dense paths (this one and the other, by the other's mode and threshold): the shared one
  let other = P.shareMode == 2u || counter[4] == 1u ||
    (P.shareMode == 1u && f32(kept) > P.shareAbove * f32(P.total));
  flag[0] = select(0u, select(1u, 2u, P.shareMode > 0u && other), dense);
  flag[1] = kept;
}
`;
}

/**
 * The other dense path's decision, where a dense backward sharing G is recorded: its mode and its
 * threshold (flag[0] = 2 where both are dense).
 */
export interface DenseShare {
  mode: Exclude<DenseMode, "never">;
  above: number;
}

/** What a dense path reads (each adds where it writes). */
export interface DensePathArgs {
  rec: Recorder;
  e: DeviceTensor;
  c: DeviceTensor;
  targets: DeviceTensor;
  lse: DeviceTensor;
  w: DeviceTensor;
  /** The kept-tile counters (own order, sorted order). */
  counter: TrackedBuffer;
  /** Tiles in all (token tiles × vocab tiles). */
  tiles: number;
  /** The order decision ran (counter[1] is the sorted order's count). */
  sortDecided: boolean;
  tok: TileSegment[];
  voc: TileSegment[];
}

/** A compiled decision and its flag. */
export interface PreparedDenseDecision {
  /** The kept fraction above which `auto` takes the dense path. */
  readonly above: number;
  /**
   * Records pass `<name> decision`, which writes the flag; with `sampleOf` (every tile), as the
   * filter's sample's decision over `a.tiles` sampled tiles; with `share`, flag 2 where the other
   * path is dense too (see {@link denseDecisionWgsl}).
   */
  record(
    a: Pick<DensePathArgs, "rec" | "counter" | "tiles" | "sortDecided">,
    sampleOf?: number,
    share?: DenseShare,
  ): void;
  /** Records `fn` with every dispatch gated: its work done only where the flag is `want`. */
  under(rec: Recorder, want: 0 | 1 | 2, fn: () => void): void;
  /** Whether the last decision recorded took the dense path, shared or not (reads the flag back). */
  took(): Promise<boolean>;
  /** The flag of the last decision: 0 the other path, 1 the dense one, 2 both dense, shared. */
  taken(): Promise<number>;
  /** That and the kept count the decision read, in one read back. */
  state(): Promise<{ took: boolean; kept: number }>;
  release(): void;
}

/** Compiles a decision (`name`: "dense dE", "dense dC") and makes its flag. */
export async function prepareDenseDecision(
  ctx: GpuContext,
  o: {
    name: string;
    mode: Exclude<DenseMode, "never">;
    /** The kept fraction above which `auto` takes the dense path. */
    above: number;
    /** Kept tiles below which `auto` sets the flag as well (default 0: never). */
    fewer?: number;
  },
): Promise<PreparedDenseDecision> {
  const gate: PreparedGate = await prepareGate(ctx);
  const label = `${o.name} decision`;
  const decide = await compileKernel(ctx, DENSE_DECISION_SIG, denseDecisionWgsl(), label);
  const flag = createTensor(ctx, {
    dtype: "u32",
    rows: 1,
    cols: 2,
    role: "workspace",
    label: `${o.name} flag`,
  });
  const fb = flag.shards[0].buffer;
  return {
    above: o.above,
    record(a, sampleOf = 0, share) {
      const { rec } = a;
      rec.pass(label, (p) => {
        const params = {
          total: a.tiles,
          sortDecided: a.sortDecided ? 1 : 0,
          mode: _MODES[o.mode],
          above: o.above,
          fewer: o.fewer ?? 0,
          sampleOf,
          shareMode: share ? (share.mode === "always" ? 2 : 1) : 0,
          shareAbove: share?.above ?? 0,
        };
        p.dispatch(decide.pipeline, decide.bind(rec, params, { counter: a.counter, flag: fb }), 1);
      });
    },
    under(rec, want, fn) {
      gate.under(rec, { flag: fb, want }, fn);
    },
    async took() {
      const f = (await download(ctx, flag))[0];
      return f === 1 || f === 2;
    },
    async taken() {
      return (await download(ctx, flag))[0];
    },
    async state() {
      const f = await download(ctx, flag);
      return { took: f[0] === 1 || f[0] === 2, kept: f[1] };
    },
    release() {
      flag.destroy();
    },
  };
}
