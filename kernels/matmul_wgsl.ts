/**
 * WGSL of the GEMM core ({@link matmulWgsl}): the product kernel with its vector-load and
 * vector-store variants and split-K slices, and the split-K reduction
 * ({@link splitKReduceWgsl}). The launcher is kernels/matmul.ts.
 * @module
 */
import type { TensorDtype } from "../gpu/tensor.ts";
import {
  accSlots,
  gemmMainloop,
  gemmShared,
  gemmThreadCoords,
  type GemmTile,
  gemmTileOrigin,
  tileThreads,
  validateTile,
} from "./gemm_codegen.ts";
import { dtypeHelpers, enableDirectives, lossConstants, wgslStorageType } from "./wgsl_common.ts";
import { type Dtype16, wgslTo16 } from "./cast16.ts";
import { signature, u32s } from "../gpu/signature.ts";
import type { LceOptions } from "../core/options.ts";

/** Generator options of the product kernel. */
export interface MatmulKernelOptions {
  tile: GemmTile;
  aDtype: TensorDtype;
  bDtype: TensorDtype;
  /** Whether A is held transposed (K×M) / B transposed (K×N). */
  aTrans: boolean;
  bTrans: boolean;
  /** f32 (default), bf16 or f16. */
  outDtype?: TensorDtype;
  /** Declare A / B as 16-byte vectors and load them so (along their contiguous index). */
  vecA?: boolean;
  vecB?: boolean;
  /**
   * f32 output (and split-K partials) declared as vec4s and written 4 columns at a time (the
   * launcher picks it where N and the output offset are multiples of 4).
   */
  vecOut?: boolean;
  /**
   * A read from the output's binding (`outp`, at aOff) instead of a binding of its own: for a
   * product whose f32 A lies in the buffer it accumulates into (the fused backward's dense dE,
   * whose G and dE accumulator share dC's storage: a buffer may not be bound both read-only and
   * writable in one dispatch). Needs f32 A and output, A's loads and the stores both 16-byte
   * vectors (the binding's one element type) or both scalar.
   */
  aFromOut?: boolean;
  /**
   * A bound writable (`read_write`) though only read: for an A that lies in the buffer the output
   * is written to, in a byte range of its own (the fused backward's dense dC, whose G lies in dC's
   * storage below the rows it writes): two writable bindings of one buffer may share it where
   * their ranges do not overlap, a read-only one and a writable one never (gpu/bindings.ts).
   */
  aReadWrite?: boolean;
  /**
   * Write the loss's gradient G = w_m·(p − (1−β)[n + col0 = t_m] − β/|V|)·∂z/∂x of the product
   * z instead of z (p = exp(softcap(z) − lse_m); kernels/logit_grad.ts's arithmetic): the
   * product is logits E·C[chunk]ᵀ, rows tokens, columns vocabulary entries from `eCol`
   * (a uniform field with `eRow`, the first row's token). Binds `targets`, `lse` and `w`;
   * unsplit products (one K slice) that overwrite their output only.
   */
  gradEpilogue?: { opts: LceOptions; v: number };
}

/**
 * The product kernel's signature: M×N output from A (offset aOff, strides sAm, sAk) and B (bOff,
 * sBn, sBk) over depth K, into outp at cOff with row stride sCm (accumulate: add to it), scaled by
 * alpha; split-K slices of kPer, `first` as in {@link matmulWgsl}. A, B and the output (and the
 * partials `part`) take their element types from the variant.
 */
export function matmulSignature(o: MatmulKernelOptions) {
  const out = o.outDtype ?? "f32";
  const vo = o.vecOut === true && out === "f32";
  const ep = o.gradEpilogue !== undefined;
  return signature({
    params: {
      ...u32s("M N K aOff sAm sAk bOff sBn sBk cOff sCm accumulate"),
      alpha: "f32",
      ...u32s("kPer first"),
      ...(ep ? u32s("eRow eCol") : {}),
    } as Record<string, "u32" | "f32">,
    bindings: {
      a: {
        elem: wgslStorageType(o.aDtype, o.vecA),
        access: o.aReadWrite ? "read_write" : "read",
        when: !o.aFromOut,
      },
      b: { elem: wgslStorageType(o.bDtype, o.vecB), access: "read" },
      outp: {
        elem: out === "f32" ? (vo ? "vec4<f32>" : "f32") : "atomic<u32>",
        access: "read_write",
      },
      part: { elem: vo ? "vec4<f32>" : "f32", access: "read_write" },
      targets: { elem: "i32", access: "read", when: ep },
      lse: { elem: "f32", access: "read", when: ep },
      w: { elem: "f32", access: "read", when: ep },
    },
    layout: { pad: ep ? ["_p", "_q", "_r"] : ["_p"], breaks: [8] },
  });
}

/**
 * WGSL of {@link MatmulKernelOptions.gradEpilogue}: `ep(m, n, z)` and `ep4(m, nb, z4)`, the
 * gradient at product value z of row m, column n of the dispatch's region.
 */
function _gradEpilogueFns(o: { opts: LceOptions; v: number }): string {
  return `${lossConstants(o.opts, o.v)}
fn ep(m: u32, n: u32, x: f32) -> f32 {
  let row = P.eRow + m;
  let zc = softcap(x);
  let p = exp(zc - lse[row]);
  let on_target = select(0.0, 1.0 - BETA, i32(P.eCol + n) == targets[row]);
  return w[row] * (p - on_target - BETA / VOCAB) * softcap_grad(zc);
}
fn ep4(m: u32, nb: u32, x: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(ep(m, nb, x.x), ep(m, nb + 1u, x.y), ep(m, nb + 2u, x.z), ep(m, nb + 3u, x.w));
}
`;
}

/** The split-K reduction's signature (see {@link splitKReduceWgsl}). */
export function splitKReduceSignature(outDtype: TensorDtype) {
  return signature({
    params: { ...u32s("M N S cOff sCm accumulate"), alpha: "f32" },
    bindings: {
      part: { elem: "f32", access: "read" },
      outp: { elem: outDtype === "f32" ? "f32" : "atomic<u32>", access: "read_write" },
    },
    layout: { pad: ["_p0"], breaks: [6] },
  });
}

/**
 * Slots whose old output values an accumulating store reads before it writes any of them. The
 * stores go through the same binding as the reads and the compiler cannot prove them apart (the
 * row stride is a uniform), so one slot at a time would wait for a memory round trip per slot.
 */
const ACCUMULATE_BATCH = 4;

/**
 * The f32 store of every accumulator: out = alpha·acc, or with `accumulate` out = alpha·acc + out,
 * reading the old values {@link ACCUMULATE_BATCH} slots at a time ahead of their stores.
 */
function _storeF32(t: GemmTile, vec: boolean, ep = false): string {
  const slots = vec
    ? _vecSlots(t).map((s) => ({
      row: s.row,
      col: s.col,
      val: s.vec,
      idx: (m: string, n: string) => `(P.cOff + ${m} * P.sCm + ${n}) >> 2u`,
      zero: "vec4<f32>(0.0)",
    }))
    : accSlots(t).map((s) => ({
      row: s.row,
      col: s.col,
      val: s.expr,
      idx: (m: string, n: string) => `P.cOff + ${m} * P.sCm + ${n}`,
      zero: "0.0",
    }));
  const at = (s: (typeof slots)[number], j: number) =>
    `let sm${j} = m0 + ${s.row}; let sn${j} = n0 + ${s.col}; let ok${j} = sm${j} < P.M && sn${j} < P.N;
      let i${j} = ${s.idx(`sm${j}`, `sn${j}`)};`;
  const value = (
    v: string,
  ) => (!ep ? `P.alpha * ${v}` : `${vec ? "ep4" : "ep"}(m, n, P.alpha * ${v})`);
  const plain = slots.map((s) =>
    `{ let m = m0 + ${s.row}; let n = n0 + ${s.col};
    if (m < P.M && n < P.N) { outp[${s.idx("m", "n")}] = ${value(s.val)}; } }`
  );
  if (ep) return plain.join("\n  ");
  const lines = (group: typeof slots, f: (s: (typeof slots)[number], j: number) => string) =>
    group.map(f).join("\n      ");
  const batches: string[] = [];
  for (let b = 0; b < slots.length; b += ACCUMULATE_BATCH) {
    const group = slots.slice(b, b + ACCUMULATE_BATCH);
    batches.push(`{
      ${lines(group, at)}
      ${lines(group, (s, j) => `var o${j} = ${s.zero}; if (ok${j}) { o${j} = outp[i${j}]; }`)}
      ${
      lines(group, (s, j) =>
        `if (ok${j}) { var v = P.alpha * ${s.val}; v = v + o${j}; outp[i${j}] = v; }`)
    }
    }`);
  }
  return `if (P.accumulate == 0u) {
    ${plain.join("\n  ")}
  } else {
    ${batches.join("\n    ")}
  }`;
}

/** The first slot of every vec4 accumulator (4 adjacent columns of one row). */
function _vecSlots(t: GemmTile) {
  const seen = new Set<string>();
  return accSlots(t).filter((s) => !seen.has(s.vec) && seen.add(s.vec) !== undefined);
}

/**
 * WGSL of the 16-bit writes into an `outp` binding of atomic<u32> words: `put_pair(i, x, y)` a
 * whole word (elements i and i + 1, i even), `put_half(i, x)` one half of a word another thread
 * may share (see {@link _store16Fns}). Also the tensor-core product's 16-bit output's.
 */
export function store16Puts(dtype: Dtype16): string {
  return `${wgslTo16(dtype)}
fn put_half(i: u32, x: f32) {
  let sh = (i & 1u) * 16u;
  atomicAnd(&outp[i >> 1u], ~(0xffffu << sh));
  atomicOr(&outp[i >> 1u], to16(x) << sh);
}
fn put_pair(i: u32, x: f32, y: f32) {
  atomicStore(&outp[i >> 1u], to16(x) | (to16(y) << 16u));
}`;
}

/**
 * WGSL of a 16-bit store: `store4(m, nb, v)` writes 4 adjacent columns of one row rounded to
 * nearest even. Two 16-bit elements share a u32 word, and a word can straddle two threads' columns
 * (an odd row stride puts every other row on an odd element). A thread writes the words it owns
 * whole (atomicStore) and the half-words it shares with a neighbour with atomicAnd (clear its half)
 * then atomicOr (set it): the halves are disjoint bits, so the word ends right whatever the order,
 * without zeroed memory, and elements outside the output region keep their values.
 */
function _store16Fns(dtype: Dtype16): string {
  return `${store16Puts(dtype)}
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
`;
}

/**
 * WGSL of the product kernel ({@link matmulSignature}; a 16-bit output needs accumulate 0).
 *
 * Split-K in one dispatch: workgroup z takes K range [z·kPer, min(K, (z+1)·kPer)). With `first` = 1
 * slice 0 stores into the output as usual and slice z ≥ 1 its f32 partial product into `part` at
 * (z − 1)·M·N (dense M×N); with `first` = 0 every slice stores into `part` at z·M·N. Unsplit
 * products run one slice (kPer = K, first = 1) and never touch `part`.
 */
export function matmulWgsl(o: MatmulKernelOptions): string {
  validateTile(o.tile);
  const t = o.tile;
  const out = o.outDtype ?? "f32";
  if (o.aFromOut && (o.aDtype !== "f32" || out !== "f32" || !o.vecA !== !o.vecOut)) {
    throw new RangeError(
      "matmul: A from the output needs f32 A and output, both as vectors or both scalar",
    );
  }
  if (out !== "f32" && out !== "bf16" && out !== "f16") {
    throw new RangeError(`matmul: unsupported output dtype ${out}`);
  }
  const vo = o.vecOut === true && out === "f32";
  const ep = o.gradEpilogue !== undefined;
  let extra = ep ? _gradEpilogueFns(o.gradEpilogue!) : "", stores: string;
  if (out === "f32") {
    stores = _storeF32(t, vo, ep);
  } else {
    extra += _store16Fns(out);
    // the epilogue reads its row's LSE, target and weight: rows of the output only
    const store = (r: string, c: string, v: string) =>
      ep
        ? `{ let m = m0 + ${r}; if (m < P.M) { store4(m, n0 + ${c}, ep4(m, n0 + ${c}, P.alpha * ${v})); } }`
        : `store4(m0 + ${r}, n0 + ${c}, P.alpha * ${v});`;
    stores = _vecSlots(t).map((s) => store(s.row, s.col, s.vec)).join("\n  ");
  }
  const partStores = vo
    ? _vecSlots(t).map((s) =>
      `{ let m = m0 + ${s.row}; let n = n0 + ${s.col};
    if (m < P.M && n < P.N) { part[(pb + m * P.N + n) >> 2u] = ${s.vec}; } }`
    ).join("\n    ")
    : accSlots(t).map((s) =>
      `{ let m = m0 + ${s.row}; let n = n0 + ${s.col};
    if (m < P.M && n < P.N) { part[pb + m * P.N + n] = ${s.expr}; } }`
    ).join("\n    ");
  return `${enableDirectives([o.aDtype, o.bDtype])}
${matmulSignature(o).wgsl}
${
    dtypeHelpers([{ name: o.aFromOut ? "outp" : "a", dtype: o.aDtype, vec: o.vecA }, {
      name: "b",
      dtype: o.bDtype,
      vec: o.vecB,
    }])
  }${extra}
${
    matmulEntry(
      o,
      `if (wg.z == 0u && P.first == 1u) {
  ${stores}
  } else {
    let pb = (wg.z - P.first) * P.M * P.N;
    ${partStores}
  }`,
      { slices: true },
    )
  }
`;
}

/**
 * The compute entry point of the product kernels: workgroup staging, the unrolled main loop over
 * the tile of output (wg.y, wg.x) with operands `a`, `b` and uniform block `P` (fields M, N, K,
 * aOff, sAm, sAk, bOff, sBn, sBk), then `stores` (statements using m0, n0, tm, tn and the
 * accumulators).
 */
export function matmulEntry(
  o: MatmulKernelOptions,
  stores: string,
  opt: { slices?: boolean } = {},
): string {
  const t = o.tile;
  // with slices: this workgroup's K range starts at ks and is kn deep (see matmulWgsl)
  const sl = opt.slices === true;
  const origin = gemmTileOrigin(t);
  return `${gemmShared({ tile: t })}
@compute @workgroup_size(${tileThreads(t)})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  ${gemmThreadCoords(t)}
  let m0 = wg.${origin.m} * ${t.bm}u;
  let n0 = wg.${origin.n} * ${t.bn}u;
  ${sl ? "let ks = wg.z * P.kPer;\n  let kn = min(P.K - ks, P.kPer);" : ""}
  ${
    gemmMainloop({
      tile: t,
      a: { dtype: o.aDtype, contig: o.aTrans ? "mn" : "k", vec: o.vecA },
      b: { dtype: o.bDtype, contig: o.bTrans ? "mn" : "k", vec: o.vecB },
      aBuf: o.aFromOut ? "outp" : "a",
      bBuf: "b",
      M: "P.M",
      N: "P.N",
      K: sl ? "kn" : "P.K",
      m0: "m0",
      n0: "n0",
      aOff: sl ? "(P.aOff + ks * P.sAk)" : "P.aOff",
      sAm: "P.sAm",
      sAk: "P.sAk",
      bOff: sl ? "(P.bOff + ks * P.sBk)" : "P.bOff",
      sBn: "P.sBn",
      sBk: "P.sBk",
    })
  }
  ${stores}
}`;
}

/**
 * WGSL of the split-K reduction: out[m, n] = (out[m, n] +) alpha·Σ_{s<S} part[s][m][n], summed in
 * slice order. The partials are dense S×M×N; the output region has offset cOff and row stride sCm.
 * One thread per output element (4 adjacent columns for a 16-bit output, written like the
 * product's 16-bit store).
 */
export function splitKReduceWgsl(outDtype: TensorDtype): string {
  const wide = outDtype === "f32";
  const sig = splitKReduceSignature(outDtype);
  const head = `${sig.struct}
${sig.line("P")}
${sig.line("part")}`;
  const sum = `fn total(m: u32, n: u32) -> f32 {
  var v = 0.0;
  for (var s = 0u; s < P.S; s++) { v = v + part[(s * P.M + m) * P.N + n]; }
  return P.alpha * v;
}`;
  if (wide) {
    return `${head}
${sig.line("outp")}
${sum}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
  let i0 = gid.x + gid.y * nw.x * 256u;
  let n = i0 % P.N;
  let m = i0 / P.N;
  if (m >= P.M) { return; }
  let i = P.cOff + m * P.sCm + n;
  var v = total(m, n);
  if (P.accumulate != 0u) { v = v + outp[i]; }
  outp[i] = v;
}
`;
  }
  return `${head}
${sig.line("outp")}
${sum}
${_store16Fns(outDtype as Dtype16)}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
  let i0 = gid.x + gid.y * nw.x * 256u;
  let groups = (P.N + 3u) / 4u;
  let nb = (i0 % groups) * 4u;
  let m = i0 / groups;
  if (m >= P.M) { return; }
  var v = vec4<f32>(0.0);
  for (var c = 0u; c < 4u; c++) { if (nb + c < P.N) { v[c] = total(m, nb + c); } }
  store4(m, nb, v);
}
`;
}
