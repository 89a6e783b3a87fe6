import assert from "node:assert/strict";
import { prepareDenseBackward } from "./_dense_backward.ts";
import {
  fused,
  fusedF32Grad,
  fusedFb,
  fusedFbNoFilter,
  fusedMethod,
  fusedNoFilter,
  fusedNoSort,
  fusedTileMap,
} from "./fused.ts";
import { TILE_HW_WIDE } from "../kernels/gemm_codegen.ts";
import { METHODS } from "./mod.ts";
import { runMethod } from "./run.ts";
import type { LceMethod } from "./types.ts";
import { assertParity, gradRoundingTol, PARITY_TOL } from "../testing/parity.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { uploadGradOut, uploadInputs } from "./run.ts";
import {
  type Dtype,
  type HostInputs,
  type LceOptions,
  type Reduction,
  resolveOptions,
} from "../core/options.ts";
import { lceReference } from "../reference/lce_reference.ts";
import { defaultFilterEps, gradRowsPerBinding } from "../kernels/fused/backward_plan.ts";
import { defaultBackwardTile } from "../kernels/fused/backward_tiles.ts";
import { prepareFusedBackward } from "../kernels/fused/backward.ts";
import { bufferBytes, methodPeaks } from "../testing/method_peaks.ts";
import { PEAKED_HOT, peakedSoftmaxInputs } from "../testing/fused_backward.ts";

const ALL: LceMethod[] = [fused, fusedNoSort, fusedNoFilter, fusedFb, fusedFbNoFilter];
const FILTERED: LceMethod[] = [fused, fusedNoSort, fusedFb];
const isFb = (m: LceMethod) => m === fusedFb || m === fusedFbNoFilter;

Deno.test({
  name: "fused methods: registered after baseline in Table 3 order",
  fn() {
    const names = METHODS.map((m) => m.name);
    const i = names.indexOf("fused");
    assert.ok(i > names.indexOf("baseline"));
    assert.deepEqual(names.slice(i, i + 5), ALL.map((m) => m.name));
  },
});

Deno.test({
  name: "fused methods: parity at odd shapes, every β, reduction, dtype, softcap, upstream grad",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const f16: Dtype = ctx.hasF16 ? "f16" : "bf16";
    const small = { n: 37, v: 131, d: 29 }, odd = { n: 70, v: 257, d: 33 };
    const even = { n: 70, v: 257, d: 34 };
    // Every dtype, β, reduction and softcap on/off appears; fused and fused-fb (same kernels) run
    // every case, the ablations (other kernels: each case compiles its own) a share of them.
    const cases: {
      shape: typeof small;
      dtype: Dtype;
      beta: number;
      reduction: Reduction;
      softcap?: number;
      more: LceMethod[];
    }[] = [
      { shape: small, dtype: "f32", beta: 0, reduction: "mean", more: [fusedNoSort, fusedTileMap] },
      {
        shape: odd,
        dtype: "bf16",
        beta: 0.1,
        reduction: "sum",
        softcap: 3,
        more: [fusedNoFilter, fusedTileMap],
      },
      { shape: small, dtype: f16, beta: 1, reduction: "none", more: [fusedNoFilter, fusedTileMap] },
      { shape: odd, dtype: "f32", beta: 0.1, reduction: "none", softcap: 5, more: [fusedNoSort] },
      { shape: small, dtype: "bf16", beta: 1, reduction: "mean", softcap: 4, more: [] },
      {
        shape: odd,
        dtype: f16,
        beta: 0,
        reduction: "sum",
        softcap: 6,
        more: [fusedFbNoFilter, fusedTileMap],
      },
      // d even: 16-bit dC accumulated in place (fused, fused-fb) next to the f32-gradient row
      {
        shape: even,
        dtype: "bf16",
        beta: 0.1,
        reduction: "mean",
        more: [fusedF32Grad, fusedTileMap],
      },
      { shape: even, dtype: f16, beta: 1, reduction: "sum", softcap: 4, more: [fusedNoSort] },
    ];
    for (const [i, cs] of cases.entries()) {
      for (const m of [fused, fusedFb, ...cs.more]) {
        const c = {
          ...cs.shape,
          dtype: cs.dtype,
          beta: cs.beta,
          softcap: cs.softcap,
          reduction: cs.reduction,
          ignoreFraction: 0.2,
          gradOutput: cs.reduction === "none" ? "vector" as const : 1.7,
          seed: i + 1,
        };
        if (isFb(m) && cs.reduction === "none") {
          const why = m.unsupported?.(ctx, { ...cs.shape, dtype: cs.dtype }, resolveOptions(c));
          assert.match(why ?? "", /reduction none/);
          continue;
        }
        const r = await assertParity(ctx, m, c);
        const want16 = cs.dtype !== "f32" && m !== fusedNoFilter && m !== fusedFbNoFilter &&
          m !== fusedF32Grad;
        assert.equal(r.stats?.gradDtype, want16 ? cs.dtype : "f32", `${m.name} ${cs.dtype}`);
      }
    }
    for (const m of ALL) {
      await assertParity(ctx, m, { n: 1, v: 1, d: 1, dtype: "f32", beta: 0.5, seed: 12 });
    }
  },
});

Deno.test({
  name: "fused methods: E, C, dE and dC split over several bindings (4 KiB per binding)",
  ...GPU_TEST,
  async fn() {
    // C: 5 bindings in bf16 (62 rows), dC: 9 (31 rows), E: 2, dE: 3; vocab segments of ≤ 31 rows.
    const ctx = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      const cases: [LceMethod, Dtype][] = [
        [fused, "bf16"],
        [fusedFb, "bf16"],
        [fusedNoFilter, "f32"],
      ];
      for (const [m, dtype] of cases) {
        await assertParity(ctx, m, {
          n: 70,
          v: 257,
          d: 33,
          dtype,
          beta: 0.1,
          softcap: dtype === "bf16" ? 5 : undefined,
          ignoreFraction: 0.2,
          seed: 4,
        });
      }
    } finally {
      ctx.destroy();
    }
  },
});

/**
 * Runs `m` and checks it against float64 within the parity tolerance plus what the filter may
 * legitimately drop: an element of a skipped tile has g = p·f' + (β/|V|)(z/s)² < ε, so with ĝ the
 * largest g below ε anywhere (float64), the tolerance is, per element,
 *   |ΔdE_nk| ≤ atol + rtol·|dE_nk| + ĝ·|w_n|·Σ_v |C_vk|,   |ΔdC_vk| ≤ … + ĝ·Σ_n |w_n·E_nk|,
 * with atol, rtol the usual parity ones (2e-5 of the array's max, 2e-4). Returns ĝ, the largest
 * allowance per array and the filter statistics.
 */
async function _assertFilterBound(
  ctx: GpuContext,
  m: LceMethod,
  x: HostInputs,
  o: LceOptions,
  dtype: Dtype,
  gradOutput: number,
) {
  const got = await runMethod(ctx, m, x, o, { dtype, gradOutput });
  const ref = lceReference(x, o, gradOutput);
  const { n, v, d } = x;
  const eps = defaultFilterEps(dtype);
  const w = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    if (x.targets[i] === o.ignoreIndex) continue;
    w[i] = o.reduction === "mean" ? gradOutput / ref.count : gradOutput;
  }
  let ghat = 0;
  for (let i = 0; i < n; i++) {
    if (w[i] === 0) continue;
    for (let j = 0; j < v; j++) {
      let z = 0;
      for (let k = 0; k < d; k++) z += x.e[i * d + k] * x.c[j * d + k];
      let g: number;
      if (o.softcap === undefined) g = Math.exp(z - ref.perToken.lse[i]);
      else {
        const q = Math.tanh(z / o.softcap);
        g = Math.exp(o.softcap * q - ref.perToken.lse[i]) * (1 - q * q) + (o.beta / v) * q * q;
      }
      if (g < eps) ghat = Math.max(ghat, g);
    }
  }
  const absC = new Float64Array(d), absWE = new Float64Array(d);
  for (let j = 0; j < v; j++) for (let k = 0; k < d; k++) absC[k] += Math.abs(x.c[j * d + k]);
  for (let i = 0; i < n; i++) {
    for (let k = 0; k < d; k++) absWE[k] += Math.abs(w[i] * x.e[i * d + k]);
  }
  const tol = PARITY_TOL[dtype];
  const maxAllow: Record<string, number> = {};
  const check = (name: string, g: Float32Array, r: Float64Array, extra: (i: number) => number) => {
    let s = 0;
    for (const y of r) s = Math.max(s, Math.abs(y));
    maxAllow[name] = 0;
    for (let i = 0; i < r.length; i++) {
      const allow = (tol.atol + gradRoundingTol(got.stats, name)) * s + tol.rtol * Math.abs(r[i]) +
        extra(i);
      maxAllow[name] = Math.max(maxAllow[name], allow);
      assert.ok(
        Math.abs(g[i] - r[i]) <= allow,
        `${m.name}: ${name}[${i}] = ${g[i]}, want ${r[i]} ± ${allow.toExponential(2)} (ĝ ${ghat})`,
      );
    }
  };
  check("loss", got.loss, ref.loss, () => 0);
  check("dE", got.dE, ref.dE, (i) => ghat * Math.abs(w[Math.floor(i / d)]) * absC[i % d]);
  check("dC", got.dC, ref.dC, (i) => ghat * absWE[i % d]);
  return { ghat, maxAllow, stats: got.stats!, ref, got, w };
}

Deno.test({
  name: "fused methods: non-zero-mean classifier, β = 0.1, most tiles filtered, no β/|V| bias",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const o = resolveOptions({ beta: 0.1, reduction: "mean" });
    const x = peakedSoftmaxInputs({ n: 70, v: 257, d: 33, alpha: 40, dtype: "bf16" });
    // Σ_v C_v is dominated by |V|·m: the rank-one term −(β/|V|)·w_n·Σ_{v in skipped tiles} C_v that
    // a biased filter would drop is, per element, about (β/|V|)·w·(skipped rows)·|m_k|.
    const colSum = new Float64Array(x.d);
    for (let j = 0; j < x.v; j++) for (let k = 0; k < x.d; k++) colSum[k] += x.c[j * x.d + k];
    const skipped: Record<string, number> = {};
    for (const m of [...FILTERED, fusedF32Grad, fusedTileMap]) {
      const r = await _assertFilterBound(ctx, m, x, o, "bf16", 1.7);
      skipped[m.name] = r.stats.tilesSkipped!;
      assert.ok(r.ghat < 1e-9, `ĝ ${r.ghat}: the dropped softmax mass is negligible here`);
      const wmax = Math.max(...r.w);
      const bias = (0.1 / x.v) * wmax * (x.v - 64) * Math.max(...colSum.map(Math.abs)) / x.v;
      // f32 gradients: a 20× margin; bf16 ones (one rounding of dE, ≤ 2^-8 of its scale): 5×
      assert.ok(
        bias > (m === fusedF32Grad ? 20 : 5) * r.maxAllow.dE,
        `a dropped β/|V| term (${bias}) would show against ${r.maxAllow.dE}`,
      );
    }
    // Unsorted, the hot rows 3, 77, 150, 201, 250 lie in as many vocab tiles as they hit; sorted,
    // they come first and share one vocab tile (for each token tile).
    const tile = defaultBackwardTile(ctx);
    const tokTiles = Math.ceil(x.n / tile.tokens), vocTiles = Math.ceil(x.v / tile.vocab);
    const hotTiles = new Set(PEAKED_HOT.map((j) => Math.floor(j / tile.vocab))).size;
    assert.equal(skipped.fused, tokTiles * (vocTiles - 1));
    assert.equal(skipped["fused-f32grad"], tokTiles * (vocTiles - 1));
    assert.equal(skipped["fused-fb"], tokTiles * (vocTiles - 1));
    assert.equal(skipped["fused-nosort"], tokTiles * (vocTiles - hotTiles));
    // the tile map's bound: a tile without hot rows has z ≤ z_hot − 2α/3 everywhere
    assert.equal(skipped["fused-tilemap"], tokTiles * (vocTiles - hotTiles));
  },
});

Deno.test({
  name: "fused methods: filtered drops stay within ε·Σ|C| (softcap, β = 0.1, p just below ε)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const o = resolveOptions({ beta: 0.1, softcap: 50, reduction: "sum" });
    const x = peakedSoftmaxInputs({ n: 70, v: 257, d: 33, alpha: 14, dtype: "bf16" });
    const r = await _assertFilterBound(ctx, fused, x, o, "bf16", 0.6);
    assert.ok(r.stats.tilesSkipped! > 0, "the filter skipped tiles");
    assert.ok(r.ghat > 1e-6 && r.ghat < defaultFilterEps("bf16"), `ĝ ${r.ghat}`);
  },
});

Deno.test({
  name: "fused methods: two runs give bitwise identical loss and gradients",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const x = peakedSoftmaxInputs({ n: 70, v: 257, d: 33, alpha: 14, dtype: "bf16" });
    const o = resolveOptions({ beta: 0.1, reduction: "mean" });
    for (const m of [fused, fusedNoFilter, fusedFb]) {
      const a = await runMethod(ctx, m, x, o, { dtype: "bf16", gradOutput: 1.3 });
      const b = await runMethod(ctx, m, x, o, { dtype: "bf16", gradOutput: 1.3 });
      for (const k of ["loss", "dE", "dC"] as const) {
        assert.deepEqual(b[k], a[k], `${m.name} ${k}`);
      }
    }
  },
});

Deno.test({
  name: "fused methods: backward peak = dE + dC + row weights + the kernel's workspaceBytes",
  ...GPU_TEST,
  async fn() {
    const n = 70, v = 257;
    // bytes of a gradient (rows×d) as the backward shards it on `ctx`, f32 or 16-bit
    const gradBytes = (ctx: GpuContext, rows: number, d: number, out16: boolean) => {
      const per = gradRowsPerBinding(ctx.maxBindingBytes, d, out16);
      let b = 0;
      for (let r = 0; r < rows; r += per) {
        b += bufferBytes(Math.min(per, rows - r) * d, out16 ? 2 : 4);
      }
      return b;
    };
    const check = async (ctx: GpuContext, m: LceMethod, beta: number, dtype: Dtype, d = 33) => {
      const opts = resolveOptions({ beta });
      const got = await methodPeaks(ctx, m, { n, v, d, dtype, beta, seed: 5 }, opts);
      if (m === fusedNoFilter) {
        const dense = await prepareDenseBackward(ctx, { spec: { n, v, d, dtype }, opts });
        const want = bufferBytes(n, 4) + gradBytes(ctx, n, d, false) + gradBytes(ctx, v, d, false) +
          dense.workspaceBytes();
        assert.equal(got.bwd, want, `${m.name}, β ${beta}, ${dtype}, d ${d}`);
        return;
      }
      const filter = true;
      const bwd = await prepareFusedBackward(ctx, {
        spec: { n, v, d, dtype },
        opts,
        filterEps: filter ? defaultFilterEps(dtype) : null,
        sort: m !== fusedNoSort,
        gradDtype: m === fusedNoFilter || m === fusedF32Grad ? "f32" : "input",
      });
      const out16 = bwd.gradDtype !== "f32";
      assert.equal(out16, dtype !== "f32" && m !== fusedNoFilter && m !== fusedF32Grad);
      // β > 0 without softcap: the forward's Σ_v C_v is handed to the backward
      const want = bufferBytes(n, 4) + gradBytes(ctx, n, d, out16) + gradBytes(ctx, v, d, out16) +
        bwd.workspaceBytes({ colsum: beta > 0 });
      bwd.release();
      assert.equal(got.bwd, want, `${m.name}, β ${beta}, ${dtype}, d ${d}`);
      return bwd;
    };
    const ctx = await testContext();
    for (const m of [fused, fusedNoSort, fusedNoFilter]) {
      for (const beta of [0.1, 0]) await check(ctx, m, beta, "f32");
    }
    // 16-bit gradients: d even (dC in place) and odd (dC scratch), and the f32-gradient row
    for (const d of [34, 33]) {
      for (const m of [fused, fusedF32Grad]) await check(ctx, m, 0.1, "bf16", d);
    }
    // E, C, dE and dC in several bindings: several vocab segments, dE partials per shard
    const small = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      for (const m of [fused, fusedNoFilter]) await check(small, m, 0.1, "bf16");
      await check(small, fused, 0.1, "bf16", 34);
    } finally {
      small.destroy();
    }
  },
});

Deno.test({
  name: "fused-fb: the backward scales the forward's gradients once",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const x = peakedSoftmaxInputs({ n: 37, v: 131, d: 29, alpha: 14, dtype: "f32" });
    const o = resolveOptions({ beta: 0.1, reduction: "mean" });
    const p = await fusedFb.prepare(ctx, { n: x.n, v: x.v, d: x.d, dtype: "f32" }, o);
    const inputs = uploadInputs(ctx, x, "f32");
    const g = uploadGradOut(ctx, x.n, o, 2);
    const rec = new Recorder(ctx);
    const f = await p.forward(rec, inputs);
    const grads = await p.backward(rec, inputs, f.saved, g);
    await rec.finish();
    assert.ok(f.saved.tensors.includes(grads.dE) && f.saved.tensors.includes(grads.dC));
    await assert.rejects(() => p.backward(new Recorder(ctx), inputs, f.saved, g), /only once/);
    p.dispose(f.saved);
    for (const t of [f.loss, g, inputs.e, inputs.c, inputs.targets]) t.destroy();
  },
});

Deno.test({
  name: "fused: the filter pass on the hardware's 128×256 product tile, odd shapes, every β",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const wide = fusedMethod({
      name: "fused-widefilter",
      label: "Ours, 128×256 filter tile",
      description: "the fused row with the filter pass on TILE_HW_WIDE",
      filter: true,
      sort: true,
      fusedForwardBackward: false,
      gradDtype: "input",
    }, { backward: { filterTile: TILE_HW_WIDE } });
    for (const [n, v, d] of [[300, 700, 72], [137, 529, 41]]) {
      for (const beta of [0, 0.1]) {
        await assertParity(ctx, wide, {
          n,
          v,
          d,
          dtype: "bf16",
          beta,
          softcap: beta ? 3 : undefined,
        });
        await assertParity(ctx, wide, { n, v, d, dtype: "f32", beta, ignoreFraction: 0.2 });
      }
    }
  },
});

Deno.test({
  name: "fused-tilemap: the refined map keeps the exact filter's tiles (gradients bit for bit " +
    "fused-nosort's), taken by the map's kept fraction",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const o = resolveOptions({ beta: 0.1, reduction: "mean" });
    // the count bound off (0): these fixtures hold 32 tiles in all, below the default's 256
    const map = (mapRefine: "auto" | "always" | "never", mapRefineMinTiles = 0) =>
      fusedMethod({
        name: `fused-tilemap-${mapRefine}-${mapRefineMinTiles}`,
        label: "Ours + tile map",
        description: "",
        filter: true,
        sort: false,
        fusedForwardBackward: false,
        gradDtype: "input",
        tileMap: true,
      }, { backward: { mapRefine, mapRefineMinTiles } });
    const run = (m: LceMethod, x: HostInputs) =>
      runMethod(ctx, m, x, o, { dtype: "bf16", gradOutput: 1.3 });
    const report: string[] = [];
    // the map's bound keeps tiles the exact filter drops (its slack, and L_min the least LSE of
    // a token tile): at α = 18 about 44% of them (refined), at α = 17 about 81% (not)
    for (const alpha of [18, 17]) {
      const x = peakedSoftmaxInputs({ n: 140, v: 1000, d: 33, alpha, dtype: "bf16" });
      const exact = await run(fusedNoSort, x);
      const always = await run(map("always"), x);
      const never = await run(map("never"), x);
      const auto = await run(map("auto"), x);
      const st = (r: typeof exact) => r.stats!;
      const total = st(exact).tilesTotal!;
      const keptBy = (r: typeof exact) => total - st(r).tilesSkipped!;
      report.push(
        `α ${alpha}: exact keeps ${keptBy(exact)}, the map ${keptBy(never)} of ${total}; ` +
          `auto refined ${st(auto).mapRefined}`,
      );
      assert.equal(st(always).mapRefined, 1, `α ${alpha}: always refines`);
      // the map's own count before the refine, as the map alone keeps
      for (const [name, r] of [["always", always], ["auto", auto]] as const) {
        assert.equal(st(r).mapKeptTiles, keptBy(never), `α ${alpha}: ${name}'s map count`);
      }
      assert.equal(st(never).mapKeptTiles, undefined, `α ${alpha}: never has no map count`);
      assert.equal(keptBy(always), keptBy(exact), `α ${alpha}: refined, the exact filter's count`);
      for (const k of ["loss", "dE", "dC"] as const) {
        assert.deepEqual(always[k], exact[k], `α ${alpha}: ${k} bit for bit fused-nosort's`);
      }
      assert.equal(st(never).mapRefined, undefined, `α ${alpha}: never records no refine`);
      assert.ok(keptBy(never) >= keptBy(exact), `α ${alpha}: the map keeps a superset`);
      // auto: refined where the map keeps at most 75% of the tiles, else the map's mask stands
      const refine = keptBy(never) <= 0.75 * total;
      assert.equal(st(auto).mapRefined, refine ? 1 : 0, `α ${alpha}: auto`);
      const want = refine ? always : never;
      assert.equal(keptBy(auto), keptBy(want), `α ${alpha}: auto's count`);
      for (const k of ["dE", "dC"] as const) {
        assert.deepEqual(auto[k], want[k], `α ${alpha}: auto's ${k}`);
      }
      assert.ok(keptBy(never) > keptBy(exact), `${report.at(-1)}: the map keeps more`);
      assert.equal(refine, alpha === 18, `${report.at(-1)}: the fixture's intent`);
      if (refine) {
        // the least count: refined at the map's own count, not one above it (then the map's
        // mask stands, bit for bit `never`'s)
        const at = await run(map("auto", keptBy(never)), x);
        assert.equal(st(at).mapRefined, 1, `α ${alpha}: refined at the least count`);
        const few = await run(map("auto", keptBy(never) + 1), x);
        assert.equal(st(few).mapRefined, 0, `α ${alpha}: too few kept tiles to refine`);
        assert.equal(st(few).mapKeptTiles, keptBy(few), `α ${alpha}: unrefined, the count's`);
        assert.equal(keptBy(few), keptBy(never), `α ${alpha}: the map's count stands`);
        for (const k of ["dE", "dC"] as const) {
          assert.deepEqual(few[k], never[k], `α ${alpha}: ${k} with the map's mask`);
        }
      }
    }
    for (const bad of [-1, 2.5]) {
      await assert.rejects(
        run(
          map("auto", bad),
          peakedSoftmaxInputs({ n: 140, v: 1000, d: 33, alpha: 18, dtype: "bf16" }),
        ),
        /mapRefineMinTiles must be a non-negative integer/,
      );
    }
    // E, C and the gradients over 4 KiB bindings: the refine's passes a segment pair at a time
    const sharded = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      const x = peakedSoftmaxInputs({ n: 140, v: 1000, d: 33, alpha: 18, dtype: "bf16" });
      const ro = { dtype: "bf16" as const, gradOutput: 1.3 };
      const exact = await runMethod(sharded, fusedNoSort, x, o, ro);
      const refined = await runMethod(sharded, map("always"), x, o, ro);
      assert.equal(refined.stats!.mapRefined, 1);
      assert.equal(refined.stats!.tilesSkipped, exact.stats!.tilesSkipped, "sharded: the count");
      for (const k of ["loss", "dE", "dC"] as const) {
        assert.deepEqual(refined[k], exact[k], `sharded: ${k} bit for bit fused-nosort's`);
      }
      report.push(`sharded: ${exact.stats!.tilesSkipped} of ${exact.stats!.tilesTotal} skipped`);
    } finally {
      sharded.destroy();
    }
    console.log(report.join("\n"));
  },
});
