/**
 * Table 3 reports: the measured rows and the environment turned into Markdown in the paper's
 * layout (a lower-bound row, a β > 0 section, a β = 0 section, cells "X MB, Y ms" with MB = MiB
 * as in the paper, each with its speed-up and memory saving against the section's baseline row),
 * JSON (long format: one row per method × β × mode, with the raw per-repetition samples, the git
 * commit and whether the tree was dirty), CSV of the rows (with adapter, shape and fixture
 * columns), and an SVG chart of time and memory per method and mode (min–max error bars, the
 * lower bound of each mode, log axes where values span more than 10×); written atomically under
 * one directory as `table3_<adapter-slug>_<n>x<v>x<d>_<dtype>.{md,json,csv,svg}` (with `_dawn`
 * after the slug for a table measured on Dawn, so that the two engines' tables of one card sit
 * side by side). Every form names the WebGPU engine and the device's kernel features.
 * @module
 */
import type { AdapterReport, GpuContext } from "../gpu/context.ts";
import { deviceSummary, type Engine, engineName } from "../gpu/engine.ts";
import { type ExternalRows, formatPeers } from "./external.ts";
import { adapterSlug, driverVersion, nvidiaDriver } from "../measure/host.ts";
import { type GitInfo, gitInfo } from "./provenance.ts";
import { DTYPE_BYTES, type Reduction } from "../core/options.ts";
import {
  failedAtRunTime,
  IDLE_GPU_WARMUP_MS,
  type MeasureRow,
  type Mode,
  MODES,
  type TimeSource,
} from "../measure/measure.ts";
import { PAPER_SHAPE, type Table3Plan, type Table3Shape } from "../measure/table3.ts";
import { passTotals } from "../measure/compare_passes.ts";
import { SPEED_RATIO_LEGEND, timesFaster } from "../measure/timing.ts";
import { formatDetail, formatMB, formatMs, formatSaving, formatSpeedup } from "./units.ts";
import type { CheckSummary } from "../measure/check.ts";
import { checkText, formatCheckSummary, isIncorrect, withCheck } from "./check_format.ts";
import { BASELINE_PRODUCT_PASS } from "../methods/baseline.ts";

export { formatMB, formatMs, formatSaving, formatSpeedup };

export { PAPER_SHAPE, type Table3Plan, type Table3Shape };

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
  /**
   * The driver: NVIDIA's version and GPU name from nvidia-smi, or Mesa's version and the adapter
   * (a software adapter); null where neither is known.
   */
  driver: { version: string; name: string } | null;
  /** The git commit of the tree and whether it had uncommitted changes (absent in old reports). */
  git?: GitInfo;
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
  /** Full GPU load (ms) run before a method's cells (MeasureOptions.busyLoad), if any. */
  idleBusyMs?: number;
  /**
   * The load ran before every cell (true), or before each method's first cell only (absent: the
   * reports measured before it ran before every cell).
   */
  busyEachCell?: boolean;
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
  /** What the correctness check compared and cost (measure/check.ts); absent when unchecked. */
  check?: CheckSummary;
}

/** L2 cache of the largest GPUs this harness targets (H100/H200: 50 MB), for the cache note. */
export const L2_CACHE_BYTES = 50 * 2 ** 20;

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
    driver: await nvidiaDriver() ?? await _mesaDriver(ctx),
    git: await gitInfo(),
  };
}

/** A Mesa driver (the software adapter's) as the report's driver, or null. */
async function _mesaDriver(ctx: GpuContext): Promise<Table3Env["driver"]> {
  const v = await driverVersion(ctx);
  return v?.startsWith("Mesa ") ? { version: v, name: ctx.report.description } : null;
}

/**
 * The least memory a mode can need: fwd = the loss (one f32, or n of them for reduction none);
 * bwd and fwd+bwd = the two gradients dE and dC in the input dtype, (n + v)·d·bytes(dtype).
 */
export function lowerBoundBytes(shape: Table3Shape, mode: Mode, reduction: Reduction): number {
  if (mode === "fwd") return reduction === "none" ? 4 * shape.n : 4;
  return (shape.n + shape.v) * shape.d * DTYPE_BYTES[shape.dtype];
}

/**
 * One table cell: "X MB, Y ms", `not run here: <why>` for a cell the method does not support on
 * this adapter or shape, or `failed: <why>`.
 */
export function formatCell(row: MeasureRow | undefined): string {
  if (!row) return "–";
  const why = _notRunReason(row);
  if (why !== undefined) return `not run here: ${why}`;
  if (row.error !== undefined) return `failed: ${row.error}`;
  return `${formatMB(row.peakBytes ?? NaN)}, ${formatMs(row.timeMs ?? NaN)}`;
}

/** The baseline row of `row`'s section (method `baseline`, same β and mode), if measured. */
function _baselineOf(r: Table3Report, row: MeasureRow): MeasureRow | undefined {
  const b = r.rows.find((x) =>
    x.method === BASELINE_METHOD && x.beta === row.beta && x.mode === row.mode
  );
  return b && b.error === undefined && !isIncorrect(b) ? b : undefined;
}

/** Name of the method every section's ratios are taken against. */
export const BASELINE_METHOD = "baseline";

/**
 * P, the plain product E·Cᵀ of a run: the baseline forward's product pass (ms), at `beta` (default
 * the first β that has it), or undefined where the report has no such pass.
 */
export function plainProductMs(r: Pick<Table3Report, "rows">, beta?: number): number | undefined {
  return r.rows.find((q) =>
    q.method === BASELINE_METHOD && q.mode === "fwd" && q.passMs &&
    (beta === undefined || q.beta === beta)
  )?.passMs?.[BASELINE_PRODUCT_PASS];
}

/**
 * Speed ({@link timesFaster}: × faster than the baseline) and memory saving (1 − this peak / baseline peak) of a row
 * against the baseline row of its section; nulls where either failed or the baseline is absent.
 */
export function vsBaseline(
  r: Table3Report,
  row: MeasureRow,
): { speedup: number | null; memorySaving: number | null } {
  const b = _baselineOf(r, row);
  // a row that failed its correctness check is not ranked
  if (!b || row.error !== undefined || isIncorrect(row) || row.method === BASELINE_METHOD) {
    return { speedup: null, memorySaving: null };
  }
  const speedup = timesFaster(b.timeMs, row.timeMs);
  const memorySaving = b.peakBytes !== null && row.peakBytes !== null && b.peakBytes > 0
    ? 1 - row.peakBytes / b.peakBytes
    : null;
  return { speedup, memorySaving };
}

/**
 * What every speed ratio of the project's reports means: × faster than the baseline, > 1 faster.
 */
export const SPEED_LEGEND = `Speed: ${SPEED_RATIO_LEGEND}. In brackets after each cell: its ` +
  "speed and memory saving (−: less peak memory than the baseline, +: more) against the " +
  "Baseline row of the same section and mode.";

/** A cell with its ratios against the section's baseline: `1.1 MB, 24.3 ms (1.7× faster, −96% mem)`. */
export function formatCellVsBaseline(r: Table3Report, row: MeasureRow | undefined): string {
  const cell = row ? withCheck(formatCell(row), row) : formatCell(row);
  if (!row) return cell;
  const { speedup, memorySaving } = vsBaseline(r, row);
  const parts: string[] = [];
  if (speedup !== null) parts.push(`${formatSpeedup(speedup)} faster`);
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
  for (const beta of betaOrder(r)) {
    const rows = r.rows.filter((x) =>
      x.beta === beta && x.mode !== "fwd" && x.error === undefined && !/nofilter/.test(x.method) &&
      typeof x.stats?.tilesTotal === "number" && x.stats.tilesTotal > 0 &&
      typeof x.stats.tilesSkipped === "number"
    );
    if (rows.length === 0) continue;
    const first = rows.find((x) => x.method === "fused") ?? rows[0];
    const skipped = first.stats!.tilesSkipped as number, total = first.stats!.tilesTotal as number;
    const what = `${first.method} skipped ${skipped.toLocaleString("en-US")} of ` +
      `${total.toLocaleString("en-US")} tiles (${(100 * skipped / total).toFixed(1)}%)` +
      (first.stats!.filterSampled === 1
        ? ", estimated from its filter's sample (the first eighth of the rows), after which " +
          "both gradients took dense products"
        : "");
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
export const reportSlug = adapterSlug;

/**
 * What file names add for an engine: nothing for Deno's built-in one (the names reports have
 * always had), `_dawn` for Dawn, `_dawn-unchecked` for Dawn with its robustness off.
 */
export function engineTag(engine: Engine | undefined): string {
  return engine === undefined || engine === "deno" ? "" : `_${engine}`;
}

/** `table3_<adapter-slug>[_dawn]_<n>x<v>x<d>_<dtype>` for a report. */
export function reportBaseName(r: Pick<Table3Report, "env" | "shape">): string {
  const { n, v, d, dtype } = r.shape;
  const slug = reportSlug(r.env.adapter) + engineTag(r.env.adapter.engine);
  return `table3_${slug}_${n}x${v}x${d}_${dtype}`;
}

/** Rows of `beta`, methods in the paper's order. */
export function sectionMethods(r: Table3Report, beta: number): string[] {
  const names = [...new Set(r.rows.filter((x) => x.beta === beta).map((x) => x.method))];
  const rank = (m: string) => {
    const i = METHOD_ORDER.indexOf(m);
    return i < 0 ? METHOD_ORDER.length + names.indexOf(m) : i;
  };
  return names.sort((a, b) => rank(a) - rank(b));
}

/** β values in section order: those > 0 in the order given, then β = 0. */
export function betaOrder(r: Table3Report): number[] {
  const bs = [...new Set([...r.betas, ...r.rows.map((x) => x.beta)])];
  return [...bs.filter((b) => b > 0), ...bs.filter((b) => b === 0)];
}

function _md(s: string): string {
  return s.replace(/\|/g, "\\|").replace(/\s*\n\s*/g, " ");
}

function _sectionTitle(beta: number): string {
  return beta > 0 ? `**β > 0 (β = ${beta})**` : "**β = 0**";
}

/** The Markdown report: header, the table in the paper's layout, failed rows, details. */
export function formatMarkdown(r: Table3Report): string {
  const modes = r.modes.length > 0 ? r.modes : [...MODES];
  const lines = [..._headerLines(r), "", ..._tableLines(r, modes)];
  if (r.external) {
    lines.push("", ...formatExternal(r.external, modes));
    lines.push("", ...formatSameArithmetic(r));
    lines.push(...formatPeers(r.external, r.rows, r.shape, modes));
  }
  const incorrect = r.rows.filter(isIncorrect);
  if (incorrect.length > 0) {
    lines.push("", `## Incorrect rows (${incorrect.length}): not ranked`, "");
    for (const x of incorrect) {
      lines.push(`- ${x.method}, β = ${x.beta}, ${x.mode}: ${_md(checkText(x))}`);
    }
  }
  const failed = r.rows.filter(failedAtRunTime);
  if (failed.length > 0) {
    lines.push("", `## Failed rows (${failed.length})`, "");
    for (const x of failed) {
      lines.push(`- ${x.method}, β = ${x.beta}, ${x.mode}: ${_md(x.error!)}`);
    }
  }
  // cells a method does not support here (tensor cores without subgroup matrices, ...): one line
  // per method and reason
  const notRun = new Map<string, { method: string; why: string; cells: string[] }>();
  for (const x of r.rows) {
    const why = _notRunReason(x);
    if (why === undefined) continue;
    const e = notRun.get(`${x.method}\n${why}`) ?? { method: x.method, why, cells: [] };
    e.cells.push(`β = ${x.beta} ${x.mode}`);
    notRun.set(`${x.method}\n${why}`, e);
  }
  if (notRun.size > 0) {
    lines.push("", "## Not run on this adapter", "");
    for (const { method, why, cells } of notRun.values()) {
      const which = _notRunAnywhere(r, method)
        ? "every cell; left out of the table"
        : cells.join(", ");
      lines.push(`- ${_md(`${method}: ${why}`)} (${which})`);
    }
  }
  lines.push("", "## Details", "", ..._detailLines(r), ..._passLines(r));
  return lines.join("\n") + "\n";
}

/** The title, the partial and reduced-shape notes, and the bullets on how it was measured. */
function _headerLines(r: Table3Report): string[] {
  const { n, v, d, dtype } = r.shape;
  const a = r.env.adapter;
  const kind = a.isFallbackAdapter ? "software (fallback) adapter" : "hardware adapter";
  const lines: string[] = [];
  lines.push(
    `# Table 3: N = ${n.toLocaleString("en-US")}, |V| = ${v.toLocaleString("en-US")}, ` +
      `D = ${d.toLocaleString("en-US")}, ${dtype}, fixture \`${r.fixture}\` on ${
        _md(a.description)
      }, ${engineName(a.engine)}`,
  );
  lines.push("");
  if (r.complete === false) {
    const planned = r.plan
      ? ` of ${r.plan.betas.length * r.plan.methods.length * r.plan.modes.length}`
      : "";
    lines.push(
      `> **Partial report.** The run was interrupted: ${r.rows.length}${planned} cells ` +
        "measured. `./dev task table3 --resume <this report's .json>` measures the rest.",
      "",
    );
  }
  if (r.reducedShape) lines.push(`> **Reduced shape.** ${_md(r.reducedShape)}`, "");
  const driver = r.env.driver ? `, driver ${r.env.driver.version} (${r.env.driver.name})` : "";
  lines.push(
    `- Adapter: ${_md(a.description)} (${kind}; vendor ${a.vendor || "?"}, architecture ` +
      `${a.architecture || "?"}${driver}); Deno ${r.env.deno.deno}, ${r.env.os}; ${r.env.date}.`,
  );
  lines.push(`- WebGPU: ${_md(deviceSummary(a))}.`);
  lines.push(
    `- Problem: E ${n}×${d} and C ${v}×${d} in ${dtype} (fixture \`${r.fixture}\`` +
      `${r.generator ? `, generator ${r.generator}` : ""}${
        r.seed !== undefined ? `, seed ${r.seed}` : ""
      }), reduction ${r.reduction}, β ∈ {${betaOrder(r).join(", ")}}.`,
  );
  lines.push(_measuredLine(r));
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
  if (r.rows.some((x) => x.method === BASELINE_METHOD)) lines.push(`- ${SPEED_LEGEND}`);
  if (r.rows.some((x) => x.check) || r.check) {
    lines.push(`- ${_md(formatCheckSummary(r.check, r.durationS))}`);
  }
  for (const note of filterNotes(r)) lines.push(`- ${note}`);
  if (r.durationS !== undefined) lines.push(`- Whole run: ${r.durationS.toFixed(1)} s.`);
  return lines;
}

/** The bullet on what memory and time are, with the repetitions and warm-up. */
function _measuredLine(r: Table3Report): string {
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
        `${r.busyEachCell ? "every" : "each method's first"} cell after at least ${r.idleBusyMs} ` +
        `ms of full GPU load, longer ` +
        `until its clock settled, since an idle GPU's clocks rise with its utilisation`,
      ]
      : []),
  ];
  const warmWhat = `${r.warmup} warm-up${notes.length ? ` (${notes.join("; ")})` : ""}`;
  return `- Memory: peak tracked GPU bytes above those live before the call, in MiB (the ` +
    `paper's "MB"). Time: ${timeWhat} of ${repsWhat} after ${warmWhat}.`;
}

/** Why the method does not run `row`'s cell on this adapter, or undefined (ran, or failed). */
function _notRunReason(row: MeasureRow): string | undefined {
  return row.error !== undefined && !failedAtRunTime(row)
    ? row.error.replace(/^unsupported: /, "")
    : undefined;
}

/** Whether every cell of method `m` is one it does not support on this adapter. */
function _notRunAnywhere(r: Table3Report, m: string): boolean {
  const rows = r.rows.filter((x) => x.method === m);
  return rows.length > 0 && rows.every((x) => _notRunReason(x) !== undefined);
}

/** The table in the paper's layout: the lower bound, then a section per β. */
function _tableLines(r: Table3Report, modes: readonly Mode[]): string[] {
  const lines = [
    `| method | arithmetic | ${modes.join(" | ")} |`,
    `| --- | --- | ${modes.map(() => "---").join(" | ")} |`,
    `| Lower bound | | ${
      modes.map((m) => formatMB(lowerBoundBytes(r.shape, m, r.reduction))).join(" | ")
    } |`,
  ];
  for (const beta of betaOrder(r)) {
    lines.push(`| ${_sectionTitle(beta)} | | ${modes.map(() => "").join(" | ")} |`);
    for (const m of sectionMethods(r, beta)) {
      const rows = r.rows.filter((x) => x.beta === beta && x.method === m);
      // a method that could run no cell on this adapter is one line under "Not run on this
      // adapter" instead of a row of reasons
      if (_notRunAnywhere(r, m)) continue;
      const label = rows[0]?.label ?? m;
      const cells = modes.map((mode) =>
        _md(formatCellVsBaseline(r, rows.find((x) => x.mode === mode)))
      );
      const arith = rows[0]?.arithmetic ?? WEBGPU_ARITHMETIC;
      lines.push(`| ${_md(label)} | ${_md(arith)} | ${cells.join(" | ")} |`);
    }
  }
  return lines;
}

/** The details table: every figure of every row. */
function _detailLines(r: Table3Report): string[] {
  const lines = [
    "| method | β | mode | peak MiB | median ms | min ms | max ms | IQR ms | wall ms | " +
    "peak by role (MiB) | check | stats |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
  ];
  const num = (x: number | null) => (x === null ? "" : formatDetail(x));
  for (const beta of betaOrder(r)) {
    for (const m of sectionMethods(r, beta)) {
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
          } | ${num(x.wallMsMedian)} | ${_md(roles)} | ${_md(checkText(x))} | ${
            _md(x.error ? formatCell(x) : stats)
          } |`,
        );
      }
    }
  }
  return lines;
}

/** Where the time goes: the median GPU time of each pass, per-chunk passes summed. */
function _passLines(r: Table3Report): string[] {
  const withPasses = r.rows.filter((x) => x.passMs && Object.keys(x.passMs).length > 1);
  if (withPasses.length === 0) return [];
  const lines = [
    "",
    "## Where the time goes (median GPU ms per pass)",
    "",
    "| method | β | mode | passes |",
    "| --- | --- | --- | --- |",
  ];
  for (const x of withPasses) {
    // per-chunk passes ("logits[3]", "dE[chunk 3]": chunked, liger) summed under one label
    // "… [chunk ×8]"
    const parts = [...passTotals(x.passMs!)].map(([k, e]) =>
      `${e.count > 1 ? k.replace("[chunk]", `[chunk ×${e.count}]`) : k} ${formatDetail(e.ms)}`
    );
    lines.push(`| ${x.method} | ${x.beta} | ${x.mode} | ${_md(parts.join("; "))} |`);
  }
  return lines;
}

/**
 * The arithmetic of a WebGPU row without its own ({@link LceMethod.arithmetic}): fp32 FMA, 16-bit
 * inputs widened; only the tensor-core rows (Dawn's subgroup matrices) differ.
 */
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
  const plain = plainProductMs(r);
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
    "Both sides multiply in fp32 FMA (these WGSL rows use no tensor cores), so these ratios carry the " +
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
