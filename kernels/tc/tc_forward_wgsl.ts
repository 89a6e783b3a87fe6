/**
 * WGSL of the tensor-core fused forward's tiles pass (kernels/tc/tc_forward.ts): the pass of
 * kernels/fused/forward_tiles.ts with its logit tiles computed on tensor cores. Workgroups form a
 * grid of (vocab split) × (token block of bm rows); a workgroup walks its range of bn-wide vocab
 * tiles, each the main loop of tc_codegen.ts over d, then the epilogue below, and at the end of
 * its range writes one log-sum-exp partial per row (and Σz with softcap or the in-kernel
 * smoothing) into the workspace the existing merge pass reads (kernels/fused/forward_merge.ts).
 *
 * Epilogue. Accumulators reach the epilogue through workgroup memory: round by round, each
 * subgroup stores one of its result matrices (times 1/(scale_E·scale_C)) into its own half of a
 * double scratch (so one barrier a round; with TcTile.singleScratch into a single one, and a
 * second barrier after the round's reads), and each invocation takes one row of it and
 * NN/(sgSize/MM) of its columns (read in an order rotated by the row, which spreads the reads
 * over all 32 banks): softcap, the vocabulary edge, and an online (max, Σexp) per row block held
 * in registers across the workgroup's tiles (one rescale a round), Σz, the tile map's maximum,
 * and the target logit from the one invocation holding it (the very value the LSE saw, parked in
 * lossRows as in the FMA forward). At the end of its range the partial states of a row (sgCols ×
 * invocations per row of them) are merged in a fixed order by one invocation: no float atomics,
 * so two runs give the same bits.
 * @module
 */
import type { Dtype } from "../../core/options.ts";
import { dtypeHelpers, LSE_MERGE } from "../wgsl_common.ts";
import { softcapFn, treeSum } from "../fused/forward_epilogue.ts";
import { tileMapForwardWgsl16, tileMapForwardWgsl16Scratch } from "../fused/tile_map.ts";
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
  tcStorageType,
  tcStoreAcc,
  tcSubgroupCoords,
  wgWords,
} from "./tc_codegen.ts";
import { tcThreads, type TcTile, tileCols, tileMma, tileRows, tileSubgroups } from "./tc_tiles.ts";

/** Options of the tiles kernel. */
export interface TcForwardKernelOptions {
  tile: TcTile;
  sgSize: number;
  dtype: Dtype;
  softcap?: number;
  /** Sum the (capped) logits per split (softcap or in-kernel smoothing). */
  sumZ: boolean;
  /** 16-byte loads of E and C (d a multiple of the vector width). */
  vecLoads: boolean;
  /**
   * Write each tile's largest capped logit into the tile map (in a ragged last token block, with
   * the zero logits of its missing rows: see tileMapForwardWgsl16; with TcTile.singleScratch
   * through the epilogue's scratch, tileMapForwardWgsl16Scratch).
   */
  tileMax: boolean;
  mode?: TcMode;
}

/** Slots of the scale buffer the forward reads: E's and C's. */
export const TC_FWD_SCALE_E = 0;
export const TC_FWD_SCALE_C = 1;

const NO_TARGET = "0xffffffffu";

/** Sizes of the epilogue: invocations per row, columns each, partial states per row. */
export function tcEpilogueShape(t: TcTile, sgSize: number) {
  const mma = tileMma(t);
  const lanesPerRow = sgSize / mma.m;
  const cols = mma.n / lanesPerRow;
  if (!Number.isInteger(lanesPerRow) || !Number.isInteger(cols) || cols < 1) {
    throw new RangeError(
      `tc epilogue: subgroup size ${sgSize} does not fit ${JSON.stringify(mma)}`,
    );
  }
  const half = mma.m * mma.n; // one matrix, row stride NN
  const copies = t.singleScratch ? 1 : 2;
  return {
    lanesPerRow,
    cols,
    parts: t.sgCols * lanesPerRow,
    half,
    /** Matrices of scratch a subgroup: 2 (one barrier a round) or 1 (two). */
    copies,
    scratch: tileSubgroups(t) * copies * half,
  };
}

/**
 * The tiles pass's signature: the parameters of the FMA forward's tiles pass
 * (kernels/fused/forward_tiles.ts: the E shard's `rows` rows from `rowStart`, the C shard's
 * `vRows` from `vStart`, depth d, the shard's `tiles` vocab tiles in `splits` splits from global
 * split `splitBase` of `sTotal`, the tile map's origin and width) and its bindings (E, C, targets,
 * the split workspace of log-sum-exp partials, [Σz], the target logits zt, [the tile map]), then
 * the scale buffer (E's at slot {@link TC_FWD_SCALE_E}, C's at {@link TC_FWD_SCALE_C}).
 */
export function tcForwardSignature(
  o: Pick<TcForwardKernelOptions, "dtype" | "vecLoads" | "sumZ" | "tileMax">,
) {
  const elem = tcStorageType({ dtype: o.dtype, contig: "k", vec: o.vecLoads });
  return signature({
    params: u32s(
      "rows rowStart vRows vStart d tiles splits splitBase sTotal mapRow0 mapCol0 mapCols",
    ),
    bindings: {
      e: { elem, access: "read" },
      c: { elem, access: "read" },
      targets: { elem: "i32", access: "read" },
      ws: { elem: "f32", access: "read_write" },
      wsz: { elem: "f32", access: "read_write", when: o.sumZ },
      zt: { elem: "f32", access: "read_write" },
      tmap: { elem: "u32", access: "read_write", when: o.tileMax },
      scales: { elem: "f32", access: "read" },
    },
    layout: { breaks: [7] },
  });
}

/** One round of the epilogue: accumulator (i, j) through scratch half `hb`. */
function _round(
  o: TcForwardKernelOptions,
  main: TcMainloopOptions,
  i: number,
  j: number,
  hb: number,
): string {
  const t = o.tile, mma = tileMma(t), ep = tcEpilogueShape(t, o.sgSize);
  const store = tcStoreAcc(
    main,
    { i, j },
    "scr",
    `sg * ${ep.copies * ep.half}u + ${hb * ep.half}u`,
    `${mma.n}u`,
    "unscale",
  );
  const qs = [...Array(ep.cols).keys()];
  const reads = qs.map((q) =>
    `let c${q} = (${q}u + rot) % ${ep.cols}u; let z${q} = softcap(scr[base + c${q}]); ` +
    `let v${q} = select(NEG_INF, z${q}, i32(c${q}) < vlim);`
  );
  const mx = qs.map((q) => `v${q}`).reduce((a, b) => `max(${a}, ${b})`);
  const lines = [
    ...reads,
    `let mx = ${mx};`,
    `let mf = max(max(st_m_${i}, mx), -1.0e30);`,
    `st_s_${i} = st_s_${i} * exp(st_m_${i} - mf) + ${treeSum(qs.map((q) => `exp(v${q} - mf)`))};`,
    `st_m_${i} = max(st_m_${i}, mx);`,
    ...(o.sumZ
      ? [`st_z_${i} += ${treeSum(qs.map((q) => `select(0.0, z${q}, i32(c${q}) < vlim)`))};`]
      : []),
    ...(o.tileMax ? [tileMapForwardWgsl16.row] : []),
    `let lt = tg_${i} - cb; if (lt < ${ep.cols}u && i32(lt) < vlim) { zt[P.rowStart + m0 + rr${i}] = softcap(scr[base + lt]); }`,
  ];
  return `${store}
    workgroupBarrier();
    {
      let cb = n0 + sc + ${j * mma.n}u + lh * ${ep.cols}u;
      let base = sg * ${ep.copies * ep.half}u + ${
    hb * ep.half
  }u + lr * ${mma.n}u + lh * ${ep.cols}u;
      let vlim = i32(P.vRows) - i32(cb);
      ${lines.join("\n      ")}
    }${ep.copies === 1 ? "\n    workgroupBarrier();" : ""}`;
}

/** The final merge of each row's partial states (sgCols × invocations per row) in fixed order. */
function _finish(o: TcForwardKernelOptions): string {
  const t = o.tile, mma = tileMma(t), ep = tcEpilogueShape(t, o.sgSize);
  const k = o.sumZ ? 3 : 2, bm = tileRows(t);
  const writes = [...Array(t.mt).keys()].map((i) =>
    `{ let at = ((sr + ${i * mma.m}u + lr) * ${ep.parts}u + part) * ${k}u;
    scr[at] = st_m_${i}; scr[at + 1u] = st_s_${i};${o.sumZ ? ` scr[at + 2u] = st_z_${i};` : ""} }`
  );
  return `workgroupBarrier();
  {
    let part = (sg % ${t.sgCols}u) * ${ep.lanesPerRow}u + lh;
    ${writes.join("\n    ")}
  }
  workgroupBarrier();
  if (lid < ${bm}u) {
    let lr0 = m0 + lid;
    if (lr0 < P.rows) {
      var a = vec2<f32>(scr[lid * ${ep.parts * k}u], scr[lid * ${ep.parts * k}u + 1u]);${
    o.sumZ ? `\n      var zs = scr[lid * ${ep.parts * k}u + 2u];` : ""
  }
      for (var p = 1u; p < ${ep.parts}u; p++) {
        let at = (lid * ${ep.parts}u + p) * ${k}u;
        a = lse_merge(a, vec2<f32>(scr[at], scr[at + 1u]));${
    o.sumZ ? "\n        zs += scr[at + 2u];" : ""
  }
      }
      let o = (P.rowStart + lr0) * P.sTotal + P.splitBase + wg.x;
      ws[o] = a.x + log(a.y);${o.sumZ ? "\n      wsz[o] = zs;" : ""}
    }
  }`;
}

/**
 * WGSL of the tiles pass. Params: rows (E shard), rowStart, vRows (C shard), vStart, d, tiles,
 * splits, splitBase, sTotal, mapRow0, mapCol0, mapCols (those of the FMA forward's pass).
 * Bindings: params, e, c, targets, ws, [wsz], zt, [tmap], scales (E's at slot
 * {@link TC_FWD_SCALE_E}, C's at {@link TC_FWD_SCALE_C}).
 */
export function tcForwardWgsl(o: TcForwardKernelOptions): string {
  const t = o.tile, mma = tileMma(t), ep = tcEpilogueShape(t, o.sgSize);
  const bm = tileRows(t), bn = tileCols(t);
  const scaled = o.dtype !== "f16";
  const op = { dtype: o.dtype, contig: "k" as const, vec: o.vecLoads };
  const main: TcMainloopOptions = {
    tile: t,
    sgSize: o.sgSize,
    a: op,
    b: op,
    aBuf: "e",
    bBuf: "c",
    M: "P.rows",
    N: "P.vRows",
    K: "P.d",
    m0: "m0",
    n0: "n0",
    aOff: "0u",
    lda: "P.d",
    bOff: "0u",
    ldb: "P.d",
    aScale: scaled ? "sa" : undefined,
    bScale: scaled ? "sb" : undefined,
    mode: o.mode,
  };
  const rows = [...Array(t.mt).keys()];
  const init = rows.map((i) =>
    `let rr${i} = sr + ${i * mma.m}u + lr;
  var tg_${i} = ${NO_TARGET};
  if (m0 + rr${i} < P.rows) { tg_${i} = u32(targets[P.rowStart + m0 + rr${i}]) - P.vStart; }
  var st_m_${i} = NEG_INF; var st_s_${i} = 0.0;${o.sumZ ? ` var st_z_${i} = 0.0;` : ""}`
  );
  const rounds = tcAccs(t).map((a, r) => _round(o, main, a.i, a.j, r % ep.copies));
  // with one scratch matrix a subgroup the map's maximum goes through the scratch: no atomics
  const threads = tcThreads(t, o.sgSize);
  const scrWords = wgWords(Math.max(ep.scratch, bm * ep.parts * (o.sumZ ? 3 : 2)));
  if (t.singleScratch && scrWords < threads) {
    throw new RangeError(`tc forward: a scratch of ${scrWords} words for ${threads} invocations`);
  }
  const tileMap = t.singleScratch ? tileMapForwardWgsl16Scratch(threads) : tileMapForwardWgsl16;
  return `${tcEnables(o.mode)}
const NEG_INF: f32 = -3.0e38;
${softcapFn(o.softcap)}
${LSE_MERGE}
${tcForwardSignature(o).wgsl}
${o.vecLoads ? "" : dtypeHelpers([{ name: "e", dtype: o.dtype }, { name: "c", dtype: o.dtype }])}
${tcModuleDecls(main, ["scr"])}
var<workgroup> scr: array<f32, ${scrWords}>;
${o.tileMax ? tileMap.decls : ""}
@compute @workgroup_size(${threads})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>${
    tcEntryParams(o.mode)
  }) {
  ${tcLanePrelude(o.mode, o.sgSize)}
  ${tcSubgroupCoords(t)}
  // this invocation's row in a result matrix, which part of its columns, and their read order
  let lr = sl % ${mma.m}u;
  let lh = sl / ${mma.m}u;
  let rot = lr >> 1u;
  let m0 = wg.y * ${bm}u;
  let tBegin = (wg.x * P.tiles) / P.splits;
  let tEnd = ((wg.x + 1u) * P.tiles) / P.splits;
  let sa = scales[${TC_FWD_SCALE_E}];
  let sb = scales[${TC_FWD_SCALE_C}];
  let unscale = 1.0 / (${scaled ? "sa * sb" : "1.0"});
  ${init.join("\n  ")}
  ${
    tcAccs(t).map((a) =>
      o.mode === "emulated"
        ? ""
        : `var ${a.name}: ${`subgroup_matrix_result<f32, ${mma.n}, ${mma.m}>`};`
    ).join(" ")
  }
  for (var it = tBegin; it < tEnd; it++) {
    let n0 = it * ${bn}u;
    ${o.tileMax ? tileMap.init : ""}
    ${tcMainloop(main, false)}
    ${rounds.join("\n    ")}
    ${o.tileMax ? tileMap.store : ""}
  }
  ${_finish(o)}
}
`;
}
