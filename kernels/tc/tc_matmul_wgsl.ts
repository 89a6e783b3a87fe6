/**
 * WGSL of the tensor-core product kernel: out = alpha·A·Bᵀ·unscale (+ out), f32 output (or a
 * 16-bit one, written through the scratch: {@link TcMatmulKernelOptions.out16}), with the split-K
 * slices of the GEMM core (kernels/matmul_wgsl.ts: slice 0 into the output, the others
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
 * which each invocation writes its elements with bounds tests (with TcTile.scratchTurns, one
 * matrix of scratch the subgroups take in turn, written out by the whole workgroup).
 * @module
 */
import { dtypeHelpers, lossConstants } from "../wgsl_common.ts";
import type { LceOptions } from "../../core/options.ts";
import { logitGradExpr } from "../logit_grad.ts";
import type { Dtype16 } from "../cast16.ts";
import { store16Puts } from "../matmul_wgsl.ts";
import { signature, u32s } from "../../gpu/signature.ts";
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

/**
 * A product's gradient epilogue: the loss's whole gradient of the logits, or with `tiledPart` the
 * part the fused backward tiles (kernels/logit_grad.ts).
 */
export interface TcGradEpilogue {
  opts: LceOptions;
  v: number;
  tiledPart?: boolean;
}

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
  /**
   * Full tiles store their accumulators straight into the output with subgroupMatrixStore where
   * the rows are 16-byte aligned (default true). Without it every tile goes through the
   * workgroup scratch, and `outp` and `part` take no matrix store: Dawn then asks no minimum
   * binding size of them beyond one element (tc_bindings.ts), which tiny outputs need.
   */
  straight?: boolean;
  /** A's binding read_write (TcMatmulKernel.aReadWrite). */
  aReadWrite?: boolean;
  /**
   * A 16-bit output (TcMatmulKernel.outDtype): every tile through the scratch, two adjacent
   * elements an invocation, rounded once (no straight stores; not accumulating, one slice).
   */
  out16?: Dtype16;
  /**
   * With a 16-bit output: write the loss's gradient of the product instead of the product,
   * G = w_m·(p − (1−β)[n + eCol = t_m] − β/|V|)·∂z/∂x (kernels/matmul_wgsl.ts's `gradEpilogue`)
   * or its tiled part, times scales[P.gSc] (w's power-of-two scale: |G| ≤ |w|·(1 + β/|V|), so it
   * puts G in f16's range). Binds `targets`, `lse` and `w`; rows are tokens from P.eRow.
   */
  gradEpilogue?: TcGradEpilogue;
  /**
   * A comes scaled by scales[P.aSc] (a G of {@link gradEpilogue}): taken as it is, the result
   * divided by that scale.
   */
  unscaleA?: boolean;
  /**
   * Accumulating into an f32 output: a full tile of slice 0 whose rows are 16-byte aligned loads
   * the output's old values into its accumulators before the K loop (divided by the store's
   * factor) and stores them straight, instead of adding through the workgroup scratch; other
   * tiles as without it. The order of the additions changes (old + the first k-slices …), not
   * their number.
   */
  preload?: boolean;
}

/**
 * The product kernel's signature: M×N output from A (offset aOff, row stride lda) and B (bOff,
 * ldb) over depth K, into outp at cOff with row stride ldc (accumulate: add to it), times alpha;
 * split-K slices of kPer with `first` as in the GEMM core (kernels/matmul_wgsl.ts); the operands'
 * scales at scales[aSc] and scales[bSc].
 */
export function tcMatmulSignature(
  o: Pick<TcMatmulKernelOptions, "a" | "b" | "aReadWrite" | "out16" | "gradEpilogue">,
) {
  const ep = o.gradEpilogue !== undefined;
  return signature({
    params: {
      ...u32s("M N K aOff lda bOff ldb cOff ldc accumulate"),
      alpha: "f32",
      ...u32s("kPer first aSc bSc"),
      ...(ep ? u32s("eRow eCol gSc") : {}),
    },
    bindings: {
      a: { elem: tcStorageType(o.a), access: o.aReadWrite ? "read_write" : "read" },
      b: { elem: tcStorageType(o.b), access: "read" },
      outp: { elem: o.out16 ? "atomic<u32>" : "f32", access: "read_write" },
      part: { elem: "f32", access: "read_write" },
      scales: { elem: "f32", access: "read" },
      targets: { elem: "i32", access: "read", when: ep },
      lse: { elem: "f32", access: "read", when: ep },
      w: { elem: "f32", access: "read", when: ep },
    },
    layout: { pad: ep ? ["_p", "_q"] : ["_p"] },
  });
}

/**
 * Words (f32) of the product kernel's store scratch: a result matrix a subgroup, or one in all
 * with {@link TcTile.scratchTurns}.
 */
export function tcStoreScratchWords(t: TcTile): number {
  const mma = tileMma(t);
  return (t.scratchTurns ? 1 : tileSubgroups(t)) * mma.m * mma.n;
}

/**
 * Stores of every accumulator into `buf` (outp or part): straight ones for a full tile, or
 * through the scratch. `base` is the element of the tile's first row and column, `ld` the row
 * stride, `f` the factor, `acc` whether to add the old value (WGSL bool expression).
 */
function _stores(
  o: TcMatmulKernelOptions,
  main: TcMainloopOptions,
  x: { buf: string; base: string; ld: string; f: string; acc: string; straight?: string },
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
  const rounds = t.scratchTurns
    ? _turns(o, main, x)
    : accs.map((a) =>
      `${tcStoreAcc(main, a, "scr", `sg * ${e}u`, `${mma.n}u`)}
      workgroupBarrier();
      ${
        _writeOut(o, x, {
          from: "sl",
          step: o.sgSize,
          row: `sr + ${a.i * mma.m}u`,
          col: `sc + ${a.j * mma.n}u`,
          at: (el) => `sg * ${e}u + ${el}`,
        })
      }
      workgroupBarrier();`
    );
  // without straight stores none is emitted: a matrix store in dead code still sets the binding's
  // minimum size
  if (x.straight === undefined) return rounds.join("\n      ");
  return `if (${x.straight}) {
      ${straight.join("\n      ")}
    } else {
      ${rounds.join("\n      ")}
    }`;
}

/**
 * The write-out of one result matrix from the scratch: invocations from `from` in steps of `step`
 * take its elements (scratch index `at`, of `el`), the matrix's first row and column `row` and
 * `col` inside the tile, each element bounds-tested and scaled (and added to the old value).
 */
function _writeOut(
  o: TcMatmulKernelOptions,
  x: { buf: string; base: string; ld: string; f: string; acc: string },
  w: { from: string; step: number; row: string; col: string; at: (el: string) => string },
): string {
  const mma = tileMma(o.tile), e = mma.m * mma.n;
  if (o.out16 && x.buf === "outp") {
    // two adjacent columns an invocation (mma.n is even): a whole word where they share one
    return `for (var el = 2u * ${w.from}; el < ${e}u; el += ${2 * w.step}u) {
        let m = m0 + ${w.row} + el / ${mma.n}u;
        let n = n0 + ${w.col} + el % ${mma.n}u;
        if (m < P.M && n < P.N) {
          let i = ${x.base} + m * ${x.ld} + n;
          let v0 = ${_ep(o, "m", "n", `${x.f} * scr[${w.at("el")}]`)};
          let v1 = ${_ep(o, "m", "n + 1u", `${x.f} * scr[${w.at("el + 1u")}]`)};
          if (n + 1u >= P.N) {
            put_half(i, v0);
          } else if ((i & 1u) == 0u) {
            put_pair(i, v0, v1);
          } else {
            put_half(i, v0);
            put_half(i + 1u, v1);
          }
        }
      }`;
  }
  return `for (var el = ${w.from}; el < ${e}u; el += ${w.step}u) {
        let m = m0 + ${w.row} + el / ${mma.n}u;
        let n = n0 + ${w.col} + el % ${mma.n}u;
        if (m < P.M && n < P.N) {
          let i = ${x.base} + m * ${x.ld} + n;
          var v = ${x.f} * scr[${w.at("el")}];
          if (${x.acc}) { v = v + ${x.buf}[i]; }
          ${x.buf}[i] = v;
        }
      }`;
}

/**
 * The scratch stores with one matrix of scratch ({@link TcTile.scratchTurns}): for each
 * accumulator the subgroups take the scratch in turn, and the whole workgroup writes each
 * subgroup's matrix out.
 */
function _turns(
  o: TcMatmulKernelOptions,
  main: TcMainloopOptions,
  x: { buf: string; base: string; ld: string; f: string; acc: string },
): string[] {
  const t = o.tile, mma = tileMma(t);
  return tcAccs(t).map((a) =>
    `for (var s = 0u; s < ${tileSubgroups(t)}u; s++) {
        if (sg == s) {
          ${tcStoreAcc(main, a, "scr", "0u", `${mma.n}u`)}
        }
        workgroupBarrier();
        let tr = (s / ${t.sgCols}u) * ${t.mt * mma.m}u + ${a.i * mma.m}u;
        let tc = (s % ${t.sgCols}u) * ${t.nt * mma.n}u + ${a.j * mma.n}u;
        ${
      _writeOut(o, x, {
        from: "lid",
        step: tcThreads(t, o.sgSize),
        row: "tr",
        col: "tc",
        at: (el) => el,
      })
    }
        workgroupBarrier();
      }`
  );
}

/** The value stored at (m, n): the product `v`, or its gradient with the epilogue. */
function _ep(o: TcMatmulKernelOptions, m: string, n: string, v: string): string {
  return o.gradEpilogue ? `ep(${m}, ${n}, ${v}) * gs` : v;
}

/** WGSL of {@link TcMatmulKernelOptions.gradEpilogue}: `ep(m, n, z)` (kernels/logit_grad.ts). */
function _gradEp(o: TcGradEpilogue): string {
  return `
${lossConstants(o.opts, o.v)}
fn ep(m: u32, n: u32, x: f32) -> f32 {
  let row = P.eRow + m;
  let zc = softcap(x);
  let p = exp(zc - lse[row]);
  let on_target = select(0.0, 1.0 - BETA, i32(P.eCol + n) == targets[row]);
  let wr = w[row];
  return ${logitGradExpr(o, "zc", "wr")};
}`;
}

/**
 * WGSL of the product kernel. Params: {@link TC_MATMUL_PARAMS}; bindings
 * {@link TC_MATMUL_BINDINGS}. Grid: (column tiles, row tiles, slices); workgroup z takes the K
 * range [z·kPer, min(K, (z+1)·kPer)), stored as the GEMM core's split-K stores it.
 */
export function tcMatmulWgsl(o: TcMatmulKernelOptions): string {
  const t = o.tile;
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
  // a matrix store needs its pointer and row stride 16-byte aligned (4 f32): Vulkan's rule for
  // cooperative-matrix loads and stores, which an emulation never meets
  if (o.gradEpilogue && !o.out16) throw new RangeError("tc matmul: the epilogue needs out16");
  const straight = o.straight !== false && !o.out16;
  const full = `m0 + ${bm}u <= P.M && n0 + ${bn}u <= P.N`;
  const outAligned = `${full} && (P.cOff % 4u) == 0u && (P.ldc % 4u) == 0u`;
  const partAligned = `${full} && (P.N % 4u) == 0u`;
  const unscaleBy = `((${o.scaleA || o.unscaleA ? "sa" : "1.0"}) * (${o.scaleB ? "sb" : "1.0"}))`;
  if (o.preload && straight) {
    const mma = tileMma(t);
    main.preload = {
      buf: "outp",
      off: (i, j) => `P.cOff + (m0 + sr + ${i * mma.m}u) * P.ldc + n0 + sc + ${j * mma.n}u`,
      stride: "P.ldc",
      // the store's factor is alpha / unscaleBy
      factor: `(${unscaleBy} / P.alpha)`,
      when: `wg.z == 0u && P.first == 1u && P.accumulate != 0u && ${outAligned}`,
    };
  }
  const outStraight = main.preload ? outAligned : `${outAligned} && P.accumulate == 0u`;
  return `${tcEnables(o.mode)}
${tcMatmulSignature(o).wgsl}
${helpers}${o.out16 ? `\n${store16Puts(o.out16)}` : ""}${
    o.gradEpilogue ? _gradEp(o.gradEpilogue) : ""
  }
${tcModuleDecls(main, o.out16 ? ["part", "scr"] : ["outp", "part", "scr"])}
var<workgroup> scr: array<f32, ${tcStoreScratchWords(t)}>;
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
  let sb = scales[P.bSc];${o.gradEpilogue ? "\n  let gs = scales[P.gSc];" : ""}
  ${tcMainloop(main)}
  let unscale = 1.0 / ${unscaleBy};
  if (wg.z == 0u && P.first == 1u) {
    let f = P.alpha * unscale;
    ${
    _stores(o, main, {
      buf: "outp",
      base: "P.cOff",
      ld: "P.ldc",
      f: "f",
      acc: "P.accumulate != 0u",
      straight: straight ? outStraight : undefined,
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
      straight: straight ? partAligned : undefined,
    })
  }
  }
}
`;
}
