/**
 * The dense backward sharing its G: where both dense paths are taken (kernels/fused/dense_de.ts,
 * kernels/fused/dense_dc.ts), each recomputes every logit, so the backward does four products of
 * the plain product's size. Sharing G, each vocabulary chunk's G is formed once (the dense dC's
 * logits product with its epilogue: the whole gradient, exact terms included, in dC's element
 * type) and both products read it:
 *
 *   dE += G·C[v0:v1]          (dE's f32 accumulator; the first chunk writes it, so the exact
 *                              terms the corrections put there are replaced by G's own)
 *   dC[v0:v1] = Gᵀ·E          (written whole, as the dense dC's)
 *
 * Memory: with 16-bit gradients dE's f32 accumulator holds the first rows of dC's storage, the
 * *floor* (2n rows of 16-bit dC rounded up to the plan's chunk alignment), until dE is final. So
 * the backward goes, under the decisions' flag 2 (kernels/fused/dense_decision.ts: both dense):
 *
 *   A. dE over the vocabulary rows [0, floor): dE-only chunks, each G above the floor
 *   B. the shared chunks over [floor, |V|) from the top down, each G between the floor and the
 *      chunk (the dense dC's plan with a floor), the last one's in the tail
 *   C. the cast of dE (the backward's, as on every path), which frees [0, floor)
 *   D. dC's rows [0, floor): the dense dC's chunks of that many rows
 *
 * 3 + floor/|V| products instead of 4 (3.33 at 4096 × 24,576 × 2304 in bf16). With f32
 * gradients, or 16-bit ones of odd d (dC accumulated in an f32 scratch), dE's accumulator lies
 * elsewhere: the floor is 0, and B alone covers every row. The tail is one workspace for B, D and
 * the separate dense dC (the largest of their tails), so the memory is the dense dC's.
 *
 * G is rounded to dC's element type once, as the dense dC's is: dE gets that rounding too (the
 * separate dense dE multiplies an f32 G). Deterministic as both paths: fixed chunks in a fixed
 * order, one owner per output element, split-K partials added in slice order.
 *
 * Recorded with FusedBackwardOptions.denseShared `auto` (the default; `never` records each
 * dense path on its own logits). On an H200 where both paths are taken it cuts the backward by
 * about a tenth (docs/performance.md, "The dense backward sharing G"). The recording: the dense dC's products (kernels/fused/dense_dc.ts
 * `sharing`) with a dE product beside them; the decisions' flag 2 (both dense) gates A and B
 * after the dense dE's passes, D after the dense dC's, and, where it is recorded, the kept dC
 * path's light passes too, which would overwrite B's rows (kernels/fused/backward.ts).
 * @module
 */
import { type DenseDCPlan, denseDCPlan } from "./dense_dc.ts";

/** The shared path's chunks (see the module doc). */
export interface DenseSharedPlan {
  /** Rows of dC's storage dE's accumulator holds (0 where it lies elsewhere). */
  floor: number;
  /** A: dE-only chunks [v0, v1) over [0, floor), G at the floor's first byte. */
  dEChunks: [number, number][];
  /** B: the shared chunks over [floor, |V|) (a dense dC plan with the floor). */
  shared: DenseDCPlan;
  /** D: dC's rows [0, floor) (a dense dC plan of floor rows), where the floor is not 0. */
  dC?: DenseDCPlan;
  /** The tail B and D need at most. */
  tailBytes: number;
}

/**
 * The chunks of a problem, or undefined where the path does not apply (either dense dC plan
 * missing, no dE chunk fitting above the floor). `accBytes`: dE's f32 accumulator's bytes where
 * it lies at the start of dC's storage, else 0; the rest as {@link denseDCPlan}'s.
 */
export function denseSharedPlan(
  o: Parameters<typeof denseDCPlan>[0] & { accBytes: number },
): DenseSharedPlan | undefined {
  const { n, v, d, outBytes } = o;
  const whole = denseDCPlan({ ...o, floor: 0 });
  if (!whole) return undefined;
  const rowBytes = d * outBytes, q = whole.q;
  const floor = Math.ceil(o.accBytes / rowBytes / q) * q;
  if (floor === 0) return { floor, dEChunks: [], shared: whole, tailBytes: whole.tailBytes };
  if (floor >= v) return undefined;
  const shared = denseDCPlan({ ...o, floor });
  const dC = denseDCPlan({ ...o, v: floor, floor: 0 });
  if (!shared || !dC) return undefined;
  // A's chunks: as wide as the rows above the floor hold their G, within one binding
  const gRow = n * (o.gBytes ?? outBytes);
  const fit = Math.min((v - floor) * rowBytes, o.maxBindingBytes) / gRow;
  const w = Math.floor(fit / q) * q;
  if (w < q) return undefined;
  const dEChunks: [number, number][] = [];
  for (let v0 = 0; v0 < floor; v0 += w) dEChunks.push([v0, Math.min(floor, v0 + w)]);
  return { floor, dEChunks, shared, dC, tailBytes: Math.max(shared.tailBytes, dC.tailBytes) };
}
