/**
 * The products the GEMM bench (scripts/bench_gemm.ts) times at one shape: every product a method
 * runs on the GEMM core, by name.
 *
 * - `logits`: E·Cᵀ → f32 (baseline, Liger chunks), `logits16`: → the input dtype (compiled,
 *   chunked);
 * - `dE`: G·C with G f32 n×|V| (baseline), `dC`: Gᵀ·E (baseline), `dE16`/`dC16` with G in the
 *   input dtype (compiled, chunked);
 * - `ligerDE`: one Liger chunk's G·C (c×d output, K = |V|: split-K), `ligerDC`: one chunk's
 *   dC += Gᵀ·E[chunk] (K = c);
 * - `dEt`, `dE16t`, `ligerDEt`: the same dE products formed transposed, dEᵀ = Cᵀ·Gᵀ (d×n output:
 *   C read as a transposed A, G as an untransposed B);
 * - `chunkDE16`, `chunkDE16t`: the chunked method's dE of one chunk (n/8 rows, G in the input
 *   dtype), as G·C and transposed;
 * - `denseDE`, `denseDC`: the no-filter rows' products of one vocabulary chunk (f32 G of n rows
 *   and denseChunkRows columns, methods/_dense_backward.ts): dE += G·C[chunk] and
 *   dC[chunk] = Gᵀ·E.
 * @module
 */
import type { DeviceTensor, TensorDtype } from "../gpu/tensor.ts";
import { type MatmulOperand, rowView } from "../kernels/matmul.ts";
import { ligerChunkSize } from "../methods/liger.ts";
import { denseChunkRows } from "../methods/_dense_backward.ts";

/** The products, by name (see the module doc). */
export const GEMM_CASES = [
  "logits",
  "logits16",
  "dE",
  "dC",
  "dE16",
  "dC16",
  "ligerDE",
  "ligerDC",
  "dEt",
  "dE16t",
  "ligerDEt",
  "chunkDE16",
  "chunkDE16t",
  "denseDE",
  "denseDC",
] as const;

/** A product's name. */
export type GemmCaseName = (typeof GEMM_CASES)[number];

/** One product to time: its operands, output and flops. */
export interface GemmCase {
  a: MatmulOperand;
  b: MatmulOperand;
  aDtype: TensorDtype;
  bDtype: TensorDtype;
  /** Makes the output (the caller destroys it). */
  out: () => DeviceTensor;
  outDtype: TensorDtype;
  accumulate?: boolean;
  /** 2·M·N·K. */
  flop: number;
}

/** Makes a workspace tensor. */
export type MakeTensor = (
  rows: number,
  cols: number,
  dt: TensorDtype,
  label: string,
) => DeviceTensor;

type _Source = "e" | "c" | "g32" | "g16" | "gc";
/** An operand: its source tensor, held transposed, its first `rows` rows only. */
type _Op = [src: _Source, trans: boolean, rows?: number];
/** A product: A, B, the output (rows, cols, f32 or the input dtype, label), accumulate. */
type _Spec = [a: _Op, b: _Op, out: [number, number, "f32" | "input", string], accumulate?: boolean];

/** The products of {@link GEMM_CASES} on E and C (the gradients G made on first use). */
export function gemmCases(
  mk: MakeTensor,
  x: { e: DeviceTensor; c: DeviceTensor; n: number; v: number; d: number; dtype: TensorDtype },
): Record<GemmCaseName, () => GemmCase> {
  const { n, v, d, dtype } = x;
  const chunk = ligerChunkSize(n, v, d);
  // the chunked method's chunk: 8 chunks of the tokens (methods/chunked.ts)
  const chunkRows = Math.ceil(n / 8);
  const vc = denseChunkRows(n, v);
  const made = new Map<_Source, DeviceTensor>([["e", x.e], ["c", x.c]]);
  const make: Record<_Source, () => DeviceTensor> = {
    e: () => x.e,
    c: () => x.c,
    g32: () => mk(n, v, "f32", "G f32"),
    g16: () => mk(n, v, dtype, "G 16"),
    gc: () => mk(n, vc, "f32", "G f32 chunk"),
  };
  const tensor = (s: _Source) => made.get(s) ?? made.set(s, make[s]()).get(s)!;
  const specs: Record<GemmCaseName, _Spec> = {
    logits: [["e", false], ["c", false], [n, v, "f32", "logits"]],
    logits16: [["e", false], ["c", false], [n, v, "input", "logits16"]],
    dE: [["g32", false], ["c", true], [n, d, "f32", "dE"]],
    dC: [["g32", true], ["e", true], [v, d, "f32", "dC"]],
    dE16: [["g16", false], ["c", true], [n, d, "f32", "dE"]],
    dC16: [["g16", true], ["e", true], [v, d, "f32", "dC"]],
    ligerDE: [["g32", false, chunk], ["c", true], [chunk, d, "f32", "dE chunk"]],
    ligerDC: [["g32", true, chunk], ["e", true, chunk], [v, d, "f32", "dC"], true],
    dEt: [["c", true], ["g32", false], [d, n, "f32", "dEᵀ"]],
    dE16t: [["c", true], ["g16", false], [d, n, "f32", "dEᵀ"]],
    ligerDEt: [["c", true], ["g32", false, chunk], [d, chunk, "f32", "dEᵀ chunk"]],
    chunkDE16: [["g16", false, chunkRows], ["c", true], [chunkRows, d, "f32", "dE chunk"]],
    chunkDE16t: [["c", true], ["g16", false, chunkRows], [d, chunkRows, "f32", "dEᵀ chunk"]],
    denseDE: [["gc", false], ["c", true, vc], [n, d, "f32", "dE"], true],
    denseDC: [["gc", true], ["e", true], [vc, d, "f32", "dC chunk"]],
  };
  const operand = ([s, trans, rows]: _Op): MatmulOperand =>
    rows === undefined
      ? { tensor: tensor(s), trans }
      : { view: rowView(tensor(s), 0, rows), trans };
  const build = ([a, b, [rows, cols, outDt, label], accumulate]: _Spec): GemmCase => {
    const A = operand(a), B = operand(b);
    const at = A.tensor ?? A.view!.tensor, bt = B.tensor ?? B.view!.tensor;
    const depth = a[1] ? (a[2] ?? at.rows) : at.cols;
    const outDtype = outDt === "f32" ? "f32" : dtype;
    return {
      a: A,
      b: B,
      aDtype: at.dtype,
      bDtype: bt.dtype,
      out: () => mk(rows, cols, outDtype, label),
      outDtype,
      accumulate,
      flop: 2 * rows * cols * depth,
    };
  };
  return Object.fromEntries(
    GEMM_CASES.map((name) => [name, () => build(specs[name])]),
  ) as Record<GemmCaseName, () => GemmCase>;
}
