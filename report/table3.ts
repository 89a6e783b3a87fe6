/**
 * Table 3 reports: the measured rows and the environment turned into Markdown in the paper's
 * layout (a lower-bound row, a β > 0 section, a β = 0 section, cells "X MB, Y ms" with MB = MiB
 * as in the paper, each with its speed-up and memory saving against the section's baseline row),
 * JSON (long format: one row per method × β × mode, with the raw per-repetition samples, the git
 * commit and whether the tree was dirty), CSV of the rows (with adapter, shape and fixture
 * columns), and an SVG chart of time and memory per method and mode (min–max error bars, the
 * lower bound of each mode, log axes where values span more than 10×); written atomically under
 * one directory as `table3_<adapter-slug>_<n>x<v>x<d>_<dtype>.{md,json,csv,svg}`.
 * @module
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { AdapterReport, GpuContext } from "../gpu/context.ts";
import { type ExternalRows, formatPeers } from "./external.ts";
import { type GitInfo, gitInfo } from "./provenance.ts";
import { type Dtype, DTYPE_BYTES, type Reduction } from "../core/options.ts";
import {
  IDLE_GPU_WARMUP_MS,
  type MeasureRow,
  type Mode,
  MODES,
  type TimeSource,
} from "../measure/measure.ts";
import { groupedBarChartSpec, renderVegaLite } from "./svg.ts";
import type { Bar } from "./svg.ts";

/** Where a table was measured. */
export interface Table3Env {
  /** The adapter's description, vendor, features and limits. */
  adapter: AdapterReport;
  /** Deno, V8 and TypeScript versions. */
  deno: { deno: string; v8: string; typescript: string };
  /** Operating system and architecture (and kernel release when known). */
  os: string;
  /** When the table was measured (ISO 8601). */
  date: string;
  /** The NVIDIA driver and GPU name from nvidia-smi, or null where nvidia-smi is absent. */
  driver: { version: string; name: string } | null;
  /** The git commit of the tree and whether it had uncommitted changes (absent in old reports). */
  git?: GitInfo;
}

/** The problem of a table. */
export interface Table3Shape {
  n: number;
  v: number;
  d: number;
  dtype: Dtype;
}

/** Everything a Table 3 report holds (also its JSON form). */
export interface Table3Report {
  env: Table3Env;
  shape: Table3Shape;
  /** Fixture name (fixtures/mod.ts). */
  fixture: string;
  /** How the inputs were generated (`cce-fast`, `fixtures`). */
  generator?: string;
  /** Seed of the inputs. */
  seed?: number;
  /** Label-smoothing values measured, β > 0 sections first. */
  betas: number[];
  /** Modes measured (table columns). */
  modes: Mode[];
  /** Reduction of the per-token losses. */
  reduction: Reduction;
  warmup: number;
  reps: number;
  /** Where the times come from. */
  timeSource: TimeSource;
  /** Full GPU load (ms) run before each method's first cell (MeasureOptions.busyLoad), if any. */
  idleBusyMs?: number;
  /** Why the shape differs from the paper's, when it was reduced by default. */
  reducedShape?: string;
  /** Seconds the whole run took. */
  durationS?: number;
  /** One row per method × β × mode. */
  rows: MeasureRow[];
  /** Rows measured by another program on the same card (scripts/torch_peers.py), if merged. */
  external?: ExternalRows;
  /**
   * False while the run is going on or after it was interrupted (the rows are those measured so
   * far; `table3 --resume` measures the rest); true once every planned cell is measured.
   */
  complete?: boolean;
  /** What the run was asked to measure (for `--resume`): every cell is method × β × mode. */
  plan?: Table3Plan;
}

/** The cells a run measures and how; a resumed run must match it. */
export interface Table3Plan {
  shape: Table3Shape;
  fixture: string;
  seed: number;
  betas: number[];
  methods: string[];
  modes: Mode[];
  reduction: Reduction;
  warmup: number;
  reps: number;
}

/** L2 cache of the largest GPUs this harness targets (H100/H200: 50 MB), for the cache note. */
export const L2_CACHE_BYTES = 50 * 2 ** 20;

/** The paper's shape (Table 3): N = 8192 tokens, |V| = 256,000, D = 2304, bf16. */
export const PAPER_SHAPE: Table3Shape = { n: 8192, v: 256000, d: 2304, dtype: "bf16" };

/**
 * The paper's row order of methods; chunked (a β = 0 row in the paper) comes after liger in every
 * section. Methods not listed follow in the order measured.
 */
export const METHOD_ORDER: readonly string[] = [
  "fused",
  "fused-nosort",
  "fused-nofilter",
  "fused-fb",
  "fused-fb-nofilter",
  "fused-f32grad",
  "fused-tilemap",
  "liger",
  "chunked",
  "compiled",
  "baseline",
];

/**
 * The environment of a context: adapter, Deno, OS, date, the NVIDIA driver when present, and the
 * git commit (with the dirty flag) of this checkout.
 */
export async function collectEnv(ctx: GpuContext): Promise<Table3Env> {
  let os = `${Deno.build.os} ${Deno.build.arch}`;
  try {
    os += ` (${Deno.osRelease()})`;
  } catch {
    // no permission: the OS name is enough
  }
  return {
    adapter: ctx.report,
    deno: { ...Deno.version },
    os,
    date: new Date().toISOString(),
    driver: await nvidiaDriver(),
    git: await gitInfo(),
  };
}

/** Driver version and GPU name from `nvidia-smi`, or null when the command is missing or fails. */
export async function nvidiaDriver(): Promise<{ version: string; name: string } | null> {
  try {
    const out = await new Deno.Command("nvidia-smi", {
      args: ["--query-gpu=driver_version,name", "--format=csv,noheader"],
      stdout: "piped",
      stderr: "null",
    }).output();
    if (!out.success) return null;
    const line = new TextDecoder().decode(out.stdout).split("\n")[0].trim();
    const comma = line.indexOf(",");
    if (comma < 0) return null;
    return { version: line.slice(0, comma).trim(), name: line.slice(comma + 1).trim() };
  } catch {
    return null;
  }
}

/**
 * The least memory a mode can need: fwd = the loss (one f32, or n of them for reduction none);
 * bwd and fwd+bwd = the two gradients dE and dC in the input dtype, (n + v)·d·bytes(dtype).
 */
export function lowerBoundBytes(shape: Table3Shape, mode: Mode, reduction: Reduction): number {
  if (mode === "fwd") return reduction === "none" ? 4 * shape.n : 4;
  return (shape.n + shape.v) * shape.d * DTYPE_BYTES[shape.dtype];
}

/** Bytes as the paper's "MB" (MiB): `1,161 MB`, `1.1 MB`, `0.09 MB`. */
export function formatMB(bytes: number): string {
  if (bytes === 0) return "0 MB";
  const mib = bytes / 2 ** 20;
  const text = mib >= 100
    ? mib.toLocaleString("en-US", { maximumFractionDigits: 0 })
    : mib >= 1
    ? mib.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 })
    : mib.toLocaleString("en-US", { maximumSignificantDigits: 2 });
  return `${text} MB`;
}

/** Milliseconds with one decimal (two significant digits below 1 ms): `24.2 ms`, `0.043 ms`. */
export function formatMs(ms: number): string {
  const text = ms >= 1
    ? ms.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 })
    : ms.toLocaleString("en-US", { maximumSignificantDigits: 2 });
  return `${text} ms`;
}

/** One table cell: "X MB, Y ms", or `failed: <why>`. */
export function formatCell(row: MeasureRow | undefined): string {
  if (!row) return "–";
  if (row.error !== undefined) return `failed: ${row.error}`;
  return `${formatMB(row.peakBytes ?? NaN)}, ${formatMs(row.timeMs ?? NaN)}`;
}

/** The baseline row of `row`'s section (method `baseline`, same β and mode), if measured. */
function _baselineOf(r: Table3Report, row: MeasureRow): MeasureRow | undefined {
  const b = r.rows.find((x) =>
    x.method === BASELINE_METHOD && x.beta === row.beta && x.mode === row.mode
  );
  return b && b.error === undefined ? b : undefined;
}

/** Name of the method every section's ratios are taken against. */
export const BASELINE_METHOD = "baseline";

/**
 * Speed-up (baseline time / this time) and memory saving (1 − this peak / baseline peak) of a row
 * against the baseline row of its section; nulls where either failed or the baseline is absent.
 */
export function vsBaseline(
  r: Table3Report,
  row: MeasureRow,
): { speedup: number | null; memorySaving: number | null } {
  const b = _baselineOf(r, row);
  if (!b || row.error !== undefined || row.method === BASELINE_METHOD) {
    return { speedup: null, memorySaving: null };
  }
  const speedup = b.timeMs !== null && row.timeMs !== null && row.timeMs > 0
    ? b.timeMs / row.timeMs
    : null;
  const memorySaving = b.peakBytes !== null && row.peakBytes !== null && b.peakBytes > 0
    ? 1 - row.peakBytes / b.peakBytes
    : null;
  return { speedup, memorySaving };
}

/** `1.7×`, `0.41×`, `12×`: a speed-up with two significant digits (none after the point ≥ 10). */
export function formatSpeedup(x: number): string {
  const text = x >= 10
    ? x.toLocaleString("en-US", { maximumFractionDigits: 0 })
    : x.toLocaleString("en-US", { minimumSignificantDigits: 2, maximumSignificantDigits: 2 });
  return `${text}×`;
}

/**
 * A memory saving as a signed percentage: `−96%` (less memory), `+35%` (more), and enough
 * decimals near −100% that the remainder shows (`−99.996%`).
 */
export function formatSaving(saving: number): string {
  const pct = 100 * saving;
  const rest = 100 - Math.abs(pct);
  const digits = rest >= 10 ? 0 : rest >= 1 ? 1 : Math.min(4, Math.ceil(-Math.log10(rest)) + 1);
  const text = Math.abs(pct).toLocaleString("en-US", {
    minimumFractionDigits: 0,
    maximumFractionDigits: Number.isFinite(digits) ? digits : 4,
  });
  return `${pct > 0 ? "−" : pct < 0 ? "+" : "±"}${text}%`;
}

/** A cell with its ratios against the section's baseline: `1.1 MB, 24.3 ms (1.7× speed, −96% mem)`. */
export function formatCellVsBaseline(r: Table3Report, row: MeasureRow | undefined): string {
  const cell = formatCell(row);
  if (!row) return cell;
  const { speedup, memorySaving } = vsBaseline(r, row);
  const parts: string[] = [];
  if (speedup !== null) parts.push(`${formatSpeedup(speedup)} speed`);
  if (memorySaving !== null) parts.push(`${formatSaving(memorySaving)} mem`);
  return parts.length > 0 ? `${cell} (${parts.join(", ")})` : cell;
}

/**
 * Notes on the gradient filter, one per β: how many tiles the filtering rows (stats with
 * `tilesTotal`, not a `nofilter` row) skipped in the backward, and when none skipped any tile,
 * that the No Grad. Filter ablation shows nothing at this shape.
 */
export function filterNotes(r: Table3Report): string[] {
  const notes: string[] = [];
  for (const beta of _betaOrder(r)) {
    const rows = r.rows.filter((x) =>
      x.beta === beta && x.mode !== "fwd" && x.error === undefined && !/nofilter/.test(x.method) &&
      typeof x.stats?.tilesTotal === "number" && x.stats.tilesTotal > 0 &&
      typeof x.stats.tilesSkipped === "number"
    );
    if (rows.length === 0) continue;
    const first = rows.find((x) => x.method === "fused") ?? rows[0];
    const skipped = first.stats!.tilesSkipped as number, total = first.stats!.tilesTotal as number;
    const what = `${first.method} skipped ${skipped.toLocaleString("en-US")} of ` +
      `${total.toLocaleString("en-US")} tiles (${(100 * skipped / total).toFixed(1)}%)`;
    if (rows.every((x) => x.stats!.tilesSkipped === 0)) {
      notes.push(
        `Gradient filter, β = ${beta}: no filtering row skipped any tile at this shape (${what}), ` +
          "so the No Grad. Filter rows do the same work as the filtered ones here: the filter " +
          "ablation shows nothing at this shape.",
      );
    } else {
      notes.push(`Gradient filter, β = ${beta}: ${what} in the backward.`);
    }
  }
  return notes;
}

/** A file-name slug of an adapter: its description (or vendor, architecture, device) lowercased. */
export function reportSlug(a: AdapterReport): string {
  const name = a.description && a.description !== "(no description)"
    ? a.description
    : [a.vendor, a.architecture, a.device].filter((s) => s).join(" ");
  return name.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 48)
    .replace(/-+$/, "") || "adapter";
}

/** `table3_<adapter-slug>_<n>x<v>x<d>_<dtype>` for a report. */
export function reportBaseName(r: Pick<Table3Report, "env" | "shape">): string {
  const { n, v, d, dtype } = r.shape;
  return `table3_${reportSlug(r.env.adapter)}_${n}x${v}x${d}_${dtype}`;
}

/** Rows of `beta`, methods in the paper's order. */
function _sectionMethods(r: Table3Report, beta: number): string[] {
  const names = [...new Set(r.rows.filter((x) => x.beta === beta).map((x) => x.method))];
  const rank = (m: string) => {
    const i = METHOD_ORDER.indexOf(m);
    return i < 0 ? METHOD_ORDER.length + names.indexOf(m) : i;
  };
  return names.sort((a, b) => rank(a) - rank(b));
}

/** β values in section order: those > 0 in the order given, then β = 0. */
function _betaOrder(r: Table3Report): number[] {
  const bs = [...new Set([...r.betas, ...r.rows.map((x) => x.beta)])];
  return [...bs.filter((b) => b > 0), ...bs.filter((b) => b === 0)];
}

function _md(s: string): string {
  return s.replace(/\|/g, "\\|").replace(/\s*\n\s*/g, " ");
}

function _sectionTitle(beta: number): string {
  return beta > 0 ? `**β > 0 (β = ${beta})**` : "**β = 0**";
}

/** A number of the details table: `1,146.5`, `24.25`, `0.137`, `0.0000153`. */
function _detail(x: number): string {
  const a = Math.abs(x);
  if (a >= 100) return x.toLocaleString("en-US", { maximumFractionDigits: 1 });
  if (a >= 1) return x.toLocaleString("en-US", { maximumFractionDigits: 2 });
  return x.toLocaleString("en-US", { maximumSignificantDigits: 3 });
}

/** The Markdown report: header, the table in the paper's layout, failed rows, details. */
export function formatMarkdown(r: Table3Report): string {
  const { n, v, d, dtype } = r.shape;
  const a = r.env.adapter;
  const modes = r.modes.length > 0 ? r.modes : [...MODES];
  const kind = a.isFallbackAdapter ? "software (fallback) adapter" : "hardware adapter";
  const lines: string[] = [];
  lines.push(
    `# Table 3: N = ${n.toLocaleString("en-US")}, |V| = ${v.toLocaleString("en-US")}, ` +
      `D = ${d.toLocaleString("en-US")}, ${dtype}, fixture \`${r.fixture}\` on ${
        _md(a.description)
      }`,
  );
  lines.push("");
  if (r.complete === false) {
    const planned = r.plan
      ? ` of ${r.plan.betas.length * r.plan.methods.length * r.plan.modes.length}`
      : "";
    lines.push(
      `> **Partial report.** The run was interrupted: ${r.rows.length}${planned} cells ` +
        "measured. `deno task table3 --resume <this report's .json>` measures the rest.",
      "",
    );
  }
  if (r.reducedShape) lines.push(`> **Reduced shape.** ${_md(r.reducedShape)}`, "");
  const driver = r.env.driver ? `, driver ${r.env.driver.version} (${r.env.driver.name})` : "";
  lines.push(
    `- Adapter: ${_md(a.description)} (${kind}; vendor ${a.vendor || "?"}, architecture ` +
      `${a.architecture || "?"}${driver}); Deno ${r.env.deno.deno}, ${r.env.os}; ${r.env.date}.`,
  );
  lines.push(
    `- Problem: E ${n}×${d} and C ${v}×${d} in ${dtype} (fixture \`${r.fixture}\`` +
      `${r.generator ? `, generator ${r.generator}` : ""}${
        r.seed !== undefined ? `, seed ${r.seed}` : ""
      }), reduction ${r.reduction}, β ∈ {${_betaOrder(r).join(", ")}}.`,
  );
  const timeWhat = r.timeSource === "gpu"
    ? "median GPU time (timestamp queries)"
    : "median wall time (the adapter has no timestamp queries)";
  const measured = r.rows.filter((x) => x.timeMsSamples !== undefined);
  const counts = measured.map((x) => x.timeMsSamples!.length);
  const lo = counts.length ? Math.min(...counts) : r.reps,
    hi = counts.length ? Math.max(...counts) : r.reps;
  const cold = measured.filter((x) => x.warmup === 0).length;
  const repsWhat = lo === hi
    ? `${lo} repetition${lo === 1 ? "" : "s"}`
    : `${lo} to ${hi} repetitions per cell`;
  const longer = r.rows.filter((x) => x.timeMs !== null && x.warmup > r.warmup).length;
  const notes = [
    ...(cold > 0 && r.warmup > 0
      ? [`none for the ${cold} fwd+bwd cells measured right after their fwd and bwd`]
      : []),
    ...(longer > 0
      ? [
        `more for the ${longer} cell${longer === 1 ? "" : "s"} first measured on an idle GPU: ` +
        `at least ${IDLE_GPU_WARMUP_MS} ms of them`,
      ]
      : []),
    ...(r.idleBusyMs
      ? [
        `each method's first cell after at least ${r.idleBusyMs} ms of full GPU load, longer ` +
        `until its clock settled, since an idle GPU's clocks rise with its utilisation`,
      ]
      : []),
  ];
  const warmWhat = `${r.warmup} warm-up${notes.length ? ` (${notes.join("; ")})` : ""}`;
  lines.push(
    `- Memory: peak tracked GPU bytes above those live before the call, in MiB (the paper's ` +
      `"MB"). Time: ${timeWhat} of ${repsWhat} after ${warmWhat}.`,
  );
  lines.push(
    "- fwd = the forward (loss and saved state); bwd = the backward given a saved forward " +
      "(gradients included); fwd+bwd = both in one recorder.",
  );
  const inputBytes = (n + v) * d * DTYPE_BYTES[dtype];
  if (inputBytes <= L2_CACHE_BYTES) {
    lines.push(
      `- Cache: E and C together are ${formatMB(inputBytes)}, small enough to stay in a large ` +
        `GPU's L2 cache (${formatMB(L2_CACHE_BYTES)} on an H100/H200), so repeated calls may ` +
        "read them from cache: times at this shape are not those of a problem that streams from " +
        "memory.",
    );
  }
  const git = r.env.git;
  if (git) {
    lines.push(
      `- Source: ${
        git.commit === null ? "not a git checkout" : `git commit ${git.commit.slice(0, 12)}`
      }${
        git.dirty ? " with uncommitted changes (dirty tree)" : git.dirty === false ? ", clean" : ""
      }.`,
    );
  }
  if (r.rows.some((x) => x.method === BASELINE_METHOD)) {
    lines.push(
      "- In brackets: speed-up (the section's baseline time / this time) and memory saving " +
        "(−: less peak memory than the section's baseline, +: more) against the Baseline row of " +
        "the same section and mode.",
    );
  }
  for (const note of filterNotes(r)) lines.push(`- ${note}`);
  if (r.durationS !== undefined) lines.push(`- Whole run: ${r.durationS.toFixed(1)} s.`);
  lines.push("");
  lines.push(`| method | arithmetic | ${modes.join(" | ")} |`);
  lines.push(`| --- | --- | ${modes.map(() => "---").join(" | ")} |`);
  lines.push(
    `| Lower bound | | ${
      modes.map((m) => formatMB(lowerBoundBytes(r.shape, m, r.reduction))).join(" | ")
    } |`,
  );
  for (const beta of _betaOrder(r)) {
    lines.push(`| ${_sectionTitle(beta)} | | ${modes.map(() => "").join(" | ")} |`);
    for (const m of _sectionMethods(r, beta)) {
      const rows = r.rows.filter((x) => x.beta === beta && x.method === m);
      const label = rows[0]?.label ?? m;
      const cells = modes.map((mode) =>
        _md(formatCellVsBaseline(r, rows.find((x) => x.mode === mode)))
      );
      lines.push(`| ${_md(label)} | ${WEBGPU_ARITHMETIC} | ${cells.join(" | ")} |`);
    }
  }
  if (r.external) {
    lines.push("", ...formatExternal(r.external, modes));
    lines.push("", ...formatSameArithmetic(r));
    lines.push(...formatPeers(r.external, r.rows, r.shape, modes));
  }
  const failed = r.rows.filter((x) => x.error !== undefined);
  if (failed.length > 0) {
    lines.push("", `## Failed rows (${failed.length})`, "");
    for (const x of failed) {
      lines.push(`- ${x.method}, β = ${x.beta}, ${x.mode}: ${_md(x.error!)}`);
    }
  }
  lines.push("", "## Details", "");
  lines.push(
    "| method | β | mode | peak MiB | median ms | min ms | max ms | IQR ms | wall ms | " +
      "peak by role (MiB) | stats |",
  );
  lines.push("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |");
  const num = (x: number | null) => (x === null ? "" : _detail(x));
  for (const beta of _betaOrder(r)) {
    for (const m of _sectionMethods(r, beta)) {
      for (const x of r.rows.filter((y) => y.beta === beta && y.method === m)) {
        const roles = x.peakByRole
          ? Object.entries(x.peakByRole).filter(([, b]) => b !== 0)
            .map(([k, b]) => `${k} ${num(b / 2 ** 20)}`).join(", ")
          : "";
        const stats = x.stats
          ? Object.entries(x.stats).filter(([, s]) => s !== undefined)
            .map(([k, s]) => `${k} ${s}`).join(", ")
          : "";
        lines.push(
          `| ${m} | ${beta} | ${x.mode} | ${
            x.peakBytes === null ? "" : num(x.peakBytes / 2 ** 20)
          } | ${num(x.timeMs)} | ${num(x.timeMsMin)} | ${num(x.timeMsMax)} | ${
            num(x.timeMsIqr)
          } | ${num(x.wallMsMedian)} | ${_md(roles)} | ${
            _md(x.error ? `failed: ${x.error}` : stats)
          } |`,
        );
      }
    }
  }
  const withPasses = r.rows.filter((x) => x.passMs && Object.keys(x.passMs).length > 1);
  if (withPasses.length > 0) {
    lines.push(
      "",
      "## Where the time goes (median GPU ms per pass)",
      "",
      "| method | β | mode | passes |",
      "| --- | --- | --- | --- |",
    );
    for (const x of withPasses) {
      // per-chunk passes ("logits[3]", "dE[chunk 3]": chunked, liger) summed under one label
      // "… [chunk ×8]"
      const sums = new Map<string, { ms: number; count: number }>();
      for (const [k, ms] of Object.entries(x.passMs!)) {
        const key = k.replace(/\[(?:chunk )?\d+\]/g, "[chunk]");
        const e = sums.get(key) ?? { ms: 0, count: 0 };
        sums.set(key, { ms: e.ms + ms, count: e.count + 1 });
      }
      const parts = [...sums].map(([k, e]) =>
        `${e.count > 1 ? k.replace("[chunk]", `[chunk ×${e.count}]`) : k} ${_detail(e.ms)}`
      );
      lines.push(`| ${x.method} | ${x.beta} | ${x.mode} | ${_md(parts.join("; "))} |`);
    }
  }
  return lines.join("\n") + "\n";
}

/** The arithmetic of every WebGPU row: WGSL reaches no tensor cores; 16-bit inputs are widened. */
export const WEBGPU_ARITHMETIC = "fp32 FMA (WGSL)";

/**
 * Our rows against the external rows of the same arithmetic (PyTorch fp32 with TF32 off, named
 * `torch-<method>-fp32`): the time ratio per β and mode, and the plain product E·Cᵀ (the
 * baseline forward's product pass) against PyTorch's fp32 matmul alone. Empty without such rows.
 */
export function formatSameArithmetic(r: Table3Report): string[] {
  const x = r.external;
  if (!x) return [];
  const ext = (method: string, beta: number, mode: string) =>
    x.rows.find((e) => e.method === method && e.beta === beta && e.mode === mode);
  const out: string[] = [];
  for (const m of ["baseline", "chunked", "compiled"]) {
    for (const row of r.rows.filter((q) => q.method === m && q.timeMs !== null)) {
      const e = ext(`torch-${m}-fp32`, row.beta, row.mode);
      if (!e?.timeMs) continue;
      out.push(
        `| ${_md(row.label)} | ${row.beta} | ${row.mode} | ${row.timeMs!.toFixed(1)} | ` +
          `${e.timeMs.toFixed(1)} | ${(row.timeMs! / e.timeMs).toFixed(2)}× |`,
      );
    }
  }
  const mm = x.rows.find((e) => e.method === "torch-matmul-fp32" && e.timeMs);
  const plain = r.rows.find((q) => q.method === BASELINE_METHOD && q.mode === "fwd" && q.passMs)
    ?.passMs?.["logits = E·Cᵀ"];
  if (mm?.timeMs && plain !== undefined) {
    out.push(
      `| plain product E·Cᵀ (the baseline's logits pass) | | fwd | ${plain.toFixed(1)} | ` +
        `${mm.timeMs.toFixed(1)} | ${(plain / mm.timeMs).toFixed(2)}× |`,
    );
  }
  if (out.length === 0) return [];
  return [
    "## Same arithmetic: WebGPU against PyTorch fp32 (TF32 off) on the same card",
    "",
    "Both sides multiply in fp32 FMA (WGSL cannot reach tensor cores), so these ratios carry the " +
    "cost of the implementation, not of the arithmetic. Times in ms (medians).",
    "",
    "| row | β | mode | WebGPU ms | PyTorch fp32 ms | ratio |",
    "| --- | --- | --- | --- | --- | --- |",
    ...out,
  ];
}

/** The Markdown section of external rows: a table per β like the main one, with their environment. */
export function formatExternal(x: ExternalRows, modes: readonly Mode[]): string[] {
  const e = x.env;
  const lines = [
    `## Same-card reference rows (external: ${_md(x.source)})`,
    "",
    `Measured by ${_md(x.source)} on ${_md(String(e.device ?? "?"))} (torch ${
      _md(String(e.torch ?? "?"))
    }, CUDA ${_md(String(e.cuda ?? "?"))}, TF32 ${e.tf32 ? "on" : "off"}, ${
      _md(String(e.date ?? "?"))
    }), shape ${x.shape.n}×${x.shape.v}×${x.shape.d} ${x.shape.dtype}, fixture \`${x.fixture}\`. ` +
    "Memory: peak allocated bytes above those live before the call (torch.cuda); time: median " +
    "of CUDA-event timings. Not WebGPU: for comparison only.",
    "",
    `| method | arithmetic | β | ${modes.join(" | ")} |`,
    `| --- | --- | --- | ${modes.map(() => "---").join(" | ")} |`,
  ];
  const betas = [...new Set(x.rows.map((r) => r.beta))].sort((a, b) => b - a);
  for (const beta of betas) {
    for (const m of [...new Set(x.rows.filter((r) => r.beta === beta).map((r) => r.method))]) {
      const rows = x.rows.filter((r) => r.beta === beta && r.method === m);
      const cells = modes.map((mode) =>
        _md(formatCell(rows.find((r) => r.mode === mode) as MeasureRow | undefined))
      );
      const arith = rows[0].arithmetic ?? (e.tf32 === false ? "bf16 tensor cores" : "?");
      lines.push(
        `| ${_md(rows[0].label ?? m)} | ${_md(arith)} | ${beta} | ${cells.join(" | ")} |`,
      );
    }
  }
  return lines;
}

/** The JSON report (pretty-printed, long format). */
export function formatJson(r: Table3Report): string {
  return JSON.stringify(r, null, 2) + "\n";
}

/** Columns of the CSV report. */
export const CSV_COLUMNS = [
  "adapter",
  "n",
  "v",
  "d",
  "dtype",
  "fixture",
  "method",
  "label",
  "beta",
  "mode",
  "peak_bytes",
  "peak_mib",
  "time_ms",
  "time_source",
  "time_ms_min",
  "time_ms_max",
  "time_ms_iqr",
  "wall_ms_median",
  "reps",
  "warmup",
  "peak_input_bytes",
  "peak_workspace_bytes",
  "peak_output_bytes",
  "peak_params_bytes",
  "speedup_vs_baseline",
  "memory_saving_vs_baseline",
  "stats",
  "error",
] as const;

function _csvField(x: unknown): string {
  if (x === null || x === undefined) return "";
  const s = typeof x === "string" ? x : typeof x === "number" ? String(x) : JSON.stringify(x);
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** The CSV report: a header and one line per row (RFC 4180 quoting). */
export function formatCsv(r: Table3Report): string {
  const lines = [CSV_COLUMNS.join(",")];
  for (const x of r.rows) {
    const role = x.peakByRole;
    const vs = vsBaseline(r, x);
    lines.push(
      [
        r.env.adapter.description,
        r.shape.n,
        r.shape.v,
        r.shape.d,
        r.shape.dtype,
        r.fixture,
        x.method,
        x.label,
        x.beta,
        x.mode,
        x.peakBytes,
        x.peakBytes === null ? null : x.peakBytes / 2 ** 20,
        x.timeMs,
        x.timeSource,
        x.timeMsMin,
        x.timeMsMax,
        x.timeMsIqr,
        x.wallMsMedian,
        x.reps,
        x.warmup,
        role?.input,
        role?.workspace,
        role?.output,
        role?.params,
        vs.speedup,
        vs.memorySaving,
        x.stats && Object.keys(x.stats).length > 0 ? x.stats : null,
        x.error,
      ].map(_csvField).join(","),
    );
  }
  return lines.join("\r\n") + "\r\n";
}

/** A short note for a failed bar: the error's first word (OOM, unsupported, leak, ...). */
function _note(error: string): string {
  const m = /^([A-Za-z][\w ]*?):/.exec(error);
  return m ? m[1] : "failed";
}

/** The SVG report: time (linear) and memory (log axis) per method, one panel per mode. */
export async function renderSvg(r: Table3Report): Promise<string> {
  const betas = _betaOrder(r);
  const group = (b: number) => `β = ${b}`;
  const methods: string[] = [];
  for (const b of betas) {
    for (const m of _sectionMethods(r, b)) if (!methods.includes(m)) methods.push(m);
  }
  const labelOf = (m: string) => r.rows.find((x) => x.method === m)?.label ?? m;
  const series = methods.map(labelOf);
  const bars = (
    value: (x: MeasureRow) => number | null,
    zeroNote: string,
    range?: (x: MeasureRow) => [number | null, number | null],
  ): Bar[] =>
    r.rows.map((x) => {
      const v = x.error === undefined ? value(x) : null;
      const bar: Bar = { facet: x.mode, group: group(x.beta), series: x.label, value: v };
      if (x.error !== undefined) bar.note = _note(x.error);
      else if (v === null || v <= 0) {
        bar.value = null;
        bar.note = zeroNote;
      } else if (range) {
        const [lo, hi] = range(x);
        if (lo !== null && hi !== null && lo > 0) [bar.lo, bar.hi] = [lo, hi];
      }
      return bar;
    });
  const common = {
    facetOrder: r.modes.filter((m) => r.rows.some((x) => x.mode === m)),
    groupOrder: betas.map(group),
    seriesOrder: series,
  };
  const what = r.timeSource === "gpu" ? "GPU" : "wall";
  /** Log axis where the values span more than 10× (bars of 0.2 ms beside seconds stay visible). */
  const wantsLog = (f: (x: MeasureRow) => number | null) => {
    const v = r.rows.filter((x) => x.error === undefined).map(f)
      .filter((y): y is number => y !== null && y > 0);
    return v.length > 0 && Math.max(...v) / Math.min(...v) > 10;
  };
  const timeLog = wantsLog((x) => x.timeMs);
  const memoryLog = wantsLog((x) => x.peakBytes);
  const time = groupedBarChartSpec({
    ...common,
    bars: bars((x) => x.timeMs, "0 ms", (x) => [x.timeMsMin, x.timeMsMax]),
    valueLabel: `median ${what} time (ms${timeLog ? ", log" : ""}); bar: min–max`,
    logY: timeLog,
    title: "Time",
  });
  const memory = groupedBarChartSpec({
    ...common,
    bars: bars((x) => (x.peakBytes === null ? null : x.peakBytes / 2 ** 20), "0 B"),
    valueLabel: `peak memory (MiB${memoryLog ? ", log" : ""})`,
    logY: memoryLog,
    title: "Memory",
    rules: common.facetOrder.map((mode) => {
      const b = lowerBoundBytes(r.shape, mode, r.reduction);
      return { facet: mode, value: b / 2 ** 20, label: `lower bound ${formatMB(b)}` };
    }),
  });
  const { n, v, d, dtype } = r.shape;
  const strip = (s: object) => {
    const { $schema: _, ...rest } = s as Record<string, unknown>;
    return rest;
  };
  return await renderVegaLite(
    {
      $schema: "https://vega.github.io/schema/vega-lite/v6.json",
      title: {
        text: `Table 3 — ${r.env.adapter.description}`,
        subtitle: `N = ${n}, |V| = ${v}, D = ${d}, ${dtype}, fixture ${r.fixture}` +
          (r.reducedShape ? " (reduced shape)" : ""),
      },
      vconcat: [strip(time), strip(memory)],
    } as unknown as Parameters<typeof renderVegaLite>[0],
  );
}

/** Paths written by {@link writeReport}. */
export interface ReportPaths {
  md: string;
  json: string;
  csv: string;
  svg: string;
}

/**
 * Writes the four reports under `dir` (created if missing) as `<reportBaseName>.{md,json,csv,svg}`
 * (only the JSON with `o.jsonOnly`, as a run does after every cell): each goes to a temporary
 * name first and all are renamed once every one is written, so a failure leaves no half-written
 * file.
 */
export async function writeReport(
  r: Table3Report,
  dir: string,
  o: { jsonOnly?: boolean } = {},
): Promise<ReportPaths> {
  const contents: Partial<Record<keyof ReportPaths, string>> = o.jsonOnly
    ? { json: formatJson(r) }
    : { md: formatMarkdown(r), json: formatJson(r), csv: formatCsv(r), svg: await renderSvg(r) };
  mkdirSync(dir, { recursive: true });
  const base = join(dir, reportBaseName(r));
  const paths = {} as ReportPaths;
  const temps: [string, string][] = [];
  try {
    for (const ext of ["md", "json", "csv", "svg"] as const) {
      paths[ext] = `${base}.${ext}`;
      if (contents[ext] === undefined) continue;
      const tmp = `${base}.${ext}.tmp-${Deno.pid}`;
      temps.push([tmp, paths[ext]]);
      writeFileSync(tmp, contents[ext]!);
    }
    for (const [tmp, final] of temps) renameSync(tmp, final);
  } catch (e) {
    for (const [tmp] of temps) rmSync(tmp, { force: true });
    throw e;
  }
  return paths;
}
