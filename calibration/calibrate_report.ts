/**
 * The text and JSON of `calibrate`: the summary line, the non-empty bins, entropy calibration
 * before and after a temperature fit, the fit's result, and the --json document.
 * @module
 */
import type { CalibrationReport } from "./metrics.ts";
import { FIT_RTOL, type TemperatureFit, type TemperaturePoint } from "./temperature.ts";

/** The five headline numbers of one temperature, as in the --json document. */
function _headline(p: TemperaturePoint) {
  return {
    nll: p.nll,
    ece: p.report.ece,
    rmsce: p.report.rmsce,
    entropy: p.report.meanEntropy,
    accuracy: p.report.accuracy,
  };
}

/** Per-bin statistics of one temperature: reliability and entropy calibration. */
function _binStats(p: TemperaturePoint, m: number) {
  const r = p.report.perBin[m], h = p.entropy.perBin[m];
  const num = (x: number) => (Number.isNaN(x) ? null : x);
  return {
    count: r.count,
    accuracy: num(r.accuracy),
    confidence: num(r.confidence),
    entropy: num(h.entropy),
    nll: num(h.nll),
    gap: num(h.gap),
  };
}

/** What a calibration was run on, for the --json document. */
export interface CalibrationJob {
  x: { n: number; v: number; d: number };
  source: Record<string, unknown>;
  dtype: string;
  opts: { beta: number; softcap?: number; ignoreIndex: number };
  bins: number;
  temperature: number;
}

/** The --json document: {temperature, before, after?, tokens, bins, env}. */
export function calibrationJson(
  job: CalibrationJob,
  adapter: string,
  before: TemperaturePoint,
  fit: TemperatureFit<TemperaturePoint> | undefined,
) {
  const after = fit?.point;
  return {
    temperature: after?.temperature ?? before.temperature,
    before: _headline(before),
    ...(after === undefined ? {} : { after: _headline(after) }),
    tokens: before.report.count,
    bins: before.report.perBin.map((b, m) => ({
      lo: b.lo,
      hi: b.hi,
      before: _binStats(before, m),
      ...(after === undefined ? {} : { after: _binStats(after, m) }),
    })),
    env: {
      description: "before: statistics of the logits divided by the temperature given " +
        "(--temperature, default 1); after: at the fitted T* (mean NLL minimised, β = 0). " +
        "nll and entropy in nats; gap = entropy − nll (< 0: over-confident); ece, rmsce and " +
        "accuracy as fractions; bins: equal-width confidence bins (lo, hi] of the tokens at " +
        "each temperature. Computed from the fused forward's per-token statistics, without " +
        "the n×|V| logits.",
      adapter,
      deno: Deno.version.deno,
      os: `${Deno.build.os}-${Deno.build.arch}`,
      source: job.source,
      shape: { n: job.x.n, v: job.x.v, d: job.x.d },
      dtype: job.dtype,
      beta: job.opts.beta,
      softcap: job.opts.softcap ?? null,
      ignoreIndex: job.opts.ignoreIndex,
      bins: job.bins,
      startTemperature: job.temperature,
      fit: fit === undefined ? null : {
        rtol: FIT_RTOL,
        forwards: fit.evaluations,
        bracket: fit.bracket,
        trace: fit.trace,
      },
    },
  };
}

/** Entropy calibration: mean entropy against mean NLL, overall and per non-empty bin. */
export function entropyLines(before: TemperaturePoint, after?: TemperaturePoint): string {
  const f = (x: number) => x.toFixed(4);
  const sgn = (x: number) => (x >= 0 ? "+" : "−") + f(Math.abs(x));
  const one = (p: TemperaturePoint) =>
    `mean entropy ${f(p.entropy.meanEntropy)} nats, mean NLL ${f(p.entropy.meanNll)} nats, ` +
    `gap (entropy − NLL) ${sgn(p.entropy.gap)} nats (${
      Math.abs(p.entropy.gap) < 5e-5
        ? "balanced"
        : p.entropy.gap < 0
        ? "over-confident"
        : "under-confident"
    })`;
  const lines = [`entropy calibration at T = ${before.temperature}: ${one(before)}`];
  if (after !== undefined) {
    lines.push(`entropy calibration at T* = ${after.temperature.toPrecision(6)}: ${one(after)}`);
  }
  const head = after === undefined ? "" : "   gap at T*";
  lines.push(`  bin            tokens   entropy       NLL       gap${head}`);
  before.entropy.perBin.forEach((b, m) => {
    if (b.count === 0) return;
    const a = after?.entropy.perBin[m];
    const tail = a === undefined ? "" : a.count === 0 ? "           -" : sgn(a.gap).padStart(12);
    lines.push(
      `  (${b.lo.toFixed(3)}, ${b.hi.toFixed(3)}]  ${String(b.count).padStart(6)}  ` +
        `${f(b.entropy).padStart(8)}  ${f(b.nll).padStart(8)}  ${sgn(b.gap).padStart(8)}${tail}`,
    );
  });
  if (after !== undefined) {
    lines.push("  (bins hold the tokens by their confidence at T; at T* they move to other bins)");
  }
  return lines.join("\n");
}

/** The fit's result: T* and the headline numbers before and after. */
export function fitLines(before: TemperaturePoint, fit: TemperatureFit<TemperaturePoint>): string {
  const pct = (x: number) => `${(100 * x).toFixed(2)}%`.padStart(8);
  const row = (label: string, p: TemperaturePoint) =>
    `  ${label.padEnd(20)} ${p.nll.toFixed(5).padStart(9)}  ${pct(p.report.ece)}  ` +
    `${pct(p.report.rmsce)}  ${p.report.meanEntropy.toFixed(5).padStart(9)}  ` +
    `${pct(p.report.accuracy)}`;
  return [
    `temperature fit: T* = ${fit.temperature.toPrecision(6)} minimises the mean NLL ` +
    `(relative tolerance ${FIT_RTOL}, ${fit.evaluations} fused forwards, bracket ` +
    `[${fit.bracket.map((x) => x.toPrecision(4)).join(", ")}])`,
    `  ${"".padEnd(20)} ${"NLL".padStart(9)}  ${"ECE".padStart(8)}  ${"RMSCE".padStart(8)}  ` +
    `${"entropy".padStart(9)}  ${"accuracy".padStart(8)}`,
    row(`before (T = ${before.temperature})`, before),
    row(`after (T* = ${fit.temperature.toPrecision(4)})`, fit.point),
  ].join("\n");
}

/** One-line summary of a report. */
export function calibrationSummary(r: CalibrationReport, meanLoss: number): string {
  const pct = (x: number) => `${(100 * x).toFixed(2)}%`;
  return `ECE ${pct(r.ece)} (${r.bins} bins), RMSCE ${pct(r.rmsce)}, accuracy ${
    pct(r.accuracy)
  }, ` +
    `mean confidence ${pct(r.meanConfidence)}, N = ${r.count} tokens, ` +
    `mean entropy ${r.meanEntropy.toFixed(4)} nats, mean loss ${meanLoss.toFixed(4)}`;
}

/** The non-empty bins as a small table. */
export function binTable(r: CalibrationReport): string {
  const lines = ["  bin            tokens  accuracy  confidence"];
  for (const b of r.perBin) {
    if (b.count === 0) continue;
    lines.push(
      `  (${b.lo.toFixed(3)}, ${b.hi.toFixed(3)}]  ${String(b.count).padStart(6)}  ` +
        `${b.accuracy.toFixed(4).padStart(8)}  ${b.confidence.toFixed(4).padStart(10)}`,
    );
  }
  return lines.join("\n");
}
