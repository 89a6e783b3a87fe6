import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { InputError } from "../core/errors.ts";
import { GATE_THRESHOLDS, type GateAdapter, type GateRun } from "./gate_suites.ts";
import {
  badRunField,
  baselineFor,
  baselineName,
  chooseBaseline,
  formatBaseline,
  readBaseline,
} from "./gate_baseline.ts";

const ADAPTER: GateAdapter = {
  slug: "llvmpipe-llvm-15-0-6-256-bits",
  description: "llvmpipe (LLVM 15.0.6, 256 bits)",
  isFallbackAdapter: true,
  timeSource: "cpu",
  engine: "deno",
  driver: "Mesa 25.0.7-2~bpo12+1",
  host: "AMD EPYC 9654",
};

function _run(adapter = ADAPTER, suite = "ci"): GateRun {
  const mode = { peakBytes: 4096, timeRatio: 1.5, ratios: [1.5, 1.25], timeMs: 2.5 };
  return {
    version: 1,
    suite,
    adapter,
    env: { deno: "2.9.6", os: "linux", date: "2026-01-01T00:00:00Z" },
    rounds: 14,
    thresholds: GATE_THRESHOLDS,
    results: [{
      fixture: "cce",
      n: 24,
      v: 130,
      d: 16,
      dtype: "bf16",
      method: "baseline",
      beta: 0.1,
      parity: { loss: 1e-7, dE: 1e-6, dC: null as unknown as number },
      yardstickMs: 3,
      modes: { fwd: mode, bwd: { ...mode, ratios: [] } },
    }],
  };
}

Deno.test("gate baseline: a file that does not parse into complete results names its first bad field", () => {
  assert.equal(badRunField(_run()), undefined, "a complete run (an infinite parity error is null)");
  const cases: [(b: Record<string, unknown>) => void, string][] = [
    [
      (b) => b.results = [{ method: "baseline" }],
      "results[0].fixture is missing (it must be a string)",
    ],
    [
      (b) => delete (b.results as Record<string, unknown>[])[0].modes,
      "results[0].modes is missing",
    ],
    [
      (b) => (b.results as Record<string, unknown>[])[0].n = 2.5,
      "results[0].n must be a positive integer, got 2.5",
    ],
    [
      (
        b,
      ) => ((b.results as Record<string, Record<string, Record<string, unknown>>>[])[0].modes.fwd
        .ratios = ["x"]),
      "results[0].modes.fwd.ratios must be a list of numbers",
    ],
    [
      (
        b,
      ) => ((b.results as Record<string, Record<string, Record<string, unknown>>>[])[0].modes.fwd
        .peakBytes = null),
      "results[0].modes.fwd.peakBytes is null without an error",
    ],
    [
      (b) => ((b.results as Record<string, Record<string, unknown>>[])[0].modes.slow = {}),
      "results[0].modes has an unknown mode 'slow'",
    ],
    [(b) => b.results = [], "results must be a non-empty list, got []"],
    [(b) => b.version = 2, "version must be 1, got 2"],
    [
      (b) => delete (b.adapter as Record<string, unknown>).timeSource,
      "adapter.timeSource is missing",
    ],
    [(b) => delete b.env, "env is missing"],
  ];
  for (const [spoil, want] of cases) {
    const b = structuredClone(_run()) as unknown as Record<string, unknown>;
    spoil(b);
    const got = badRunField(b);
    assert.ok(got?.startsWith(want), `${want}: got ${got}`);
  }
  const dir = mkdtempSync(join(tmpdir(), "gate-baseline-"));
  try {
    const path = join(dir, "b.json");
    writeFileSync(path, JSON.stringify({ ..._run(), results: [{ method: "baseline" }] }));
    assert.throws(() => readBaseline(path), (e: Error) => {
      assert.ok(e instanceof InputError);
      assert.match(e.message, /^baseline .*b\.json: results\[0\]\.fixture is missing/);
      assert.ok(!e.message.includes("\n"));
      return true;
    });
    writeFileSync(path, formatBaseline(_run()));
    assert.deepEqual(readBaseline(path), _run());
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("gate baseline: one file per host, this host's chosen, else the nearest", () => {
  assert.equal(
    baselineName(ADAPTER),
    "gate_baseline_llvmpipe-llvm-15-0-6-256-bits_deno_mesa-25-0-7-2-bpo12-1-amd-epyc-9654.json",
  );
  const other = { ...ADAPTER, host: "Intel Xeon Platinum 8480+" };
  const dawn = { ...ADAPTER, engine: "dawn" };
  const gpu: GateAdapter = {
    slug: "nvidia-h100",
    description: "NVIDIA H100",
    isFallbackAdapter: false,
    timeSource: "gpu",
    engine: "deno",
    driver: "NVIDIA 580.95.05",
  };
  const files = [gpu, other, dawn].map((a) => ({ path: baselineName(a), run: _run(a) }));
  assert.equal(
    chooseBaseline([...files, { path: "own", run: _run() }], ADAPTER, "ci")?.path,
    "own",
  );
  const near = chooseBaseline(files, ADAPTER, "ci")!;
  assert.equal(near.run.adapter.host, other.host, "same adapter and engine, another CPU");
  assert.equal(near.sameHost, false);
  assert.equal(chooseBaseline(files, ADAPTER, "tiny"), undefined, "no baseline of that suite");
  assert.equal(
    chooseBaseline(files, { ...gpu, driver: "NVIDIA 570" }, "ci")?.run.adapter.slug,
    "nvidia-h100",
  );
  const dir = mkdtempSync(join(tmpdir(), "gate-baselines-"));
  try {
    assert.throws(
      () => baselineFor({ adapter: ADAPTER, suite: "ci", update: false, dir }),
      /^InputError: no gate baseline of suite 'ci' in .* for AMD EPYC 9654 \(Mesa 25\.0\.7-2~bpo12\+1, deno\) \(expected .*gate_baseline_llvmpipe-llvm-15-0-6-256-bits_deno_mesa-25-0-7-2-bpo12-1-amd-epyc-9654\.json\); create it with \.\/dev task gate --update$/,
    );
    assert.equal(baselineFor({ adapter: ADAPTER, suite: "ci", update: true, dir }), undefined);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
