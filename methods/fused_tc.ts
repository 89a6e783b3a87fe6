/**
 * The fused rows on tensor cores (f16 operands, f32 accumulation, through Dawn's subgroup-matrix
 * extension): `fused-tc` ("Ours", tensor cores) and `fused-tilemap-tc` ("Ours + tile map", tensor
 * cores).
 *
 * - Forward: the tensor-core fused forward (kernels/tc/tc_forward.ts): the logit tiles on tensor
 *   cores, the FMA forward's merge, column sum and tile map; E's and C's power-of-two scales
 *   computed on the way and kept for the backward (two f32).
 * - `fused-tc` backward: the fused backward of kernels/fused/backward.ts (vocabulary sorting with
 *   the order decision, exact sparse and rank-one terms, gradients in the input dtype) whose
 *   filter pass, the one that recomputes every logit tile, runs on tensor cores
 *   (kernels/tc/tc_filter.ts); the kept tiles' gradient products stay on the FMA passes (at the
 *   paper's shape the filter keeps about 0.05% of the tiles), but where it keeps more than about
 *   a quarter of them dE and dC are formed densely on tensor cores instead, within the same
 *   memory (kernels/tc/tc_dense_de.ts, kernels/tc/tc_dense_dc.ts; both rows).
 * - `fused-tilemap-tc` backward: `fused-tilemap`'s (the map filter reads the forward's tile
 *   maxima, no products), but where the map keeps at most 75% of the tiles (and at least 256) its
 *   mask is refined by the tensor-core filter over every tile, not by the FMA filter over the
 *   tiles the map keeps (kernels/fused/map_refine.ts, `full`): then the kept tiles are those
 *   `fused-tc` keeps in its own order. Kept tiles on the FMA passes.
 *
 * Inputs: bf16 or f16 (bf16 converts to f16 exactly after the scale, see kernels/tc/tc_scale.ts).
 * f32 inputs would be rounded to f16's 11 significant bits: these rows refuse them.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { LceOptions } from "../core/options.ts";
import { prepareLossReduce } from "../kernels/loss_reduce.ts";
import { prepareRowWeights } from "../kernels/row_weights.ts";
import { defaultFilterEps } from "../kernels/fused/backward_plan.ts";
import { prepareFusedBackward } from "../kernels/fused/backward.ts";
import type { FusedBackwardOptions } from "../kernels/fused/backward_types.ts";
import { createTileMap } from "../kernels/fused/tile_map.ts";
import type { TcMode } from "../kernels/tc/tc_codegen.ts";
import { prepareTcForward } from "../kernels/tc/tc_forward.ts";
import { tcFilterKernel } from "../kernels/tc/tc_filter.ts";
import { prepareTcDenseDE } from "../kernels/tc/tc_dense_de.ts";
import { prepareTcDenseDC, TC_DENSE_DC_G_BYTES } from "../kernels/tc/tc_dense_dc.ts";
import { tcSupport } from "../kernels/tc/tc_tiles.ts";
import type { LceMethod, MethodStats, PreparedMethod, ProblemSpec } from "./types.ts";
import { lossTensor, vector } from "./_common.ts";
import { fusedEstimate } from "./fused.ts";

/** What the tensor-core rows multiply in, for reports. */
export const TC_ARITHMETIC = "f16 tensor cores (WGSL, Dawn)";

/**
 * Why a tensor-core row cannot run: the engine or adapter offers no f16 subgroup matrices
 * (natively), or the inputs are f32.
 */
export function tcUnsupported(ctx: GpuContext, spec: ProblemSpec, mode: TcMode = "native") {
  if (spec.dtype === "f32") {
    return "f32 inputs would be rounded to f16's 11 significant bits on tensor cores (bf16 and " +
      "f16 inputs convert exactly)";
  }
  if (mode === "native") return tcSupport(ctx).reason;
  return ctx.hasF16 ? undefined : "the emulation needs shader-f16";
}

/** Variant switches of a tensor-core fused row. */
export interface FusedTcVariant {
  name: string;
  label: string;
  description: string;
  /** Vocabulary sorting (with the order decision) in the backward. */
  sort: boolean;
  /** The forward keeps the tile map and the backward filters from it. */
  tileMap: boolean;
  /** Native subgroup matrices (default) or their emulation (tests on software adapters). */
  mode?: TcMode;
}

/**
 * Kernel options no shipped tensor-core row sets, for tests: the backward's order decision and
 * its bound (on by default, the bound off on software adapters), which read the filter's entry
 * bits; the tile map's refine and its least count (`auto` on hardware, `never` on software).
 */
export interface FusedTcKernelOptions {
  backward?: Pick<
    FusedBackwardOptions,
    | "decideOrder"
    | "sortBound"
    | "mapRefine"
    | "mapRefineMinTiles"
    | "denseDE"
    | "denseDC"
    | "denseDCTailRows"
    | "filterSample"
  >;
}

/** Builds the method of a tensor-core fused variant (with kernel options: tests). */
export function fusedTcMethod(f: FusedTcVariant, k: FusedTcKernelOptions = {}): LceMethod {
  if (f.tileMap && f.sort) throw new RangeError(`${f.name}: the tile map needs no sorting`);
  return {
    name: f.name,
    label: f.label,
    description: f.description,
    arithmetic: (f.mode ?? "native") === "native"
      ? `${TC_ARITHMETIC}; kept tiles fp32 FMA`
      : "tensor cores emulated in fp32 FMA (WGSL)",
    unsupported: (ctx, spec) => tcUnsupported(ctx, spec, f.mode),
    prepare: (ctx, spec, opts) => _prepare(ctx, spec, opts, f, k),
  };
}

async function _prepare(
  ctx: GpuContext,
  spec: ProblemSpec,
  opts: LceOptions,
  f: FusedTcVariant,
  k: FusedTcKernelOptions,
): Promise<PreparedMethod> {
  const mode = f.mode ?? "native";
  const fwd = await prepareTcForward(ctx, { spec, opts, tileMax: f.tileMap, mode });
  const reduce = await prepareLossReduce(ctx, opts);
  const weights = await prepareRowWeights(ctx, opts);
  const bwd = await prepareFusedBackward(ctx, {
    spec,
    opts,
    filterEps: defaultFilterEps(spec.dtype),
    sort: f.sort,
    gradDtype: "input",
    mapFilter: f.tileMap ? { tile: fwd.tile } : undefined,
    filterKernel: f.tileMap ? undefined : tcFilterKernel(ctx, { mode }),
    mapRefineFilter: f.tileMap ? tcFilterKernel(ctx, { mode }) : undefined,
    denseDEPath: (c, d) => prepareTcDenseDE(c, { ...d, tcMode: mode }),
    denseDCPath: {
      gBytes: TC_DENSE_DC_G_BYTES,
      prepare: (c, d) => prepareTcDenseDC(c, { ...d, tcMode: mode }),
    },
    ...k.backward,
  });
  const keepColsum = fwd.smoothing === "identity";
  // the FMA fused row's, plus E's and C's scales and maxima (16 bytes each) in the forward
  const estimateBytes = () => {
    const e = fusedEstimate(ctx, spec, opts, { tileMap: f.tileMap, fusedForwardBackward: false }, {
      fwdWorkspace: fwd.workspaceBytes() + 32,
      bwdWorkspace: bwd.workspaceBytes({ colsum: keepColsum }),
      keepColsum,
      gradDtype: bwd.gradDtype,
      mapTile: fwd.tile,
    });
    return e;
  };
  const stats = async (): Promise<MethodStats> => ({
    ...(await bwd.stats()),
    gradDtype: bwd.gradDtype,
    dERoundings: bwd.roundings.dE,
    dCRoundings: bwd.roundings.dC,
    arithmetic: `${TC_ARITHMETIC}; kept tiles fp32 FMA`,
  });
  return {
    forward(rec, x) {
      const tileMax = f.tileMap ? createTileMap(ctx, x.e, x.c, fwd.tile) : undefined;
      const lse = vector(ctx, spec.n, "workspace", "lse");
      const lossRows = vector(ctx, spec.n, "workspace", "loss rows");
      const count = vector(ctx, 1, "workspace", "count");
      const colsum = keepColsum ? vector(ctx, spec.d, "workspace", "Σ_v C_v") : undefined;
      const scales = fwd.scales.allocate(ctx);
      fwd.record(rec, {
        e: x.e,
        c: x.c,
        targets: x.targets,
        lse,
        lossRows,
        tileMax,
        colsum,
        scales,
      });
      const loss = lossTensor(ctx, spec.n, opts);
      reduce.record(rec, { lossRows, targets: x.targets, loss, count });
      rec.release(lossRows.shards[0].buffer, scales.maxBits);
      const tensors = [lse, count, tileMax, colsum].filter((t) => t !== undefined);
      return Promise.resolve({
        loss,
        saved: { tensors, lse, count, tileMap: tileMax, colsum, scales: scales.scales },
      });
    },
    backward(rec, x, saved, gradOut) {
      const w = vector(ctx, spec.n, "workspace", "row weights");
      weights.record(rec, { gradOut, targets: x.targets, count: saved.count, w });
      const { tileMap, colsum } = saved;
      const g = bwd.record(rec, {
        ...x,
        lse: saved.lse,
        w,
        count: saved.count,
        tileMap,
        colsum,
        filterScales: saved.scales,
      });
      rec.release(w.shards[0].buffer);
      return Promise.resolve(g);
    },
    dispose(saved) {
      for (const t of saved.tensors) t.destroy();
      saved.scales.destroy();
    },
    stats,
    release: () => bwd.release(),
    estimateBytes,
  };
}

/** "Ours" on tensor cores. */
export const fusedTc: LceMethod = fusedTcMethod({
  name: "fused-tc",
  label: "Ours (tensor cores)",
  description: `Ours with the forward and the backward's filter pass on ${TC_ARITHMETIC}; ` +
    "kept tiles' gradient products fp32 FMA, dense dE and dC on tensor cores where many are kept",
  sort: true,
  tileMap: false,
});

/** "Ours + tile map" on tensor cores. */
export const fusedTileMapTc: LceMethod = fusedTcMethod({
  name: "fused-tilemap-tc",
  label: "Ours + tile map (tensor cores)",
  description: `Ours + tile map with the forward (and its tile map) on ${TC_ARITHMETIC}; the ` +
    "backward filters from the map, kept tiles fp32 FMA, dense dE and dC on tensor cores where " +
    "many are kept",
  sort: false,
  tileMap: true,
});
