/**
 * Column sums of a sharded row-major matrix, colsum[k] = Σ_v C[v][k], in f32 on the GPU, for the
 * "identity" smoothing term of the fused forward (Σ_v z_nv = E_n·colsum(C) without softcap).
 *
 * Accuracy without compensated arithmetic: Kahan/Neumaier summation relies on the compiler keeping
 * `(t − s) − y` as written, and SPIR-V lets a driver reassociate float additions (naga emits no
 * NoContraction), so the sum is blocked instead. Pass 1 splits the rows into at most
 * {@link MAX_CHUNKS} chunks per shard (plus one per shard boundary); within a chunk, 16 lanes per
 * column each sum a contiguous run of rows in nested blocks of 16 and 16·16 rows, and the lanes
 * are added as a tree. Pass 2 adds a column's chunk partials as a 256-way tree. The rounding error
 * is then bounded by about (16 + 16 + L/256 + 4 + 8)·ε·Σ|C[v][k]| with L the rows per lane
 * (500 at |V| = 256000), against (|V| − 1)·ε for a plain running sum, and the order of every
 * addition is fixed, so the result is bitwise reproducible.
 *
 * Weighted column sums out = scale·Σ_r ω_r·X_r ({@link prepareWeightedColumnSum}: Ē for the
 * vocabulary order of kernels/fused/vocab_order.ts, Σ_n w_n·E_n for kernels/fused/corrections.ts)
 * are blocked into chunks of {@link COLSUM_CHUNK_ROWS} rows summed in order, then the chunk
 * partials are added in order.
 * @module
 */
import type { GpuContext, TrackedBuffer } from "../gpu/context.ts";
import type { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor, TensorDtype } from "../gpu/tensor.ts";
import type { Dtype } from "../core/options.ts";
import {
  dtypeHelpers,
  enableDirectives,
  loadF32,
  vecWidth,
  wgslStorageType,
} from "./wgsl_common.ts";
import { compileKernel, signature } from "../gpu/signature.ts";

/** Most chunks (pass-1 partials per column) of one shard. */
export const MAX_CHUNKS = 32;
const COLS = 16; // columns (or column vectors) per pass-1 workgroup
const LANES = 16; // row lanes per column in pass 1
const WG2 = 256; // threads per column in pass 2

/** Pass 1's signature: a C shard (as `elem`), partials (column-major: col·chunks + chunk). */
function _partialSignature(elem: string) {
  return signature({
    params: { rows: "u32", d: "u32", chunkBase: "u32", chunks: "u32", chunkRows: "u32" },
    bindings: { c: { elem, access: "read" }, partials: { elem: "f32", access: "read_write" } },
  });
}

/** Pass 2's signature: the partials, out (d f32). */
const FINAL_SIG = signature({
  params: { d: "u32", chunks: "u32" },
  bindings: {
    partials: { elem: "f32", access: "read" },
    outp: { elem: "f32", access: "read_write" },
  },
});

/** WGSL of pass 1. */
export function columnSumPartialWgsl(dtype: Dtype): string {
  return `${enableDirectives([dtype])}
${_partialSignature(wgslStorageType(dtype)).wgsl}
${dtypeHelpers([{ name: "c", dtype }])}
var<workgroup> red: array<f32, ${COLS * LANES}>;
@compute @workgroup_size(${COLS * LANES})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let col = wg.x * ${COLS}u + (lid % ${COLS}u);
  let lane = lid / ${COLS}u;
  let per = P.chunkRows / ${LANES}u;
  let r0 = min(wg.y * P.chunkRows + lane * per, P.rows);
  let r1 = min(r0 + per, P.rows);
  var s = 0.0;
  if (col < P.d) {
    var r = r0;
    while (r < r1) {
      var b2 = 0.0;
      let e2 = min(r + 256u, r1);
      while (r < e2) {
        var b1 = 0.0;
        let e1 = min(r + 16u, e2);
        while (r < e1) {
          b1 += ${loadF32("c", dtype, "r * P.d + col")};
          r++;
        }
        b2 += b1;
      }
      s += b2;
    }
  }
  red[lid] = s;
  workgroupBarrier();
  ${_laneTree((h) => `red[lid] += red[lid + ${h}u];`)}
  if (lid < ${COLS}u && col < P.d) { partials[col * P.chunks + P.chunkBase + wg.y] = red[lid]; }
}
`;
}

/**
 * WGSL of pass 1 with 16-byte loads (d and so every row start a multiple of the vector width W:
 * {@link vecWidth}): each thread sums W adjacent columns, one vector per row, with the scalar
 * kernel's order per column (blocks of 16 and 256 rows per lane, lanes added as a tree), so the
 * partials are bitwise those of {@link columnSumPartialWgsl}; the 16 threads of a lane read 256
 * contiguous bytes of a row (on an H100 the scalar kernel read C at about a third of the memory
 * rate). 16 lanes a column and 16 column vectors a workgroup: at the paper's shape 18 × 32
 * workgroups (64 columns and 4 lanes gave 5 × 32 workgroups, too few to keep the reads in flight:
 * 0.92 ms for C's 1.1 GiB).
 */
export function columnSumPartialVecWgsl(dtype: Dtype): string {
  const w = vecWidth(dtype);
  const ty = wgslStorageType(dtype, true);
  const idx = [...Array(w).keys()];
  const val = (j: number) =>
    dtype === "f32"
      ? `v[${j}]`
      : dtype === "f16"
      ? `unpack2x16float(v[${j >> 1}])[${j & 1}]`
      : j % 2 === 0
      ? `bitcast<f32>(v[${j >> 1}] << 16u)`
      : `bitcast<f32>(v[${j >> 1}] & 0xffff0000u)`;
  const each = (f: (j: number) => string, sep = " ") => idx.map(f).join(sep);
  const T = COLS * LANES;
  return `${enableDirectives([dtype])}
${_partialSignature(ty).wgsl}
var<workgroup> red: array<array<f32, ${T}>, ${w}>;
@compute @workgroup_size(${T})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let col0 = (wg.x * ${COLS}u + (lid % ${COLS}u)) * ${w}u;
  let lane = lid / ${COLS}u;
  let per = P.chunkRows / ${LANES}u;
  let r0 = min(wg.y * P.chunkRows + lane * per, P.rows);
  let r1 = min(r0 + per, P.rows);
  let dv = P.d / ${w}u;
  ${each((j) => `var s${j} = 0.0;`)}
  if (col0 < P.d) {
    var r = r0;
    while (r < r1) {
      ${each((j) => `var b2_${j} = 0.0;`)}
      let e2 = min(r + 256u, r1);
      while (r < e2) {
        ${each((j) => `var b1_${j} = 0.0;`)}
        let e1 = min(r + 16u, e2);
        while (r < e1) {
          let v = c[r * dv + col0 / ${w}u];
          ${each((j) => `b1_${j} += ${val(j)};`, "\n          ")}
          r++;
        }
        ${each((j) => `b2_${j} += b1_${j};`)}
      }
      ${each((j) => `s${j} += b2_${j};`)}
    }
  }
  ${each((j) => `red[${j}][lid] = s${j};`)}
  workgroupBarrier();
  ${_laneTree((h) => each((j) => `red[${j}][lid] += red[${j}][lid + ${h}u];`))}
  if (lid < ${COLS}u && col0 < P.d) {
    ${
    each(
      (j) => `partials[(col0 + ${j}u) * P.chunks + P.chunkBase + wg.y] = red[${j}][lid];`,
      "\n    ",
    )
  }
  }
}
`;
}

/**
 * The lanes of pass 1 added as a tree (lane l += lane l + h for h = LANES/2 … 1, in columns-fastest
 * thread order), a barrier after each level: `add(h)` is the statement for a half-width of h lanes.
 */
function _laneTree(add: (h: number) => string): string {
  const out: string[] = [];
  for (let h = LANES / 2; h >= 1; h /= 2) {
    out.push(`if (lid < ${COLS * h}u) { ${add(COLS * h)} }\n  workgroupBarrier();`);
  }
  return out.join("\n  ");
}

/** WGSL of pass 2. */
export function columnSumFinalWgsl(): string {
  return `${FINAL_SIG.wgsl}
var<workgroup> red: array<f32, ${WG2}>;
@compute @workgroup_size(${WG2})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var col = wg.x; col < P.d; col += nwg.x) {
    var s = 0.0;
    for (var j = lid; j < P.chunks; j += ${WG2}u) { s += partials[col * P.chunks + j]; }
    red[lid] = s;
    workgroupBarrier();
    for (var w = ${WG2 / 2}u; w > 0u; w >>= 1u) {
      if (lid < w) { red[lid] += red[lid + w]; }
      workgroupBarrier();
    }
    if (lid == 0u) { outp[col] = red[0]; }
    workgroupBarrier();
  }
}
`;
}

/** How the rows of C are cut into chunks. */
export interface ColumnSumPlan {
  /** Rows per chunk (a multiple of 64). */
  chunkRows: number;
  /** Chunks of each shard, in shard order. */
  chunksPerShard: number[];
  /** Chunks in all: partials per column. */
  chunks: number;
  /** Bytes of the partials buffer (the workspace of {@link PreparedColumnSum.record}). */
  workspaceBytes: number;
}

/**
 * The chunking for shards of `shardRows` rows and `d` columns: chunks of at least 256 rows, at
 * most {@link MAX_CHUNKS} per shard, and a partials buffer that fits one binding.
 */
export function columnSumPlan(
  shardRows: number[],
  d: number,
  maxBindingBytes: number,
): ColumnSumPlan {
  const rowsMax = Math.max(...shardRows);
  let chunkRows = Math.max(256, Math.ceil(Math.ceil(rowsMax / MAX_CHUNKS) / 64) * 64);
  for (;;) {
    const per = shardRows.map((r) => Math.max(1, Math.ceil(r / chunkRows)));
    const chunks = per.reduce((a, b) => a + b, 0);
    const bytes = Math.max(4, chunks * d * 4);
    if (bytes <= maxBindingBytes || chunks === shardRows.length) {
      return { chunkRows, chunksPerShard: per, chunks, workspaceBytes: bytes };
    }
    chunkRows *= 2;
  }
}

/** A compiled column sum. */
export interface PreparedColumnSum {
  /** The chunking used for `c` (its workspace bytes included). */
  plan(c: DeviceTensor): ColumnSumPlan;
  /**
   * Records colsum(c) into `out` (d×1 f32, one shard) as one pass of two dispatches per shard
   * plus one; the partials buffer is released after the submission.
   */
  record(rec: Recorder, a: { c: DeviceTensor; out: DeviceTensor }): void;
}

/** Compiles the column sum for a dtype of C. */
export async function prepareColumnSum(
  ctx: GpuContext,
  o: { dtype: Dtype },
): Promise<PreparedColumnSum> {
  const p1 = await compileKernel(
    ctx,
    _partialSignature(wgslStorageType(o.dtype)),
    columnSumPartialWgsl(o.dtype),
    "column_sum_partial",
  );
  const p1v = await compileKernel(
    ctx,
    _partialSignature(wgslStorageType(o.dtype, true)),
    columnSumPartialVecWgsl(o.dtype),
    "column_sum_partial_vec",
  );
  const p2 = await compileKernel(ctx, FINAL_SIG, columnSumFinalWgsl(), "column_sum_final");
  const plan = (c: DeviceTensor) =>
    columnSumPlan(c.shards.map((s) => s.rows), c.cols, ctx.maxBindingBytes);
  return {
    plan,
    record(rec, { c, out }) {
      const d = c.cols;
      if (c.dtype !== o.dtype || out.dtype !== "f32" || out.rows * out.cols !== d) {
        throw new RangeError(
          `column_sum: C ${c.rows}×${d} ${c.dtype} (prepared for ${o.dtype}), out ${out.rows}×${out.cols} ${out.dtype}`,
        );
      }
      if (out.shards.length !== 1) throw new RangeError("column_sum: out must be one shard");
      const pl = plan(c);
      const partials = ctx.createBuffer({
        size: pl.workspaceBytes,
        role: "workspace",
        label: "column sum partials",
      });
      rec.pass("column_sum", (p) => {
        let base = 0;
        c.shards.forEach((s, i) => {
          const params = {
            rows: s.rows,
            d,
            chunkBase: base,
            chunks: pl.chunks,
            chunkRows: pl.chunkRows,
          };
          // vector loads where every row starts at a multiple of the width (shards start at
          // row boundaries)
          const w = vecWidth(o.dtype);
          const k = d % w === 0 ? p1v : p1;
          const bg = k.bind(rec, params, { c: s.buffer, partials });
          const x = d % w === 0 ? Math.ceil(d / (COLS * w)) : Math.ceil(d / COLS);
          p.dispatch(k.pipeline, bg, x, pl.chunksPerShard[i]);
          base += pl.chunksPerShard[i];
        });
        const bg = p2.bind(rec, { d, chunks: pl.chunks }, {
          partials,
          outp: out.shards[0].buffer,
        });
        p.dispatch(p2.pipeline, bg, Math.min(d, 65535));
      });
      rec.release(partials);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Weighted column sums.

/** Rows summed by one pass-1 workgroup of the weighted column sum. */
export const COLSUM_CHUNK_ROWS = 256;
const COLSUM_WG = 64;
/**
 * Rows a pass-1 thread loads before it adds them (in row order, so the sums are those of a plain
 * loop bit for bit): a thread's 256 rows one dependent load after another took 0.25 ms at
 * 4096 × 2304 on an H200, the loads' latency rather than E's 19 MB.
 */
const COLSUM_UNROLL = 8;

/**
 * How the rows of a weighted column sum are weighted: `vector` by an f32 vector ω_r, `validMean`
 * by 1/count for non-ignored rows and 0 for ignored ones (Ē).
 */
export type ColumnWeights = "vector" | "validMean";

/** The weighted sum's pass 1 signature: an X shard, the weights, targets, the partials. */
function _weightedPartialSignature(dtype: TensorDtype) {
  return signature({
    params: { rows: "u32", rowStart: "u32", d: "u32", chunkBase: "u32" },
    bindings: {
      x: { elem: wgslStorageType(dtype), access: "read" },
      wts: { elem: "f32", access: "read" },
      targets: { elem: "i32", access: "read" },
      partials: { elem: "f32", access: "read_write" },
    },
  });
}

/** The weighted sum's pass 2 signature: the partials, the count, out. */
const WEIGHTED_FINAL_SIG = signature({
  params: { d: "u32", chunks: "u32", scale: "f32" },
  bindings: {
    partials: { elem: "f32", access: "read" },
    count: { elem: "f32", access: "read" },
    outp: { elem: "f32", access: "read_write" },
  },
});

/** WGSL of pass 1: partial[chunk·d + col] = Σ_{r in chunk} ω_r·X[r, col], rows in order. */
export function weightedColumnPartialWgsl(
  o: { dtype: TensorDtype; weights: ColumnWeights; ignoreIndex: number },
): string {
  const wt = (row: string) =>
    o.weights === "vector"
      ? `wts[${row}]`
      : `select(1.0, 0.0, targets[${row}] == ${o.ignoreIndex})`;
  // a step of U rows: every load first, then the fmas in row order (a zero weight adds nothing:
  // the select keeps s, whatever the row holds)
  const at = (i: number) => i === 0 ? "r" : `r + ${i}u`;
  const loads = Array.from({ length: COLSUM_UNROLL }, (_, i) => [
    `let w${i} = ${wt(`P.rowStart + ${at(i)}`)};`,
    `let x${i} = ${loadF32("x", o.dtype, `(${at(i)}) * P.d + col`)};`,
  ]).flat();
  const fmas = Array.from(
    { length: COLSUM_UNROLL },
    (_, i) => `s = select(s, fma(w${i}, x${i}, s), w${i} != 0.0);`,
  );
  return `${enableDirectives([o.dtype])}
${_weightedPartialSignature(o.dtype).wgsl}
${dtypeHelpers([{ name: "x", dtype: o.dtype }])}
@compute @workgroup_size(${COLSUM_WG})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
  let col = gid.x;
  if (col >= P.d) { return; }
  let r0 = wg.y * ${COLSUM_CHUNK_ROWS}u;
  let r1 = min(r0 + ${COLSUM_CHUNK_ROWS}u, P.rows);
  var s = 0.0;
  var r = r0;
  loop {
    if (r + ${COLSUM_UNROLL}u > r1) { break; }
    ${loads.join("\n    ")}
    ${fmas.join("\n    ")}
    r += ${COLSUM_UNROLL}u;
  }
  for (; r < r1; r++) {
    let w = ${wt("P.rowStart + r")};
    if (w != 0.0) { s = fma(w, ${loadF32("x", o.dtype, "r * P.d + col")}, s); }
  }
  partials[(P.chunkBase + wg.y) * P.d + col] = s;
}
`;
}

/**
 * WGSL of pass 2: out[col] = scale·Σ_chunk partial (in chunk order), divided by count[0] for
 * `validMean`.
 */
export function weightedColumnFinalWgsl(o: { weights: ColumnWeights }): string {
  return `${WEIGHTED_FINAL_SIG.wgsl}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let col = gid.x;
  if (col >= P.d) { return; }
  var s = 0.0;
  for (var j = 0u; j < P.chunks; j++) { s += partials[j * P.d + col]; }
  outp[col] = ${o.weights === "validMean" ? "P.scale * s / max(count[0], 1.0)" : "P.scale * s"};
}
`;
}

/** Arguments of {@link PreparedWeightedColumnSum.record}. */
export interface WeightedColumnSumArgs {
  /** The matrix (rows sharded). */
  x: DeviceTensor;
  /** Row weights ω (n×1 f32, one shard) for `vector`. */
  weights?: DeviceTensor;
  /** Targets (n×1 i32, one shard) for `validMean`. */
  targets?: DeviceTensor;
  /** Count of non-ignored rows (1×1 f32) for `validMean`. */
  count?: DeviceTensor;
  /** Output, d×1 f32 in one shard. */
  out: DeviceTensor;
  /** Factor applied to the sum (default 1). */
  scale?: number;
  /**
   * Buffer for the chunk partials (at least {@link columnPartialsBytes} of x's shards), e.g. one
   * shared by several sums recorded in turn; default: allocated and released by the call.
   */
  partials?: TrackedBuffer;
}

/** Bytes of the chunk partials of a weighted column sum of a matrix with these shard row counts. */
export function columnPartialsBytes(shardRows: number[], d: number): number {
  return shardRows.reduce((s, r) => s + Math.max(1, Math.ceil(r / COLSUM_CHUNK_ROWS)), 0) * d * 4;
}

/** A compiled weighted column sum out = scale·Σ_r ω_r·X_r (deterministic, see module doc). */
export interface PreparedWeightedColumnSum {
  record(rec: Recorder, a: WeightedColumnSumArgs): void;
  /**
   * Bytes of the partials workspace for a matrix with these shard row counts and d columns
   * ({@link columnPartialsBytes}; 0 when the caller supplies the partials).
   */
  workspaceBytes(shardRows: number[], d: number): number;
}

/** Compiles a weighted column sum for a dtype of X. */
export async function prepareWeightedColumnSum(
  ctx: GpuContext,
  o: { dtype: TensorDtype; weights: ColumnWeights; ignoreIndex: number },
): Promise<PreparedWeightedColumnSum> {
  const p1 = await compileKernel(
    ctx,
    _weightedPartialSignature(o.dtype),
    weightedColumnPartialWgsl(o),
    "weighted_colsum_partial",
  );
  const p2 = await compileKernel(
    ctx,
    WEIGHTED_FINAL_SIG,
    weightedColumnFinalWgsl(o),
    "weighted_colsum_final",
  );
  const chunksOf = (rows: number[]) =>
    rows.reduce((s, r) => s + Math.max(1, Math.ceil(r / COLSUM_CHUNK_ROWS)), 0);
  return {
    workspaceBytes: columnPartialsBytes,
    record(rec, a) {
      const d = a.x.cols;
      if (a.x.dtype !== o.dtype || a.out.rows * a.out.cols !== d || a.out.shards.length !== 1) {
        throw new RangeError(`weighted column sum: X ${a.x.dtype} ${a.x.rows}×${d}`);
      }
      const chunks = chunksOf(a.x.shards.map((s) => s.rows));
      if (a.partials && a.partials.size < chunks * d * 4) {
        throw new RangeError(
          `weighted column sum: partials of ${a.partials.size} bytes, need ${chunks * d * 4}`,
        );
      }
      const partials = a.partials ?? ctx.createBuffer({
        size: chunks * d * 4,
        role: "workspace",
        label: "weighted column sum partials",
      });
      const dummy = a.weights ?? a.targets ?? a.out;
      const wts = (a.weights ?? dummy).shards[0].buffer;
      const tg = (a.targets ?? dummy).shards[0].buffer;
      const cnt = (a.count ?? dummy).shards[0].buffer;
      if (o.weights === "vector" && !a.weights) throw new RangeError("weights missing");
      if (o.weights === "validMean" && (!a.targets || !a.count)) {
        throw new RangeError("targets and count missing");
      }
      rec.pass("weighted column sum", (p) => {
        let base = 0;
        for (const s of a.x.shards) {
          const nc = Math.max(1, Math.ceil(s.rows / COLSUM_CHUNK_ROWS));
          const params = { rows: s.rows, rowStart: s.rowStart, d, chunkBase: base };
          p.dispatch(
            p1.pipeline,
            p1.bind(rec, params, { x: s.buffer, wts, targets: tg, partials }),
            Math.ceil(d / COLSUM_WG),
            nc,
          );
          base += nc;
        }
        const params = { d, chunks, scale: a.scale ?? 1 };
        p.dispatch(
          p2.pipeline,
          p2.bind(rec, params, { partials, count: cnt, outp: a.out.shards[0].buffer }),
          Math.ceil(d / 64),
        );
      });
      if (!a.partials) rec.release(partials);
    },
  };
}
