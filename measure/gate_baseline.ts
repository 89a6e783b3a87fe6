/**
 * The gate's baseline files: one complete gate run per host (adapter, WebGPU engine, driver and,
 * on a software adapter, CPU model) in `reports/gate_baseline_<adapter>_<engine>_<host>.json`,
 * read with every field checked (a file that does not parse into complete results is bad input
 * naming its first bad field), written so that an update reads as a short diff, and chosen for a
 * run: the baseline of the run's own host when there is one (memory, parity and time are gated),
 * else the nearest other one (memory and parity only; the gate says so on its last line).
 * @module
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { writeAtomic } from "../io/outputs.ts";
import { join } from "node:path";
import { InputError, oneLine } from "../core/errors.ts";
import { slug } from "../core/slug.ts";
import { MODES } from "./timing.ts";
import {
  GATE_THRESHOLDS,
  type GateAdapter,
  type GateRun,
  hostText,
  resultKey,
  timeHostKey,
} from "./gate_suites.ts";

/** Where committed baselines live. */
export const BASELINE_DIR = "reports";

/** The file name of a host's baseline: `gate_baseline_<adapter>_<engine>_<driver and CPU>.json`. */
export function baselineName(a: GateAdapter): string {
  const host = slug([a.driver ?? "driver unknown", a.host ?? ""].join(" "));
  return `gate_baseline_${a.slug}_${a.engine ?? "deno"}_${host}.json`;
}

/** The path of a host's baseline in `dir`. */
export function baselinePath(a: GateAdapter, dir = BASELINE_DIR): string {
  return join(dir, baselineName(a));
}

type _Check = (x: unknown) => string | undefined;

const _isObj = (x: unknown): x is Record<string, unknown> =>
  x !== null && typeof x === "object" && !Array.isArray(x);
const _str: _Check = (x) => typeof x === "string" ? undefined : "must be a string";
const _optStr: _Check = (x) =>
  x === undefined || typeof x === "string" ? undefined : "must be a string";
const _num: _Check = (x) =>
  typeof x === "number" && Number.isFinite(x) ? undefined : "must be a number";
const _numOrNull: _Check = (x) =>
  x === null || (typeof x === "number" && Number.isFinite(x))
    ? undefined
    : "must be a number or null";
const _posInt: _Check = (x) =>
  Number.isInteger(x) && (x as number) >= 1 ? undefined : "must be a positive integer";

/** The first bad field of `o` against `fields`, as `path: what`, or undefined. */
function _fields(o: unknown, path: string, fields: Record<string, _Check>): string | undefined {
  if (!_isObj(o)) return `${path} must be an object`;
  for (const [k, check] of Object.entries(fields)) {
    const why = check(o[k]);
    if (why !== undefined) {
      return o[k] === undefined
        ? `${path}.${k} is missing (it ${why})`
        : `${path}.${k} ${why}, got ${JSON.stringify(o[k])}`;
    }
  }
  return undefined;
}

/** The first bad field of a mode result. */
function _mode(m: unknown, path: string): string | undefined {
  const bad = _fields(m, path, {
    peakBytes: _numOrNull,
    timeRatio: _numOrNull,
    timeMs: _numOrNull,
    error: _optStr,
    ratios: (x) =>
      Array.isArray(x) && x.every((r) => typeof r === "number" && Number.isFinite(r))
        ? undefined
        : "must be a list of numbers",
  });
  if (bad) return bad;
  const r = m as Record<string, unknown>;
  if (r.error === undefined && r.peakBytes === null) {
    return `${path}.peakBytes is null without an error`;
  }
  return undefined;
}

/** The first bad field of one result. */
function _result(r: unknown, path: string): string | undefined {
  const bad = _fields(r, path, {
    fixture: _str,
    n: _posInt,
    v: _posInt,
    d: _posInt,
    dtype: (x) =>
      ["bf16", "f16", "f32"].includes(x as string) ? undefined : "must be bf16, f16 or f32",
    method: _str,
    beta: (x) =>
      typeof x === "number" && x >= 0 && x <= 1 ? undefined : "must be a number in [0, 1]",
    yardstickMs: _numOrNull,
    error: _optStr,
    parity: (x) => x === null || _isObj(x) ? undefined : "must be an object or null",
    modes: (x) => _isObj(x) ? undefined : "must be an object of modes",
  });
  if (bad) return bad;
  const o = r as Record<string, unknown>;
  if (o.parity !== null) {
    // an infinite error (NaN output) is written to JSON as null
    const p = _fields(o.parity, `${path}.parity`, {
      loss: _numOrNull,
      dE: _numOrNull,
      dC: _numOrNull,
    });
    if (p) return p;
  }
  const modes = o.modes as Record<string, unknown>;
  const names = Object.keys(modes);
  const unknown = names.find((m) => !(MODES as readonly string[]).includes(m));
  if (unknown !== undefined) return `${path}.modes has an unknown mode '${unknown}'`;
  if (o.error === undefined && names.length === 0) {
    return `${path}.modes is empty without an error`;
  }
  if (o.error === undefined && o.parity === null) return `${path}.parity is null without an error`;
  for (const m of names) {
    const why = _mode(modes[m], `${path}.modes.${m}`);
    if (why) return why;
  }
  return undefined;
}

/** The first bad field of a gate run read from JSON, or undefined when it is complete. */
export function badRunField(b: unknown): string | undefined {
  const bad = _fields(b, "file", {
    version: (x) => x === 1 ? undefined : "must be 1",
    suite: _str,
    adapter: (x) => _isObj(x) ? undefined : "must be an object",
    env: (x) => _isObj(x) ? undefined : "must be an object",
    rounds: _posInt,
    results: (x) => Array.isArray(x) && x.length > 0 ? undefined : "must be a non-empty list",
  });
  if (bad) return bad.replace(/^file\./, "");
  const o = b as Record<string, unknown>;
  const a = _fields(o.adapter, "adapter", {
    slug: _str,
    description: _str,
    isFallbackAdapter: (x) => typeof x === "boolean" ? undefined : "must be true or false",
    timeSource: (x) =>
      ["gpu", "wall", "cpu"].includes(x as string) ? undefined : "must be gpu, wall or cpu",
    host: _optStr,
    engine: _optStr,
    driver: _optStr,
  });
  if (a) return a;
  const e = _fields(o.env, "env", { deno: _str, os: _str, date: _str });
  if (e) return e;
  const results = o.results as unknown[];
  for (let i = 0; i < results.length; i++) {
    const why = _result(results[i], `results[${i}]`);
    if (why) return why;
  }
  return undefined;
}

/** Reads and checks a baseline file; InputError naming the file and its first bad field. */
export function readBaseline(path: string): GateRun {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new InputError(`cannot read baseline ${path}: ${oneLine(e)}`);
  }
  let b: GateRun;
  try {
    b = JSON.parse(text);
  } catch (e) {
    throw new InputError(`baseline ${path} is not JSON: ${(e as Error).message.split("\n")[0]}`);
  }
  if (_isObj(b) && b.complete === false) {
    throw new InputError(
      `baseline ${path} is the partial file of an interrupted --update (complete: false); ` +
        "finish it with --update --resume",
    );
  }
  const bad = badRunField(b);
  if (bad !== undefined) throw new InputError(`baseline ${path}: ${bad}`);
  return b;
}

/**
 * A run as the baseline file's JSON: one field per line, each list of numbers (the per-round
 * ratios) on one line, so that a baseline update reads as a short diff.
 */
export function formatBaseline(run: GateRun): string {
  return JSON.stringify(run, null, 1).replace(
    /\[\s*(-?[\d.e+-]+(?:,\s*-?[\d.e+-]+)*)\s*\]/g,
    (_, nums: string) => `[${nums.split(/,\s*/).join(", ")}]`,
  ) + "\n";
}

/** A baseline chosen for a run, and whether its times can be compared with the run's. */
export interface ChosenBaseline {
  path: string;
  run: GateRun;
  /** Same host ({@link timeHostKey}): times are gated. */
  sameHost: boolean;
}

/** Every baseline file in `dir` (each checked), in name order. */
export function readBaselines(dir = BASELINE_DIR): { path: string; run: GateRun }[] {
  let names: string[] = [];
  try {
    names = readdirSync(dir).filter((f) => /^gate_baseline_.+\.json$/.test(f)).sort();
  } catch {
    names = [];
  }
  return names.map((f) => ({ path: join(dir, f), run: readBaseline(join(dir, f)) }));
}

/**
 * The baseline of suite `suite` for a run on `a` among `files`: the one of the same host (time
 * gated); else of the same adapter and engine, of the same kind of adapter and engine, of the
 * same kind (memory and parity only); undefined when there is none of the suite.
 */
export function chooseBaseline(
  files: readonly { path: string; run: GateRun }[],
  a: GateAdapter,
  suite: string,
): ChosenBaseline | undefined {
  const ofSuite = files.filter((f) => f.run.suite === suite);
  const key = timeHostKey(a);
  const engine = (x: GateAdapter) => x.engine ?? "deno";
  const tiers: ((x: GateAdapter) => boolean)[] = [
    (x) => timeHostKey(x) === key,
    (x) => x.slug === a.slug && engine(x) === engine(a),
    (x) => x.isFallbackAdapter === a.isFallbackAdapter && engine(x) === engine(a),
    (x) => x.isFallbackAdapter === a.isFallbackAdapter,
  ];
  for (const [i, tier] of tiers.entries()) {
    const f = ofSuite.find((x) => tier(x.run.adapter));
    if (f) return { ...f, sameHost: i === 0 };
  }
  return undefined;
}

/** What a partial `--update` run must match to be resumed. */
export interface PartialExpect {
  suite: string;
  adapter: GateAdapter;
  rounds: number;
  methods: readonly string[];
}

/** The results of a partial --update run to resume; InputError unless it is this run's. */
export function readPartialRun(path: string, want: PartialExpect): GateRun["results"] {
  let b: GateRun;
  try {
    b = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new InputError(`--resume ${path}: cannot read a partial gate run: ${oneLine(e)}`);
  }
  if (!(_isObj(b) && b.version === 1 && Array.isArray(b.results) && b.complete === false)) {
    throw new InputError(
      `--resume ${path}: not the partial file of a gate --update (complete: false)`,
    );
  }
  const bad = b.results.length === 0 ? undefined : badRunField(b);
  if (bad !== undefined) throw new InputError(`--resume ${path}: ${bad}`);
  const same = (what: string, have: unknown, expect: unknown) => {
    if (have !== expect) {
      throw new InputError(`--resume ${path}: ${what} ${have} in the file, ${expect} asked`);
    }
  };
  same("suite", b.suite, want.suite);
  same("host", timeHostKey(b.adapter), timeHostKey(want.adapter));
  same("rounds", b.rounds, want.rounds);
  const names = new Set(want.methods);
  const extra = b.results.find((r) => !names.has(r.method));
  if (extra !== undefined) {
    throw new InputError(
      `--resume ${path}: method ${extra.method} in the file is not among --methods`,
    );
  }
  return b.results;
}

/**
 * The baseline a run compares with: the one given (its suite must be the run's, except for an
 * update, which then compares with nothing), else this host's in {@link BASELINE_DIR}, else the
 * nearest ({@link chooseBaseline}). InputError when there is none and this is not an update.
 */
export function baselineFor(o: {
  given?: { path: string; run: GateRun };
  adapter: GateAdapter;
  suite: string;
  update: boolean;
  dir?: string;
}): ChosenBaseline | undefined {
  const { given, adapter, suite } = o;
  if (given) {
    if (given.run.suite !== suite && !o.update) {
      throw new InputError(
        `baseline ${given.path} holds suite '${given.run.suite}', not '${suite}'`,
      );
    }
    const sameHost = timeHostKey(given.run.adapter) === timeHostKey(adapter);
    return given.run.suite === suite ? { ...given, sameHost } : undefined;
  }
  const dir = o.dir ?? BASELINE_DIR;
  const chosen = chooseBaseline(readBaselines(dir), adapter, suite);
  if (!chosen && !o.update) {
    throw new InputError(
      `no gate baseline of suite '${suite}' in ${dir}/ for ${hostText(adapter)} (expected ` +
        `${baselinePath(adapter, dir)}); create it with ./dev task gate --update`,
    );
  }
  return chosen;
}

/** Results and modes of a run that failed at run time (not `unsupported`), as text. */
export function failedResults(run: GateRun): string[] {
  const failed = (e?: string) => e !== undefined && !e.startsWith("unsupported:");
  return run.results.flatMap((r) => {
    if (failed(r.error)) return [`${resultKey(r)}: ${r.error}`];
    return Object.entries(r.modes).filter(([, m]) => failed(m?.error))
      .map(([mode, m]) => `${resultKey(r)} ${mode}: ${m!.error}`);
  });
}

/** The parity errors of a run above the absolute limit, as text (a baseline must have none). */
export function parityOverLimit(run: GateRun, limit = GATE_THRESHOLDS.parityMaxErr): string[] {
  return run.results.flatMap((r) =>
    r.parity
      ? (["loss", "dE", "dC"] as const).filter((a) => !((r.parity![a] ?? Infinity) <= limit))
        .map((a) => `${r.method} β=${r.beta} ${r.fixture} ${a} ${r.parity![a]}`)
      : []
  );
}

/**
 * Writes `run` as the baseline at `path`, atomically, unless a parity error is above the
 * absolute limit (then nothing is written and the reason is returned). With `measured` (only
 * some methods were measured), the other methods' entries of the baseline already there (`own`,
 * or the file at `path`) are kept.
 */
export function writeBaseline(
  path: string,
  run: GateRun,
  o: { own?: GateRun; measured?: readonly string[] } = {},
): string | undefined {
  const over = parityOverLimit(run);
  if (over.length) {
    return `not writing ${path}: parity error above ${GATE_THRESHOLDS.parityMaxErr}: ` +
      over.join("; ");
  }
  const failed = failedResults(run);
  if (failed.length) {
    return `not writing ${path}: ${failed.length} result${failed.length === 1 ? "" : "s"} ` +
      `failed (a baseline holds what runs): ${failed.slice(0, 3).join("; ")}` +
      (failed.length > 3 ? "; …" : "");
  }
  const own = o.own ?? (existsSync(path) ? readBaseline(path) : undefined);
  if (o.measured && own && own.suite === run.suite) {
    const measured = new Set(o.measured);
    run.results.push(...own.results.filter((r) => !measured.has(r.method)));
  }
  writeAtomic(path, formatBaseline(run));
  return undefined;
}
