/**
 * The checks of scripts/tc_check.ts, the correctness run of the tensor-core rows on a GPU (where
 * Dawn distrusts f16 on the driver, their numbers count only once checked there): each method on
 * a list of cases against the float64 reference (reference/lce_reference.ts) with the parity
 * tolerances of testing/parity.ts, the reference computed once per case and shared by the
 * methods; cases whose filter skipped tiles also get what the filter may drop (testing/fuzz.ts);
 * and bitwise determinism (two runs, identical bits).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { HostInputs, LceOptions } from "../core/options.ts";
import { lceReference, type LceReferenceResult } from "../reference/lce_reference.ts";
import { compareArrays, describeWorst } from "../reference/compare.ts";
import type { LceMethod } from "../methods/types.ts";
import { runMethod, type RunResult } from "../methods/run.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { defaultFilterEps } from "../kernels/fused/backward_plan.ts";
import { caseInputs, gradRoundingTol, PARITY_TOL, type ParityCase } from "./parity.ts";
import { caseGradOutput, caseOptions } from "./rounded_logits_tol.ts";
import { CANCELLED, termScales } from "./fuzz.ts";
import type { ProductCheck } from "../kernels/tc/tc_product_check.ts";
import { BASELINE_TC_TILES } from "../kernels/tc/tc_tiles.ts";

/** A case of the check: a parity case, or the cce recipe (peaked logits: the filter skips). */
export type TcCase = ParityCase & { name: string; recipe?: "cce" };

/** One line of the log. */
export interface TcCheckLine {
  method: string;
  case: string;
  ok: boolean;
  /** e.g. "loss 0.02 dE 0.31 dC 0.12 of tolerance; skipped 40/44" or the failure. */
  detail: string;
  ms: number;
}

/** The inputs, options and upstream gradient of a case. */
export function tcCaseData(c: TcCase): { x: HostInputs; o: LceOptions; g: number | number[] } {
  const x = c.recipe === "cce"
    ? makeFixture("cce", {
      n: c.n,
      v: c.v,
      d: c.d,
      dtype: c.dtype,
      seed: c.seed ?? 1,
      ignoreFraction: c.ignoreFraction,
    })
    : caseInputs(c);
  return { x, o: caseOptions(c), g: caseGradOutput(c) };
}

const _maxAbs = (a: ArrayLike<number>) => {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]));
  return m;
};

/**
 * How far `got` is from the reference, as the largest fraction of its tolerance over loss, dE and
 * dC (≤ 1 passes), with testing/parity.ts's tolerance (and gradRoundingTol for 16-bit gradients);
 * where tiles were skipped, plus what the filter may drop (termScales, as assertMatchesReference).
 */
export function tcCompare(
  got: RunResult,
  want: LceReferenceResult,
  d: number,
  dtype: "bf16" | "f16",
  filter?: { x: HostInputs; o: LceOptions; g: number | number[] },
): { ok: boolean; detail: string } {
  const tol = PARITY_TOL[dtype];
  const skipped = (got.stats?.tilesSkipped ?? 0) > 0;
  const terms = skipped && filter
    ? termScales(filter.x, filter.o, filter.g, want, defaultFilterEps(dtype))
    : undefined;
  const parts: string[] = [];
  let ok = true;
  for (const name of ["loss", "dE", "dC"] as const) {
    let s = _maxAbs(want[name]) || 1;
    if (terms && s < CANCELLED * terms[name]) s = terms[name];
    const dropped = terms && name !== "loss" ? terms.filter[name] : 0;
    const atol = (tol.atol + gradRoundingTol(got.stats, name)) * s + dropped;
    const r = compareArrays(got[name], want[name], { atol, rtol: tol.rtol });
    // the worst element's share of its allowance
    const i = r.worstIndex;
    const share = i < 0
      ? 0
      : Math.abs(got[name][i] - want[name][i]) / (atol + tol.rtol * Math.abs(want[name][i]));
    parts.push(`${name} ${share.toFixed(3)}`);
    if (!r.ok) {
      ok = false;
      parts.push(
        `FAIL ${
          describeWorst(got[name], want[name], r, { name, cols: name === "loss" ? undefined : d })
        }`,
      );
    }
  }
  const s = got.stats;
  if (s?.tilesTotal) parts.push(`skipped ${s.tilesSkipped}/${s.tilesTotal}`);
  return { ok, detail: `${parts.join(" ")} (of tolerance)` };
}

/**
 * Runs every method on every case against the reference (computed once per case). `taken` names,
 * for a method, the stats of the paths it forces (`mapRefined`, `denseDE`, `denseDC`): a run
 * where one is 0 (not taken) fails, as it checked something else; where one is absent the path
 * does not apply at that shape (its chunks do not fit), which the line says
 * ({@link checkTaken} then asks that each was taken somewhere).
 */
export async function checkCases(
  ctx: GpuContext,
  methods: LceMethod[],
  cases: TcCase[],
  log: (l: TcCheckLine) => void,
  taken: Record<string, string[]> = {},
): Promise<TcCheckLine[]> {
  const out: TcCheckLine[] = [];
  for (const c of cases) {
    const data = tcCaseData(c);
    const want = lceReference(data.x, data.o, data.g);
    for (const m of methods) {
      const t0 = performance.now();
      let line: TcCheckLine;
      try {
        const why = m.unsupported?.(ctx, { n: c.n, v: c.v, d: c.d, dtype: c.dtype }, data.o);
        if (why) throw new Error(`unsupported: ${why}`);
        const got = await runMethod(ctx, m, data.x, data.o, { dtype: c.dtype, gradOutput: data.g });
        const r = tcCompare(got, want, c.d, c.dtype as "bf16" | "f16", data);
        const keys = taken[m.name] ?? [];
        const missed = keys.filter((k) => got.stats?.[k] === 0);
        const absent = keys.filter((k) => got.stats?.[k] === undefined);
        const took = keys.filter((k) => got.stats?.[k] === 1);
        const notes = [
          took.length ? `taken: ${took.join(", ")}` : "",
          absent.length ? `does not apply here: ${absent.join(", ")}` : "",
          missed.length ? `FAIL not taken: ${missed.join(", ")}` : "",
        ].filter((x) => x);
        line = {
          method: m.name,
          case: c.name,
          ok: r.ok && missed.length === 0,
          detail: [r.detail, ...notes].join("; "),
          ms: performance.now() - t0,
        };
      } catch (e) {
        const detail = `error: ${(e as Error).message.split("\n")[0]}`;
        line = { method: m.name, case: c.name, ok: false, detail, ms: performance.now() - t0 };
      }
      out.push(line);
      log(line);
    }
  }
  return out;
}

/**
 * One line per forced path (`taken`, as {@link checkCases}'s) of the methods checked: it fails
 * where no case's line says it was taken, so a check cannot pass having run none of them.
 */
export function checkTaken(
  lines: TcCheckLine[],
  methods: LceMethod[],
  taken: Record<string, string[]>,
  log: (l: TcCheckLine) => void,
): void {
  for (const m of methods) {
    for (const k of taken[m.name] ?? []) {
      const n = lines.filter((l) =>
        l.method === m.name && l.ok && new RegExp(`taken: [^;]*\\b${k}\\b`).test(l.detail)
      ).length;
      log({
        method: m.name,
        case: `${k} taken`,
        ok: n > 0,
        detail: n > 0 ? `in ${n} passing cases` : "in no case: the forced path was never checked",
        ms: 0,
      });
    }
  }
}

/** Runs each method twice on a case; the gradients and loss must be identical bit for bit. */
export async function checkDeterminism(
  ctx: GpuContext,
  methods: LceMethod[],
  c: TcCase,
  log: (l: TcCheckLine) => void,
): Promise<TcCheckLine[]> {
  const data = tcCaseData(c);
  const out: TcCheckLine[] = [];
  for (const m of methods) {
    const t0 = performance.now();
    let ok = true, detail = "identical bits";
    try {
      const run = () => runMethod(ctx, m, data.x, data.o, { dtype: c.dtype, gradOutput: data.g });
      const a = await run(), b = await run();
      for (const k of ["loss", "dE", "dC"] as const) {
        const ua = new Uint32Array(a[k].buffer), ub = new Uint32Array(b[k].buffer);
        const diff = ua.findIndex((x, i) => x !== ub[i]);
        if (diff >= 0) {
          ok = false;
          detail = `${k}[${diff}] differs: ${a[k][diff]} vs ${b[k][diff]}`;
          break;
        }
      }
    } catch (e) {
      ok = false;
      detail = `error: ${(e as Error).message.split("\n")[0]}`;
    }
    const line = {
      method: m.name,
      case: `${c.name} twice`,
      ok,
      detail,
      ms: performance.now() - t0,
    };
    out.push(line);
    log(line);
  }
  return out;
}

/** The cases of the check: odd shapes over β, softcap, reductions and dtypes; real vocabularies. */
export function tcCheckCases(o: { large: boolean }): TcCase[] {
  const cases: TcCase[] = [];
  let seed = 1;
  // every β with bf16 (softcap with β = 0.1), and f16 once: every reduction, ignored rows
  const odd = [["bf16", 0, "mean"], ["bf16", 0.1, "sum"], ["bf16", 1, "none"], [
    "f16",
    0.1,
    "none",
  ]] as const;
  for (const [dtype, beta, reduction] of odd) {
    const softcap = beta === 0.1 ? 30 : undefined;
    cases.push({
      name: `37×131×29 ${dtype} β=${beta}${softcap ? " softcap 30" : ""} ${reduction}`,
      n: 37,
      v: 131,
      d: 29,
      dtype,
      beta,
      softcap,
      reduction,
      ignoreFraction: 0.2,
      gradOutput: reduction === "none" ? "vector" : 1.7,
      seed: seed++,
    });
  }
  cases.push({
    name: "300×1000×264 bf16 β=0.1 (vector loads, partial tiles)",
    n: 300,
    v: 1000,
    d: 264,
    dtype: "bf16",
    beta: 0.1,
    ignoreFraction: 0.1,
    seed: seed++,
  });
  cases.push({
    name: "cce 256×8192×1024 bf16 β=0.1 (filtered)",
    recipe: "cce",
    n: 256,
    v: 8192,
    d: 1024,
    dtype: "bf16",
    beta: 0.1,
    ignoreFraction: 0.1,
    seed: seed++,
  });
  if (o.large) {
    cases.push({
      name: "GPT-2 vocabulary 32×50257×768 bf16 β=0.1",
      n: 32,
      v: 50257,
      d: 768,
      dtype: "bf16",
      beta: 0.1,
      ignoreFraction: 0.1,
      seed: seed++,
    });
    cases.push({
      name: "Llama-3 vocabulary 8×128256×4096 bf16 β=0.1 softcap 30 sum",
      n: 8,
      v: 128256,
      d: 4096,
      dtype: "bf16",
      beta: 0.1,
      softcap: 30,
      reduction: "sum",
      seed: seed++,
    });
  }
  return cases;
}

/** The products of the methods at odd shapes (see baseline-tc's tiles). */
export function tcCheckProducts(): (ProductCheck & { name: string })[] {
  const { logits: lt, split } = BASELINE_TC_TILES;
  const logits = { tile: lt, aTrans: false, bTrans: false } as const;
  const dE = { tile: split, aDtype: "f32", aTrans: false, bTrans: true, split: true } as const;
  const dC = { tile: split, aDtype: "f32", aTrans: true, bTrans: true, split: true } as const;
  // the dense paths' gradient products: f16 G read through a read_write binding, taken as it is
  const dense = {
    tile: lt,
    aDtype: "f16",
    bTrans: true,
    unscaleA: true,
    aReadWrite: true,
  } as const;
  return [
    {
      name: "E·Cᵀ bf16 197×133×77",
      kernel: { ...logits, aDtype: "bf16", bDtype: "bf16" },
      m: 197,
      n: 133,
      k: 77,
    },
    {
      name: "E·Cᵀ bf16 264×520×136 split-K 3",
      kernel: { ...logits, aDtype: "bf16", bDtype: "bf16" },
      m: 264,
      n: 520,
      k: 136,
      splitK: 3,
    },
    {
      name: "E·Cᵀ f16 300×257×264 C of 1e-3",
      kernel: { ...logits, aDtype: "f16", bDtype: "f16" },
      m: 300,
      n: 257,
      k: 264,
      sa: 1,
      sb: 1e-3,
    },
    {
      name: "G·C f32/bf16 split 129×264×300 accumulate",
      kernel: { ...dE, bDtype: "bf16" },
      m: 129,
      n: 264,
      k: 300,
      accumulate: true,
      sa: 1e-4,
    },
    {
      name: "Gᵀ·E f32/bf16 split 300×264×129 alpha",
      kernel: { ...dC, bDtype: "bf16" },
      m: 300,
      n: 264,
      k: 129,
      alpha: -0.5,
    },
    { name: "Gᵀ·E f32/f16 split 77×91×45", kernel: { ...dC, bDtype: "f16" }, m: 77, n: 91, k: 45 },
    // the tensor-core dense dE's product, into its f32 accumulator, full tiles preloaded
    {
      name: "G·C f16/bf16 264×300×520 accumulate, preloaded",
      kernel: { ...dense, aTrans: false, bDtype: "bf16", preload: true },
      m: 264,
      n: 300,
      k: 520,
      accumulate: true,
    },
    // the tensor-core dense dC's product (a 16-bit output, odd n: words shared by two rows)
    {
      name: "Gᵀ·E f16/bf16 → bf16 300×264×129",
      kernel: { ...dense, aTrans: true, bDtype: "bf16", outDtype: "bf16" },
      m: 300,
      n: 264,
      k: 129,
    },
    {
      name: "Gᵀ·E f16/f16 → f16 77×91×45",
      kernel: { ...dense, aTrans: true, bDtype: "f16", outDtype: "f16" },
      m: 77,
      n: 91,
      k: 45,
    },
  ];
}
