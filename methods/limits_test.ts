import assert from "node:assert/strict";
import { METHODS } from "./mod.ts";
import { runMethod } from "./run.ts";
import type { LceMethod } from "./types.ts";
import { bindingRange, GpuContext } from "../gpu/context.ts";
import { GpuError, InputError } from "../core/errors.ts";
import { resolveOptions } from "../core/options.ts";
import { assertParity, caseInputs, type ParityCase } from "../testing/parity.ts";
import { assertMatchesReference, methodTolerance } from "../testing/fuzz.ts";
import { caseGradOutput, caseOptions } from "../testing/rounded_logits_tol.ts";
import { defaultFilterEps } from "../kernels/fused/backward_plan.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { rowsPerBinding, type TensorDtype } from "../gpu/tensor.ts";

/** The reason `m` gives for not running `c` on `ctx`, if any. */
function _unsupported(ctx: GpuContext, m: LceMethod, c: ParityCase): string | undefined {
  const opts = resolveOptions({
    beta: c.beta,
    softcap: c.softcap,
    reduction: c.reduction ?? "mean",
  });
  return m.unsupported?.(ctx, { n: c.n, v: c.v, d: c.d, dtype: c.dtype }, opts);
}

/**
 * Wraps ctx.bindGroup to record the storage buffers (uniform blocks aside) bound whole although
 * larger than the lowered maxBindingBytes: workspaces that are not sharded, which the adapter's
 * own limit would refuse on a large enough problem. They are printed, not failed.
 */
function _watchBindings(ctx: GpuContext): { over: Map<string, number>; reset(): void } {
  const over = new Map<string, number>();
  const inner = ctx.bindGroup.bind(ctx);
  ctx.bindGroup = (pipeline, buffers, label) => {
    for (const b of buffers) {
      const { buffer: buf, size } = bindingRange(b);
      const isUniform = (buf.usage & GPUBufferUsage.UNIFORM) !== 0;
      if (!isUniform && size > ctx.maxBindingBytes) {
        const key = `${label || "?"}: ${buf.label || "?"}`;
        over.set(key, Math.max(over.get(key) ?? 0, size));
      }
    }
    return inner(pipeline, buffers, label);
  };
  return { over, reset: () => over.clear() };
}

Deno.test({
  name: "limits: a row wider than one binding is a one-line limits error for every method",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create({ poison: true, maxBindingBytes: 256 });
    try {
      // E and C rows of 100 f32 values (400 bytes) against 256-byte bindings; the 3 logits of a
      // row fit, so only the operands are too wide.
      const x = caseInputs({ n: 4, v: 3, d: 100, dtype: "f32", beta: 0.1, seed: 3 });
      const o = resolveOptions({ beta: 0.1 });
      const before = ctx.memory().liveBytes;
      const wide = await testContext();
      for (const m of METHODS) {
        // rows that cannot run these inputs whatever the bindings (f32 on tensor cores)
        if (m.unsupported?.(wide, { n: 4, v: 3, d: 100, dtype: "f32" }, o) !== undefined) continue;
        await assert.rejects(
          () => runMethod(ctx, m, x, o, { dtype: "f32" }),
          (e: unknown) => {
            const msg = (e as Error).message;
            assert.ok(
              (e instanceof GpuError && e.kind === "limits") ||
                (e instanceof InputError && msg.startsWith(`method ${m.name} cannot run here: `)),
              `${m.name}: ${e}`,
            );
            assert.match(msg, /\b400 bytes\b.*\b256 bytes\b/, `${m.name}: names size and limit`);
            assert.ok(!msg.includes("\n"), `${m.name}: one line`);
            return true;
          },
        );
      }
      console.log(`live bytes left by the refused runs: ${ctx.memory().liveBytes - before}`);
    } finally {
      ctx.destroy();
    }
  },
});

Deno.test({
  name: "limits: a buffer past maxBufferSize is a limits error naming both sizes",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create({ poison: true });
    try {
      const size = Math.ceil((ctx.maxBufferBytes + 1) / 4) * 4;
      assert.throws(
        () => ctx.createBuffer({ size, role: "workspace", label: "logits" }),
        (e: unknown) =>
          e instanceof GpuError && e.kind === "limits" &&
          e.message ===
            `logits: a buffer of ${size} bytes exceeds the adapter's maxBufferSize ${ctx.maxBufferBytes}`,
      );
      assert.equal(ctx.memory().liveBytes, 0);
    } finally {
      ctx.destroy();
    }
  },
});

/** Odd shapes of the forced-sharding test: [maxBindingBytes, case]. */
const SHARDED: [number, ParityCase][] = [
  [4096, { n: 70, v: 257, d: 33, dtype: "f32", beta: 0.1, ignoreFraction: 0.2, seed: 4 }],
  [4096, {
    n: 77,
    v: 131,
    d: 29,
    dtype: "bf16",
    beta: 0.3,
    softcap: 5,
    ignoreFraction: 0.2,
    reduction: "sum",
    gradOutput: -1.3,
    seed: 5,
  }],
  [8192, {
    n: 129,
    v: 65,
    d: 63,
    dtype: "f16",
    beta: 1,
    reduction: "none",
    gradOutput: "vector",
    seed: 6,
  }],
  // 512-byte bindings: two 200-byte bf16 rows of E or C per shard, one 400-byte f32 row of dE
  // (a method may refuse these with a limits error).
  [512, { n: 9, v: 19, d: 100, dtype: "bf16", beta: 0.1, ignoreFraction: 0.2, seed: 7 }],
];

/**
 * Parity of a sharded run. Tiles never straddle bindings, so with bindings of one or two rows the
 * gradient filter's tiles shrink to single elements and it may skip some of a small random case's
 * elements (g < ε): a filtered result is held to the bound the fuzz harness and
 * methods/fused_test.ts use, the plain tolerance plus what the filter may drop.
 */
async function _assertSharded(ctx: GpuContext, m: LceMethod, c: ParityCase): Promise<void> {
  const x = caseInputs(c), opts = caseOptions(c), g = caseGradOutput(c);
  const got = await runMethod(ctx, m, x, opts, { dtype: c.dtype, gradOutput: g });
  const eps = (got.stats?.tilesSkipped ?? 0) > 0 ? defaultFilterEps(c.dtype) : 0;
  try {
    assertMatchesReference(got, x, opts, g, methodTolerance(m, c), eps);
  } catch (e) {
    throw new Error(`${m.name} ${JSON.stringify(c)}: ${(e as Error).message}`);
  }
}

Deno.test({
  name: "limits: every method splits E, C, logits and gradients into many shards, parity holds",
  ...GPU_TEST,
  async fn() {
    const contexts = new Map<number, GpuContext>();
    const overs: string[] = [];
    try {
      for (const [bytes, c] of SHARDED) {
        if (!contexts.has(bytes)) {
          contexts.set(bytes, await GpuContext.create({ poison: true, maxBindingBytes: bytes }));
        }
        const ctx = contexts.get(bytes)!;
        if (c.dtype === "f16" && !ctx.hasF16) continue;
        const shards = (dtype: TensorDtype, rows: number, cols: number) =>
          Math.ceil(rows / rowsPerBinding(ctx, dtype, cols));
        const counts = {
          E: shards(c.dtype, c.n, c.d),
          C: shards(c.dtype, c.v, c.d),
          logits: shards("f32", c.n, c.v),
          dE: shards("f32", c.n, c.d),
          dC: shards("f32", c.v, c.d),
        };
        for (const [k, count] of Object.entries(counts)) {
          assert.ok(count >= 2, `${k} of ${JSON.stringify(c)} is split (${count} shards)`);
        }
        const watch = _watchBindings(ctx);
        for (const m of METHODS) {
          const why = _unsupported(ctx, m, c);
          if (why !== undefined) {
            console.log(`${m.name} at ${bytes}-byte bindings, ${c.reduction ?? "mean"}: ${why}`);
            continue;
          }
          watch.reset();
          try {
            await _assertSharded(ctx, m, c);
          } catch (e) {
            // Below a few KiB, a method may refuse with a limits error naming what did not fit.
            if (!(bytes < 4096 && e instanceof GpuError && e.kind === "limits")) throw e;
            console.log(`${m.name} at ${bytes}-byte bindings refused: ${e.message}`);
            continue;
          }
          for (const [what, size] of watch.over) {
            overs.push(
              `${m.name} (${c.n}×${c.v}×${c.d} ${c.dtype}, ${bytes} B): ${what} ${size} B`,
            );
          }
        }
      }
    } finally {
      for (const ctx of contexts.values()) ctx.destroy();
    }
    if (overs.length > 0) {
      console.log(`storage bindings above the per-binding limit:\n  ${overs.join("\n  ")}`);
    }
  },
});

Deno.test({
  name: "limits: more rows or vocabulary entries than workgroups per dimension (70 000 > 65 535)",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create({ poison: true });
    try {
      const cases: ParityCase[] = [
        { n: 70_001, v: 3, d: 2, dtype: "f32", beta: 0.1, ignoreFraction: 0.1, seed: 8 },
        // f32: testing/rounded_logits_tol.ts cannot bound 16-bit cases this large (Math.max(...)
        // over 140 002 values overflows the stack).
        { n: 3, v: 70_001, d: 2, dtype: "f32", beta: 0.1, reduction: "sum", seed: 9 },
      ];
      for (const c of cases) {
        for (const m of METHODS) {
          if (_unsupported(ctx, m, c) !== undefined) continue;
          await assertParity(ctx, m, { ...c, tol: methodTolerance(m, c) });
        }
      }
    } finally {
      ctx.destroy();
    }
  },
});
