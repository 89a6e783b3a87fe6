/**
 * Every tensor-core kernel the methods and the bench generate, as WGSL for one subgroup size: the
 * product in each layout, dtype and load variant the methods and the bench's variants use, the
 * forward's tiles pass and the filter pass in representative option sets (loss constants, softcap,
 * Σz, tile map, sorting, entry bits, vector or scalar loads), and the scale passes. CI validates
 * all of them through Dawn's null backend (tc_null_test.ts); the GPU commands compile all of them
 * for the real adapter first (scripts/bench_tc.ts, scripts/tc_check.ts).
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { resolveOptions } from "../../core/options.ts";
import { defaultFilterEps } from "../fused/backward_plan.ts";
import { BACKWARD_TILE_LARGE } from "../fused/backward_tiles.ts";
import type { Signature } from "../../gpu/signature.ts";
import { filterPassSignature } from "../fused/filter.ts";
import { type TcMatmulKernelOptions, tcMatmulSignature, tcMatmulWgsl } from "./tc_matmul_wgsl.ts";
import { tcForwardSignature, tcForwardWgsl } from "./tc_forward_wgsl.ts";
import { type TcFilterKernelOptions, tcFilterWgsl } from "./tc_filter_wgsl.ts";
import { TC_FORWARD_TILE, TC_FORWARD_TILE_SUMZ } from "./tc_forward.ts";
import { TC_FILTER_TILE, tcFilterDispatchTile } from "./tc_filter.ts";
import {
  ABSMAX_SIGNATURE,
  absmaxWgsl,
  CLEAR_SIGNATURE,
  clearWgsl,
  SCALES_SIGNATURE,
  scalesWgsl,
} from "./tc_scale.ts";
import { BASELINE_TC_TILES, TC_BENCH_TILES, tcSupport, type TcTile } from "./tc_tiles.ts";
import type { TcDtype } from "./tc_codegen.ts";

/** One kernel of the catalog. */
export interface CatalogKernel {
  name: string;
  code: string;
  /** The kernel's signature: the code declares exactly it (checked before compiling). */
  sig: Signature;
  /** Bindings that take subgroup-matrix loads or stores (kernels/tc/tc_bindings.ts). */
  matrices: string[];
}

/** The catalog for subgroups of `sgSize` (32 on NVIDIA). */
export function tcCatalog(sgSize: number): CatalogKernel[] {
  const out: CatalogKernel[] = [];
  const mm = (name: string, tile: TcTile, a: TcDtype, b: TcDtype, o: {
    aTrans?: boolean;
    bTrans?: boolean;
    split?: boolean;
    vecA: boolean;
    vecB: boolean;
    diag?: "copy-only" | "mma-only";
    straight?: boolean;
    aReadWrite?: boolean;
    out16?: "bf16" | "f16";
    gradEpilogue?: "whole" | "tiled";
    unscaleA?: boolean;
    preload?: boolean;
  }) => {
    const ko: TcMatmulKernelOptions = {
      tile,
      sgSize,
      a: { dtype: a, contig: o.aTrans ? "mn" : "k", vec: o.vecA, split: o.split },
      b: { dtype: b, contig: o.bTrans ? "mn" : "k", vec: o.vecB },
      scaleA: a !== "f16",
      scaleB: b !== "f16",
      diag: o.diag,
      straight: o.straight,
      aReadWrite: o.aReadWrite,
      out16: o.out16,
      gradEpilogue: o.gradEpilogue
        ? {
          opts: resolveOptions({ beta: 0.1, softcap: 30 }),
          v: 1000,
          tiledPart: o.gradEpilogue === "tiled",
        }
        : undefined,
      unscaleA: o.unscaleA,
      preload: o.preload,
    };
    out.push({
      name: `matmul ${name} ${a}·${b}${o.vecA ? " vecA" : ""}${o.vecB ? " vecB" : ""}${
        o.straight === false ? " scratch stores" : ""
      }${o.aReadWrite ? " A read_write" : ""}${o.out16 ? ` → ${o.out16}` : ""}${
        o.gradEpilogue ? ` gradient${o.gradEpilogue === "tiled" ? " (tiled part)" : ""}` : ""
      }${o.preload ? " preload" : ""}`,
      code: tcMatmulWgsl(ko),
      sig: tcMatmulSignature(ko),
      matrices: o.straight === false ? [] : o.out16 ? ["part"] : ["outp", "part"],
    });
  };
  for (const [name, tile] of Object.entries(TC_BENCH_TILES)) {
    mm(name, tile, "bf16", "bf16", { vecA: true, vecB: true });
  }
  for (const name of ["t128_k32", "t128x256_k16"]) {
    mm(`${name} split`, TC_BENCH_TILES[name], "f32", "bf16", {
      split: true,
      vecA: true,
      vecB: true,
    });
  }
  for (const name of ["t128_k32_db", "t128x256_k16_db"]) {
    const tile = TC_BENCH_TILES[name];
    mm(name, tile, "f16", "f16", { vecA: true, vecB: true });
    for (const diag of ["copy-only", "mma-only"] as const) {
      mm(`${name} ${diag}`, tile, "bf16", "bf16", { vecA: true, vecB: true, diag });
    }
  }
  for (const dt of ["bf16", "f16"] as const) {
    for (const [vecA, vecB] of [[true, true], [false, true], [true, false], [false, false]]) {
      const { logits, split } = BASELINE_TC_TILES;
      mm("logits", logits, dt, dt, { vecA, vecB });
      mm("dE", split, "f32", dt, { bTrans: true, split: true, vecA, vecB });
      // the tensor-core dense dE's (kernels/tc/tc_dense_de.ts): G's tiled part in f16 from the
      // logits' epilogue; G·C with G in the output's buffer
      mm("logits", logits, dt, dt, { vecA, vecB, out16: "f16", gradEpilogue: "tiled" });
      const g16 = { vecA, vecB, aReadWrite: true, unscaleA: true };
      mm("dE", logits, "f16", dt, { ...g16, bTrans: true });
      mm("dE", logits, "f16", dt, { ...g16, bTrans: true, preload: true });
      mm("dC", split, "f32", dt, { aTrans: true, bTrans: true, split: true, vecA, vecB });
      // the tensor-core dense dC's (kernels/tc/tc_dense_dc.ts): G in f16 from the logits'
      // epilogue; Gᵀ·E with G in the output's buffer, dC in its 16-bit dtype or in f32 (odd d)
      mm("logits", logits, dt, dt, { vecA, vecB, out16: "f16", gradEpilogue: "whole" });
      mm("dC", logits, "f16", dt, { ...g16, aTrans: true, bTrans: true, out16: dt });
      mm("dC", logits, "f16", dt, { ...g16, aTrans: true, bTrans: true });
    }
    // the variant of outputs smaller than one matrix (no matrix stores into storage)
    mm("logits", BASELINE_TC_TILES.logits, dt, dt, { vecA: false, vecB: false, straight: false });
  }
  for (const dtype of ["bf16", "f16"] as const) {
    for (const vecLoads of [true, false]) {
      for (
        const [tag, softcap, sumZ, tileMax] of [
          ["plain", undefined, false, false],
          ["softcap Σz tile map", 30, true, true],
        ] as const
      ) {
        for (
          const [tileTag, tile] of [["", TC_FORWARD_TILE], [
            " 128x256",
            TC_FORWARD_TILE_SUMZ,
          ]] as const
        ) {
          const fo = { tile, sgSize, dtype, softcap, sumZ, vecLoads, tileMax };
          out.push({
            name: `forward ${dtype}${vecLoads ? " vec" : ""} ${tag}${tileTag}`,
            code: tcForwardWgsl(fo),
            sig: tcForwardSignature(fo),
            matrices: [],
          });
        }
      }
    }
  }
  for (const dtype of ["bf16", "f16"] as const) {
    for (const vecLoads of [true, false]) {
      for (
        const [tag, beta, softcap, sort, entryBits] of [
          ["entry bits", 0.1, undefined, false, true],
          ["sorted", 0, undefined, true, false],
          ["softcap", 0.1, 20, false, false],
          // the tile map's refine (kernels/fused/map_refine.ts, `full`): own order, no entry bits
          ["map refine", 0.1, undefined, false, false],
        ] as const
      ) {
        const fo: TcFilterKernelOptions = {
          tile: BACKWARD_TILE_LARGE,
          filterTile: tcFilterDispatchTile(TC_FILTER_TILE),
          dtype,
          opts: resolveOptions({ beta, softcap }),
          v: 256000,
          eps: defaultFilterEps(dtype),
          sort,
          entryBits,
          vecLoads,
          scales: true,
          tcTile: TC_FILTER_TILE,
          sgSize,
        };
        out.push({
          name: `filter ${dtype}${vecLoads ? " vec" : ""} ${tag}`,
          code: tcFilterWgsl(fo),
          sig: filterPassSignature(fo),
          matrices: [],
        });
      }
    }
  }
  for (const dt of ["bf16", "f32"] as const) {
    out.push({ name: `absmax ${dt}`, code: absmaxWgsl(dt), sig: ABSMAX_SIGNATURE, matrices: [] });
  }
  out.push({ name: "scales", code: scalesWgsl(), sig: SCALES_SIGNATURE, matrices: [] });
  out.push({ name: "scales clear", code: clearWgsl(), sig: CLEAR_SIGNATURE, matrices: [] });
  return out;
}

/** What compiling one kernel for the adapter gave. */
export interface CompiledKernel {
  name: string;
  ms: number;
  error?: string;
}

/**
 * Compiles the catalog for the context's adapter (its subgroup size), `parallel` pipelines at a
 * time (Dawn compiles asynchronous pipelines on worker threads), each failure in its row. The
 * pipelines are not kept: a driver's shader cache makes the methods' own compilations of the
 * same code cheap afterwards.
 */
export function compileCatalog(ctx: GpuContext, parallel = 8): Promise<CompiledKernel[]> {
  return compileKernels(ctx.device, tcCatalog(tcSupport(ctx).sgSize), parallel);
}

/** Compiles `kernels` on `device`, `parallel` at a time (see {@link compileCatalog}). */
export async function compileKernels(
  device: GPUDevice,
  kernels: CatalogKernel[],
  parallel = 8,
): Promise<CompiledKernel[]> {
  const out: CompiledKernel[] = new Array(kernels.length);
  let next = 0;
  const worker = async () => {
    while (next < kernels.length) {
      const i = next++, k = kernels[i], t0 = performance.now();
      let error: string | undefined;
      try {
        k.sig.check(k.code, k.name);
        error = await _compile(device, k.code);
      } catch (e) {
        error = (e as Error).message.split("\n")[0];
      }
      out[i] = { name: k.name, ms: performance.now() - t0, ...(error ? { error } : {}) };
    }
  };
  // the shader modules' own validation errors are read from their compilation info
  device.pushErrorScope("validation");
  await Promise.all(Array.from({ length: Math.max(1, parallel) }, worker));
  await device.popErrorScope();
  return out;
}

/** The first error of compiling `code` into a compute pipeline, or undefined. */
async function _compile(device: GPUDevice, code: string): Promise<string | undefined> {
  const module = device.createShaderModule({ code });
  const info = await module.getCompilationInfo();
  const err = info.messages.find((m) => m.type === "error");
  if (err) return `line ${err.lineNum}:${err.linePos}: ${err.message.split("\n")[0]}`;
  try {
    await device.createComputePipelineAsync({
      layout: "auto",
      compute: { module, entryPoint: "main" },
    });
    return undefined;
  } catch (e) {
    return (e as Error).message.split("\n")[0];
  }
}
