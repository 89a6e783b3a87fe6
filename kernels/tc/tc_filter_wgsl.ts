/**
 * WGSL of the fused backward's filter pass on tensor cores: kernels/fused/filter.ts's pass (the
 * same parameters, bindings, grid and mask, with the scale buffer bound after them) with the
 * logits of each filter tile computed by the tc_codegen.ts main loop. The epilogue takes the
 * accumulators through workgroup memory as the tensor-core forward does (tc_forward_wgsl.ts),
 * tests g = p·f' + (β/|V|)(z/s)² ≥ ε per element (tokens with w_n ≠ 0 only) and ORs the verdicts
 * into one bit per backward tile; the flushes into the mask, the counter and the entry bits are
 * the FMA pass's own (filterFlushWgsl).
 * @module
 */
import type { LceOptions } from "../../core/options.ts";
import { dtypeHelpers, f32Lit, lossConstants } from "../wgsl_common.ts";
import {
  filterFlushWgsl,
  type FilterPassKernelOptions,
  filterPassSignature,
} from "../fused/filter.ts";
import { gradValue } from "../fused/backward_wgsl.ts";
import {
  tcAccs,
  tcEnables,
  tcEntryParams,
  tcLanePrelude,
  tcMainloop,
  type TcMainloopOptions,
  type TcMode,
  tcModuleDecls,
  tcStoreAcc,
  tcSubgroupCoords,
  wgWords,
} from "./tc_codegen.ts";
import { tcEpilogueShape } from "./tc_forward_wgsl.ts";
import { tcThreads, type TcTile, tileCols, tileMma, tileRows } from "./tc_tiles.ts";

/** What the tensor-core filter adds to the FMA filter's options. */
export interface TcFilterKernelOptions extends FilterPassKernelOptions {
  tcTile: TcTile;
  sgSize: number;
  mode?: TcMode;
}

/** The slots of E's and C's scales in the scale buffer (the forward's). */
export const TC_FILTER_SCALE_E = 0;
export const TC_FILTER_SCALE_C = 1;

/** One round: accumulator (i, j) through scratch half hb, each element tested. */
function _round(
  o: TcFilterKernelOptions,
  main: TcMainloopOptions,
  i: number,
  j: number,
  hb: number,
) {
  const t = o.tcTile, mma = tileMma(t), ep = tcEpilogueShape(t, o.sgSize);
  const TT = o.tile.tokens, VT = o.tile.vocab, subV = tileCols(t) / VT;
  const store = tcStoreAcc(
    main,
    { i, j },
    "scr",
    `sg * ${ep.copies * ep.half}u + ${hb * ep.half}u`,
    `${mma.n}u`,
    "unscale",
  );
  const tests = [...Array(ep.cols).keys()].map((q) =>
    `{ let cq = (${q}u + rot) % ${ep.cols}u; let col = c0 + cq;
        if (tw_${i} != 0.0 && v0 + col < P.vE) {
          let z = softcap(scr[base + cq]);
          if (${gradValue(o.opts, "z", `tl_${i}`)} >= EPS) {
            bits |= 1u << ((rr${i} / ${TT}u) * ${subV}u + col / ${VT}u);${
      o.entryBits
        ? `\n            let hv = v0 + col; atomicOr(&s_hot[(rr${i} / ${TT}u) * ${
          tileCols(t) / 32 + 1
        }u + (hv >> 5u) - (v0 >> 5u)], 1u << (hv & 31u));`
        : ""
    }
          }
        } }`
  );
  return `${store}
    workgroupBarrier();
    {
      let c0 = sc + ${j * mma.n}u + lh * ${ep.cols}u;
      let base = sg * ${ep.copies * ep.half}u + ${
    hb * ep.half
  }u + lr * ${mma.n}u + lh * ${ep.cols}u;
      ${tests.join("\n      ")}
    }${ep.copies === 1 ? "\n    workgroupBarrier();" : ""}`;
}

/**
 * WGSL of the tensor-core filter pass. Params and bindings: those of filterPassWgsl
 * (kernels/fused/filter.ts), then `scales`.
 */
export function tcFilterWgsl(o: TcFilterKernelOptions): string {
  const t = o.tcTile, mma = tileMma(t), ep = tcEpilogueShape(t, o.sgSize);
  const bm = tileRows(t), bn = tileCols(t);
  const TT = o.tile.tokens, VT = o.tile.vocab;
  if (bm % TT !== 0 || bn % VT !== 0 || (bm / TT) * (bn / VT) > 32) {
    throw new RangeError(`tc filter: tile ${bm}×${bn} does not cover whole ${TT}×${VT} tiles`);
  }
  const scaled = o.dtype !== "f16";
  const op = { dtype: o.dtype, contig: "k" as const, vec: o.vecLoads === true };
  const main: TcMainloopOptions = {
    tile: t,
    sgSize: o.sgSize,
    a: { ...op, rowStart: (r) => `(${r} - P.eR0) * P.d` },
    b: { ...op, rowStart: (r) => `(${o.sort ? `perm[${r}]` : r} - P.cR0) * P.d` },
    aBuf: "e",
    bBuf: "c",
    M: "P.tE",
    N: "P.vE",
    K: "P.d",
    m0: "t0",
    n0: "v0",
    aOff: "0u",
    lda: "P.d",
    bOff: "0u",
    ldb: "P.d",
    aScale: scaled ? "sa" : undefined,
    bScale: scaled ? "sb" : undefined,
    mode: o.mode,
  };
  if (o.scales !== true) {
    throw new RangeError(
      "tc filter: its operands' scales need the `scales` binding (options.scales)",
    );
  }
  // the FMA pass's own signature (its parameters and bindings, `scales` last): the backward binds
  // this pass as it binds the FMA one
  const sig = filterPassSignature(o);
  const hotWords = (bm / TT) * (bn / 32 + 1);
  // s_any is the first of four words and s_hot whole 16 bytes: see wgWords
  const rowVals = [...Array(t.mt).keys()].map((i) =>
    `let rr${i} = sr + ${i * mma.m}u + lr; let tk${i} = t0 + rr${i};
  let tw_${i} = select(0.0, w[min(tk${i}, P.tE - 1u)], tk${i} < P.tE); let tl_${i} = lse[min(tk${i}, P.tE - 1u)];`
  );
  const helpers = op.vec
    ? ""
    : dtypeHelpers([{ name: "e", dtype: o.dtype }, { name: "c", dtype: o.dtype }]);
  return `${tcEnables(o.mode)}
${lossConstants(o.opts as LceOptions, o.v)}
const EPS: f32 = ${f32Lit(o.eps)};
${sig.wgsl}
${helpers}
${tcModuleDecls(main, ["scr"])}
var<workgroup> scr: array<f32, ${wgWords(ep.scratch)}>;
var<workgroup> s_any: array<atomic<u32>, 4>;
${o.entryBits ? `var<workgroup> s_hot: array<atomic<u32>, ${wgWords(hotWords)}>;` : ""}
@compute @workgroup_size(${tcThreads(t, o.sgSize)})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>${
    tcEntryParams(o.mode)
  }) {
  ${tcLanePrelude(o.mode, o.sgSize)}
  ${tcSubgroupCoords(t)}
  let lr = sl % ${mma.m}u;
  let lh = sl / ${mma.m}u;
  let rot = lr >> 1u;
  let t0 = P.tS + wg.x * ${bm}u;
  let v0 = P.vS + wg.y * ${bn}u;
  if (lid == 0u) { atomicStore(&s_any[0], 0u); }
  ${o.entryBits ? `if (lid < ${hotWords}u) { atomicStore(&s_hot[lid], 0u); }` : ""}
  let sa = scales[${TC_FILTER_SCALE_E}];
  let sb = scales[${TC_FILTER_SCALE_C}];
  let unscale = 1.0 / (${scaled ? "sa * sb" : "1.0"});
  ${rowVals.join("\n  ")}
  ${tcMainloop(main)}
  var bits = 0u;
  ${tcAccs(t).map((a, r) => _round(o, main, a.i, a.j, r % ep.copies)).join("\n  ")}
  if (bits != 0u) { atomicOr(&s_any[0], bits); }
  workgroupBarrier();
  ${filterFlushWgsl({ bm, bn, tile: o.tile, entryBits: o.entryBits === true, any: "s_any[0]" })}
}
`;
}
