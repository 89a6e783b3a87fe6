/**
 * One `calibrate` job: the statistics of the fused forward at a temperature T (and at the fitted
 * T* when asked), printed as text, and the files it writes — the reliability diagram and its
 * JSON (`--out`), the --json document — built in memory so that they are written all or nothing.
 * @module
 */
import { join } from "node:path";
import type { GpuContext } from "../gpu/context.ts";
import type { Dtype, HostInputs, LceOptions } from "../core/options.ts";
import type { OutputFile } from "../io/outputs.ts";
import { streamingCalibration } from "./streaming.ts";
import {
  prepareTemperatureScan,
  scaledInputs,
  type TemperatureFit,
  type TemperaturePoint,
} from "./temperature.ts";
import { reliabilityDiagram } from "./reliability_svg.ts";
import {
  binTable,
  calibrationJson,
  calibrationSummary,
  entropyLines,
  fitLines,
} from "./calibrate_report.ts";

/** What to calibrate and where the results go. */
export interface CalibrateJob {
  x: HostInputs;
  /** Where the inputs came from (fixture and seed, or the files), for the reports. */
  source: Record<string, unknown>;
  dtype: Dtype;
  opts: LceOptions;
  bins: number;
  /** Directory of the diagram and its JSON, with their file name stem. */
  out?: string;
  name: string;
  temperature: number;
  /** Also fit T*. */
  fit: boolean;
  /** Path of the --json document. */
  json?: string;
}

/** The statistics of a job: at T, at T* (with the fit), and the label-smoothed mean loss. */
export interface CalibrateResult {
  before: TemperaturePoint;
  fit?: TemperatureFit<TemperaturePoint>;
  /** Mean label-smoothed loss at T (β > 0), else the NLL. */
  meanLoss: number;
}

/** Measures a job on `ctx`: fused forwards only, no logits. */
export async function runCalibration(ctx: GpuContext, job: CalibrateJob): Promise<CalibrateResult> {
  const t = job.temperature;
  // the label-smoothed loss of the summary line needs a pass with β; the rest is β = 0 (NLL)
  let smoothedLoss: number | undefined;
  if (job.opts.beta !== 0) {
    const at = scaledInputs(job.x, t, job.opts.softcap);
    smoothedLoss = (await streamingCalibration(ctx, at.x, {
      dtype: job.dtype,
      beta: job.opts.beta,
      softcap: at.softcap,
      ignoreIndex: job.opts.ignoreIndex,
      bins: job.bins,
    })).tokens.meanLoss;
  }
  const scan = await prepareTemperatureScan(ctx, job.x, {
    dtype: job.dtype,
    softcap: job.opts.softcap,
    ignoreIndex: job.opts.ignoreIndex,
    bins: job.bins,
  });
  try {
    const before = await scan.at(t);
    const fit = job.fit ? await scan.fit({ start: t }) : undefined;
    return { before, fit, meanLoss: smoothedLoss ?? before.nll };
  } finally {
    scan.destroy();
  }
}

/** The text of a result: the problem, the summary, the bins, entropy calibration and the fit. */
export function calibrationText(job: CalibrateJob, r: CalibrateResult, adapter: string): string {
  const { n, v, d } = job.x;
  const what = job.source.kind === "fixture"
    ? `fixture ${job.source.fixture} (seed ${job.source.seed})`
    : `${job.source.e}, ${job.source.c}, ${job.source.targets}`;
  const t = job.temperature;
  const lines = [
    `calibration of ${what}: n = ${n}, |V| = ${v}, d = ${d}, ${job.dtype}, β = ${job.opts.beta}` +
    `${job.opts.softcap === undefined ? "" : `, softcap ${job.opts.softcap}`}` +
    `${t === 1 ? "" : `, temperature ${t}`}; fused forward on ${adapter}`,
    calibrationSummary(r.before.report, r.meanLoss),
    binTable(r.before.report),
    entropyLines(r.before, r.fit?.point),
  ];
  if (r.fit !== undefined) lines.push(fitLines(r.before, r.fit));
  return lines.join("\n");
}

/** The files of a result: the diagram and its JSON (with `out`), the --json document. */
export async function calibrationFiles(
  job: CalibrateJob,
  r: CalibrateResult,
  adapter: string,
): Promise<OutputFile[]> {
  const files: OutputFile[] = [];
  const { before } = r;
  const after = r.fit?.point;
  const report = before.report;
  if (job.out !== undefined) {
    const { n, v, d } = job.x;
    const label = job.source.kind === "fixture" ? `${job.source.fixture} fixture` : "inputs";
    const tag = (p: TemperaturePoint) => `T = ${p.temperature.toPrecision(5)}`;
    const series = after === undefined ? [{ label, report }] : [
      { label: `${label}, ${tag(before)}`, report },
      { label: `${label}, fitted ${tag(after)}`, report: after.report },
    ];
    const svg = await reliabilityDiagram({
      series,
      title: `Reliability diagram (fused forward, no logits): n = ${n}, |V| = ${v}, d = ${d}`,
    });
    const json = {
      description: "Calibration from the fused forward's per-token statistics (confidence = " +
        "exp(max logit − LSE), correct = argmax == target, entropy = LSE − Σ p·z); the n×|V| " +
        "logits are never materialised. Ignored targets are left out.",
      source: job.source,
      shape: { n, v, d },
      dtype: job.dtype,
      beta: job.opts.beta,
      softcap: job.opts.softcap ?? null,
      ignoreIndex: job.opts.ignoreIndex,
      temperature: job.temperature,
      adapter,
      meanLoss: r.meanLoss,
      ...report,
    };
    const base = join(job.out, `calibration_${job.name}`);
    files.push({ path: `${base}.svg`, bytes: svg }, {
      path: `${base}.json`,
      bytes: JSON.stringify(json, null, 1) + "\n",
    });
  }
  if (job.json !== undefined) {
    const doc = calibrationJson(job, adapter, before, r.fit);
    files.push({ path: job.json, bytes: JSON.stringify(doc, null, 1) + "\n" });
  }
  return files;
}
