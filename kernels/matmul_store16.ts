/**
 * WGSL of the matrix product out = alpha·A·Bᵀ written in a packed 16-bit dtype (bf16 or f16): the
 * main loop of gemm_codegen.ts, then a store that rounds each f32 accumulator to nearest even.
 *
 * Two 16-bit elements share a u32 word, and a word can straddle two threads' columns (an odd row
 * stride puts every other row on an odd element, and a row's first element shares its word with
 * the previous row's last one). Each thread owns 4 adjacent columns of a row: it writes the words
 * it owns whole (atomicStore), and the half-words it shares with a neighbour with atomicAnd (clear
 * its half) then atomicOr (set it). The two halves are disjoint bits, so the word ends right
 * whatever the order, without zeroed memory, and elements outside the output region keep their
 * values. Params are those of kernels/matmul.ts (`accumulate` must be 0).
 * @module
 */
import type { TensorDtype } from "../gpu/tensor.ts";
import {
  accSlots,
  dtypeHelpers,
  enableDirectives,
  type GemmTile,
  validateTile,
  wgslStorageType,
} from "./gemm_codegen.ts";
import { type Dtype16, wgslTo16 } from "./cast16.ts";
import { matmulEntry } from "./matmul.ts";

/** Generator options of the 16-bit-output product. */
export interface MatmulStore16Options {
  tile: GemmTile;
  aDtype: TensorDtype;
  bDtype: TensorDtype;
  /** Whether A is held transposed (K×M) / B transposed (K×N). */
  aTrans: boolean;
  bTrans: boolean;
  /** Output dtype. */
  outDtype: Dtype16;
}

/** WGSL of the kernel. Bindings: params, a, b, out (packed u32 words). */
export function matmulStore16Wgsl(o: MatmulStore16Options): string {
  validateTile(o.tile);
  const t = o.tile;
  // One store4 call per vec4 accumulator: 4 adjacent columns of one row, starting at an even one.
  const seen = new Set<string>();
  const stores = accSlots(t).filter((s) => {
    if (seen.has(s.vec)) return false;
    seen.add(s.vec);
    return true;
  }).map((s) => `store4(m0 + ${s.row}, n0 + ${s.col}, P.alpha * ${s.vec});`).join("\n  ");
  return `${enableDirectives([o.aDtype, o.bDtype])}
struct Params { M: u32, N: u32, K: u32, aOff: u32, sAm: u32, sAk: u32, bOff: u32, sBn: u32,
  sBk: u32, cOff: u32, sCm: u32, accumulate: u32, alpha: f32, _p0: u32, _p1: u32, _p2: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<${wgslStorageType(o.aDtype)}>;
@group(0) @binding(2) var<storage, read> b: array<${wgslStorageType(o.bDtype)}>;
@group(0) @binding(3) var<storage, read_write> outp: array<atomic<u32>>;
${dtypeHelpers([{ name: "a", dtype: o.aDtype }, { name: "b", dtype: o.bDtype }])}
${wgslTo16(o.outDtype)}
fn put_half(i: u32, x: f32) {
  let sh = (i & 1u) * 16u;
  atomicAnd(&outp[i >> 1u], ~(0xffffu << sh));
  atomicOr(&outp[i >> 1u], to16(x) << sh);
}
fn put_pair(i: u32, x: f32, y: f32) {
  atomicStore(&outp[i >> 1u], to16(x) | (to16(y) << 16u));
}
// Columns nb..nb+3 of row m (nb even); the first element index decides which words are shared.
fn store4(m: u32, nb: u32, v: vec4<f32>) {
  if (m >= P.M || nb >= P.N) { return; }
  let cnt = min(P.N - nb, 4u);
  let base = P.cOff + m * P.sCm + nb;
  var c = 0u;
  if ((base & 1u) == 1u) {
    put_half(base, v[0]);
    c = 1u;
  }
  loop {
    if (c + 1u >= cnt) { break; }
    put_pair(base + c, v[c], v[c + 1u]);
    c = c + 2u;
  }
  if (c < cnt) { put_half(base + c, v[c]); }
}
${matmulEntry(o, stores)}
`;
}
