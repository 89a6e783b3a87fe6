/**
 * The reference of the correctness check that table3 and the sweep run before trusting a time: a
 * deliberately simple GPU kernel (kernels/reference_check_wgsl.ts: no tiling tricks, compensated
 * sums) that computes, for inputs already on the GPU,
 *
 * - every row's log-sum-exp over the full vocabulary, its target logit and Σ_v z (one pass over
 *   N×|V|×D, merged over vocabulary chunks in float64 on the host): hence the loss of every token;
 * - for a sample of tokens, Σ_v p·σ'·C_v, Σ_v σ'·C_v and σ'_t·C_t (S_t×|V|×D): hence their dE
 *   rows;
 * - for a sample of vocabulary entries, the same sums over every token weighted by its upstream
 *   gradient (N×S_v×D): hence their dC rows, with the contribution of every token.
 *
 * Everything it returns is independent of β and of the mean/sum choice ({@link expectedSamples}
 * combines it in float64 for a given β), so one reference serves every method and β section of a
 * table. σ' is the softcap's derivative (1 without one).
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { DeviceTensor, download, fromHost, readRows } from "../gpu/tensor.ts";
import { check } from "../core/errors.ts";
import { type Dtype, type LceOptions, resolveOptions } from "../core/options.ts";
import {
  REF_ROWS,
  REF_WG,
  referenceRowsReduceWgsl,
  referenceRowsWgsl,
  referenceSamplesWgsl,
  type SampleSide,
} from "./reference_check_wgsl.ts";

/** Vocabulary entries per dispatch of the row pass (one thread per entry, 4 rows at a time). */
export const REF_VOCAB_CHUNK = 16384;
/** Rows of the other side one workgroup of the sample pass sums over. */
export const REF_SAMPLE_CHUNK = 16384;

/** The inputs on the GPU (those of a method: E n×d, C v×d in one dtype, targets n×1 i32). */
export interface ReferenceInputs {
  e: DeviceTensor;
  c: DeviceTensor;
  targets: DeviceTensor;
}

/** What to compute. */
export interface ReferenceRequest {
  /** Sampled tokens (rows of E) whose dE rows are wanted. */
  tokens: ArrayLike<number>;
  /** Sampled vocabulary entries (rows of C) whose dC rows are wanted. */
  vocab: ArrayLike<number>;
  /** The upstream gradient: one value (mean, sum) or n (reduction none). */
  gradOut: ArrayLike<number>;
  softcap?: number;
  ignoreIndex: number;
  /** Chunk sizes (tests use small ones to cover the merges); default the constants above. */
  chunks?: { vocab?: number; samples?: number };
}

/** The β-independent pieces of the loss and of the sampled gradient rows, in float64. */
export interface ReferenceSamples {
  n: number;
  v: number;
  d: number;
  /** The targets (read back once: they pick the samples and the rows' weights). */
  targets: Int32Array;
  /** Per token: log Σ_v exp(z_nv), z at the target (0 for an ignored row), Σ_v z_nv. */
  lse: Float64Array;
  targetLogit: Float64Array;
  logitSum: Float64Array;
  tokens: Int32Array;
  vocab: Int32Array;
  /** The upstream gradient the vocabulary side was weighted with. */
  gradOut: Float64Array;
  softcap?: number;
  ignoreIndex: number;
  /** Sampled tokens, S_t×d each: Σ_v p·σ'·C_v, Σ_v σ'·C_v, σ'·C at the target. */
  tokenP: Float64Array;
  tokenS: Float64Array;
  tokenT: Float64Array;
  /**
   * Sampled vocabulary entries v, S_v×d each, with ω_n the upstream gradient of token n (0 when
   * ignored): Σ_n ω_n·p_nv·σ'·E_n, Σ_n ω_n·σ'·E_n, Σ_{n: t_n = v} ω_n·σ'·E_n.
   */
  vocabP: Float64Array;
  vocabS: Float64Array;
  vocabT: Float64Array;
  /** Wall time of the whole computation, ms. */
  ms: number;
}

/** Runs the reference kernels on `x` (see the module doc). Frees everything it allocates. */
export async function referenceSamples(
  ctx: GpuContext,
  x: ReferenceInputs,
  r: ReferenceRequest,
): Promise<ReferenceSamples> {
  const t0 = performance.now();
  const n = x.e.rows, v = x.c.rows, d = x.e.cols;
  const dtype = x.e.dtype as Dtype;
  check(
    x.c.cols === d && x.c.dtype === dtype && (dtype === "f32" || dtype === "bf16" ||
      dtype === "f16") &&
      x.targets.rows === n && x.targets.dtype === "i32",
    `reference check: E ${n}×${d} ${x.e.dtype}, C ${v}×${x.c.cols} ${x.c.dtype}, targets ` +
      `${x.targets.rows} ${x.targets.dtype} do not make a problem`,
  );
  const opts = resolveOptions({ beta: 0, softcap: r.softcap, ignoreIndex: r.ignoreIndex });
  const targets = Int32Array.from(await download(ctx, x.targets));
  const grad = Float64Array.from(r.gradOut);
  check(grad.length === 1 || grad.length === n, `upstream gradient of ${grad.length} values`);
  const tokens = Int32Array.from(r.tokens), vocab = Int32Array.from(r.vocab);
  for (const t of tokens) check(t >= 0 && t < n, `sampled token ${t} outside [0, ${n})`);
  for (const j of vocab) check(j >= 0 && j < v, `sampled vocabulary entry ${j} outside [0, ${v})`);
  const weights = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    weights[i] = targets[i] === r.ignoreIndex ? 0 : grad.length === 1 ? grad[0] : grad[i];
  }
  const owned: { destroy(): void }[] = [];
  const keep = <T extends { destroy(): void }>(t: T) => (owned.push(t), t);
  try {
    return await ctx.scoped(async () => {
      const rows = await _rowPass(ctx, x, { dtype, opts, chunk: r.chunks?.vocab }, keep);
      const base = { dtype, opts, d, chunk: r.chunks?.samples ?? REF_SAMPLE_CHUNK };
      const up = (a: Float32Array | Int32Array, label: string) =>
        keep(fromHost(ctx, {
          dtype: a instanceof Int32Array ? "i32" : "f32",
          rows: Math.max(1, a.length),
          cols: 1,
          role: "workspace",
          label,
        }, a.length > 0 ? a : a instanceof Int32Array ? new Int32Array(1) : new Float32Array(1)));
      const tokenSide = await _samplePass(ctx, { ...base, side: "token" }, keep, {
        xs: up(await _rowsOf(ctx, x.e, tokens), "reference token rows"),
        y: x.c,
        count: tokens.length,
        lse: up(Float32Array.from(tokens, (t) => rows.lse[t]), "reference token lse"),
        wts: up(new Float32Array(1), "reference unused"),
        tg: up(Int32Array.from(tokens, (t) => targets[t]), "reference token targets"),
        xid: up(new Int32Array(1), "reference unused"),
      });
      const vocabSide = await _samplePass(ctx, { ...base, side: "vocab" }, keep, {
        xs: up(await _rowsOf(ctx, x.c, vocab), "reference vocabulary rows"),
        y: x.e,
        count: vocab.length,
        lse: up(Float32Array.from(rows.lse), "reference lse"),
        wts: up(weights, "reference weights"),
        tg: x.targets,
        xid: up(vocab, "reference vocabulary indices"),
      });
      return {
        n,
        v,
        d,
        targets,
        ...rows,
        tokens,
        vocab,
        gradOut: grad,
        softcap: r.softcap,
        ignoreIndex: r.ignoreIndex,
        tokenP: tokenSide[0],
        tokenS: tokenSide[1],
        tokenT: tokenSide[2],
        vocabP: vocabSide[0],
        vocabS: vocabSide[1],
        vocabT: vocabSide[2],
        ms: performance.now() - t0,
      };
    });
  } finally {
    for (const t of owned) t.destroy();
  }
}

/** The rows of `t` as f32 (an empty sample reads nothing). */
function _rowsOf(ctx: GpuContext, t: DeviceTensor, rows: Int32Array): Promise<Float32Array> {
  return rows.length === 0 ? Promise.resolve(new Float32Array(0)) : readRows(ctx, t, rows);
}

/** Rows of a group whose partials (`bytesPerRow` each) fit one binding. */
function _groupRows(ctx: GpuContext, bytesPerRow: number, what: string): number {
  const rows = Math.floor(ctx.maxBindingBytes / bytesPerRow);
  check(
    rows >= 1,
    `reference check: ${what} of one row need ${bytesPerRow} bytes, more than one binding ` +
      `holds (${ctx.maxBindingBytes})`,
  );
  return rows;
}

/** Reads a workspace buffer of `words` f32 back. */
function _read(ctx: GpuContext, buffer: TrackedBuffer, words: number): Promise<Float32Array> {
  const t = new DeviceTensor("f32", words, 1, [{ buffer, rowStart: 0, rows: words }], "partials");
  return download(ctx, t);
}

/** The row pass: every row's LSE, target logit and Σz, merged over chunks in float64. */
async function _rowPass(
  ctx: GpuContext,
  x: ReferenceInputs,
  o: { dtype: Dtype; opts: LceOptions; chunk?: number },
  keep: <T extends { destroy(): void }>(t: T) => T,
): Promise<{ lse: Float64Array; targetLogit: Float64Array; logitSum: Float64Array }> {
  const n = x.e.rows, d = x.e.cols;
  const chunk = o.chunk ?? REF_VOCAB_CHUNK;
  const pipe = await ctx.pipeline(referenceRowsWgsl({ ...o, chunk }), "reference_rows");
  const merge = await ctx.pipeline(referenceRowsReduceWgsl(), "reference_rows_merge");
  // groups of rows of one E shard against one C shard, each with its own partials buffer and
  // the per-thread scratch its chunks reuse in turn
  const groups: { buf: TrackedBuffer; row0: number; rows: number; chunks: number }[] = [];
  const rec = new Recorder(ctx);
  rec.pass("reference rows", (p) => {
    for (const es of x.e.shards) {
      for (const cs of x.c.shards) {
        const chunks = Math.max(1, Math.ceil(cs.rows / chunk));
        const per = _groupRows(ctx, Math.max(chunks, REF_WG) * 16, "row partials");
        for (let g0 = 0; g0 < es.rows; g0 += per) {
          const rows = Math.min(per, es.rows - g0);
          const mk = (size: number, label: string) =>
            keep(ctx.createBuffer({ size, role: "workspace", label }));
          const buf = mk(rows * chunks * 16, "ref rows");
          const scratch = mk(rows * REF_WG * 16, "ref rows scratch");
          groups.push({ buf, row0: es.rowStart + g0, rows, chunks });
          const wgs = Math.ceil(rows / REF_ROWS);
          for (let k = 0; k < chunks; k++) {
            const words = [rows, g0, es.rowStart + g0, cs.rows, cs.rowStart, d, k, wgs];
            const u = rec.uniform(new Uint32Array(words), "reference rows params");
            const bufs = [u, es.buffer, cs.buffer, x.targets.shards[0].buffer, scratch];
            p.dispatch(pipe, rec.bindGroup(pipe, bufs), Math.min(wgs, 65535));
            const um = rec.uniform(new Uint32Array([rows, k, chunks, 0]), "reference merge params");
            const groupsM = Math.min(Math.ceil(rows / 64), 65535);
            p.dispatch(merge, rec.bindGroup(merge, [um, scratch, buf]), groupsM);
          }
        }
      }
    }
  });
  await rec.finish();
  const parts = [];
  for (const g of groups) parts.push({ ...g, raw: await _read(ctx, g.buf, g.rows * g.chunks * 4) });
  const m = new Float64Array(n).fill(-Infinity);
  for (const g of parts) {
    for (let i = 0; i < g.rows * g.chunks; i++) {
      const row = g.row0 + Math.floor(i / g.chunks);
      m[row] = Math.max(m[row], g.raw[4 * i]);
    }
  }
  const s = new Float64Array(n), targetLogit = new Float64Array(n);
  const logitSum = new Float64Array(n);
  for (const g of parts) {
    for (let i = 0; i < g.rows * g.chunks; i++) {
      const row = g.row0 + Math.floor(i / g.chunks);
      s[row] += g.raw[4 * i + 1] * Math.exp(g.raw[4 * i] - m[row]);
      logitSum[row] += g.raw[4 * i + 2];
      targetLogit[row] += g.raw[4 * i + 3];
    }
  }
  const lse = m.map((mi, i) => mi + Math.log(s[i]));
  return { lse, targetLogit, logitSum };
}

/** Buffers of one side of the sample pass. */
interface _SampleArgs {
  /** The sampled rows (f32, count×d). */
  xs: DeviceTensor;
  /** The other side, summed over. */
  y: DeviceTensor;
  count: number;
  lse: DeviceTensor;
  wts: DeviceTensor;
  tg: DeviceTensor;
  xid: DeviceTensor;
}

/** One side of the sample pass: three count×d float64 arrays (see ReferenceSamples). */
async function _samplePass(
  ctx: GpuContext,
  o: { dtype: Dtype; opts: LceOptions; d: number; side: SampleSide; chunk: number },
  keep: <T extends { destroy(): void }>(t: T) => T,
  a: _SampleArgs,
): Promise<[Float64Array, Float64Array, Float64Array]> {
  const d = o.d;
  const out = [0, 1, 2].map(() => new Float64Array(a.count * d));
  if (a.count === 0) return out as [Float64Array, Float64Array, Float64Array];
  const pipe = await ctx.pipeline(referenceSamplesWgsl(o), `reference_${o.side}_samples`);
  const groups: { buf: TrackedBuffer; s0: number; count: number; chunks: number }[] = [];
  const rec = new Recorder(ctx);
  rec.pass(`reference ${o.side} samples`, (p) => {
    for (const ys of a.y.shards) {
      const chunks = Math.max(1, Math.ceil(ys.rows / o.chunk));
      const per = _groupRows(ctx, chunks * 3 * d * 4, `${o.side} sample partials`);
      for (let s0 = 0; s0 < a.count; s0 += per) {
        const count = Math.min(per, a.count - s0);
        const buf = keep(ctx.createBuffer({
          size: count * chunks * 3 * d * 4,
          role: "workspace",
          label: `ref ${o.side} samples`,
        }));
        groups.push({ buf, s0, count, chunks });
        const u = rec.uniform(
          new Uint32Array([ys.rows, ys.rowStart, d, chunks, s0, 0, 0, 0]),
          "reference samples params",
        );
        const small = [a.lse, a.wts, a.tg, a.xid].map((t) => t.shards[0].buffer);
        const bg = rec.bindGroup(pipe, [u, a.xs.shards[0].buffer, ys.buffer, ...small, buf]);
        p.dispatch(pipe, bg, count, chunks);
      }
    }
  });
  await rec.finish();
  for (const g of groups) {
    const raw = await _read(ctx, g.buf, g.count * g.chunks * 3 * d);
    for (let s = 0; s < g.count; s++) {
      for (let k = 0; k < g.chunks; k++) {
        const at = (s * g.chunks + k) * 3 * d;
        for (let q = 0; q < 3; q++) {
          const dst = out[q], base = (g.s0 + s) * d;
          for (let j = 0; j < d; j++) dst[base + j] += raw[at + q * d + j];
        }
      }
    }
  }
  return out as [Float64Array, Float64Array, Float64Array];
}

/** The loss and sampled gradient rows a method must produce, in float64. */
export interface ExpectedSamples {
  /** 1 value (mean, sum) or n (none; 0 for ignored rows). */
  loss: Float64Array;
  /** dE rows of the sampled tokens, S_t×d. */
  dE: Float64Array;
  /** dC rows of the sampled vocabulary entries, S_v×d. */
  dC: Float64Array;
  /** Non-ignored tokens. */
  count: number;
}

/**
 * Combines a reference with β and the reduction (the loss options must match those it was
 * computed for: softcap, ignore_index, and an upstream gradient of n values exactly for
 * reduction none): loss_n = LSE_n − (1−β)·z_t − (β/|V|)·Σz; with g_n the row weight (g/count for
 * mean, g for sum, g_n for none, 0 when ignored), dE_n = g_n·(P − (1−β)·T − (β/|V|)·S) and
 * dC_v = s·(P − (1−β)·T − (β/|V|)·S) with s = 1/count for mean, else 1.
 */
export function expectedSamples(r: ReferenceSamples, o: LceOptions): ExpectedSamples {
  check(
    o.ignoreIndex === r.ignoreIndex && o.softcap === r.softcap,
    "reference check: computed for another softcap or ignore_index",
  );
  check(
    r.gradOut.length === (o.reduction === "none" ? r.n : 1),
    `reference check: ${r.gradOut.length} upstream gradient values for reduction ${o.reduction}`,
  );
  let count = 0;
  for (const t of r.targets) if (t !== o.ignoreIndex) count++;
  check(count > 0 || o.reduction !== "mean", "reference check: every target is ignored");
  const a = 1 - o.beta, b = o.beta / r.v, d = r.d;
  const rowLoss = new Float64Array(r.n);
  let total = 0;
  for (let i = 0; i < r.n; i++) {
    if (r.targets[i] === o.ignoreIndex) continue;
    rowLoss[i] = r.lse[i] - a * r.targetLogit[i] - b * r.logitSum[i];
    total += rowLoss[i];
  }
  const loss = o.reduction === "none"
    ? rowLoss
    : Float64Array.of(o.reduction === "mean" ? total / count : total);
  const weight = (i: number) =>
    r.targets[i] === o.ignoreIndex
      ? 0
      : o.reduction === "none"
      ? r.gradOut[i]
      : o.reduction === "mean"
      ? r.gradOut[0] / count
      : r.gradOut[0];
  const combine = (
    P: Float64Array,
    S: Float64Array,
    T: Float64Array,
    scale: (s: number) => number,
  ) => {
    const out = new Float64Array(P.length);
    for (let s = 0; s < P.length / d; s++) {
      const g = scale(s);
      for (let j = 0; j < d; j++) {
        const i = s * d + j;
        out[i] = g * (P[i] - a * T[i] - b * S[i]);
      }
    }
    return out;
  };
  const dE = combine(r.tokenP, r.tokenS, r.tokenT, (s) => weight(r.tokens[s]));
  const dC = combine(r.vocabP, r.vocabS, r.vocabT, () => (o.reduction === "mean" ? 1 / count : 1));
  return { loss, dE, dC, count };
}
