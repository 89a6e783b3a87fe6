/**
 * Test helpers of the fused backward (kernels/fused/backward.ts): run it alone on host inputs
 * against the float64 reference, and compare its gradients with the reference.
 * @module
 */
import assert from "node:assert/strict";
import { columnVector, randomArray } from "./gpu.ts";
import type { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { download, fromHost } from "../gpu/tensor.ts";
import {
  type Dtype,
  type HostInputs,
  IGNORE_INDEX,
  type LceOptions,
  resolveOptions,
} from "../core/options.ts";
import { lceReference } from "../reference/lce_reference.ts";
import { assertClose } from "../reference/compare.ts";
import type { GemmTile } from "../kernels/gemm_codegen.ts";
import { BACKWARD_TILE_SMALL, type BackwardTile } from "../kernels/fused/backward_tiles.ts";
import { type FusedBackwardOptions, prepareFusedBackward } from "../kernels/fused/backward.ts";
import { defaultFilterEps } from "../kernels/fused/backward_plan.ts";
import { caseInputs } from "./parity.ts";
import { bf16BitsToF32, f32ToBf16Bits, roundArray } from "../core/dtype.ts";

/** The backward's options a test varies. */
export interface BackwardCase {
  tile?: BackwardTile;
  filterTile?: GemmTile;
  dESplits?: number;
  dERowSlices?: number;
  filterEps: number | null;
  sort: boolean;
  decideOrder?: boolean;
  /** Rows per shard of E and C (default one binding). */
  shardRows?: number;
  gradDtype?: "f32" | "input";
  dEGather?: FusedBackwardOptions["dEGather"];
  dCOrder?: boolean;
  /** The dC split (default the backward's: on hardware adapters only). */
  dCSplit?: FusedBackwardOptions["dCSplit"];
  /** The dense dE path (default `never` here: these helpers test the kept tiles' passes). */
  denseDE?: FusedBackwardOptions["denseDE"];
  /** The dense dC path (default `never` here, as the dense dE's). */
  denseDC?: FusedBackwardOptions["denseDC"];
  /** Its tail's rows at most. */
  denseDCTailRows?: number;
  /** Its tiles. */
  denseDCTuning?: FusedBackwardOptions["denseDCTuning"];
  /** The dense backward sharing G (default the backward's: where both dense paths are taken). */
  denseShared?: FusedBackwardOptions["denseShared"];
  /** The filter's sample (default the backward's: where both dense paths are recorded). */
  filterSample?: FusedBackwardOptions["filterSample"];
  /** The order decision's bound (default the backward's: on hardware adapters only). */
  sortBound?: boolean;
  /** The dC pass's gradient product (default the backward's). */
  dCProduct?: FusedBackwardOptions["dCProduct"];
  /** The direct dC pass's logits on [k][row] staging. */
  dCStage2d?: boolean;
}

/** A parity case of the backward's tests: the input and gradient dtypes, β, softcap, d, order. */
export interface GradCase {
  dtype: "bf16" | "f32";
  beta: number;
  softcap?: number;
  d: number;
  gradDtype: "input" | "f32";
  sort: boolean;
}

/**
 * A case's loss options (mean reduction) and the backward's options it fixes: the dtype's
 * filter ε, the vocabulary order and the gradient dtype.
 */
export function gradCaseOptions(cs: GradCase): { o: LceOptions; b: BackwardCase } {
  return {
    o: resolveOptions({ beta: cs.beta, softcap: cs.softcap, reduction: "mean" }),
    b: { filterEps: defaultFilterEps(cs.dtype), sort: cs.sort, gradDtype: cs.gradDtype },
  };
}

/**
 * Runs the backward alone on host inputs, with the float64 reference's LSE and the row weights of
 * an upstream gradient `g`; returns the gradients, the reference and the filter statistics.
 */
export async function runBackward(
  ctx: GpuContext,
  x: HostInputs,
  o: LceOptions,
  dtype: Dtype,
  b: BackwardCase,
  g = 1.3,
) {
  const ref = lceReference(x, o, g);
  const w = new Float32Array(x.n);
  for (let i = 0; i < x.n; i++) {
    if (x.targets[i] !== o.ignoreIndex) w[i] = o.reduction === "mean" ? g / ref.count : g;
  }
  const rows = { maxRowsPerShard: b.shardRows };
  const e = fromHost(ctx, { dtype, rows: x.n, cols: x.d, role: "input", label: "E", ...rows }, x.e);
  const c = fromHost(ctx, { dtype, rows: x.v, cols: x.d, role: "input", label: "C", ...rows }, x.c);
  const targets = columnVector(ctx, x.targets, "targets");
  const lse = columnVector(ctx, Float32Array.from(ref.perToken.lse), "lse");
  const wt = columnVector(ctx, w, "w");
  const count = columnVector(ctx, Float32Array.of(ref.count), "count");
  const bwd = await prepareFusedBackward(ctx, {
    spec: { n: x.n, v: x.v, d: x.d, dtype },
    opts: o,
    ...b,
    denseDE: b.denseDE ?? "never",
    denseDC: b.denseDC ?? "never",
  });
  const once = async () => {
    const rec = new Recorder(ctx);
    const out = bwd.record(rec, { e, c, targets, lse, w: wt, count });
    await rec.finish();
    const r = { dE: await download(ctx, out.dE), dC: await download(ctx, out.dC) };
    out.dE.destroy();
    out.dC.destroy();
    return { ...r, stats: await bwd.stats() };
  };
  const got = await once();
  const again = await once();
  for (const t of [e, c, targets, lse, wt, count]) t.destroy();
  return { got, again, ref, bwd };
}

/** Asserts gradients within the f32 tolerance of the float64 reference (scaled by max |value|). */
export function assertGrads(
  tag: string,
  got: { dE: Float32Array; dC: Float32Array },
  ref: { dE: Float64Array; dC: Float64Array },
  d: number,
) {
  for (const k of ["dE", "dC"] as const) {
    const s = maxAbs(ref[k]);
    try {
      assertClose(got[k], ref[k], { atol: 2e-5 * (s || 1), rtol: 2e-4, name: k, cols: d });
    } catch (e) {
      throw new Error(`${tag}: ${(e as Error).message}`);
    }
  }
}

/** Unit roundoff (half the spacing of [1, 2)) of a 16-bit output dtype. */
export const UNIT_ROUNDOFF = { bf16: 2 ** -8, f16: 2 ** -11 } as const;

/** Max |x| of an array (0 when empty). */
export function maxAbs(a: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s = Math.max(s, Math.abs(a[i]));
  return s;
}

/**
 * Asserts a 16-bit gradient against the float64 reference: every stored value is a 16-bit
 * number, and `roundings` roundings of values ≤ max |ref| cost at most that many times u·max |ref|.
 */
export function assertRounded16(
  name: string,
  got: ArrayLike<number>,
  ref: ArrayLike<number>,
  o: { roundings: number; cols: number; u?: number },
) {
  const u = o.u ?? UNIT_ROUNDOFF.bf16;
  assertClose(got, ref, {
    atol: (2e-5 + o.roundings * u) * maxAbs(ref),
    rtol: 2e-4,
    name,
    cols: o.cols,
  });
}

/** Max |got − ref| / max |ref| of an array. */
export function relErr(got: ArrayLike<number>, ref: ArrayLike<number>): number {
  let e = 0, s = 0;
  for (let i = 0; i < ref.length; i++) {
    e = Math.max(e, Math.abs(got[i] - ref[i]));
    s = Math.max(s, Math.abs(ref[i]));
  }
  return e / (s || 1);
}

/**
 * Peaked inputs from `base`: token i's embedding a copy of classifier row hot[i % hot.length]
 * scaled so that its logit for that row is `logit`, its target that row, every `ignoreEvery`-th
 * token (from token 0) ignored.
 */
export function peakedInputs(
  base: HostInputs,
  o: { hot: number[]; logit: number; ignoreEvery: number },
): HostInputs {
  const { n, d } = base;
  const e = new Float32Array(n * d), targets = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const j = o.hot[i % o.hot.length];
    let nrm = 0;
    for (let k = 0; k < d; k++) nrm += base.c[j * d + k] ** 2;
    for (let k = 0; k < d; k++) e[i * d + k] = Math.fround((o.logit / nrm) * base.c[j * d + k]);
    targets[i] = i % o.ignoreEvery === 0 ? IGNORE_INDEX : j;
  }
  return { ...base, e, targets };
}

/** A peaked case of the dC tests: its dtype, β, d and hot rows, optionally scaled or retargeted. */
export interface PeakedCase {
  dtype: "bf16" | "f32";
  beta: number;
  d: number;
  /** The classifier rows the tokens copy (round robin). */
  hot: number[];
  /** Factor on the hot rows of C (default 1). */
  hotScale?: number;
  /** Targets spread over the vocabulary, not the hot rows (dC not all cancellation). */
  otherTargets?: boolean;
}

/**
 * The inputs of a peaked case at 700 tokens × 1,031 vocabulary rows ({@link peakedInputs} on
 * {@link caseInputs}), E rounded to bf16 for bf16 cases so that the reference sees the values
 * the kernels read.
 */
export function peakedCaseInputs(
  cs: PeakedCase,
  o: { seed: number; logit: number; ignoreEvery: number },
): HostInputs {
  const base = caseInputs({
    n: 700,
    v: 1031,
    d: cs.d,
    dtype: cs.dtype,
    beta: cs.beta,
    seed: o.seed,
  });
  for (const j of cs.hot) {
    for (let k = 0; k < cs.d; k++) base.c[j * cs.d + k] *= cs.hotScale ?? 1;
  }
  const x = peakedInputs(base, { hot: cs.hot, logit: o.logit, ignoreEvery: o.ignoreEvery });
  if (cs.otherTargets) {
    x.targets = x.targets.map((t, j) => t === IGNORE_INDEX ? t : (j * 37) % x.v);
  }
  if (cs.dtype === "bf16") x.e = x.e.map((y) => bf16BitsToF32(f32ToBf16Bits(y)));
  return x;
}

/**
 * Asserts a dense path's decision on the GPU (`path` "denseDE" or "denseDC", taken above the kept
 * fraction `above`): on a flat fixture (random logits of a few units: p ≥ ε in every tile) the
 * dense path, on a peaked one (each token's embedding a scaled copy of one of 3 classifier rows,
 * so one vocab tile holds every softmax term above ε) the kept tiles', each bit for bit what
 * forcing that path gives. `seeds` are the two fixtures'.
 */
export async function assertDenseDecision(
  ctx: GpuContext,
  o: {
    path: "denseDE" | "denseDC";
    above: number;
    seeds: [number, number];
    /** Further backward options of every run. */
    extra?: Partial<BackwardCase>;
  },
): Promise<void> {
  const n = 70, v = 1031, d = 40;
  const opts = resolveOptions({ beta: 0.1, reduction: "mean" });
  const flat = caseInputs({ n, v, d, dtype: "f32", beta: 0.1, seed: o.seeds[0] });
  const base = caseInputs({ n, v, d, dtype: "f32", beta: 0.1, seed: o.seeds[1] });
  const peaked = peakedInputs(base, { hot: [5, 6, 7], logit: 60, ignoreEvery: 9 });
  // a few targets far from the hot rows, in tiles the filter skips: the kept path's dC adds them
  // after its pass (the target scatter), which must run where the dense path is not taken
  for (let i = 1; i < n; i += 4) peaked.targets[i] = v - 1 - 3 * i;
  const b: BackwardCase = {
    filterEps: defaultFilterEps("bf16"),
    sort: true,
    tile: BACKWARD_TILE_SMALL,
    gradDtype: "input",
    ...o.extra,
    [o.path]: "auto",
  };
  const runs = {
    flat: await runBackward(ctx, flat, opts, "bf16", b),
    peaked: await runBackward(ctx, peaked, opts, "bf16", b),
  };
  const k = (r: typeof runs.flat) => 1 - r.got.stats.tilesSkipped / r.got.stats.tilesTotal;
  assert.ok(k(runs.flat) > o.above, `flat keeps ${k(runs.flat)}`);
  assert.equal(runs.flat.got.stats[o.path], 1);
  assert.ok(k(runs.peaked) < o.above, `peaked keeps ${k(runs.peaked)}`);
  assert.equal(runs.peaked.got.stats[o.path], 0);
  // what was decided is what forcing that path gives, bit for bit
  const forced = {
    flat: await runBackward(ctx, flat, opts, "bf16", { ...b, [o.path]: "always" }),
    peaked: await runBackward(ctx, peaked, opts, "bf16", { ...b, [o.path]: "never" }),
  };
  for (const f of ["flat", "peaked"] as const) {
    assert.deepEqual(runs[f].got.dE, forced[f].got.dE, `${f}: dE as forced`);
    assert.deepEqual(runs[f].got.dC, forced[f].got.dC, `${f}: dC as forced`);
  }
}

/** A run of {@link runBackward}. */
export type BackwardRun = Awaited<ReturnType<typeof runBackward>>;

/** A case of {@link assertDensePath}: a parity case, |V| (default 1031), more backward options. */
export type DensePathCase = GradCase & { v?: number; extra?: Partial<BackwardCase> };

/** A dense-path case's inputs: n = 70, |V| 1031 unless given, 20% of the rows ignored. */
export function densePathInputs(cs: DensePathCase, seed: number): HostInputs {
  const { d, dtype, beta } = cs;
  return caseInputs({ n: 70, v: cs.v ?? 1031, d, dtype, beta, ignoreFraction: 0.2, seed });
}

/**
 * Asserts a dense path (`path` "denseDE" or "denseDC") forced on against the kept tiles' (forced
 * off) for each case at odd shapes (n = 70, 20% ignored rows, inputs from seed `seed` + the
 * case's index): the path taken and said in the stats, recorded only where forced; its gradient
 * bitwise reproducible and within one output rounding of the float64 reference (f32 gradients:
 * both runs' gradients within the f32 tolerance); the other gradient bit for bit the same on both
 * paths; the kept tiles' gradient within `keptRoundings(kept)` 16-bit roundings of the dense one
 * (4e-5 with f32 gradients), as the dense path is the unfiltered gradient. `check` adds a path's
 * own assertions.
 */
export async function assertDensePath(
  ctx: GpuContext,
  o: {
    path: "denseDE" | "denseDC";
    cases: DensePathCase[];
    seed: number;
    keptRoundings: (kept: BackwardRun) => number;
    check?: (r: { cs: DensePathCase; tag: string; dense: BackwardRun; kept: BackwardRun }) => void;
  },
): Promise<void> {
  const grad = o.path === "denseDE" ? "dE" : "dC", other = grad === "dE" ? "dC" : "dE";
  for (const [i, cs] of o.cases.entries()) {
    const { o: opts, b: base } = gradCaseOptions(cs);
    const x = densePathInputs(cs, o.seed + i);
    const b = { ...base, ...cs.extra };
    const dense = await runBackward(ctx, x, opts, cs.dtype, { ...b, [o.path]: "always" });
    const kept = await runBackward(ctx, x, opts, cs.dtype, { ...b, [o.path]: "never" });
    const tag = JSON.stringify(cs);
    assert.equal(dense.got.stats[o.path], 1, `${tag}: the dense path taken`);
    assert.equal(kept.got.stats[o.path], undefined, `${tag}: no dense path recorded`);
    assert.deepEqual(
      dense.again[grad],
      dense.got[grad],
      `${tag}: dense ${grad} bitwise reproducible`,
    );
    assert.deepEqual(dense.got[other], kept.got[other], `${tag}: ${other} the same on both paths`);
    o.check?.({ cs, tag, dense, kept });
    if (cs.gradDtype === "f32") {
      assertGrads(`${tag} dense`, dense.got, dense.ref, x.d);
      assertGrads(`${tag} kept tiles`, kept.got, kept.ref, x.d);
    } else {
      // one rounding of each element to the 16-bit output
      assertRounded16(`${tag} dense ${grad}`, dense.got[grad], dense.ref[grad], {
        roundings: 1,
        cols: x.d,
      });
    }
    // the kept tiles' gradient differs from the unfiltered one by the filter's dropped terms at
    // most and the roundings
    const s = maxAbs(dense.ref[grad]);
    assertClose(kept.got[grad], dense.got[grad], {
      atol: (cs.gradDtype === "f32" ? 4e-5 : o.keptRoundings(kept) * UNIT_ROUNDOFF.bf16) * s,
      rtol: 0,
      name: `${tag} kept against dense ${grad}`,
      cols: x.d,
    });
  }
}
/** The hot rows of {@link peakedSoftmaxInputs} (v ≥ 251). */
export const PEAKED_HOT = [3, 77, 150, 201, 250];

/**
 * Peaked softmax over a classifier with a clearly non-zero column mean: C_v = m + u_v with |m| ≈ 2
 * and |u_v| ≈ 1, except 5 "hot" rows scattered over the vocabulary whose noise is 3× longer; token
 * n's embedding is α·û_j/|û_j|² for one hot row j (so z_nj − z_nv ≥ 2α/3 for every non-hot v).
 * 80% of the targets are that hot row, 10% random, 10% ignored.
 */
export function peakedSoftmaxInputs(
  o: { n: number; v: number; d: number; alpha: number; dtype: Dtype },
): HostInputs {
  const { n, v, d } = o;
  const a = Math.sqrt(3 / d);
  const mean = randomArray(d, 1, 2 * a);
  const c = randomArray(v * d, 2, a);
  for (const j of PEAKED_HOT) for (let k = 0; k < d; k++) c[j * d + k] *= 3;
  const e = new Float32Array(n * d);
  const pick = randomArray(n, 3);
  const targets = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const j = PEAKED_HOT[i % PEAKED_HOT.length];
    let nrm = 0;
    for (let k = 0; k < d; k++) nrm += c[j * d + k] ** 2;
    for (let k = 0; k < d; k++) e[i * d + k] = (o.alpha / nrm) * c[j * d + k];
    const u = (pick[i] + 1) / 2;
    targets[i] = u < 0.1 ? IGNORE_INDEX : u < 0.2 ? Math.floor(u * 10 * v) % v : j;
  }
  for (let i = 0; i < v * d; i++) c[i] += mean[i % d];
  return {
    n,
    v,
    d,
    e: roundArray(e, o.dtype),
    c: roundArray(c, o.dtype),
    targets,
  };
}
