/**
 * What the regression gate measures and records (measure/gate.ts): the suites (cases, β values,
 * modes, rounds), the thresholds in force, and the shape of a run and of its results (the
 * committed baseline is one run as JSON).
 * @module
 */
import type { Dtype } from "../core/options.ts";
import { type Mode, MODES, type TimeSource } from "./timing.ts";

export type { TimeSource };

/** One problem of the suite: fixture, shape and storage dtype. */
export interface GateCase {
  /** Fixture name (fixtures/mod.ts). */
  fixture: string;
  n: number;
  v: number;
  d: number;
  dtype: Dtype;
}

/** A suite: the cases, β values and rounds every method is measured with. */
export interface GateSuite {
  /** Name (`--suite`). */
  name: string;
  cases: readonly GateCase[];
  /** Label smoothing values; each method runs at each. */
  betas: readonly number[];
  /** Modes measured. */
  modes: readonly Mode[];
  /** Timed rounds per method and β (the baseline uses {@link UPDATE_ROUNDS_FACTOR} times more). */
  rounds: number;
  /**
   * Methods whose results may be on one side only (in the run and not in the baseline, or the
   * other way round) without failing the gate: e.g. a method only some engines offer. Every
   * other result on one side only fails.
   */
  optionalMethods?: readonly string[];
}

/**
 * The CI suite: two fixtures at a small shape with odd sizes (no dimension a multiple of a tile),
 * every mode, β = 0.1 and β = 0, in bf16 (the paper's dtype). Every method of the registry, 7
 * timed rounds each: about three minutes on Mesa lavapipe with two shared cores.
 */
export const CI_SUITE: GateSuite = {
  name: "ci",
  cases: [
    { fixture: "cce", n: 96, v: 1000, d: 48, dtype: "bf16" },
    { fixture: "llm", n: 96, v: 1000, d: 48, dtype: "bf16" },
  ],
  betas: [0.1, 0],
  modes: MODES,
  rounds: 7,
};

/** A tiny suite for the gate's own tests: one case, β = 0.1, 5 rounds (seconds per method). */
export const TINY_SUITE: GateSuite = {
  name: "tiny",
  cases: [{ fixture: "cce", n: 24, v: 130, d: 16, dtype: "bf16" }],
  betas: [0.1],
  modes: MODES,
  rounds: 5,
};

/** The suites by name (`--suite`). */
export const SUITES: Readonly<Record<string, GateSuite>> = { ci: CI_SUITE, tiny: TINY_SUITE };

/** The baseline is measured with this many times the suite's rounds (a steadier median). */
export const UPDATE_ROUNDS_FACTOR = 2;

/** Seed of every fixture of the gate. */
export const GATE_SEED = 0;

/** The gate's limits (see measure/gate.ts's module documentation). */
export interface GateThresholds {
  /** A mode's time ratio regresses beyond this many times the baseline ratio. */
  timeThreshold: number;
  /**
   * The sign test's bar: the rounds must have q_i above it significantly often (1: slower than
   * the baseline at all; `timeThreshold`: beyond the threshold — stricter, less power).
   */
  timeSignBar: number;
  /** Significance level of the one-sided sign test over rounds. */
  timeAlpha: number;
  /** Least growth of the median ratio that counts (in yardsticks). */
  timeMinDelta: number;
  /** Largest parity error of any method (relative to the array's max |value|). */
  parityMaxErr: number;
  /** Parity error may grow to parityGrowth × the baseline's error + parityFloor. */
  parityGrowth: number;
  /** See parityGrowth. */
  parityFloor: number;
}

/**
 * The limits in force. Time: over 12 runs of the unchanged tree on lavapipe with two shared
 * cores, the 1296 per-mode median q had a log spread of 7.6% and a maximum of 1.49 (one cell;
 * three above 1.3), so 1.5 — with the sign test and the re-run behind it — passes noise, while a
 * 2× slowdown (median q ≈ 2) is caught in every cell. `parityMaxErr` is 5e-2 because the methods
 * that store logits in bf16 (chunked, compiled) have errors up to 1.7e-2 of the scale; the f32
 * methods sit near 1e-6, where the growth rule (1.5× + 1e-5) is what guards them.
 */
export const GATE_THRESHOLDS: GateThresholds = {
  timeThreshold: 1.5,
  timeSignBar: 1,
  timeAlpha: 0.05,
  timeMinDelta: 0.1,
  parityMaxErr: 5e-2,
  parityGrowth: 1.5,
  parityFloor: 1e-5,
};

/** Parity errors of one method run (max abs error over the array's max |value|). */
export interface ParityErrors {
  loss: number;
  dE: number;
  dC: number;
}

/** One mode of a measured method. */
export interface GateModeResult {
  /** Exact tracked peak bytes above the inputs (null when the mode failed). */
  peakBytes: number | null;
  /** Median of the per-round ratios method / yardstick. */
  timeRatio: number | null;
  /** The per-round ratios, in round order. */
  ratios: number[];
  /** Median time of the mode, ms (informational). */
  timeMs: number | null;
  /** Why the mode failed. */
  error?: string;
}

/** One method at one β on one case: its parity and every mode. */
export interface GateResult extends GateCase {
  method: string;
  beta: number;
  /** Parity errors, null when the method could not run. */
  parity: ParityErrors | null;
  /** Median yardstick time over the rounds, ms (informational). */
  yardstickMs: number | null;
  /** The modes measured. */
  modes: Partial<Record<Mode, GateModeResult>>;
  /** Why the method could not run at all (unsupported, failed parity run, ...). */
  error?: string;
}

/**
 * The adapter a run or baseline was measured on, and the host whose time profile its times
 * follow: times are compared only between runs of the same adapter, time source, WebGPU engine,
 * driver and (on a software adapter) CPU model ({@link timeHostKey}).
 */
export interface GateAdapter {
  /** File-name slug of the adapter's description (report/table3.ts). */
  slug: string;
  description: string;
  isFallbackAdapter: boolean;
  /** Where times come from. */
  timeSource: TimeSource;
  /**
   * On a software adapter, the host's CPU model: that adapter's kernels run on the CPU, and their
   * times relative to the yardstick move with its microarchitecture (on one AMD EPYC host, with
   * the same code, the fused forwards took up to 1.9× and the fused-fb backwards up to 2.4× the
   * yardsticks of a baseline measured on another host). Absent on hardware adapters and where
   * the model cannot be read.
   */
  host?: string;
  /** The WebGPU engine (`deno`: wgpu, `dawn`); absent in files of before engines: `deno`. */
  engine?: string;
  /** The engine and its version, e.g. "wgpu (Deno 2.9.6)". */
  engineVersion?: string;
  /** The driver and its version, e.g. "Mesa 25.0.7-2~bpo12+1" or "NVIDIA 580.95.05". */
  driver?: string;
}

/** The identity of a host's time profile: runs with the same key can compare their times. */
export function timeHostKey(a: GateAdapter): string {
  return [a.slug, a.timeSource, a.engine ?? "deno", a.driver ?? "?", a.host ?? ""].join("|");
}

/** The host of a run in a few words: CPU model (or adapter), driver and engine. */
export function hostText(a: GateAdapter): string {
  return `${a.host ?? a.description} (${a.driver ?? "driver unknown"}, ${a.engine ?? "deno"})`;
}

/** A gate run; the baseline file holds one (JSON). */
export interface GateRun {
  /** File format version. */
  version: 1;
  suite: string;
  adapter: GateAdapter;
  /** Deno version, OS, date (ISO 8601). */
  env: { deno: string; os: string; date: string };
  /** Timed rounds per method. */
  rounds: number;
  /** Thresholds in force when it was measured (informational). */
  thresholds: GateThresholds;
  results: GateResult[];
  /** False in the partial file of a `--update` that is still running or was interrupted. */
  complete?: boolean;
}

/** The key of a result: fixture, shape, dtype, method and β (the mode and adapter are outside). */
export function resultKey(r: GateCase & { method: string; beta: number }): string {
  return `${r.fixture} ${r.n}x${r.v}x${r.d} ${r.dtype} ${r.method} β=${r.beta}`;
}
