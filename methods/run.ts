/**
 * Runs one method end to end on host inputs: upload, forward, backward with an upstream gradient,
 * download. What `lce`, the parity tests and the gate use to get a method's numbers.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { download, fromHost } from "../gpu/tensor.ts";
import { checkInputs, type Dtype, type HostInputs, type LceOptions } from "../core/options.ts";
import { check } from "../core/errors.ts";
import type { LceMethod, MethodInputs, MethodStats, PreparedMethod } from "./types.ts";

/** Options of {@link runMethod}. */
export interface RunOptions {
  dtype: Dtype;
  /** Upstream gradient: a scalar, or n values for reduction none (default 1). */
  gradOutput?: number | ArrayLike<number>;
}

/** Host results of a method. */
export interface RunResult {
  /** 1 value (mean/sum) or n (none). */
  loss: Float32Array;
  /** dE (n×d, row-major), widened to f32 from the dtype the method computed it in. */
  dE: Float32Array;
  /** dC (v×d, row-major), widened to f32 from the dtype the method computed it in. */
  dC: Float32Array;
  /** Statistics the method reported for its backward. */
  stats?: MethodStats;
}

/** Uploads E, C and the targets of `x` as the method's inputs. */
export function uploadInputs(ctx: GpuContext, x: HostInputs, dtype: Dtype): MethodInputs {
  return {
    e: fromHost(ctx, { dtype, rows: x.n, cols: x.d, role: "input", label: "E" }, x.e),
    c: fromHost(ctx, { dtype, rows: x.v, cols: x.d, role: "input", label: "C" }, x.c),
    targets: fromHost(
      ctx,
      { dtype: "i32", rows: x.n, cols: 1, role: "input", label: "targets" },
      x.targets,
    ),
  };
}

/** The upstream gradient's values (1, or n for reduction none), checked: length, finiteness. */
export function gradValues(
  n: number,
  o: LceOptions,
  g: number | ArrayLike<number> = 1,
): Float32Array {
  const rows = o.reduction === "none" ? n : 1;
  const vals = new Float32Array(rows);
  if (typeof g === "number") vals.fill(g);
  else {
    check(g.length === rows, `upstream gradient has ${g.length} values, expected ${rows}`);
    vals.set(Array.from(g));
  }
  const bad = vals.findIndex((x) => !Number.isFinite(x));
  check(bad < 0, `upstream gradient has a non-finite value ${vals[bad]} at index ${bad}`);
  return vals;
}

/** The upstream gradient as a tensor (1 value, or n for reduction none). */
export function uploadGradOut(
  ctx: GpuContext,
  n: number,
  o: LceOptions,
  g: number | ArrayLike<number> = 1,
) {
  const vals = gradValues(n, o, g);
  const label = "grad_out";
  return fromHost(ctx, { dtype: "f32", rows: vals.length, cols: 1, role: "input", label }, vals);
}

/**
 * Validates, runs forward and backward, and downloads loss, dE and dC. Everything it allocates
 * is freed again, also when the method fails.
 */
export async function runMethod(
  ctx: GpuContext,
  method: LceMethod,
  x: HostInputs,
  opts: LceOptions,
  ro: RunOptions,
): Promise<RunResult> {
  checkInputs(x, opts);
  const spec = { n: x.n, v: x.v, d: x.d, dtype: ro.dtype };
  const why = method.unsupported?.(ctx, spec, opts);
  check(why === undefined, `method ${method.name} cannot run here: ${why}`);
  gradValues(x.n, opts, ro.gradOutput); // checked before anything is allocated
  const owned: { destroy(): void }[] = [];
  let prepared: PreparedMethod | undefined;
  try {
    return await ctx.scoped(async () => {
      const p = prepared = await method.prepare(ctx, spec, opts);
      const inputs = uploadInputs(ctx, x, ro.dtype);
      owned.push(inputs.e, inputs.c, inputs.targets);
      const gradOut = uploadGradOut(ctx, x.n, opts, ro.gradOutput);
      owned.push(gradOut);
      const rec = new Recorder(ctx);
      const fwd = await p.forward(rec, inputs);
      owned.push(fwd.loss, { destroy: () => p.dispose(fwd.saved) });
      const grads = await p.backward(rec, inputs, fwd.saved, gradOut);
      owned.push(grads.dE, grads.dC); // destroy() is idempotent where these alias saved state
      await rec.finish();
      const stats = await p.stats?.();
      return {
        loss: await download(ctx, fwd.loss),
        dE: await download(ctx, grads.dE),
        dC: await download(ctx, grads.dC),
        stats,
      };
    });
  } finally {
    for (const t of owned) t.destroy();
    prepared?.release?.();
  }
}
