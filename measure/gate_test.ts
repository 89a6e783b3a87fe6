import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { createTensor, download, upload } from "../gpu/tensor.ts";
import type { LceMethod, PreparedMethod } from "../methods/types.ts";
import { baseline } from "../methods/baseline.ts";
import { runGate } from "./gate.ts";
import { cpuModel } from "./host.ts";
import { type GateAdapter, type GateRun, type GateSuite, TINY_SUITE } from "./gate_suites.ts";
import { formatComparison } from "./gate_format.ts";

// GPU: planted regressions on a tiny suite

/** What a planted regression does to the wrapped method. */
interface _Plant {
  /** Bytes of one more workspace buffer in the forward. */
  extraBytes?: number;
  /** Records the forward and the backward this many times (the last results are returned). */
  repeat?: number;
  /** Adds back the gradient of the β/|V| term, as a method that dropped it would return. */
  dropBetaTerm?: boolean;
}

/** `inner` with a planted regression, under the same name (as if the tree had changed). */
function _planted(inner: LceMethod, plant: _Plant): LceMethod {
  return {
    ...inner,
    async prepare(ctx, spec, opts) {
      const p = await inner.prepare(ctx, spec, opts);
      const repeat = plant.repeat ?? 1;
      const wrapped: PreparedMethod = {
        async forward(rec, x) {
          for (let i = 1; i < repeat; i++) {
            const f = await p.forward(rec, x);
            await rec.flush();
            p.dispose(f.saved);
            f.loss.destroy();
          }
          if (plant.extraBytes) {
            const t = createTensor(ctx, {
              dtype: "f32",
              rows: plant.extraBytes / 4,
              cols: 1,
              role: "workspace",
              label: "planted",
            });
            rec.release(...t.shards.map((s) => s.buffer));
          }
          return await p.forward(rec, x);
        },
        async backward(rec, x, saved, gradOut) {
          for (let i = 1; i < repeat; i++) {
            const g = await p.backward(rec, x, saved, gradOut);
            await rec.flush();
            g.dE.destroy();
            g.dC.destroy();
          }
          const g = await p.backward(rec, x, saved, gradOut);
          if (!plant.dropBetaTerm || opts.beta === 0) return g;
          // G gains +w_n·β/v everywhere: dE += (β/v)·w ⊗ Σ_v C_v, dC += (β/v)·1 ⊗ Σ_n w_n E_n
          await rec.flush();
          const [e, c, t, go, dE, dC] = await Promise.all(
            [x.e, x.c, x.targets, gradOut, g.dE, g.dC].map((a) => download(ctx, a)),
          );
          const { n, v, d } = spec;
          const valid = Array.from(t, (ti) => ti !== opts.ignoreIndex);
          const count = valid.filter((b) => b).length;
          const w = valid.map((b) => (b ? go[0] / count : 0));
          const colSum = new Float64Array(d), wE = new Float64Array(d);
          for (let j = 0; j < v; j++) for (let k = 0; k < d; k++) colSum[k] += c[j * d + k];
          for (let i = 0; i < n; i++) for (let k = 0; k < d; k++) wE[k] += w[i] * e[i * d + k];
          const s = opts.beta / v;
          for (let i = 0; i < n; i++) {
            for (let k = 0; k < d; k++) dE[i * d + k] += s * w[i] * colSum[k];
          }
          for (let j = 0; j < v; j++) for (let k = 0; k < d; k++) dC[j * d + k] += s * wE[k];
          upload(ctx, g.dE, dE);
          upload(ctx, g.dC, dC);
          return g;
        },
        dispose: (saved) => p.dispose(saved),
        release: () => p.release?.(),
      };
      return wrapped;
    },
  };
}

const SUITE: GateSuite = TINY_SUITE;
const ADAPTER: GateAdapter = {
  slug: "test",
  description: "llvmpipe (test)",
  isFallbackAdapter: true,
  timeSource: "cpu",
};

async function _gate(methods: LceMethod[], base?: GateRun) {
  const ctx = await testContext();
  return await runGate(ctx, {
    suite: SUITE,
    methods,
    adapter: ADAPTER,
    env: { deno: "test", os: "test", date: "2026-01-01T00:00:00Z" },
    baseline: base,
  });
}

let _baseline: Promise<GateRun> | undefined;
/** The unchanged method's run, measured once per file with twice the rounds (like --update). */
function _base(): Promise<GateRun> {
  _baseline ??= (async () => {
    const ctx = await testContext();
    return (await runGate(ctx, {
      suite: SUITE,
      methods: [baseline],
      rounds: 2 * SUITE.rounds,
      adapter: ADAPTER,
      env: { deno: "test", os: "test", date: "2026-01-01T00:00:00Z" },
    })).run;
  })();
  return _baseline;
}

Deno.test({
  name: "gate: the unchanged method passes run after run",
  ...GPU_TEST,
  async fn() {
    const base = await _base();
    assert.equal(base.results.length, SUITE.cases.length * SUITE.betas.length);
    assert.ok(base.results.every((r) => r.error === undefined), JSON.stringify(base.results));
    for (let i = 0; i < 4; i++) {
      const { comparison } = await _gate([baseline], base);
      assert.ok(comparison!.passed, formatComparison(comparison!));
      assert.ok(comparison!.findings.every((f) => f.check !== "memory"));
    }
  },
});

Deno.test({
  name: "gate: one more buffer fails memory",
  ...GPU_TEST,
  async fn() {
    const base = await _base();
    const { comparison } = await _gate([_planted(baseline, { extraBytes: 256 })], base);
    const c = comparison!;
    assert.equal(c.passed, false);
    const mem = c.findings.filter((f) => f.check === "memory");
    assert.ok(mem.some((f) => f.mode === "fwd" && f.status === "fail"), formatComparison(c));
    assert.ok(mem.every((f) => f.detail.startsWith("+256 bytes")), formatComparison(c));
    assert.ok(c.findings.every((f) => f.check === "memory"), formatComparison(c));
  },
});

Deno.test({
  name: "gate: doing the work twice or three times fails time (after a re-run)",
  ...GPU_TEST,
  async fn() {
    const base = await _base();
    for (const repeat of [2, 3]) {
      const { comparison, rerun } = await _gate([_planted(baseline, { repeat })], base);
      const c = comparison!;
      assert.equal(c.passed, false, `${repeat}×: ${formatComparison(c)}`);
      const slow = c.findings.filter((f) => f.check === "time" && f.status === "fail");
      assert.ok(slow.some((f) => f.mode === "fwd+bwd"), `${repeat}×: ${formatComparison(c)}`);
      assert.ok(rerun.length >= slow.length);
      assert.ok(c.findings.every((f) => f.check === "time"), formatComparison(c));
    }
  },
});

Deno.test({
  name: "gate: a gradient without the β/|V| term fails parity",
  ...GPU_TEST,
  async fn() {
    const base = await _base();
    const { comparison } = await _gate([_planted(baseline, { dropBetaTerm: true })], base);
    const c = comparison!;
    assert.equal(c.passed, false);
    const par = c.findings.filter((f) => f.check === "parity" && f.status === "fail");
    assert.deepEqual(
      par.map((f) => f.detail.split(" ")[0]).sort(),
      ["dC", "dE"],
      formatComparison(c),
    );
  },
});

Deno.test("gate: the host CPU's model from /proc/cpuinfo", () => {
  const info = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 \n" +
    "processor\t: 1\nmodel name\t: AMD EPYC 9654\n";
  assert.equal(cpuModel(info), "AMD EPYC 9654");
  assert.equal(cpuModel("processor\t: 0\nCPU part\t: 0xd0c\n"), undefined);
});
