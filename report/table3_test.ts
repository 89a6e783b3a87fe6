import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { assertWellFormedXml, svgTexts } from "./svg_xml.ts";
import type { MeasureRow, Mode } from "../measure/measure.ts";
import { CSV_COLUMNS, formatCsv } from "./table3_csv.ts";
import { writeReport } from "./table3_files.ts";
import { testReportEnv } from "../testing/report_env.ts";
import {
  engineTag,
  filterNotes,
  formatCell,
  formatMarkdown,
  formatMB,
  formatMs,
  formatSaving,
  formatSpeedup,
  lowerBoundBytes,
  PAPER_SHAPE,
  reportBaseName,
  type Table3Report,
} from "./table3.ts";

function _row(method: string, beta: number, mode: Mode, o: Partial<MeasureRow> = {}): MeasureRow {
  return {
    method,
    label: method === "fused" ? "Ours" : method === "baseline" ? "Baseline" : method,
    beta,
    mode,
    peakBytes: 1.1 * 2 ** 20,
    timeMs: 24.25,
    timeSource: "gpu",
    timeMsMin: 24,
    timeMsMax: 25,
    timeMsIqr: 0.5,
    wallMsMedian: 26,
    reps: 5,
    warmup: 1,
    peakByRole: { input: 0, workspace: 1.1 * 2 ** 20, output: 0, params: 0 },
    stats: mode === "fwd" ? null : { tilesSkipped: 3, tilesTotal: 4 },
    ...o,
  };
}

function _report(): Table3Report {
  const rows: MeasureRow[] = [];
  for (const beta of [0.1, 0]) {
    for (const method of ["baseline", "chunked", "fused"]) {
      for (const mode of ["fwd", "bwd", "fwd+bwd"] as Mode[]) {
        const failed = method === "baseline" && mode === "fwd+bwd";
        rows.push(
          _row(
            method,
            beta,
            mode,
            failed
              ? {
                error: "OOM: needs 28,000 MiB",
                peakBytes: null,
                timeMs: null,
                peakByRole: null,
                stats: null,
              }
              : {},
          ),
        );
      }
    }
  }
  return {
    env: testReportEnv({
      description: "NVIDIA H200 | test",
      driver: { version: "570.1", name: "NVIDIA H200" },
      features: ["timestamp-query"],
      os: "linux x86_64",
    }),
    shape: PAPER_SHAPE,
    fixture: "cce",
    betas: [0.1, 0],
    modes: ["fwd", "bwd", "fwd+bwd"],
    reduction: "mean",
    warmup: 1,
    reps: 5,
    timeSource: "gpu",
    rows,
  };
}

Deno.test("lower bound: the two gradients in bf16 at the paper's shape are 1,161 MiB", () => {
  const b = lowerBoundBytes(PAPER_SHAPE, "bwd", "mean");
  assert.equal(b, (8192 + 256000) * 2304 * 2);
  assert.equal(Math.round(b / 2 ** 20), 1161);
  assert.equal(formatMB(b), "1,161 MB");
  assert.equal(lowerBoundBytes(PAPER_SHAPE, "fwd+bwd", "mean"), b);
  assert.equal(lowerBoundBytes(PAPER_SHAPE, "fwd", "mean"), 4);
  assert.equal(lowerBoundBytes(PAPER_SHAPE, "fwd", "none"), 4 * 8192);
  assert.equal(lowerBoundBytes({ ...PAPER_SHAPE, dtype: "f32" }, "bwd", "sum"), 2 * b);
});

Deno.test("formatting: MiB as the paper's MB, ms with one decimal, failed cells say why", () => {
  assert.equal(formatMB(24000 * 2 ** 20), "24,000 MB");
  assert.equal(formatMB(1.1 * 2 ** 20), "1.1 MB");
  assert.equal(formatMB(0.09 * 2 ** 20), "0.09 MB");
  assert.equal(formatMB(4), "0.0000038 MB");
  assert.equal(formatMB(0), "0 MB");
  assert.equal(formatMs(24.25), "24.3 ms");
  assert.equal(formatMs(1234.56), "1,234.6 ms");
  assert.equal(formatMs(0.0431), "0.043 ms");
  assert.equal(formatCell(_row("fused", 0, "fwd")), "1.1 MB, 24.3 ms");
  assert.equal(
    formatCell(_row("x", 0, "fwd", { error: "unsupported: no f16" })),
    "not run here: no f16",
  );
  assert.equal(
    formatCell(_row("x", 0, "fwd", { error: "OOM: needs 9 MiB" })),
    "failed: OOM: needs 9 MiB",
  );
  assert.equal(formatCell(undefined), "–");
});

Deno.test("formatMarkdown: a method's own arithmetic; cells it cannot run here apart from failures", () => {
  const r = _report();
  for (const beta of [0.1, 0]) {
    for (const mode of ["fwd", "bwd", "fwd+bwd"] as Mode[]) {
      r.rows.push(_row("fused-tc", beta, mode, {
        label: "Ours (tensor cores)",
        arithmetic: "f16 tensor cores (WGSL, Dawn)",
        error: "unsupported: no subgroup matrices",
        peakBytes: null,
        timeMs: null,
      }));
    }
  }
  // a method that ran nowhere is one line below the table, not a row of reasons
  const md = formatMarkdown(r);
  assert.ok(!md.split("\n").some((l) => l.startsWith("| Ours (tensor cores) |")));
  assert.match(md, /## Failed rows \(2\)\n/);
  assert.match(
    md,
    /## Not run on this adapter\n\n- fused-tc: no subgroup matrices \(every cell; left out of the table\)\n/,
  );
  // one that ran somewhere keeps its row: its own arithmetic, the reason in the cells it skipped
  r.rows[r.rows.length - 1] = _row("fused-tc", 0, "fwd+bwd", {
    label: "Ours (tensor cores)",
    arithmetic: "f16 tensor cores (WGSL, Dawn)",
  });
  const md2 = formatMarkdown(r);
  const rows = md2.split("\n").filter((l) => l.startsWith("| Ours (tensor cores) |"));
  assert.equal(
    rows[0],
    "| Ours (tensor cores) | f16 tensor cores (WGSL, Dawn) | not run here: no subgroup matrices | " +
      "not run here: no subgroup matrices | not run here: no subgroup matrices |",
  );
  assert.match(
    rows[1],
    /^\| Ours \(tensor cores\) \| f16 tensor cores \(WGSL, Dawn\) \| not run .* \| 1\.1 MB, 24\.3 ms/,
  );
  assert.match(
    md2,
    /- fused-tc: no subgroup matrices \(β = 0.1 fwd, β = 0.1 bwd, β = 0.1 fwd\+bwd, β = 0 fwd, β = 0 bwd\)\n/,
  );
});

Deno.test("formatMarkdown: title, lower bound, β > 0 then β = 0 sections in the paper's order", () => {
  const md = formatMarkdown(_report());
  const lines = md.split("\n");
  assert.match(
    lines[0],
    /^# Table 3: N = 8,192, \|V\| = 256,000, D = 2,304, bf16, fixture `cce` on NVIDIA H200 \\\| test, wgpu$/,
  );
  const table = lines.filter((l) => l.startsWith("| ")).slice(0, 11);
  assert.deepEqual(table.map((l) => l.split(" | ")[0]), [
    "| method",
    "| ---",
    "| Lower bound",
    "| **β > 0 (β = 0.1)**",
    "| Ours",
    "| chunked",
    "| Baseline",
    "| **β = 0**",
    "| Ours",
    "| chunked",
    "| Baseline",
  ]);
  assert.equal(table[0], "| method | arithmetic | fwd | bwd | fwd+bwd |");
  assert.equal(
    table[2],
    "| Lower bound | | 0.0000038 MB | 1,161 MB | 1,161 MB |",
  );
  assert.equal(
    table[6],
    "| Baseline | fp32 FMA (WGSL) | 1.1 MB, 24.3 ms | 1.1 MB, 24.3 ms | failed: OOM: needs 28,000 MiB |",
  );
  assert.match(
    md,
    /## Failed rows \(2\)\n\n- baseline, β = 0.1, fwd\+bwd: OOM: needs 28,000 MiB\n/,
  );
  assert.doesNotMatch(md, /## Not run on this adapter/);
  assert.match(md, /median GPU time \(timestamp queries\) of 5 repetitions after 1 warm-up\./);
  // a first cell warmed up longer (IDLE_GPU_WARMUP_MS) is said so
  const r0 = _report();
  const longer = formatMarkdown({
    ...r0,
    rows: r0.rows.map((x, i) => i === 0 ? { ...x, warmup: 12 } : x),
  });
  assert.match(longer, /after 1 warm-up \(more for the 1 cell first measured on an idle GPU: /);
  assert.doesNotMatch(md, /full GPU load/);
  // the full load run before each method's first cell (or every cell) is said so
  const busy = formatMarkdown({ ...r0, idleBusyMs: 250 });
  assert.match(busy, /each method's first cell after at least 250 ms of full GPU load, longer/);
  const every = formatMarkdown({ ...r0, idleBusyMs: 250, busyEachCell: true });
  assert.match(every, /every cell after at least 250 ms of full GPU load, longer/);
  assert.match(md, /driver 570\.1 \(NVIDIA H200\)/);
  assert.match(md, /tilesSkipped 3, tilesTotal 4/);
  assert.doesNotMatch(md, /Reduced shape/);
  const reduced = formatMarkdown({ ..._report(), reducedShape: "software adapter" });
  assert.match(reduced, /> \*\*Reduced shape\.\*\* software adapter/);
});

Deno.test("formatCsv: header, shape columns and one quoted line per row with its ratios", () => {
  const r = _report();
  r.rows.find((x) => x.method === "fused" && x.beta === 0.1 && x.mode === "fwd")!.timeMs = 12.125;
  const csv = formatCsv(r).split("\r\n");
  assert.equal(csv[0], CSV_COLUMNS.join(","));
  assert.equal(csv.length, 1 + 18 + 1);
  for (const c of ["adapter", "engine", "n", "v", "d", "dtype", "fixture"]) {
    assert.ok(CSV_COLUMNS.includes(c as typeof CSV_COLUMNS[number]), c);
  }
  const failed = csv.find((l) => l.includes(",baseline,Baseline,0.1,fwd+bwd,"))!;
  assert.match(failed, /,"OOM: needs 28,000 MiB"$/);
  const ok = csv[1].split(",");
  assert.deepEqual(ok.slice(0, 15), [
    "NVIDIA H200 | test",
    "deno",
    "8192",
    "256000",
    "2304",
    "bf16",
    "cce",
    "baseline",
    "Baseline",
    "0.1",
    "fwd",
    "1153433.6",
    "1.1",
    "24.25",
    "gpu",
  ]);
  const col = (k: string) => CSV_COLUMNS.indexOf(k as typeof CSV_COLUMNS[number]);
  const fused = csv.find((l) => l.includes(",fused,Ours,0.1,fwd,"))!.split(",");
  assert.equal(fused[col("speedup_vs_baseline")], "2");
  assert.equal(fused[col("memory_saving_vs_baseline")], "0");
  assert.equal(ok[col("speedup_vs_baseline")], "", "the baseline has no ratio to itself");
});

Deno.test("table3 markdown: each cell's speed-up and memory saving against its section's baseline", () => {
  const r = _report();
  const fused = r.rows.find((x) => x.method === "fused" && x.beta === 0 && x.mode === "bwd")!;
  fused.timeMs = 24.25 / 4;
  fused.peakBytes = 1.1 * 2 ** 20 * 0.04;
  const md = formatMarkdown(r);
  const line = (label: string, section: number) =>
    md.split("\n").filter((l) => l.startsWith(`| ${label} |`))[section];
  assert.equal(
    line("Ours", 1),
    "| Ours | fp32 FMA (WGSL) | 1.1 MB, 24.3 ms (1.0× faster, ±0% mem) | " +
      "0.044 MB, 6.1 ms (4.0× faster, −96% mem) | " +
      "1.1 MB, 24.3 ms |",
    "no ratio where the baseline failed (fwd+bwd)",
  );
  assert.equal(
    line("Baseline", 0),
    "| Baseline | fp32 FMA (WGSL) | 1.1 MB, 24.3 ms | 1.1 MB, 24.3 ms | failed: OOM: needs 28,000 MiB |",
  );
  assert.match(md, /× faster than the baseline = the baseline's time \/ this time: > 1 is faster/);
  assert.equal(formatSaving(-0.35), "+35%");
  assert.equal(formatSaving(0.99996), "−99.996%");
  assert.equal(formatSaving(0.5), "−50%");
  assert.equal(formatSpeedup(893.4), "893×");
  assert.equal(formatSpeedup(0.0561), "0.056×");
});

Deno.test("table3 markdown: git commit and dirty tree; the filter note when no tile was skipped", () => {
  const r = _report();
  r.env.git = { commit: "abcdef0123456789abcdef0123456789abcdef01", dirty: true };
  const md = formatMarkdown(r);
  assert.match(md, /Source: git commit abcdef012345 with uncommitted changes \(dirty tree\)/);
  assert.match(
    md,
    /Gradient filter, β = 0\.1: fused skipped 3 of 4 tiles \(75\.0%\) in the backward/,
  );
  assert.doesNotMatch(md, /ablation shows nothing/);
  assert.doesNotMatch(md, /filter's sample/);
  for (const x of r.rows) if (x.stats) x.stats = { ...x.stats, filterSampled: 1 };
  assert.match(
    formatMarkdown(r),
    /fused skipped 3 of 4 tiles \(75\.0%\), estimated from its filter's sample \(the first eighth of the rows\), after which both gradients took dense products in the backward/,
  );
  for (const x of r.rows) if (x.stats) x.stats = { tilesSkipped: 0, tilesTotal: 4 };
  assert.deepEqual(filterNotes(r).length, 2);
  assert.match(
    formatMarkdown(r),
    /Gradient filter, β = 0: no filtering row skipped any tile at this shape \(fused skipped 0 of 4 tiles \(0\.0%\)\), so the No Grad\. Filter rows do the same work as the filtered ones here: the filter ablation shows nothing at this shape\./,
  );
  r.env.git = { commit: "abcdef0123456789abcdef0123456789abcdef01", dirty: false };
  assert.match(formatMarkdown(r), /Source: git commit abcdef012345, clean\./);
});

Deno.test("writeReport: four files named after adapter and shape, SVG well formed", async () => {
  const dir = mkdtempSync(join(tmpdir(), "table3-"));
  try {
    const r = _report();
    const base = reportBaseName(r);
    assert.equal(base, "table3_nvidia-h200-test_8192x256000x2304_bf16");
    const paths = await writeReport(r, join(dir, "out"));
    assert.deepEqual(
      readdirSync(join(dir, "out")).sort(),
      ["csv", "json", "md", "svg"].map((e) => `${base}.${e}`),
    );
    assert.deepEqual(JSON.parse(readFileSync(paths.json, "utf8")), JSON.parse(JSON.stringify(r)));
    const svg = readFileSync(paths.svg, "utf8");
    assertWellFormedXml(svg);
    const texts = svgTexts(svg);
    for (
      const t of ["Time", "Memory", "Ours", "OOM", "fwd+bwd", "β = 0.1", "lower bound 1,161 MB"]
    ) {
      assert(texts.includes(t), `SVG has text ${t}`);
    }
    // min–max error bars on the time bars (one per measured row), the lower bound in each panel
    const rules = [...svg.matchAll(/<g class="mark-rule role-mark ([^"]*)"/g)].map((m) => m[1]);
    assert.ok(rules.length >= 2, `error bars and lower-bound rules: ${rules.join(" ")}`);
    assert.ok(svg.includes("stroke-dasharray"), "the lower bound is dashed");
    assert(!existsSync(`${paths.md}.tmp-${Deno.pid}`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("table3 reports name their engine: title, WebGPU line, CSV column, file name", () => {
  const wgpu = _report();
  const dawn = _report();
  dawn.env.adapter = {
    ...dawn.env.adapter,
    engine: "dawn",
    engineVersion: "Dawn (npm:webgpu@0.6.2)",
    features: ["shader-f16", "subgroups", "timestamp-query"],
  };
  assert.equal(reportBaseName(dawn), "table3_nvidia-h200-test_dawn_8192x256000x2304_bf16");
  assert.notEqual(reportBaseName(dawn), reportBaseName(wgpu));
  const md = formatMarkdown(dawn).split("\n");
  assert.match(md[0], /on NVIDIA H200 \\\| test, Dawn$/);
  assert.ok(
    md.includes(
      "- WebGPU: Dawn (npm:webgpu@0.6.2); shader-f16, subgroups, timestamp-query; no " +
        "subgroup-matrix.",
    ),
    md.join("\n"),
  );
  assert.match(formatMarkdown(wgpu).split("\n")[0], /, wgpu$/);
  const col = CSV_COLUMNS.indexOf("engine");
  const [, first] = formatCsv(dawn).split("\r\n");
  assert.equal(first.split(",")[col], "dawn");
  assert.equal(formatCsv(wgpu).split("\r\n")[1].split(",")[col], "deno");
});

Deno.test("table3 markdown: says when the inputs fit in L2, and not at the paper's shape", () => {
  const base = _report();
  const small = formatMarkdown({ ...base, shape: { n: 256, v: 4096, d: 128, dtype: "bf16" } });
  assert.match(
    small,
    /Cache: E and C together are 1\.1 MB, small enough to stay in a large GPU's L2/,
  );
  const paper = formatMarkdown({ ...base, shape: { n: 8192, v: 256000, d: 2304, dtype: "bf16" } });
  assert.doesNotMatch(paper, /Cache:/);
});

Deno.test("table3 markdown: each row's arithmetic, and ratios to PyTorch rows of the same arithmetic", () => {
  const r = _report();
  const base = r.rows.find((x) => x.method === "baseline" && x.beta === 0.1 && x.mode === "fwd")!;
  base.passMs = { "logits = E·Cᵀ": 22, "row_softmax_stats": 2.3 };
  r.external = {
    source: "torch.json",
    env: { device: "NVIDIA H200", torch: "2.11", cuda: "13.0", tf32: false },
    shape: { n: 8192, v: 256000, d: 2304, dtype: "bf16" },
    fixture: "cce",
    rows: [
      {
        method: "torch-baseline",
        beta: 0.1,
        mode: "fwd",
        timeMs: 3,
        peakBytes: 1,
        external: true,
        arithmetic: "bf16 tensor cores",
      },
      {
        method: "torch-baseline-fp32",
        beta: 0.1,
        mode: "fwd",
        timeMs: 20,
        peakBytes: 1,
        external: true,
        arithmetic: "fp32 FMA (TF32 off)",
      },
      {
        method: "torch-matmul-fp32",
        beta: 0.1,
        mode: "fwd",
        timeMs: 20,
        peakBytes: 1,
        external: true,
        arithmetic: "fp32 FMA (TF32 off)",
      },
    ],
  };
  const md = formatMarkdown(r);
  assert.match(md, /\| torch-baseline \| bf16 tensor cores \| 0\.1 \|/);
  assert.match(md, /\| torch-baseline-fp32 \| fp32 FMA \(TF32 off\) \| 0\.1 \|/);
  assert.match(md, /## Same arithmetic: WebGPU against PyTorch fp32/);
  // the baseline row's fwd (24.25 ms in the fixture report) against 20 ms; the product 22 against 20
  assert.match(md, /\| Baseline[^|]* \| 0\.1 \| fwd \| 24\.3 \| 20\.0 \| 1\.21× \|/);
  assert.match(md, /\| plain product E·Cᵀ[^|]* \| \| fwd \| 22\.0 \| 20\.0 \| 1\.10× \|/);
  // without fp32 rows there is no such section
  r.external.rows = r.external.rows.slice(0, 1);
  assert.doesNotMatch(formatMarkdown(r), /Same arithmetic/);
});

Deno.test("table3: file names add the engine but for Deno's own (the names reports always had)", () => {
  assert.deepEqual(
    [undefined, "deno", "dawn", "dawn-unchecked"].map((e) => engineTag(e as never)),
    ["", "", "_dawn", "_dawn-unchecked"],
  );
});
