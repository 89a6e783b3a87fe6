/**
 * Rows measured outside this harness on the same card by `scripts/torch_peers.py`: the PyTorch
 * baseline, torch.compile, chunked and matmul rows, and the seeds' own systems (the paper's
 * Triton kernel, Cut Cross-Entropy, Liger-Kernel), with the accuracy of each against float64.
 * Read from its JSON so a Table 3 report can show WebGPU, PyTorch and those systems side by side,
 * clearly labelled as external; {@link formatPeers} is the report's section on the systems.
 * @module
 */
import { readFileSync } from "node:fs";
import { check, InputError } from "../core/errors.ts";
import type { MeasureRow, Mode } from "../measure/measure.ts";
import { isIncorrect } from "./check_format.ts";

/** One external cell (same units as the harness: bytes and milliseconds). */
export interface ExternalRow {
  method: string;
  label?: string;
  beta: number;
  mode: "fwd" | "bwd" | "fwd+bwd";
  peakBytes?: number | null;
  timeMs?: number | null;
  timeMsMin?: number;
  timeMsMax?: number;
  error?: string;
  /** The arithmetic of its products, e.g. "bf16 tensor cores" or "fp32 FMA (TF32 off)". */
  arithmetic?: string;
  /** The package it comes from: `pytorch`, `paper-cce`, `apple-cce` or `liger-kernel`. */
  system?: string;
  /** The package's version, and commit where known. */
  version?: string;
  /** Whether its forward already computes dE and dC (its bwd then only scales them). */
  gradsInForward?: boolean;
  /** What the row's figures mean where that is not obvious. */
  note?: string;
  /** Why the system cannot run this cell (e.g. "no label smoothing"): not measured, not failed. */
  unsupported?: string;
  external: true;
}

/** One external system: how it was called and from which package. */
export interface ExternalSystem {
  label: string;
  package: string;
  /** Version (and commit) of the package, or why it was not found. */
  version: string;
  arithmetic: string;
  gradsInForward: boolean;
  labelSmoothing: boolean;
  note?: string;
}

/** A gradient against its float64 reference. */
export interface GradientError {
  /** ‖x − ref‖₂ / ‖ref‖₂ (null: not finite). */
  relL2?: number | null;
  /** max |x − ref| (null: not finite). */
  maxAbs?: number | null;
  /** max |ref|, the scale of maxAbs. */
  refMaxAbs?: number | null;
  /** Elements that are NaN or infinite. */
  nonFinite?: number;
  /** The call produced no such gradient. */
  missing?: boolean;
}

/** The accuracy of one row (method, β) on one data set, against float64. */
export interface AccuracyEntry {
  method: string;
  beta: number;
  fixture: string;
  loss?: { value: number | null; reference: number | null; relErr: number | null };
  dE?: GradientError;
  dC?: GradientError;
  /**
   * On the offset data with β > 0: the fraction of the −β/|V|·Σ_v C_v term of dE the row lost,
   * read from dE's bias along the offset (0: none lost, 1: all).
   */
  droppedSmoothing?: number | null;
  /** What the backward kernel of a cut_cross_entropy package received. */
  kernel?: { kernel: string; filterEps: number | null; vocabSorted: boolean };
  error?: string;
  unsupported?: string;
}

/** What a gradient filter could skip on one data set and β (computed from float64 logits). */
export interface FixtureStats {
  fixture: string;
  beta: number;
  eps: number;
  tile: string;
  entriesBelowEps: number;
  tilesSkippableSorted: number;
  tilesSkippableUnsorted: number;
}

/** The accuracy part of an external file. */
export interface ExternalAccuracy {
  shape: { n: number; v: number; d: number; dtype: string };
  seed: number;
  /** Data-set name → how it is made. */
  fixtures: Record<string, string>;
  entries: AccuracyEntry[];
  fixtureStats: FixtureStats[];
}

/** An external rows file. */
export interface ExternalRows {
  /** Where the rows come from (the file given). */
  source: string;
  env: Record<string, unknown>;
  shape: { n: number; v: number; d: number; dtype: string };
  fixture: string;
  /** The PyTorch reference rows (torch-baseline, torch-compiled, …). */
  rows: ExternalRow[];
  /** The external systems' rows (those named in `systems`), apart from the PyTorch rows. */
  peers?: ExternalRow[];
  /** Each external system by name. */
  systems?: Record<string, ExternalSystem>;
  accuracy?: ExternalAccuracy;
}

/** Reads and validates an external rows file; InputError naming the file otherwise. */
export function readExternalRows(path: string): ExternalRows {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new InputError(
      `${path}: cannot read external rows: ${(e as Error).message.split("\n")[0]}`,
    );
  }
  const x = raw as Partial<ExternalRows>;
  check(x && typeof x === "object" && Array.isArray(x.rows), `${path}: no "rows" array`);
  check(x.shape && typeof x.shape.n === "number", `${path}: no "shape" {n, v, d, dtype}`);
  for (const [i, r] of x.rows!.entries()) {
    check(
      typeof r.method === "string" && typeof r.beta === "number" &&
        ["fwd", "bwd", "fwd+bwd"].includes(r.mode),
      `${path}: row ${i} lacks method, beta or mode`,
    );
    r.external = true;
  }
  if (x.accuracy !== undefined) {
    check(
      Array.isArray(x.accuracy.entries) && x.accuracy.shape &&
        typeof x.accuracy.shape.n === "number",
      `${path}: "accuracy" lacks its shape or entries`,
    );
    for (const [i, a] of x.accuracy.entries.entries()) {
      check(
        typeof a.method === "string" && typeof a.beta === "number" &&
          typeof a.fixture === "string",
        `${path}: accuracy entry ${i} lacks method, beta or fixture`,
      );
    }
  }
  const systems = x.systems ?? {};
  const isPeer = (r: ExternalRow) => Object.hasOwn(systems, r.method);
  return {
    source: path.split("/").pop() ?? path,
    env: x.env ?? {},
    shape: x.shape!,
    fixture: x.fixture ?? "?",
    rows: x.rows!.filter((r) => !isPeer(r)),
    ...(x.systems ? { peers: x.rows!.filter(isPeer), systems } : {}),
    ...(x.accuracy ? { accuracy: x.accuracy } : {}),
  };
}

/**
 * Our rows nearest to each external system: [our method, their method]. Ours and Ours + tile map
 * against the paper's kernel and Cut Cross-Entropy, the no-filter ablation against theirs, the
 * Fused Version against the paper's fused kernel, the Liger-style row against Liger.
 */
export const PEER_PAIRS: readonly (readonly [string, string])[] = [
  ["fused", "paper-ours"],
  ["fused-tilemap", "paper-ours"],
  ["fused", "paper-filter"],
  ["fused-tilemap", "paper-filter"],
  ["fused-nofilter", "paper-nofilter"],
  ["fused-fb", "paper-fused"],
  ["fused-fb-nofilter", "paper-fused-nofilter"],
  ["fused", "cce"],
  ["fused-tilemap", "cce"],
  ["fused-nofilter", "cce-nofilter"],
  ["liger", "liger"],
  // the tensor-core rows (Dawn) against the same systems, on tensor cores on both sides
  ["fused-tc", "paper-ours"],
  ["fused-tilemap-tc", "paper-ours"],
  ["fused-tc", "paper-filter"],
  ["fused-tilemap-tc", "paper-filter"],
  ["fused-tc", "cce"],
  ["fused-tilemap-tc", "cce"],
];

function _md(s: string): string {
  return s.replace(/\|/g, "\\|").replace(/\n/g, " ");
}

/** MiB as the paper's "MB": `1,161 MB`, `4.2 MB`, `0.09 MB`. */
function _mb(bytes: number): string {
  const mib = bytes / 2 ** 20;
  if (mib === 0) return "0 MB";
  const digits = mib >= 100
    ? { maximumFractionDigits: 0 }
    : mib >= 1
    ? { minimumFractionDigits: 1, maximumFractionDigits: 1 }
    : { maximumSignificantDigits: 2 };
  return `${mib.toLocaleString("en-US", digits)} MB`;
}

function _ms(ms: number): string {
  return ms >= 1
    ? `${ms.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 })} ms`
    : `${ms.toLocaleString("en-US", { maximumSignificantDigits: 2 })} ms`;
}

/** A number in short scientific form (`2.5e-3`), `0` for zero, `–` where absent. */
function _sci(x: number | null | undefined): string {
  if (x === null || x === undefined) return "–";
  if (x === 0) return "0";
  return x.toExponential(1).replace("e+", "e");
}

const SCALING_ONLY = "scaling only";

/** One cell of an external system: "X MB, Y ms", why it did not run, or why it failed. */
export function formatPeerCell(row: ExternalRow | undefined): string {
  if (!row) return "–";
  if (row.unsupported !== undefined) return row.unsupported;
  if (row.error !== undefined) return `failed: ${row.error}`;
  if (typeof row.timeMs !== "number" || typeof row.peakBytes !== "number") return "–";
  const cell = `${_mb(row.peakBytes)}, ${_ms(row.timeMs)}`;
  return row.gradsInForward && row.mode === "bwd" ? `${cell} (${SCALING_ONLY})` : cell;
}

function _betas(rows: readonly { beta: number }[]): number[] {
  return [...new Set(rows.map((r) => r.beta))].sort((a, b) => b - a);
}

function _peerTable(x: ExternalRows, modes: readonly Mode[]): string[] {
  const peers = x.peers ?? [];
  const e = x.env;
  const lines = [
    `## The seeds' systems on this card (external: ${_md(x.source)})`,
    "",
    `Measured by ${_md(x.source)} on ${_md(String(e.device ?? "?"))} (torch ${
      _md(String(e.torch ?? "?"))
    }, triton ${_md(String(e.triton ?? "?"))}, ${_md(String(e.date ?? "?"))}), shape ` +
    `${x.shape.n}×${x.shape.v}×${x.shape.d} ${x.shape.dtype}, the same data recipe (\`${
      _md(x.fixture)
    }\`) as the PyTorch rows: each system's own Python package, unchanged, run in its own ` +
    "process. Memory: peak allocated bytes above those live before the call (torch.cuda); " +
    "time: median of CUDA-event timings. Not WebGPU: for comparison only.",
    "",
    `| system | arithmetic | β | ${modes.join(" | ")} |`,
    `| --- | --- | --- | ${modes.map(() => "---").join(" | ")} |`,
  ];
  const order = Object.keys(x.systems ?? {});
  const rank = (m: string) => order.indexOf(m) < 0 ? order.length : order.indexOf(m);
  for (const beta of _betas(peers)) {
    const methods = [...new Set(peers.filter((r) => r.beta === beta).map((r) => r.method))];
    for (const m of methods.sort((a, b) => rank(a) - rank(b))) {
      const rows = peers.filter((r) => r.beta === beta && r.method === m);
      const cells = modes.map((mode) => _md(formatPeerCell(rows.find((r) => r.mode === mode))));
      lines.push(
        `| ${_md(rows[0].label ?? m)} (\`${m}\`) | ${_md(rows[0].arithmetic ?? "?")} | ${beta} | ${
          cells.join(" | ")
        } |`,
      );
    }
  }
  if (peers.some((r) => r.gradsInForward)) {
    lines.push(
      "",
      `${SCALING_ONLY}: the system's forward computes the loss and both gradients, so its bwd ` +
        "only scales them by the upstream gradient (NA in the paper's table).",
    );
  }
  lines.push("", "Packages and calls:", "");
  for (const [name, s] of Object.entries(x.systems ?? {})) {
    lines.push(
      `- \`${name}\`: ${_md(s.version)}${s.note ? `. ${_md(s.note)}` : ""}.`,
    );
  }
  return lines;
}

function _gradient(g: GradientError | undefined, key: "relL2" | "maxAbs"): string {
  if (!g) return "–";
  if (g.missing) return "none";
  if (g.nonFinite) return `${g.nonFinite.toLocaleString("en-US")} non-finite`;
  return _sci(g[key]);
}

function _kernel(a: AccuracyEntry): string {
  if (!a.kernel) return "";
  const eps = a.kernel.filterEps === null ? "None" : _sci(a.kernel.filterEps);
  return `filter_eps ${eps}${a.kernel.vocabSorted ? ", vocabulary sorted" : ""}`;
}

function _accuracyTable(acc: ExternalAccuracy): string[] {
  const s = acc.shape;
  const lines = [
    `### Accuracy against float64 (${s.n}×${s.v}×${s.d} ${s.dtype}, seed ${acc.seed})`,
    "",
    "Each row's loss, dE and dC from one call on fresh inputs, against the same inputs in " +
    "float64 (PyTorch's cross_entropy with label_smoothing = β); relative L2 errors and largest " +
    "absolute errors. Data sets:",
    "",
    ...Object.entries(acc.fixtures).map(([k, v]) => `- \`${_md(k)}\`: ${_md(v)}.`),
  ];
  for (const f of acc.fixtureStats) {
    lines.push(
      `- Filter headroom on \`${_md(f.fixture)}\`, β = ${f.beta}: ${
        (100 * f.entriesBelowEps).toFixed(2)
      }% of ∂loss/∂z entries below eps = ${_sci(f.eps)}; ${
        (100 * f.tilesSkippableSorted).toFixed(1)
      }% of ${f.tile} tiles entirely below it with the vocabulary sorted by mean logit, ${
        (100 * f.tilesSkippableUnsorted).toFixed(1)
      }% in its own order.`,
    );
  }
  lines.push(
    "",
    "| row | β | data | loss rel. err. | dE rel. L2 | dC rel. L2 | dE max abs | dC max abs | " +
      "−β/\\|V\\| lost | backward kernel received |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  );
  for (const beta of _betas(acc.entries)) {
    for (const a of acc.entries.filter((x) => x.beta === beta)) {
      const head = `| \`${_md(a.method)}\` | ${beta} | ${_md(a.fixture)} |`;
      const why = a.unsupported ?? (a.error !== undefined ? `failed: ${a.error}` : undefined);
      if (why !== undefined) {
        lines.push(`${head} ${_md(why)} | | | | | | |`);
        continue;
      }
      const lost = typeof a.droppedSmoothing === "number" ? a.droppedSmoothing.toFixed(2) : "";
      lines.push(
        `${head} ${_sci(a.loss?.relErr)} | ${_gradient(a.dE, "relL2")} | ${
          _gradient(a.dC, "relL2")
        } | ${_gradient(a.dE, "maxAbs")} | ${_gradient(a.dC, "maxAbs")} | ${lost} | ${
          _md(_kernel(a))
        } |`,
      );
    }
  }
  if (acc.entries.some((a) => typeof a.droppedSmoothing === "number")) {
    lines.push(
      "",
      "−β/|V| lost: on the offset data the exact dE does not depend on the offset m, while a " +
        "backward that skips a tile drops its −β/|V|·C_v terms and so adds (β·f/N)·m to every " +
        "dE row, f the fraction of the vocabulary skipped; the column is f read from dE's " +
        "error along m (0: nothing lost; rounding ∂loss/∂z to 16 bits leaves a few thousandths).",
    );
  }
  return lines;
}

function _ratioCell(o: MeasureRow | undefined, t: ExternalRow | undefined): string | undefined {
  // a cell that failed its correctness check gets no ratio
  if (!o || o.timeMs === null || isIncorrect(o) || typeof t?.timeMs !== "number") return undefined;
  return `${_ms(o.timeMs)} / ${_ms(t.timeMs)} = ${(o.timeMs / t.timeMs).toFixed(2)}×`;
}

function _ratioTable(x: ExternalRows, ours: readonly MeasureRow[], modes: readonly Mode[]) {
  const out: string[] = [];
  for (const [mine, theirs] of PEER_PAIRS) {
    for (const beta of _betas(ours.filter((r) => r.method === mine))) {
      const find = <T extends { method: string; beta: number; mode: string }>(
        rows: readonly T[],
        method: string,
        mode: Mode,
      ) => rows.find((r) => r.method === method && r.beta === beta && r.mode === mode);
      const cells = modes.map((m) =>
        _ratioCell(find(ours, mine, m), find(x.peers ?? [], theirs, m))
      );
      if (cells.every((c) => c === undefined)) continue;
      const label = ours.find((r) => r.method === mine)!.label;
      const their = (x.peers ?? []).find((r) => r.method === theirs)?.label ?? theirs;
      out.push(
        `| ${_md(label)} | ${_md(their)} (\`${theirs}\`) | ${beta} | ${
          cells.map((c) => c ?? "–").join(" | ")
        } |`,
      );
    }
  }
  return out;
}

/**
 * The report's section on the seeds' systems: their time and memory per β and mode, the
 * accuracy of every external row against float64, and the time of our nearest row over theirs
 * ({@link PEER_PAIRS}; only where both were measured at the same shape). Empty when the
 * external file has neither systems nor accuracy.
 */
export function formatPeers(
  x: ExternalRows,
  ours: readonly MeasureRow[],
  shape: { n: number; v: number; d: number; dtype: string },
  modes: readonly Mode[],
): string[] {
  const lines: string[] = [];
  if ((x.peers ?? []).length > 0) lines.push("", ..._peerTable(x, modes));
  if (x.accuracy && x.accuracy.entries.length > 0) {
    if (lines.length === 0) lines.push("", "## Accuracy of the same-card rows");
    lines.push("", ..._accuracyTable(x.accuracy));
  }
  if ((x.peers ?? []).length === 0) return lines;
  const same = x.shape.n === shape.n && x.shape.v === shape.v && x.shape.d === shape.d &&
    x.shape.dtype === shape.dtype;
  const ratios = same ? _ratioTable(x, ours, modes) : [];
  lines.push("", "### Our rows against the seeds' systems", "");
  if (!same) {
    lines.push(
      `Not compared: the systems were measured at ${x.shape.n}×${x.shape.v}×${x.shape.d} ` +
        `${x.shape.dtype}, this table at ${shape.n}×${shape.v}×${shape.d} ${shape.dtype}.`,
    );
  } else if (ratios.length === 0) {
    lines.push("No row of ours and of a system was measured at the same β and mode.");
  } else {
    lines.push(
      "Our WGSL rows (fp32 FMA; the tensor-core rows on f16 tensor cores through Dawn) against " +
        "the system each follows, same β and mode: our time / theirs = the ratio (above 1: ours " +
        "is slower). Medians; a cell that failed its correctness check has none.",
      "",
      `| our row | system | β | ${modes.join(" | ")} |`,
      `| --- | --- | --- | ${modes.map(() => "---").join(" | ")} |`,
      ...ratios,
    );
  }
  return lines;
}
