import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { MeasureRow, Mode } from "../measure/measure.ts";
import { InputError } from "../core/errors.ts";
import { type ExternalRow, formatPeerCell, formatPeers, readExternalRows } from "./external.ts";
import { tempDir } from "../testing/temp_dir.ts";

// Written by scripts/torch_peers.py's own writer on stand-in systems (scripts/peers/stubs.py);
// scripts/peers/cli_test.py fails when it is not what the writer produces now.
const STUB = new URL("./testdata/torch_peers_stub.json", import.meta.url).pathname;
const MODES: Mode[] = ["fwd", "bwd", "fwd+bwd"];
const PAPER = { n: 8192, v: 256000, d: 2304, dtype: "bf16" };

function _ours(method: string, label: string, beta: number, times: number[]): MeasureRow[] {
  return MODES.map((mode, i) => ({
    method,
    label,
    beta,
    mode,
    peakBytes: 2 ** 30,
    timeMs: times[i],
    timeSource: "gpu",
    timeMsMin: times[i],
    timeMsMax: times[i],
    timeMsIqr: 0,
    wallMsMedian: times[i],
    reps: 3,
    warmup: 1,
    peakByRole: null,
    stats: null,
  }));
}

function _row(x: { peers?: ExternalRow[] }, method: string, beta: number, mode: Mode) {
  const r = x.peers!.find((r) => r.method === method && r.beta === beta && r.mode === mode);
  assert.ok(r, `${method} ${beta} ${mode}`);
  return r;
}

Deno.test("external: the script's JSON splits into PyTorch rows, systems and accuracy", () => {
  const x = readExternalRows(STUB);
  assert.equal(x.source, "torch_peers_stub.json");
  assert.deepEqual([...new Set(x.rows.map((r) => r.method))], ["torch-baseline", "torch-matmul"]);
  assert.deepEqual(Object.keys(x.systems!), [
    "paper-ours",
    "paper-nofilter",
    "paper-fused",
    "paper-filter",
    "cce",
    "cce-nofilter",
    "liger",
    "torch-linear-ce",
  ]);
  assert.equal(x.peers!.length, 8 * 2 * 3);
  assert.ok(x.peers!.every((r) => r.external && r.system !== undefined));
  assert.equal(_row(x, "cce", 0.1, "fwd").unsupported, "no label smoothing");
  assert.equal(_row(x, "paper-fused", 0, "bwd").error, "RuntimeError: stub fused kernel failed");
  assert.equal(_row(x, "liger", 0.1, "bwd").gradsInForward, true);
  assert.deepEqual(x.accuracy!.shape, { n: 256, v: 1000, d: 64, dtype: "bf16" });
  const probe = x.accuracy!.entries.find((a) =>
    a.method === "paper-filter" && a.beta === 0.1 && a.fixture === "cce-offset"
  )!;
  assert.equal(probe.kernel!.filterEps, 2 ** -12);
  assert.equal(typeof probe.droppedSmoothing, "number");
});

Deno.test("external: the systems' section — cells, accuracy and our time over theirs", () => {
  const x = readExternalRows(STUB);
  const ours = [
    ..._ours("fused", "Ours", 0.1, [223.5, 211.6, 435.2]),
    ..._ours("fused-fb", "Fused Version", 0.1, [400, 1, 401]),
    ..._ours("liger", "Liger-style (WGSL)", 0, [700, 2, 702]),
    ..._ours("fused-tilemap-tc", "Ours + tile map (tensor cores)", 0.1, [105.5, 3.1, 108.6]),
    ..._ours("fused-tc", "Ours (tensor cores)", 0.1, [99.8, 139.3, 239.3]),
  ];
  // a tensor-core cell that failed its correctness check: no ratio for it
  const wrong = ours.find((r) => r.method === "fused-tc" && r.mode === "bwd")!;
  wrong.check = { ok: false } as NonNullable<MeasureRow["check"]>;
  const md = formatPeers(x, ours, PAPER, MODES).join("\n");
  assert.match(md, /^\n## The seeds' systems on this card \(external: torch_peers_stub\.json\)/);
  assert.match(
    md,
    /\| Cut Cross-Entropy \(Apple\), impl cce \(`cce`\) \| bf16 tensor cores \(Triton\) \| 0\.1 \| no label smoothing \| no label smoothing \| no label smoothing \|/,
  );
  const lig = _row(x, "liger", 0.1, "bwd");
  assert.ok(md.includes(`${formatPeerCell(lig)}`));
  assert.match(formatPeerCell(lig), /\(scaling only\)$/);
  assert.match(md, /failed: not measured: the worker was stopped after 600 s/);
  assert.match(md, /- `paper-ours`: cut-cross-entropy 24\.12\.1, commit 5d9cdad/);
  // accuracy: the kernel's filter as received, the −β/|V| column on the offset data
  assert.match(md, /### Accuracy against float64 \(256×1000×64 bf16, seed 1\)/);
  assert.match(
    md,
    /\| `paper-ours` \| 0\.1 \| cce \| [^|]+ \| 2\.0e-3 \| 3\.0e-3 \| .* filter_eps None \|/,
  );
  assert.match(
    md,
    /\| `paper-filter` \| 0\.1 \| cce-offset \| .* \| 0\.00 \| filter_eps 2\.4e-4, vocabulary sorted \|/,
  );
  assert.match(md, /\| `torch-linear-ce` \| 0 \| cce \| not in torch 2\.11\.0\+cu130 \|/);
  assert.match(md, /Filter headroom on `cce`, β = 0\.1: 99\.90% of ∂loss\/∂z entries/);
  // ratios, computed from the file's own medians
  const t = _row(x, "paper-ours", 0.1, "fwd+bwd").timeMs!;
  assert.ok(md.includes(`435.2 ms / ${t.toFixed(1)} ms = ${(435.2 / t).toFixed(2)}×`));
  assert.ok(md.includes(`108.6 ms / ${t.toFixed(1)} ms = ${(108.6 / t).toFixed(2)}×`));
  const tcRow = md.split("\n").find((l) =>
    l.startsWith("| Ours (tensor cores) | ") && /paper-ours/.test(l)
  )!;
  assert.match(
    tcRow,
    /^\| Ours \(tensor cores\) \| .* \| 0\.1 \| 99\.8 ms \/ [^|]+ \| – \| 239\.3 ms \/ /,
  );
  assert.match(md, /### Our rows against the seeds' systems/);
  // paper-fused failed and liger at β = 0 was never measured: no ratio rows for them
  assert.doesNotMatch(md, /\| Fused Version \|/);
  assert.doesNotMatch(md, /\| Liger-style \(WGSL\) \|/);
  const other = formatPeers(x, ours, { ...PAPER, n: 4096 }, MODES).join("\n");
  assert.match(
    other,
    /Not compared: the systems were measured at 8192×256000×2304 bf16, this table at 4096×256000×2304 bf16\./,
  );
  assert.doesNotMatch(other, /ms = \d/);
});

Deno.test("external: a PyTorch-only file keeps its rows and adds no section", async () => {
  const dir = await tempDir("external_test_");
  const path = join(dir, "torch.json");
  const rows = [{ method: "torch-baseline", beta: 0.1, mode: "fwd", timeMs: 3, peakBytes: 1 }];
  writeFileSync(path, JSON.stringify({ env: {}, shape: PAPER, fixture: "cce", rows }));
  const x = readExternalRows(path);
  assert.equal(x.rows.length, 1);
  assert.equal(x.peers, undefined);
  assert.deepEqual(formatPeers(x, [], PAPER, MODES), []);
  writeFileSync(
    path,
    JSON.stringify({
      env: {},
      shape: PAPER,
      rows,
      accuracy: { shape: PAPER, entries: [{ beta: 0.1, fixture: "cce" }] },
    }),
  );
  assert.throws(() => readExternalRows(path), InputError);
  assert.throws(
    () => readExternalRows(path),
    /torch\.json: accuracy entry 0 lacks method, beta or fixture/,
  );
});
