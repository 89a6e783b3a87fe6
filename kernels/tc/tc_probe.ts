/**
 * The semantics probe: tiny kernels that pin down, on the real adapter, what the subgroup-matrix
 * builtins do, against what the emulation (tc_mma.ts) assumes from the extension's definition:
 *
 * - `subgroup_matrix_left<T, K, M>` is M rows × K columns, `subgroup_matrix_right<T, N, K>` K × N,
 *   `subgroup_matrix_result<T, N, M>` M × N, and the product is C[r][c] = Σ_k A[r][k]·B[k][c];
 * - `subgroupMatrixLoad<T, row_major>(&arr, off, st)` reads element [r][c] at off + r·st + c,
 *   `col_major` at off + c·st + r; `subgroupMatrixStore` writes the same places;
 * - offsets taken from `subgroup_id` address each subgroup's own matrices;
 * - f16 conversions (scalar, vec2 and bitcast) as IEEE round-to-nearest-even.
 *
 * Each case stages known values (index-coded: element i holds i + 1, exact in f16) in workgroup
 * memory as f16 the way the staging does, loads with one layout, stride and offset, multiplies by
 * an identity, a permutation or small integers, stores into a poisoned f32 buffer, and compares
 * every element of the buffer with the emulation's expectation. A mismatch is reported with the
 * mapping it observed (which source element landed where). One line per case.
 * @module
 */
import type { GpuContext } from "../../gpu/context.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { download, fromHost, poison } from "../../gpu/tensor.ts";
import { roundArray } from "../../core/dtype.ts";
import { compileKernel, signature } from "../../gpu/signature.ts";
import { type MmaShape, tcSupport } from "./tc_tiles.ts";

type Layout = "row_major" | "col_major";

/** One probe case: the operands' staging and layouts, the store, and what A and B hold. */
export interface ProbeCase {
  name: string;
  mma: MmaShape;
  /** Layout, stride and offset (elements) of the left load, right load and store. */
  a: { layout: Layout; stride: number; off: number };
  b: { layout: Layout; stride: number; off: number };
  c: { layout: Layout; stride: number; off: number };
  /** What the matrices hold: index-coded, identity, a permutation, small integers. */
  aKind: "index" | "identity" | "perm" | "ints";
  bKind: "index" | "identity" | "ints";
  /** Subgroups: each loads A at off + sg·(M·a.stride) and stores at off + sg·(M·c.stride). */
  subgroups?: number;
  /** Factor applied with subgroupMatrixScalarMultiply before the store (default 1). */
  factor?: number;
  /** Informational: the extension allows it but Vulkan's alignment rule does not promise it. */
  info?: string;
}

/** The outcome of one case. */
export interface ProbeResult {
  name: string;
  ok: boolean;
  /** `ok`, or the mismatches and the observed mapping. */
  line: string;
}

/** The probe kernels' bindings: the values staged, and the poisoned output. */
export const PROBE_SIGNATURE = signature({
  bindings: { src: { elem: "f32", access: "read" }, dst: { elem: "f32", access: "read_write" } },
});

/** Elements of a matrix operand's staging array: enough for the layout's reach. */
function _extent(rows: number, cols: number, x: { layout: Layout; stride: number; off: number }) {
  return x.off +
    (x.layout === "row_major" ? (rows - 1) * x.stride + cols : (cols - 1) * x.stride + rows);
}

/** Element [r][c] of a matrix at (layout, stride, offset): the emulation's address. */
export function probeIndex(
  x: { layout: Layout; stride: number; off: number },
  r: number,
  c: number,
): number {
  return x.off + (x.layout === "row_major" ? r * x.stride + c : c * x.stride + r);
}

/** The matrix values of a kind (rows × cols, row-major), index-coded where asked. */
function _values(kind: ProbeCase["aKind"], rows: number, cols: number, seed: number): number[][] {
  const m: number[][] = [];
  for (let r = 0; r < rows; r++) {
    m.push([]);
    for (let c = 0; c < cols; c++) {
      let v = 0;
      if (kind === "identity") v = r === c ? 1 : 0;
      else if (kind === "perm") v = c === (r * 5 + 3) % cols ? 1 : 0;
      else if (kind === "ints") v = ((r * 7 + c * 3 + seed) % 5) - 2;
      m[r].push(v);
    }
  }
  return m;
}

/** Elements of a case's left and right staging arrays. */
function _staging(p: ProbeCase): { nl: number; nr: number } {
  const { m, n, k } = p.mma;
  return {
    nl: _extent(m, k, p.a) + ((p.subgroups ?? 1) - 1) * m * p.a.stride,
    nr: _extent(k, n, p.b),
  };
}

/** WGSL of a case for subgroups of `sgSize` (its bindings: {@link PROBE_SIGNATURE}). */
export function probeWgsl(p: ProbeCase, sgSize: number): string {
  const { m, n, k } = p.mma, sgs = p.subgroups ?? 1, threads = sgs * sgSize;
  const { nl, nr } = _staging(p);
  return `enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;
${PROBE_SIGNATURE.wgsl}
var<workgroup> wl: array<f16, ${nl}>;
var<workgroup> wr: array<f16, ${nr}>;
@compute @workgroup_size(${threads})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg: u32) {
  for (var i = lid; i < ${nl}u; i += ${threads}u) { wl[i] = f16(src[i]); }
  for (var i = lid; i < ${nr}u; i += ${threads}u) { wr[i] = f16(src[${nl}u + i]); }
  workgroupBarrier();
  let a = subgroupMatrixLoad<subgroup_matrix_left<f16, ${k}, ${m}>, ${p.a.layout}>(&wl, ${p.a.off}u + sg * ${
    m * p.a.stride
  }u, ${p.a.stride}u);
  let b = subgroupMatrixLoad<subgroup_matrix_right<f16, ${n}, ${k}>, ${p.b.layout}>(&wr, ${p.b.off}u, ${p.b.stride}u);
  var c = subgroup_matrix_result<f32, ${n}, ${m}>();
  c = subgroupMatrixMultiplyAccumulate(a, b, c);
  subgroupMatrixStore<${p.c.layout}>(&dst, ${p.c.off}u + sg * ${
    m * p.c.stride
  }u, subgroupMatrixScalarMultiply(c, ${(p.factor ?? 1).toFixed(1)}), ${p.c.stride}u);
}
`;
}

/** Runs one case on the context (native subgroup matrices) and compares every output element. */
export async function runProbeCase(ctx: GpuContext, p: ProbeCase): Promise<ProbeResult> {
  const { m, n, k } = p.mma, sgs = p.subgroups ?? 1;
  const sgSize = tcSupport(ctx).sgSize;
  // staging of A (every subgroup's block) and of B, as f32 values exact in f16
  const { nl, nr } = _staging(p);
  const src = new Float32Array(nl + nr);
  for (let i = 0; i < src.length; i++) src[i] = i < nl ? i + 1 : i - nl + 1;
  const A: number[][][] = [], B = _values(p.bKind, k, n, 1);
  for (let s = 0; s < sgs; s++) {
    const blk = { ...p.a, off: p.a.off + s * m * p.a.stride };
    const vals = _values(p.aKind, m, k, s);
    A.push(vals);
    for (let r = 0; r < m; r++) {
      for (let c = 0; c < k; c++) {
        const at = probeIndex(blk, r, c);
        if (p.aKind === "index") vals[r][c] = src[at];
        else src[at] = vals[r][c];
      }
    }
  }
  for (let r = 0; r < k; r++) {
    for (let c = 0; c < n; c++) {
      const at = nl + probeIndex(p.b, r, c);
      if (p.bKind === "index") B[r][c] = src[at];
      else src[at] = B[r][c];
    }
  }
  // the emulation's expectation: C = factor·A·B stored at the store's places, NaN elsewhere
  const nd = _extent(m, n, p.c) + (sgs - 1) * m * p.c.stride;
  const want = new Float32Array(nd).fill(NaN);
  for (let s = 0; s < sgs; s++) {
    for (let r = 0; r < m; r++) {
      for (let c = 0; c < n; c++) {
        let v = 0;
        for (let q = 0; q < k; q++) v += A[s][r][q] * B[q][c];
        want[probeIndex({ ...p.c, off: p.c.off + s * m * p.c.stride }, r, c)] = (p.factor ?? 1) * v;
      }
    }
  }
  const kernel = await compileKernel(
    ctx,
    PROBE_SIGNATURE,
    probeWgsl(p, sgSize),
    `tc probe ${p.name}`,
  );
  const srcT = fromHost(ctx, {
    dtype: "f32",
    rows: 1,
    cols: src.length,
    role: "input",
    label: "probe src",
  }, src);
  // at least a matrix's footprint (tc_bindings.ts)
  const dstT = fromHost(ctx, {
    dtype: "f32",
    rows: 1,
    cols: Math.max(nd, 256),
    role: "output",
    label: "probe dst",
  }, new Float32Array(Math.max(nd, 256)));
  poison(ctx, dstT);
  try {
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      rec.pass("tc probe", (pass) =>
        pass.dispatch(
          kernel.pipeline,
          kernel.bind(rec, undefined, { src: srcT.shards[0].buffer, dst: dstT.shards[0].buffer }),
          1,
        ));
      await rec.finish();
    });
    const got = (await download(ctx, dstT)).subarray(0, nd);
    return _verdict(p, got, want, src);
  } finally {
    srcT.destroy();
    dstT.destroy();
  }
}

/** The case's line: ok, or the mismatches with the source elements that landed there. */
function _verdict(
  p: ProbeCase,
  got: Float32Array,
  want: Float32Array,
  src: Float32Array,
): ProbeResult {
  const bad: number[] = [];
  for (let i = 0; i < want.length; i++) {
    const same = Number.isNaN(want[i]) ? Number.isNaN(got[i]) : got[i] === want[i];
    if (!same) bad.push(i);
  }
  const tag = p.info ? ` (${p.info})` : "";
  if (bad.length === 0) return { name: p.name, ok: true, line: `ok${tag}` };
  const where = (i: number) => {
    const c = p.c, rel = i - c.off;
    const [r, col] = c.layout === "row_major"
      ? [Math.floor(rel / c.stride), rel % c.stride]
      : [rel % c.stride, Math.floor(rel / c.stride)];
    const from = p.aKind === "index" || p.bKind === "index"
      ? ` = source element ${got[i] - 1}${got[i] - 1 >= 0 && got[i] - 1 < src.length ? "" : "?"}` +
        ` of ${p.aKind === "index" ? "A's" : "B's"} staging`
      : "";
    return `[${r}][${col}] got ${got[i]}${from}, want ${want[i]}`;
  };
  const transposed = bad.every((i) => {
    const c = p.c, rel = i - c.off;
    if (c.layout !== "row_major" || rel < 0) return false;
    const r = Math.floor(rel / c.stride), col = rel % c.stride;
    return got[i] === want[c.off + col * c.stride + r];
  });
  return {
    name: p.name,
    ok: false,
    line: `MISMATCH ${bad.length} of ${want.length} elements${tag}${
      transposed ? "; the result is the expected one transposed" : ""
    }: ${bad.slice(0, 4).map(where).join("; ")}`,
  };
}

/** The cases for one MMA shape (the product's 16×16×16, and the other f16 → f32 shapes offered). */
export function probeCases(mma: MmaShape): ProbeCase[] {
  const { m, n, k } = mma, tag = `${m}x${n}x${k}`;
  const L = (layout: Layout, stride: number, off = 0) => ({ layout, stride, off });
  const rowC = L("row_major", n);
  const out: ProbeCase[] = [];
  for (const layout of ["row_major", "col_major"] as const) {
    const minA = layout === "row_major" ? k : m, minB = layout === "row_major" ? n : k;
    for (const [st, off] of [[minA, 0], [minA + 8, 0], [minA + 24, 8 * (minA + 24)]]) {
      out.push({
        name: `${tag} left ${layout} stride ${st} offset ${off}`,
        mma,
        a: L(layout, st, off),
        b: L("row_major", n),
        c: rowC,
        aKind: "index",
        bKind: "identity",
      });
    }
    for (const [st, off] of [[minB, 0], [minB + 8, 0], [minB + 24, 16]]) {
      out.push({
        name: `${tag} right ${layout} stride ${st} offset ${off}`,
        mma,
        a: L("row_major", k),
        b: L(layout, st, off),
        c: rowC,
        aKind: "identity",
        bKind: "index",
      });
    }
    const minC = layout === "row_major" ? n : m;
    for (const [st, off] of [[minC, 0], [minC + 4, 4]]) {
      out.push({
        name: `${tag} store ${layout} stride ${st} offset ${off}`,
        mma,
        a: L("row_major", k),
        b: L("row_major", n),
        c: L(layout, st, off),
        aKind: "ints",
        bKind: "ints",
      });
    }
  }
  out.push({
    name: `${tag} permutation·B (the left operand's rows)`,
    mma,
    a: L("row_major", k),
    b: L("row_major", n),
    c: rowC,
    aKind: "perm",
    bKind: "index",
  });
  out.push({
    name: `${tag} small integers, scalar multiply 0.5`,
    mma,
    a: L("col_major", m + 8),
    b: L("col_major", k + 8),
    c: rowC,
    aKind: "ints",
    bKind: "ints",
    factor: 0.5,
  });
  out.push({
    name: `${tag} 4 subgroups, offsets from subgroup_id`,
    mma,
    a: L("row_major", k + 8),
    b: L("row_major", n),
    c: rowC,
    aKind: "index",
    bKind: "identity",
    subgroups: 4,
  });
  out.push({
    name: `${tag} store stride ${n + 1} offset 1 (rows not 16-byte aligned)`,
    mma,
    a: L("row_major", k),
    b: L("row_major", n),
    c: L("row_major", n + 1, 1),
    aKind: "ints",
    bKind: "ints",
    info: "informational: Vulkan asks 16-byte aligned rows; the product avoids it",
  });
  return out;
}

/** WGSL of the conversion probe over `n` values (even): f16(x), vec2<f16>(x), a bitcast. */
export function probeConversionWgsl(n: number): string {
  return `enable f16;
${PROBE_SIGNATURE.wgsl}
var<workgroup> w: array<f16, ${3 * n}>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32) {
  for (var i = lid; i < ${n / 2}u; i += 64u) {
    let x = vec2<f32>(src[2u * i], src[2u * i + 1u]);
    w[2u * i] = f16(x.x); w[2u * i + 1u] = f16(x.y);
    let h = vec2<f16>(x); w[${n}u + 2u * i] = h.x; w[${n}u + 2u * i + 1u] = h.y;
    let b = bitcast<vec2<f16>>(pack2x16float(x)); w[${2 * n}u + 2u * i] = b.x; w[${
    2 * n
  }u + 2u * i + 1u] = b.y;
  }
  workgroupBarrier();
  for (var i = lid; i < ${3 * n}u; i += 64u) { dst[i] = f32(w[i]); }
}
`;
}

/** f16 conversions as the staging does them, against round-to-nearest-even on the host. */
export async function probeConversions(ctx: GpuContext): Promise<ProbeResult> {
  // bf16 values across f16's range, its subnormals, ties and values past 65504
  const xs: number[] = [];
  for (let e = -26; e <= 15; e++) {
    for (const f of [1, 1.00390625, 1.5, 1.99951171875, 1.0009765625 + 2 ** -11]) {
      xs.push(f * 2 ** e, -f * 2 ** e);
    }
  }
  const n = xs.length + (xs.length % 2);
  const src = new Float32Array(n);
  src.set(xs);
  const code = probeConversionWgsl(n);
  const kernel = await compileKernel(ctx, PROBE_SIGNATURE, code, "tc probe f16 conversions");
  const srcT = fromHost(
    ctx,
    { dtype: "f32", rows: 1, cols: n, role: "input", label: "probe src" },
    src,
  );
  const dstT = fromHost(
    ctx,
    { dtype: "f32", rows: 1, cols: 3 * n, role: "output", label: "dst" },
    new Float32Array(3 * n),
  );
  poison(ctx, dstT);
  try {
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      rec.pass("tc probe", (pass) =>
        pass.dispatch(
          kernel.pipeline,
          kernel.bind(rec, undefined, { src: srcT.shards[0].buffer, dst: dstT.shards[0].buffer }),
          1,
        ));
      await rec.finish();
    });
    const got = await download(ctx, dstT);
    const want = roundArray(src, "f16");
    const names = ["f16(x)", "vec2<f16>(x)", "bitcast(pack2x16float)"];
    const bad: string[] = [];
    let flushed = 0;
    for (let v = 0; v < 3; v++) {
      for (let i = 0; i < n; i++) {
        const g = got[v * n + i];
        // WGSL lets an implementation flush f16 subnormals to zero: counted, not a mismatch
        if (g === 0 && want[i] !== 0 && Math.abs(want[i]) < 2 ** -14) flushed++;
        else if (g !== want[i]) bad.push(`${names[v]} of ${src[i]} gave ${g}, want ${want[i]}`);
      }
    }
    const note = flushed > 0
      ? ` (${flushed} f16 subnormals flushed to zero: bf16 values below 2⁻¹⁴ of the scaled range are lost)`
      : "";
    return {
      name: "f16 conversions (scalar, vec2, bitcast)",
      ok: bad.length === 0,
      line: bad.length === 0
        ? `ok${note}`
        : `MISMATCH ${bad.length} of ${3 * n}${note}: ${bad.slice(0, 4).join("; ")}`,
    };
  } finally {
    srcT.destroy();
    dstT.destroy();
  }
}

/**
 * Every probe case for the adapter: the conversions, then each f16 → f32 MMA shape it offers.
 * `print` gets one line per case as it finishes. Informational cases do not fail the probe.
 */
export async function runProbe(
  ctx: GpuContext,
  print: (line: string) => void = () => {},
): Promise<{ results: ProbeResult[]; ok: boolean }> {
  const results: ProbeResult[] = [];
  const emit = (r: ProbeResult) => {
    results.push(r);
    print(`probe ${r.name.padEnd(58)} ${r.line}`);
  };
  emit(await probeConversions(ctx));
  const shapes = ctx.report.subgroupMatrixConfigs
    .filter((c) => c.componentType === "f16" && c.resultComponentType === "f32")
    .map((c) => ({ m: c.M, n: c.N, k: c.K }));
  for (const mma of shapes) {
    for (const p of probeCases(mma)) {
      try {
        const r = await runProbeCase(ctx, p);
        emit(p.info ? { ...r, ok: true } : r);
      } catch (e) {
        emit({ name: p.name, ok: false, line: `ERROR ${(e as Error).message.split("\n")[0]}` });
      }
    }
  }
  return { results, ok: results.every((r) => r.ok) };
}
