/**
 * Data and SVG of the paper's Figure 4 as reconstructed here: the normalised entropy gap
 * (log|V| − B)/log|V| of the LM-head entropy lower bound B (see entropy_bound.ts) against the
 * hidden size D on a log axis, one line per vocabulary size (and per ρ).
 * @module
 */
import { check } from "../core/errors.ts";
import { lineChart } from "../report/svg.ts";
import { boxMinEntropy } from "./entropy_bound.ts";

/** Options of {@link figure4Data}. */
export interface Figure4Options {
  /** Values of ρ = σ_W·σ_h (default [0.1]). */
  rho?: readonly number[];
  /** Vocabulary sizes (default 32000, 128256, 256000: Llama 2, Llama 3, Gemma). */
  vocabSizes?: readonly number[];
  /** Smallest hidden size (default 64). */
  dMin?: number;
  /** Largest hidden size (default 8192). */
  dMax?: number;
  /** Hidden sizes per line, log-spaced and rounded to integers (default 49). */
  points?: number;
}

/** One point of a Figure 4 line. */
export interface Figure4Point {
  /** Hidden size D. */
  hiddenSize: number;
  /** Logit bound a = ρ√D. */
  logitBound: number;
  /** Entropy lower bound B (nats). */
  bound: number;
  /** (log|V| − B)/log|V|. */
  gap: number;
  /** Tokens at +a in the minimising logit vertex. */
  topCount: number;
}

/** One line of Figure 4. */
export interface Figure4Series {
  /** Legend label. */
  label: string;
  /** |V|. */
  vocabSize: number;
  /** ρ. */
  rho: number;
  /** log|V| (nats). */
  logVocab: number;
  /** Points in increasing D. */
  points: Figure4Point[];
}

/** The plotted numbers of Figure 4 (written as JSON beside the SVG). */
export interface Figure4Data {
  /** What the figure shows. */
  description: string;
  /** Hidden sizes evaluated. */
  hiddenSizes: number[];
  /** The lines. */
  series: Figure4Series[];
}

/** Default vocabulary sizes of Figure 4. */
export const FIGURE4_VOCABS: readonly number[] = [32000, 128256, 256000];

/** Log-spaced integer hidden sizes from dMin to dMax (both included, duplicates removed). */
export function hiddenSizeGrid(dMin: number, dMax: number, points: number): number[] {
  check(Number.isInteger(dMin) && dMin >= 1, `dMin must be a positive integer, got ${dMin}`);
  check(Number.isInteger(dMax) && dMax >= dMin, `dMax must be an integer ≥ dMin, got ${dMax}`);
  check(Number.isInteger(points) && points >= 2, `points must be an integer ≥ 2, got ${points}`);
  const out = new Set<number>();
  for (let i = 0; i < points; i++) {
    out.add(Math.round(dMin * (dMax / dMin) ** (i / (points - 1))));
  }
  return [...out].sort((a, b) => a - b);
}

/** Computes the lines of Figure 4. */
export function figure4Data(o: Figure4Options = {}): Figure4Data {
  const rhos = o.rho ?? [0.1];
  const vocabs = o.vocabSizes ?? FIGURE4_VOCABS;
  check(rhos.length > 0, "at least one rho is needed");
  check(vocabs.length > 0, "at least one vocabulary size is needed");
  for (const r of rhos) check(r > 0 && r < Infinity, `rho must be finite and > 0, got ${r}`);
  for (const v of vocabs) {
    check(Number.isInteger(v) && v >= 2, `vocabulary sizes must be integers ≥ 2, got ${v}`);
  }
  const ds = hiddenSizeGrid(o.dMin ?? 64, o.dMax ?? 8192, o.points ?? 49);
  const series: Figure4Series[] = [];
  for (const rho of rhos) {
    for (const v of vocabs) {
      const logV = Math.log(v);
      const points = ds.map((d) => {
        const a = rho * Math.sqrt(d);
        const m = boxMinEntropy({ logitBound: a, vocabSize: v });
        return {
          hiddenSize: d,
          logitBound: a,
          bound: m.entropy,
          gap: (logV - m.entropy) / logV,
          topCount: m.topCount,
        };
      });
      const label = `|V| = ${v.toLocaleString("en-US")}` + (rhos.length > 1 ? `, ρ = ${rho}` : "");
      series.push({ label, vocabSize: v, rho, logVocab: logV, points });
    }
  }
  return {
    description: "Normalised entropy gap (log|V| − B)/log|V| of the LM-head entropy lower bound " +
      "B = min entropy of softmax(z) over |z_v| ≤ ρ·√D (reconstruction of Theorem 4.2 of " +
      "Huang, Lu & Zeng 2025; see calibration/entropy_bound.ts)",
    hiddenSizes: ds,
    series,
  };
}

/** Figure 4 as an SVG string (x: D on a log axis with power-of-two ticks; y: gap in [0, 1]). */
export async function figure4Svg(data: Figure4Data): Promise<string> {
  const ds = data.hiddenSizes;
  const ticks: number[] = [];
  for (let t = 2 ** Math.ceil(Math.log2(ds[0])); t <= ds[ds.length - 1]; t *= 2) ticks.push(t);
  const rhos = [...new Set(data.series.map((s) => s.rho))];
  return await lineChart({
    title: "Figure 4 (reconstructed): normalised entropy gap vs hidden size",
    subtitle: [
      "(log|V| − B)/log|V|, B = minimum entropy of softmax(z) with |z_v| ≤ ρ·√D" +
      (rhos.length === 1 ? `, ρ = ${rhos[0]}` : ""),
      "0: the head cannot leave the uniform distribution; 1: it can become fully confident",
    ],
    xLabel: "hidden size D",
    yLabel: "normalised entropy gap",
    logX: true,
    xTicks: ticks,
    xDomain: [ds[0], ds[ds.length - 1]],
    yDomain: [0, 1],
    legendTitle: "vocabulary",
    points: false,
    series: data.series.map((s) => ({
      label: s.label,
      x: s.points.map((p) => p.hiddenSize),
      y: s.points.map((p) => p.gap),
    })),
  });
}
