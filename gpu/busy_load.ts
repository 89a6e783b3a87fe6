/**
 * A full-load workload: a register-only f32 FMA loop that keeps every SM busy, used to raise an
 * idle GPU's clocks before a measurement and to measure the f32 FMA peak (`deno task gpu-smoke`).
 *
 * Why: an idle H100 sits at 345 MHz and raises its clock with its utilisation. Calls that keep it
 * 40–60% busy (a 10 ms forward with the host's work between calls) held it below about 1 GHz for
 * over a second, so such a cell measured 2–5× its time; under full load it reached 1,980 MHz
 * within 0.1 s, and it stayed there for 1.4 s after the load stopped (`nvidia-smi` every 100 ms
 * beside a measurement; docs/performance.md).
 * @module
 */
import type { GpuContext, TrackedBuffer } from "./context.ts";
import { Recorder } from "./recorder.ts";
import { createTensor } from "./tensor.ts";
import { compileKernel, signature } from "./signature.ts";

/** Independent vec4 accumulators a thread, FMA steps per loop iteration, iterations, threads. */
const ACC = 8, STEPS = 16, ITERS = 4096, THREADS = 256;

/** Flops of one workgroup of {@link FMA_LOOP_WGSL}: 2 per lane of every vec4 FMA. */
export const FMA_LOOP_GROUP_FLOP = 2 * 4 * ACC * STEPS * ITERS * THREADS;

const _names = Array.from({ length: ACC }, (_, i) => `a${i}`);

/** The loop's signature: its output, one vec4. */
const SIG = signature({ bindings: { out: { elem: "vec4<f32>", access: "read_write" } } });

/**
 * WGSL: each thread runs ACC independent chains `a = fma(a, m, c)` (written out: Deno's WGSL
 * compiler does not unroll), then writes their sum only if it is exactly −1 (never, but the
 * compiler cannot know), so the output is one vec4.
 */
export const FMA_LOOP_WGSL = `${SIG.wgsl}
@compute @workgroup_size(${THREADS})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let s = f32(gid.x) * 1e-9;
  ${_names.map((a, i) => `var ${a} = vec4<f32>(s + ${i}.0);`).join("\n  ")}
  let m = vec4<f32>(0.9999999);
  let c = vec4<f32>(1e-7);
  for (var i = 0u; i < ${ITERS}u; i++) {
    ${Array(STEPS).fill(_names.map((a) => `${a} = fma(${a}, m, c);`).join(" ")).join("\n    ")}
  }
  let sum = ${_names.join(" + ")};
  if (sum.x == -1.0) { out[0] = sum; }
}
`;

/** The compiled workload. */
export interface BusyLoad {
  /** Runs `groups` workgroups of the loop in one submission; returns its GPU time in ms. */
  dispatch(groups: number): Promise<number>;
  /**
   * Keeps the GPU fully busy for at least `ms` of wall time, and then until its clock has settled
   * (two consecutive submissions ran at rates within {@link SETTLED_RATE}, at most
   * {@link SETTLE_MAX_MS} more): each submission is sized from the previous one's rate to last
   * about 100 ms (the host's gap between two is about 1% of that), so that the GPU sees full load
   * from the second submission on, whatever its clock.
   */
  run(ms: number): Promise<void>;
}

/** GPU time a submission of {@link BusyLoad.run} aims at, ms. */
const SUBMISSION_MS = 100;
/**
 * Relative difference of two consecutive submissions' rates (workgroups per GPU ms) below which
 * {@link BusyLoad.run} takes the clock as settled. Why it waits for that: 400 ms of this load
 * once left an idle H100 at 1,005 MHz for the 1.6 s of the first cell measured after it (1,980
 * MHz is its clock under full load).
 */
export const SETTLED_RATE = 0.02;
/** Most wall time (ms) {@link BusyLoad.run} adds to the time asked while the clock settles. */
export const SETTLE_MAX_MS = 2000;
/** Most workgroups along x (WebGPU's default limit). */
const MAX_GROUPS = 65535;

/** Compiles the workload. */
export async function prepareBusyLoad(ctx: GpuContext): Promise<BusyLoad> {
  const k = await compileKernel(ctx, SIG, FMA_LOOP_WGSL, "busy load");
  const submit = (out: TrackedBuffer, groups: number) =>
    ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      rec.pass("busy load", (p) => {
        p.dispatch(k.pipeline, k.bind(rec, undefined, { out }), groups);
      });
      const t = await rec.finish();
      return Number.isNaN(t.gpuMs) ? t.wallMs : t.gpuMs;
    });
  // the loop's one-vec4 output, for the duration of a call only
  const withOutput = async <T>(fn: (out: TrackedBuffer) => Promise<T>): Promise<T> => {
    const out = createTensor(ctx, {
      dtype: "f32",
      rows: 1,
      cols: 4,
      role: "workspace",
      label: "busy",
    });
    try {
      return await fn(out.shards[0].buffer);
    } finally {
      out.destroy();
    }
  };
  return {
    dispatch: (groups) => withOutput((out) => submit(out, groups)),
    run: (ms) =>
      withOutput(async (out) => {
        const t0 = performance.now();
        // about 25 ms at an idle H100's 345 MHz, 4.4 ms at full clock (software adapters: ~100×)
        let groups = ctx.report.isFallbackAdapter ? 4 : 256;
        let rate = 0, settled = false;
        for (;;) {
          const elapsed = performance.now() - t0;
          if (elapsed >= ms && (settled || elapsed >= ms + SETTLE_MAX_MS)) break;
          const took = await submit(out, groups);
          const r = groups / took;
          settled = rate > 0 && Math.abs(r - rate) <= SETTLED_RATE * rate;
          rate = r;
          groups = Math.max(1, Math.min(MAX_GROUPS, Math.round(groups * SUBMISSION_MS / took)));
        }
      }),
  };
}
