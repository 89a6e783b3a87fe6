import assert from "node:assert/strict";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";
import { caseInputs } from "../testing/parity.ts";
import { GpuContext } from "../gpu/context.ts";
import { fromHost } from "../gpu/tensor.ts";
import { type Dtype, type HostInputs, type Reduction, resolveOptions } from "../core/options.ts";
import { lceReference } from "../reference/lce_reference.ts";
import { expectedSamples, referenceSamples } from "./reference_check.ts";

function _upload(ctx: GpuContext, x: HostInputs, dtype: Dtype) {
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

/** max |got − want| over max |want| (the check's own measure), over the picked rows. */
function _err(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let diff = 0, scale = 0;
  for (let i = 0; i < want.length; i++) {
    diff = Math.max(diff, Math.abs(got[i] - want[i]));
    scale = Math.max(scale, Math.abs(want[i]));
  }
  return diff / scale;
}

function _rows(a: Float64Array, rows: ArrayLike<number>, d: number): Float64Array {
  const out = new Float64Array(rows.length * d);
  for (let i = 0; i < rows.length; i++) out.set(a.subarray(rows[i] * d, (rows[i] + 1) * d), i * d);
  return out;
}

/**
 * Runs the reference on a case and compares its loss and sampled rows with the float64 host
 * reference for every β and reduction the one reference serves.
 */
async function _matches(
  ctx: GpuContext,
  c: { n: number; v: number; d: number; dtype: Dtype; seed: number; softcap?: number },
  o: { gradOut: number[]; reductions: Reduction[]; chunks?: { vocab?: number; samples?: number } },
) {
  const x = caseInputs({ ...c, beta: 0, ignoreFraction: 0.2, scale: 0.9 });
  const tokens = [0, 3, c.n - 1, 11, 3];
  const vocab = [x.targets.find((t) => t >= 0)!, 0, c.v - 1, 7, 64 % c.v];
  const inputs = _upload(ctx, x, c.dtype);
  try {
    const ref = await referenceSamples(ctx, inputs, {
      tokens,
      vocab,
      gradOut: o.gradOut,
      softcap: c.softcap,
      ignoreIndex: -100,
      chunks: o.chunks,
    });
    assert.ok(ref.ms > 0);
    for (const reduction of o.reductions) {
      for (const beta of [0, 0.1, 1]) {
        const opts = resolveOptions({ beta, softcap: c.softcap, reduction });
        const g = reduction === "none" ? o.gradOut : o.gradOut[0];
        const want = lceReference(x, opts, g);
        const got = expectedSamples(ref, opts);
        const tag = `${JSON.stringify(c)} ${reduction} β=${beta}`;
        assert.ok(_err(got.loss, want.loss) < 1e-6, `${tag}: loss ${got.loss} vs ${want.loss}`);
        const dE = _err(got.dE, _rows(want.dE, tokens, c.d));
        const dC = _err(got.dC, _rows(want.dC, vocab, c.d));
        assert.ok(dE < 2e-6, `${tag}: dE rows off by ${dE} of their scale`);
        assert.ok(dC < 2e-6, `${tag}: dC rows off by ${dC} of their scale`);
        assert.equal(got.count, want.count);
      }
    }
  } finally {
    for (const t of Object.values(inputs)) t.destroy();
  }
}

Deno.test({
  name: "reference check: f32, odd shape, several chunks, against float64 (mean, sum)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    await _matches(ctx, { n: 37, v: 131, d: 29, dtype: "f32", seed: 3 }, {
      gradOut: [1.7],
      reductions: ["mean", "sum"],
      chunks: { vocab: 64, samples: 20 },
    });
  },
});

Deno.test({
  name: "reference check: bf16 with a softcap and reduction none (per-token upstream gradient)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 41;
    const g = Array.from(randomArray(n, 5), (x) => x + 1.5);
    await _matches(ctx, { n, v: 97, d: 33, dtype: "bf16", seed: 4, softcap: 3 }, {
      gradOut: g,
      reductions: ["none"],
    });
  },
});

Deno.test({
  name: "reference check: f16 when the adapter has it",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    if (!ctx.hasF16) return;
    await _matches(ctx, { n: 19, v: 203, d: 17, dtype: "f16", seed: 5 }, {
      gradOut: [0.6],
      reductions: ["mean"],
      chunks: { vocab: 100, samples: 70 },
    });
  },
});

Deno.test({
  name: "reference check: E and C split into many shards (4096-byte bindings)",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      for (const dtype of ["f32", "bf16"] as const) {
        const x = { n: 45, v: 151, d: 31, dtype, seed: 6 };
        await _matches(ctx, x, { gradOut: [1], reductions: ["mean"], chunks: { samples: 24 } });
      }
    } finally {
      ctx.destroy();
    }
  },
});

Deno.test({
  name: "reference check: bad samples and options are refused",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const x = caseInputs({ n: 5, v: 7, d: 3, dtype: "f32", beta: 0, seed: 1 });
    const inputs = _upload(ctx, x, "f32");
    try {
      const req = { tokens: [0], vocab: [1], gradOut: [1], ignoreIndex: -100 };
      await assert.rejects(referenceSamples(ctx, inputs, { ...req, tokens: [5] }), /token 5/);
      await assert.rejects(referenceSamples(ctx, inputs, { ...req, vocab: [-1] }), /entry -1/);
      const ref = await referenceSamples(ctx, inputs, req);
      assert.throws(() => expectedSamples(ref, resolveOptions({ reduction: "none" })), /upstream/);
      assert.throws(() => expectedSamples(ref, resolveOptions({ softcap: 2 })), /softcap/);
    } finally {
      for (const t of Object.values(inputs)) t.destroy();
    }
  },
});
