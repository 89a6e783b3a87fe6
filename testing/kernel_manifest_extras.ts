/**
 * The kernels of the tuning tools for the kernel manifest (testing/kernel_manifest.ts): the GEMM
 * bench's tile candidates on each of its products, the fused forward tuner's candidate tiles with
 * each variant it times, and the fused backward bench's configurations, on the emulated H100 at
 * the paper's shape and on the emulated software adapter at each tool's software default; and the
 * GPU busy load and the calibration's SGD step.
 * @module
 */
import { resolveOptions } from "../core/options.ts";
import { Recorder } from "../gpu/recorder.ts";
import { createTensor, type TensorDtype } from "../gpu/tensor.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
import { prepareRowSoftmaxStats } from "../kernels/row_softmax_stats.ts";
import type { GemmTile } from "../kernels/gemm_codegen.ts";
import { type FusedForwardOptions, prepareFusedForward } from "../kernels/fused/forward.ts";
import { fusedMethod } from "../methods/fused.ts";
import { GEMM_CASES, gemmCases } from "../tuning/gemm_cases.ts";
import { GEMM_TILE_CANDIDATES } from "../tuning/gemm_candidates.ts";
import { fillRandom } from "../tuning/fill_random.ts";
import { FORWARD_TILES_HW, FORWARD_TILES_SW, runnableTiles } from "../tuning/forward_tuner.ts";
import { BENCH_BASE, BENCH_CONFIGS, benchConfig } from "../tuning/fused_backward_configs.ts";
import {
  type AdapterProfile,
  emulatedContext,
  H100_PROFILE,
  SOFTWARE_PROFILE,
} from "./emulated_device.ts";
import { collect, type ManifestRun, runMethodKernels } from "./kernel_capture.ts";
import { tcCatalog } from "../kernels/tc/tc_catalog.ts";
import { prepareBusyLoad } from "../gpu/busy_load.ts";
import { prepareSgd } from "../calibration/training.ts";

const PAPER = { n: 8192, v: 256000, d: 2304 };

/** The GEMM bench: every tile candidate on every product, per input dtype. */
async function _benchGemm(
  codes: Map<string, string>,
  profile: AdapterProfile,
  shape: { n: number; v: number; d: number },
): Promise<ManifestRun[]> {
  const runs: ManifestRun[] = [];
  for (const dtype of ["bf16", "f16", "f32"] as const) {
    for (const [tn, tile] of Object.entries(GEMM_TILE_CANDIDATES)) {
      const key = `bench_gemm ${profile.name} ${dtype} ${tn}`;
      const em = emulatedContext(profile);
      const ctx = em.ctx;
      const mk = (rows: number, cols: number, dt: TensorDtype, label: string) =>
        createTensor(ctx, { dtype: dt, rows, cols, role: "workspace", label });
      const e = mk(shape.n, shape.d, dtype, "E"), c = mk(shape.v, shape.d, dtype, "C");
      const cases = gemmCases(mk, { e, c, ...shape, dtype });
      try {
        for (const cn of GEMM_CASES) {
          const cs = cases[cn]();
          const mm = await prepareMatmul(ctx, {
            tile,
            aDtype: cs.aDtype,
            bDtype: cs.bDtype,
            aTrans: cs.a.trans,
            bTrans: cs.b.trans,
            outDtype: cs.outDtype,
          });
          const rec = new Recorder(ctx);
          mm.record(rec, { a: cs.a, b: cs.b, out: cs.out(), accumulate: cs.accumulate });
          await rec.finish();
        }
        runs.push({ key, kernels: await collect(em.kernels, codes) });
      } catch (err) {
        runs.push({ key, kernels: [], skipped: `error: ${(err as Error).message.split("\n")[0]}` });
      }
    }
  }
  return runs;
}

/** The fused forward tuner: each candidate tile with each variant it can time. */
async function _tuneForward(
  codes: Map<string, string>,
  profile: AdapterProfile,
  tiles: GemmTile[],
  shape: { n: number; v: number; d: number },
): Promise<ManifestRun[]> {
  const runs: ManifestRun[] = [];
  const runnable = new Set(runnableTiles(tiles, profile.limits as unknown as GPUSupportedLimits));
  const fits = (t: GemmTile) => runnable.has(t);
  for (const dtype of ["bf16", "f32"] as const) {
    for (const softcap of [undefined, 30]) {
      for (const [i, tile] of tiles.entries()) {
        if (!fits(tile)) continue;
        const key = `tune_forward ${profile.name} ${dtype} softcap=${softcap ?? "off"} tile ${i}`;
        const em = emulatedContext(profile);
        const ctx = em.ctx;
        const spec = { ...shape, dtype };
        const opts = resolveOptions({ beta: 0.1, softcap, reduction: "none" });
        const variants: Partial<FusedForwardOptions>[] = [
          {},
          { tileState: "registers" as const },
          { tokenStats: true },
          { smoothing: "in-kernel" as const },
          { opts: resolveOptions({ beta: 0.1, softcap: 30, reduction: "none" }) },
        ];
        for (let r = 1; r <= tile.tm; r *= 2) {
          if (tile.tm % r === 0) variants.push({ roundRows: r });
        }
        try {
          for (const v of variants) {
            await prepareFusedForward(ctx, { spec, opts, tile, ...v }).catch((e) => {
              if (!(e instanceof RangeError)) throw e; // a variant past the workgroup memory
            });
          }
          const mk = (rows: number, cols: number, dt: TensorDtype, label: string) =>
            createTensor(ctx, { dtype: dt, rows, cols, role: "workspace", label });
          const e = mk(shape.n, shape.d, dtype, "E"), c = mk(shape.v, shape.d, dtype, "C");
          await fillRandom(ctx, e, 11, 1);
          const mm = await prepareMatmul(ctx, {
            tile,
            aDtype: dtype,
            bDtype: dtype,
            aTrans: false,
            bTrans: false,
          });
          const rec = new Recorder(ctx);
          const logits = mk(shape.n, shape.v, "f32", "logits");
          mm.record(rec, {
            a: { tensor: e, trans: false },
            b: { tensor: c, trans: false },
            out: logits,
          });
          await rec.finish();
          await prepareRowSoftmaxStats(ctx, { logitsDtype: "f32", opts, v: shape.v });
          runs.push({ key, kernels: await collect(em.kernels, codes) });
        } catch (err) {
          runs.push({
            key,
            kernels: [],
            skipped: `error: ${(err as Error).message.split("\n")[0]}`,
          });
        }
      }
    }
  }
  return runs;
}

/** The fused backward bench: each named configuration, forward and backward. */
async function _benchFusedBackward(
  codes: Map<string, string>,
  profile: AdapterProfile,
  shape: { n: number; v: number; d: number },
): Promise<ManifestRun[]> {
  const runs: ManifestRun[] = [];
  const names = [...Object.keys(BENCH_CONFIGS), "s2r2", "g128k16t8x8s-kgs"];
  for (const dtype of ["bf16", "f32"] as const) {
    for (const name of names) {
      const key = `bench_fused_backward ${profile.name} ${dtype} ${name}`;
      const em = emulatedContext(profile);
      const cfg = benchConfig(name)!(em.ctx);
      const m = fusedMethod({ ...BENCH_BASE, ...cfg.variant, name }, cfg.kernels);
      try {
        await runMethodKernels(em.ctx, m, { ...shape, dtype }, resolveOptions({ beta: 0.1 }));
        runs.push({ key, kernels: await collect(em.kernels, codes) });
      } catch (err) {
        runs.push({ key, kernels: [], skipped: `error: ${(err as Error).message.split("\n")[0]}` });
      }
    }
  }
  return runs;
}

/** The kernels outside the methods and the tuning tools: the busy load and the SGD step. */
async function _others(codes: Map<string, string>): Promise<ManifestRun[]> {
  const em = emulatedContext(H100_PROFILE);
  await prepareBusyLoad(em.ctx);
  await prepareSgd(em.ctx);
  return [{ key: "others", kernels: await collect(em.kernels, codes) }];
}

/**
 * The tensor-core kernels (kernels/tc/tc_catalog.ts, for NVIDIA's 32-wide subgroups): the methods
 * that run them are unsupported on the emulated adapters (they need Dawn's subgroup matrices), so
 * the catalog of every variant they and the bench generate stands for them.
 */
async function _tensorCores(codes: Map<string, string>): Promise<ManifestRun[]> {
  return [{
    key: "tensor cores (catalog, subgroups of 32)",
    kernels: await collect(
      tcCatalog(32).map((k) => ({ label: `tc ${k.name}`, code: k.code, via: "pipeline" as const })),
      codes,
    ),
  }];
}

/** Every tuning tool's kernels and the others (see the module doc). */
export async function manifestExtras(codes: Map<string, string>): Promise<ManifestRun[]> {
  return [
    ...await _others(codes),
    ...await _tensorCores(codes),
    ...await _benchGemm(codes, H100_PROFILE, PAPER),
    ...await _benchGemm(codes, SOFTWARE_PROFILE, { n: 37, v: 53, d: 19 }),
    ...await _tuneForward(codes, H100_PROFILE, FORWARD_TILES_HW, PAPER),
    ...await _tuneForward(codes, SOFTWARE_PROFILE, FORWARD_TILES_SW, { n: 256, v: 4096, d: 128 }),
    ...await _benchFusedBackward(codes, H100_PROFILE, PAPER),
    ...await _benchFusedBackward(codes, SOFTWARE_PROFILE, { n: 512, v: 8192, d: 256 }),
  ];
}
