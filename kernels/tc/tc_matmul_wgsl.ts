/**
 * WGSL of the tensor-core product kernel: out = alpha·A·Bᵀ·unscale (+ out), f32 output, with the
 * split-K slices of the GEMM core (kernels/matmul_wgsl.ts: slice 0 into the output, the others
 * into dense partials added afterwards in slice order by its splitKReduceWgsl). The launcher is
 * tc_matmul.ts.
 *
 * Operand scales: where an operand is scaled (bf16 and f32 inputs), each value is multiplied by
 * its power-of-two scale scales[P.aSc] (scales[P.bSc]) before its conversion to f16, and the
 * accumulators by 1/(scale_a·scale_b) when stored (exact: powers of two).
 *
 * Stores: a tile wholly inside the output, not accumulating, stores each accumulator straight to
 * the output with subgroupMatrixStore (scaled by subgroupMatrixScalarMultiply); other tiles (edges,
 * accumulation) go one matrix per subgroup at a time through a workgroup scratch of f32, from
 * which each invocation writes its elements with bounds tests.
 * @module
 */
import { dtypeHelpers } from "../wgsl_common.ts";
import {
  tcAccs,
  tcEnables,
  tcEntryParams,
  tcLanePrelude,
  tcMainloop,
  type TcMainloopOptions,
  type TcMode,
  tcModuleDecls,
  type TcOperand,
  tcStorageType,
  tcStoreAcc,
  tcSubgroupCoords,
} from "./tc_codegen.ts";
import { tcThreads, type TcTile, tileCols, tileMma, tileRows, tileSubgroups } from "./tc_tiles.ts";

/** Generator options of the product kernel. */
export interface TcMatmulKernelOptions {
  tile: TcTile;
  sgSize: number;
  a: TcOperand;
  b: TcOperand;
  /** Operands multiplied by their scale before conversion (else taken as they are). */
  scaleA: boolean;
  scaleB: boolean;
  /** Bench diagnostics (see TcMainloopOptions.diag). */
  diag?: TcMainloopOptions["diag"];
  /** Native subgroup matrices or their emulation (tc_codegen.ts). */
  mode?: TcMode;
}

/** The uniform block's fields, in order (16 words). */
export const TC_MATMUL_PARAMS = [
  "M",
  "N",
  "K",
  "aOff",
  "lda",
  "bOff",
  "ldb",
  "cOff",
  "ldc",
  "accumulate",
  "alpha",
  "kPer",
  "first",
  "aSc",
  "bSc",
  "_p",
] as const;

const PARAMS = `struct Params { ${
  TC_MATMUL_PARAMS.map((f) => `${f}: ${f === "alpha" ? "f32" : "u32"}`).join(", ")
} };`;

/** Bindings in order: params, a, b, outp, part, scales. */
export const TC_MATMUL_BINDINGS = ["params", "a", "b", "outp", "part", "scales"] as const;

/**
 * Stores of every accumulator into `buf` (outp or part): straight ones for a full tile, or
 * through the scratch. `base` is the element of the tile's first row and column, `ld` the row
 * stride, `f` the factor, `acc` whether to add the old value (WGSL bool expression).
 */
function _stores(
  o: TcMatmulKernelOptions,
  main: TcMainloopOptions,
  x: { buf: string; base: string; ld: string; f: string; acc: string; straight: string },
): string {
  const t = o.tile, mma = tileMma(t), e = mma.m * mma.n;
  const accs = tcAccs(t);
  const straight = accs.map((a) =>
    tcStoreAcc(
      main,
      a,
      x.buf,
      `${x.base} + (m0 + sr + ${a.i * mma.m}u) * ${x.ld} + n0 + sc + ${a.j * mma.n}u`,
      x.ld,
      x.f,
    )
  );
  // the scratch path serves edge tiles and accumulation only: a loop, not unrolled
  const rounds = accs.map((a) =>
    `${tcStoreAcc(main, a, "scr", `sg * ${e}u`, `${mma.n}u`)}
      workgroupBarrier();
      for (var el = sl; el < ${e}u; el += ${o.sgSize}u) {
        let m = m0 + sr + ${a.i * mma.m}u + el / ${mma.n}u;
        let n = n0 + sc + ${a.j * mma.n}u + el % ${mma.n}u;
        if (m < P.M && n < P.N) {
          let i = ${x.base} + m * ${x.ld} + n;
          var v = ${x.f} * scr[sg * ${e}u + el];
          if (${x.acc}) { v = v + ${x.buf}[i]; }
          ${x.buf}[i] = v;
        }
      }
      workgroupBarrier();`
  );
  return `if (${x.straight}) {
      ${straight.join("\n      ")}
    } else {
      ${rounds.join("\n      ")}
    }`;
}

/**
 * WGSL of the product kernel. Params: {@link TC_MATMUL_PARAMS}; bindings
 * {@link TC_MATMUL_BINDINGS}. Grid: (column tiles, row tiles, slices); workgroup z takes the K
 * range [z·kPer, min(K, (z+1)·kPer)), stored as the GEMM core's split-K stores it.
 */
export function tcMatmulWgsl(o: TcMatmulKernelOptions): string {
  const t = o.tile, mma = tileMma(t);
  const bm = tileRows(t), bn = tileCols(t);
  const ka = o.a.contig === "k" ? "1u" : "P.lda", kb = o.b.contig === "k" ? "1u" : "P.ldb";
  const main: TcMainloopOptions = {
    tile: t,
    sgSize: o.sgSize,
    a: o.a,
    b: o.b,
    aBuf: "a",
    bBuf: "b",
    M: "P.M",
    N: "P.N",
    K: "kn",
    m0: "m0",
    n0: "n0",
    aOff: `(P.aOff + ks * ${ka})`,
    lda: "P.lda",
    bOff: `(P.bOff + ks * ${kb})`,
    ldb: "P.ldb",
    aScale: o.scaleA ? "sa" : undefined,
    bScale: o.scaleB ? "sb" : undefined,
    diag: o.diag,
    mode: o.mode,
  };
  // element readers for scalar loads (vector loads read whole registers)
  const helpers = dtypeHelpers(
    [{ name: "a", ...o.a }, { name: "b", ...o.b }].filter((x) => !x.vec),
  );
  const full = `m0 + ${bm}u <= P.M && n0 + ${bn}u <= P.N`;
  return `${tcEnables(o.mode)}
${PARAMS}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<${tcStorageType(o.a)}>;
@group(0) @binding(2) var<storage, read> b: array<${tcStorageType(o.b)}>;
@group(0) @binding(3) var<storage, read_write> outp: array<f32>;
@group(0) @binding(4) var<storage, read_write> part: array<f32>;
@group(0) @binding(5) var<storage, read> scales: array<f32>;
${helpers}
${tcModuleDecls(main, ["outp", "part", "scr"])}
var<workgroup> scr: array<f32, ${tileSubgroups(t) * mma.m * mma.n}>;
@compute @workgroup_size(${tcThreads(t, o.sgSize)})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>${
    tcEntryParams(o.mode)
  }) {
  ${tcLanePrelude(o.mode, o.sgSize)}
  let m0 = wg.y * ${bm}u;
  let n0 = wg.x * ${bn}u;
  let ks = wg.z * P.kPer;
  let kn = min(P.K - ks, P.kPer);
  ${tcSubgroupCoords(t)}
  let sa = scales[P.aSc];
  let sb = scales[P.bSc];
  ${tcMainloop(main)}
  let unscale = 1.0 / ((${o.scaleA ? "sa" : "1.0"}) * (${o.scaleB ? "sb" : "1.0"}));
  if (wg.z == 0u && P.first == 1u) {
    let f = P.alpha * unscale;
    ${
    _stores(o, main, {
      buf: "outp",
      base: "P.cOff",
      ld: "P.ldc",
      f: "f",
      acc: "P.accumulate != 0u",
      straight: `${full} && P.accumulate == 0u`,
    })
  }
  } else {
    let pb = (wg.z - P.first) * P.M * P.N;
    ${
    _stores(o, main, {
      buf: "part",
      base: "pb",
      ld: "P.N",
      f: "unscale",
      acc: "false",
      straight: full,
    })
  }
  }
}
`;
}
