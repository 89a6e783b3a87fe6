/**
 * The tile map's exact filter (`map refine`, the "Ours + tile map" row's backward): after the map
 * filter (kernels/fused/tile_map.ts) has set the mask from the forward's tile maxima, the filter
 * pass (kernels/fused/filter.ts, `refine`) recomputes the tiles the map keeps, and only those, and
 * clears the ones that keep no element. The kept tiles are then those the exact filter keeps (the
 * map keeps a superset of them: its bound), so the gradient passes after it do the work of `Ours`
 * without sorting, bit for bit its gradients, at the cost of recomputing the filter tiles (128 ×
 * 256 on hardware) that hold a tile the map keeps, instead of every tile: on `llm`, where the map
 * keeps 67% of the tiles, nearly all of them (docs/performance.md, the tile map).
 *
 * Where the map keeps more than {@link MAP_REFINE_BELOW} of the tiles the refine is skipped: the
 * dense dE path (kernels/fused/dense_de.ts, from 0.75) would take most of its work anyway, and a
 * recompute of nearly every tile costs a product's worth; then the map's mask stands, as before.
 * It is skipped too where the map keeps fewer than {@link MAP_REFINE_MIN_TILES} tiles: too few
 * for the tiles it could drop to repay its own pass.
 * The choice is made on the GPU from the map filter's count (kernels/fused/dense_decision.ts),
 * the refine recorded under a gate of it (gpu/gate.ts): no read back.
 *
 * With a filter of another kernel family (`full`: the tensor-core rows' filter,
 * FusedBackwardOptions.mapRefineFilter) the refine is that filter over every tile instead, after a
 * pass that clears the mask and the count (`map refine clear`): the kept tiles are then that
 * filter's own, as its row without the map keeps them in its own order. A tensor-core filter over
 * every tile costs less than the FMA filter over most of them (on `llm` on an H200, 2.6 against
 * 9.6 ms). Where both dense paths apply, that filter takes the filter's sample as the plain
 * filter does (kernels/fused/filter_sample.ts): first the sample's token tiles, then the sample's
 * decision, then the rest under the sample's gate, nested in the refine's (gpu/gate.ts). Where the
 * sample keeps enough tiles for both dense paths the rest does no work, and the dense paths read
 * nothing the refine writes; where the refine is skipped the sample's decision does not run
 * either, and the dense decisions read the map's count.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../../gpu/context.ts";
import { GATE_CAPACITY } from "../../gpu/gate.ts";
import { compileKernel, signature } from "../../gpu/signature.ts";
import type { GemmTile } from "../gemm_codegen.ts";
import {
  type FilterPassKernelOptions,
  filterPassSignature,
  filterPassWgsl,
  type FilterRecordOptions,
  recordFilterPass,
} from "./filter.ts";
import { type DensePathArgs, prepareDenseDecision } from "./dense_decision.ts";
import { type PreparedFilterSample, sampleSegments } from "./filter_sample.ts";

/**
 * The map's kept fraction above which the refine is skipped (`auto`): where the dense dE path
 * takes over (kernels/fused/dense_de.ts `DENSE_DE_ABOVE`).
 */
export const MAP_REFINE_BELOW = 0.75;

/**
 * The map's kept tiles (128 × 64 on hardware) below which the refine is skipped (`auto`). At the
 * paper's shape the map keeps 128 tiles, the exact filter's own: the refine took 0.80 ms of the
 * map row's 3.8 ms backward on an H200 and 0.79 ms on an H100 and dropped none, while the kept
 * tiles' passes after it took 1.4 ms for all 128 (kept g 0.68, dE 0.28, dC 0.40). Below a few
 * hundred kept tiles those passes cost about what the refine does, so the refine cannot repay
 * itself even if it dropped most of them (docs/performance.md, the tile map).
 */
export const MAP_REFINE_MIN_TILES = 256;

/**
 * Workgroups the refine launches a segment pair, about: each walks a group of its token block's
 * filter tiles (kernels/fused/filter.ts, refine), instead of a workgroup a tile (64,000 at the
 * paper's shape, nearly all stopping at once). Measured on an H200, it changed nothing that
 * mattered: the refine's 0.8 ms at the paper's shape stayed (3.78 → 3.81 ms for the backward),
 * `llm:zipf=3`'s backward went 4.81 → 5.24 ms, the rest within 1%
 * (reports/tuning/map_refine_group_nvidia-h200.log); the tables are this one's.
 */
export const MAP_REFINE_WORKGROUPS = 2048;

/** Whether the tile map's mask is refined: by its kept fraction (`auto`), or always, or never. */
export type MapRefineMode = "auto" | "always" | "never";

/** What a refine records beside the filter's own (the decision reads the map filter's count). */
export type MapRefineArgs =
  & Omit<FilterRecordOptions, "hotWords">
  & Omit<DensePathArgs, "sortDecided">
  & {
    d: number;
    /** The `scales` binding of a `full` refine's filter (FusedBackwardArgs.filterScales). */
    scales?: TrackedBuffer;
    /**
     * A `full` refine's sample, where both dense paths apply: its first `rows` (whole backward
     * tiles of `tileTokens` rows, one token segment) and the sample's decision.
     */
    sample?: { rows: number; tileTokens: number; prepared: PreparedFilterSample };
  };

/** The clear before a `full` refine: the mask's first `words` words and counter[0] to zero. */
export const MAP_REFINE_CLEAR_SIG = signature({
  params: { words: "u32" },
  bindings: {
    mask: { elem: "u32", access: "read_write" },
    counter: { elem: "u32", access: "read_write" },
  },
});

/** WGSL of the clear (256 invocations a workgroup, a word each). */
export function mapRefineClearWgsl(): string {
  return `${MAP_REFINE_CLEAR_SIG.wgsl}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x < P.words) { mask[gid.x] = 0u; }
  if (gid.x == 0u) { counter[0] = 0u; }
}
`;
}

/** A compiled refine: its filter pass and its decision. */
export interface PreparedMapRefine {
  /** Records pass `map refine decision`, then the refining filter under its gate. */
  record(a: MapRefineArgs): void;
  /**
   * Whether the last record refined the mask, and the tiles the map kept before any refine (one
   * read back of the decision's flag).
   */
  state(): Promise<{ refined: boolean; mapKept: number }>;
  release(): void;
}

/**
 * Compiles the refine: the filter pass of `filter` (the options the plain filter would take, in
 * the own order, without entry bits) refining the mask.
 */
export async function prepareMapRefine(
  ctx: GpuContext,
  o: {
    filter: FilterPassKernelOptions;
    filterTile: GemmTile;
    mode: Exclude<MapRefineMode, "never">;
    /** `auto` skips the refine below this many kept tiles (default {@link MAP_REFINE_MIN_TILES}). */
    minTiles?: number;
    /** A filter of another kernel family run over every tile instead (see the module doc). */
    full?: (o: FilterPassKernelOptions) => string;
  },
): Promise<PreparedMapRefine> {
  const full = o.full !== undefined;
  const fo = full
    ? { ...o.filter, refine: false, entryBits: false, sort: false, scales: true }
    : { ...o.filter, refine: true, entryBits: false, sort: false, scales: false };
  const kernel = await compileKernel(
    ctx,
    filterPassSignature(fo),
    (o.full ?? filterPassWgsl)(fo),
    "fused_backward_map_refine",
  );
  const clear = full
    ? await compileKernel(ctx, MAP_REFINE_CLEAR_SIG, mapRefineClearWgsl(), "map refine clear")
    : undefined;
  // the decision's flag is 1 where the map keeps more than the threshold or fewer than the
  // least count: no refine
  const always = o.mode === "always";
  const decision = await prepareDenseDecision(ctx, {
    name: "map refine",
    mode: "auto",
    above: always ? 2 : MAP_REFINE_BELOW,
    fewer: always ? 0 : o.minTiles ?? MAP_REFINE_MIN_TILES,
  });
  return {
    record(a) {
      if (clear && !a.scales) throw new RangeError("map refine: its filter needs `scales`");
      if (a.sample && (!clear || a.tok.length !== 1)) {
        throw new RangeError("map refine: a sample needs a full refine over one token segment");
      }
      decision.record({ ...a, sortDecided: false });
      const lse = a.lse.shards[0].buffer, w = a.w.shards[0].buffer;
      // a gated pass holds at most GATE_CAPACITY dispatches, one fewer under the sample's gate
      // too: one a segment pair
      const filter = (tok: typeof a.tok, label: string, cap: number) => {
        for (const vs of a.voc) {
          for (let i = 0; i < tok.length; i += cap) {
            recordFilterPass({
              ...a,
              voc: [vs],
              tok: tok.slice(i, i + cap),
              hotWords: 0,
              kernel,
              filterTile: o.filterTile,
              lse,
              w,
              label,
              refineWorkgroups: full ? undefined : MAP_REFINE_WORKGROUPS,
              scales: a.scales,
            });
          }
        }
      };
      decision.under(a.rec, 0, () => {
        if (clear) {
          const words = Math.ceil(a.tiles / 32);
          a.rec.pass("map refine clear", (p) => {
            const bg = clear.bind(a.rec, { words }, { mask: a.mask, counter: a.counter });
            p.dispatch(clear.pipeline, bg, Math.ceil(words / 256));
          });
        }
        const s = a.sample;
        if (!s) return filter(a.tok, "fused backward map refine", GATE_CAPACITY);
        // the sample's token tiles, its decision, then the rest under its gate too
        const [first, rest] = sampleSegments(a.tok[0], s.rows, s.tileTokens);
        filter([first], "fused backward map refine sample", GATE_CAPACITY);
        const sampled = first.tiles * a.vTotal;
        s.prepared.record(a.rec, { counter: a.counter, sampled, total: a.tiles });
        s.prepared.rest(
          a.rec,
          () => filter([rest], "fused backward map refine", GATE_CAPACITY - 1),
        );
      });
    },
    async state() {
      const s = await decision.state();
      return { refined: !s.took, mapKept: s.kept };
    },
    release() {
      decision.release();
    },
  };
}
